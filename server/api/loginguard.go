package api

import (
	"slices"
	"sync"
	"time"
)

// loginGuard holds back password guessing without locking anyone out.
// Failed logins are counted three ways:
//
//   - per (user name, address) pair: the first free failures cost
//     nothing, each further one doubles a wait (from a second, at most
//     max) before that address may try that name again;
//   - per address, across names: four times as many free failures
//     (people share addresses behind NAT), then the same doubling, so an
//     address spraying many names is slowed down;
//   - per user name, across addresses: past nameFree failures the name's
//     gate engages, and every further try of the name from an address
//     that failed it (a suspect) waits for the gate, which lets one try
//     through at a time and doubles its wait with each failure. An
//     address that has not failed for the name is not a suspect: the
//     real user, from a new address with the right password, gets in
//     however many addresses are guessing.
//
// Failures are forgotten when a key has none for window. A success
// forgets its pair and its address, not the name's count: the attack on
// the name goes on. The tables are bounded (maxLoginNames,
// maxLoginPairs, maxLoginAddrs, maxPairsPerName); a name whose suspects
// could not all be kept treats every address as a suspect until window
// passes, so that overflowing the tables gains an attacker no fresh
// tries.
type loginGuard struct {
	free, addrFree, nameFree int
	max, window              time.Duration
	// attackAddrs distinct addresses failing one name make an attack.
	attackAddrs int

	mu    sync.Mutex
	names map[string]*nameFailures
	addrs map[string]*failures
	pairs int // pairs kept, over every name
}

// failures are the recent failures of a key: how many, when the last
// was, and until when the key must wait.
type failures struct {
	n           int
	last, until time.Time
}

// nameFailures are a user name's failures with those of each address
// that failed it (its suspects).
type nameFailures struct {
	failures
	pairs map[string]*failures
	// overflow is when a suspect could not be kept (maxPairsPerName).
	overflow time.Time
	// addrs counts the addresses that failed the name since its
	// failures were last forgotten; alerted is when that was last
	// reported as an attack.
	addrs   int
	alerted time.Time
}

// Bounds of the guard's memory: names, (name, address) pairs in all and
// per name, and addresses.
const (
	maxLoginNames   = 100_000
	maxLoginPairs   = 200_000
	maxPairsPerName = 10_000
	maxLoginAddrs   = 100_000
	// loginWindow is how long failures are remembered.
	loginWindow = 24 * time.Hour
	// attackAlertEvery spaces the alerts about one name under attack.
	attackAlertEvery = time.Hour
)

func newLoginGuard(free int, max time.Duration, attackAddrs int) *loginGuard {
	return &loginGuard{free: free, addrFree: 4 * free, nameFree: 4 * free, max: max, window: loginWindow, attackAddrs: attackAddrs,
		names: map[string]*nameFailures{}, addrs: map[string]*failures{}}
}

// holdBack says why a login is held back, for the answer.
type holdBack int

const (
	heldByPair holdBack = iota + 1
	heldByAddr
	heldByName
)

// admit returns how long name must wait before a try from addr (0: it
// may try now) and which count holds it back. A suspect admitted while
// the name's gate is engaged takes the gate's next turn at once, so that
// suspects trying at the same moment get one try between them.
func (g *loginGuard) admit(now time.Time, name, addr string) (time.Duration, holdBack) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var wait time.Duration
	var why holdBack
	hold := func(f *failures, w holdBack) {
		if f != nil && f.until.After(now) && f.until.Sub(now) > wait {
			wait, why = f.until.Sub(now), w
		}
	}
	nf := g.fresh(now, name)
	if nf != nil {
		hold(g.pair(now, nf, addr), heldByPair)
	}
	hold(g.addr(now, addr), heldByAddr)
	if nf != nil && g.suspect(now, nf, addr) {
		hold(&nf.failures, heldByName)
		if wait == 0 && nf.n >= g.nameFree {
			nf.until = now.Add(g.delay(nf.n + 1 - g.nameFree))
		}
	}
	return wait, why
}

// loginFailure is what failed counted.
type loginFailure struct {
	// pair, addr and name are the failures in a row of the name from
	// the address, of the address, and of the name.
	pair, addr, name int
	// addrs is how many addresses failed the name; attack is set when
	// that makes an attack to report now.
	addrs  int
	attack bool
}

// failed counts a failed login of name from addr.
func (g *loginGuard) failed(now time.Time, name, addr string) loginFailure {
	g.mu.Lock()
	defer g.mu.Unlock()
	nf := g.fresh(now, name)
	if nf == nil {
		if len(g.names) >= maxLoginNames || g.pairs >= maxLoginPairs {
			g.sweepNames(now)
		}
		nf = &nameFailures{pairs: map[string]*failures{}}
		g.names[name] = nf
	}
	p := g.pair(now, nf, addr)
	if p == nil {
		if g.pairs >= maxLoginPairs {
			g.sweepNames(now)
			if g.names[name] != nf { // swept with the rest
				nf = &nameFailures{pairs: map[string]*failures{}}
				g.names[name] = nf
			}
		}
		p = &failures{}
		if len(nf.pairs) < maxPairsPerName {
			nf.pairs[addr] = p
			g.pairs++
		} else {
			nf.overflow = now
		}
		nf.addrs++
	}
	a := g.addr(now, addr)
	if a == nil {
		if len(g.addrs) >= maxLoginAddrs {
			g.sweepAddrs(now)
		}
		a = &failures{}
		g.addrs[addr] = a
	}
	g.count(now, p, g.free)
	g.count(now, a, g.addrFree)
	// The name's gate: its wait is set at each failure past nameFree,
	// whoever failed (a suspect took its turn in admit already).
	nf.n++
	nf.last = now
	if over := nf.n - g.nameFree; over > 0 {
		nf.until = now.Add(g.delay(over))
	}
	out := loginFailure{pair: p.n, addr: a.n, name: nf.n, addrs: nf.addrs}
	if nf.addrs >= g.attackAddrs && now.Sub(nf.alerted) >= attackAlertEvery {
		nf.alerted = now
		out.attack = true
	}
	return out
}

// succeeded forgets the failures of name from addr, and of addr.
func (g *loginGuard) succeeded(name, addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if nf := g.names[name]; nf != nil {
		if _, ok := nf.pairs[addr]; ok {
			delete(nf.pairs, addr)
			g.pairs--
		}
	}
	delete(g.addrs, addr)
}

// count adds a failure to f, and past free failures sets its wait.
func (g *loginGuard) count(now time.Time, f *failures, free int) {
	f.n++
	f.last = now
	if over := f.n - free; over > 0 {
		f.until = now.Add(g.delay(over))
	}
}

// delay is the wait after the over-th failure past the free ones: a
// second, doubled each time, at most max.
func (g *loginGuard) delay(over int) time.Duration {
	if over < 30 && time.Second<<(over-1) < g.max {
		return time.Second << (over - 1)
	}
	return g.max
}

// fresh returns name's failures, nil when it has none it remembers.
func (g *loginGuard) fresh(now time.Time, name string) *nameFailures {
	nf := g.names[name]
	if nf != nil && now.Sub(nf.last) > g.window {
		g.pairs -= len(nf.pairs)
		delete(g.names, name)
		return nil
	}
	return nf
}

// pair returns the failures of nf's name from addr, nil when none.
func (g *loginGuard) pair(now time.Time, nf *nameFailures, addr string) *failures {
	p := nf.pairs[addr]
	if p != nil && now.Sub(p.last) > g.window {
		delete(nf.pairs, addr)
		g.pairs--
		return nil
	}
	return p
}

// addr returns the failures of addr, nil when none.
func (g *loginGuard) addr(now time.Time, addr string) *failures {
	a := g.addrs[addr]
	if a != nil && now.Sub(a.last) > g.window {
		delete(g.addrs, addr)
		return nil
	}
	return a
}

// suspect reports whether addr failed nf's name, or might have (its
// suspects overflowed lately).
func (g *loginGuard) suspect(now time.Time, nf *nameFailures, addr string) bool {
	if _, ok := nf.pairs[addr]; ok {
		return true
	}
	return !nf.overflow.IsZero() && now.Sub(nf.overflow) <= g.window
}

// sweepNames makes room: names forgotten by now go, then the older half
// of the names whose gate is not engaged (losing them gives their
// addresses a few free tries again, which their address counts bound),
// and only then the older half of the rest.
func (g *loginGuard) sweepNames(now time.Time) {
	for name := range g.names {
		g.fresh(now, name)
	}
	full := func() bool { return len(g.names) >= maxLoginNames || g.pairs >= maxLoginPairs }
	for _, gated := range []bool{false, true} {
		if !full() {
			return
		}
		var lasts []time.Time
		for _, nf := range g.names {
			if (nf.n > g.nameFree) == gated {
				lasts = append(lasts, nf.last)
			}
		}
		if len(lasts) == 0 {
			continue
		}
		slices.SortFunc(lasts, func(a, b time.Time) int { return a.Compare(b) })
		mid := lasts[len(lasts)/2]
		for name, nf := range g.names {
			if (nf.n > g.nameFree) == gated && !nf.last.After(mid) {
				g.pairs -= len(nf.pairs)
				delete(g.names, name)
			}
		}
	}
}

// sweepAddrs makes room: addresses forgotten by now go, then the older
// half.
func (g *loginGuard) sweepAddrs(now time.Time) {
	var lasts []time.Time
	for addr := range g.addrs {
		if a := g.addr(now, addr); a != nil {
			lasts = append(lasts, a.last)
		}
	}
	if len(g.addrs) < maxLoginAddrs || len(lasts) == 0 {
		return
	}
	slices.SortFunc(lasts, func(a, b time.Time) int { return a.Compare(b) })
	mid := lasts[len(lasts)/2]
	for addr, a := range g.addrs {
		if !a.last.After(mid) {
			delete(g.addrs, addr)
		}
	}
}
