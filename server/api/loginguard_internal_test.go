package api

import (
	"fmt"
	"testing"
	"time"
)

// guessDay plays an attacker who guesses one user's password for a day
// from addrs addresses as fast as the guard lets it: each second it
// spends one address that never failed the name, and tries the
// addresses that did until one is let through. It returns how many
// guesses were checked.
func guessDay(g *loginGuard, start time.Time, addrs int) int {
	checked, fresh, next := 0, 0, 0
	for s := range 24 * 60 * 60 {
		now := start.Add(time.Duration(s) * time.Second)
		try := func(addr string) bool {
			if wait, _ := g.admit(now, "org/admin", addr); wait > 0 {
				return false
			}
			g.failed(now, "org/admin", addr)
			checked++
			return true
		}
		if fresh < addrs {
			try(fmt.Sprintf("addr-%d", fresh))
			fresh++
		}
		for range min(fresh, 8) {
			addr := fmt.Sprintf("addr-%d", next%fresh)
			next++
			if try(addr) {
				break
			}
		}
	}
	return checked
}

// TestLoginGuardWorstCase: an attacker with 1, 50 or 5,000 addresses
// guessing one name as fast as it is let for a day gets at most one
// guess per address, the name's free failures and one turn of the
// name's gate every login-max-delay (the figures of docs/security.md);
// the real user, from an address that never failed, is let in at once
// at the end of it.
func TestLoginGuardWorstCase(t *testing.T) {
	cfg := Default()
	for _, addrs := range []int{1, 50, 5000} {
		t.Run(fmt.Sprint(addrs), func(t *testing.T) {
			g := newLoginGuard(cfg.LoginFreeFailures, cfg.LoginMaxDelay, cfg.LoginAlertAfter)
			start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
			checked := guessDay(g, start, addrs)
			day := 24 * time.Hour
			limit := addrs + 4*cfg.LoginFreeFailures + int(day/cfg.LoginMaxDelay) + 16
			if checked > limit {
				t.Fatalf("%d addresses: %d guesses checked in a day, want at most %d", addrs, checked, limit)
			}
			t.Logf("%d addresses: %d guesses checked in 24h (%.1f an hour)", addrs, checked, float64(checked)/24)
			if wait, why := g.admit(start.Add(day), "org/admin", "the real user"); wait != 0 {
				t.Fatalf("the real user from a new address after the attack: wait %v (%v), want none", wait, why)
			}
		})
	}
}

// TestLoginGuardBounded: a spray of made-up names from many addresses
// keeps the guard's tables within their bounds, and a name whose
// suspects overflowed holds every address back until they are forgotten.
func TestLoginGuardBounded(t *testing.T) {
	g := newLoginGuard(5, 15*time.Minute, 10)
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for i := range maxLoginPairs + 5000 {
		g.failed(now, fmt.Sprintf("org/user-%d", i%(maxLoginNames+10)), fmt.Sprintf("addr-%d", i%(maxLoginAddrs+7)))
		now = now.Add(time.Millisecond)
	}
	if len(g.names) > maxLoginNames || g.pairs > maxLoginPairs || len(g.addrs) > maxLoginAddrs {
		t.Fatalf("names %d, pairs %d, addresses %d: want at most %d, %d, %d", len(g.names), g.pairs, len(g.addrs), maxLoginNames, maxLoginPairs, maxLoginAddrs)
	}
	pairs := 0
	for _, nf := range g.names {
		pairs += len(nf.pairs)
	}
	if pairs != g.pairs {
		t.Fatalf("pairs counted %d, kept %d", g.pairs, pairs)
	}
	// One name failed from more addresses than it keeps.
	for i := range maxPairsPerName + 1 {
		g.failed(now, "org/target", fmt.Sprintf("spray-%d", i))
	}
	if wait, why := g.admit(now, "org/target", "never-failed"); wait == 0 || why != heldByName {
		t.Fatalf("a new address after the name's suspects overflowed: wait %v (%v), want held by the name", wait, why)
	}
	if wait, _ := g.admit(now.Add(loginWindow+time.Second), "org/target", "never-failed"); wait != 0 {
		t.Fatalf("a day later: wait %v, want none", wait)
	}
}
