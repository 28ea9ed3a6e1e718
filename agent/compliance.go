package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// The compliance monitor watches, between deploys, every resource the last
// deploy left deployed. Path-based resources (and users, groups, packages,
// through the files their state lives in) are watched with inotify on their
// directories; services are polled. An event makes its resources suspects;
// suspects are verified (Read and diff, as a dry run) after a short settle
// time that folds a burst of events into one verification. Drift is reported
// as a compliance event through the outbox, so it is seen and kept while the
// broker is away and delivered when it is back; under the heal policy the
// resource is re-applied at once and reported restored, unless the server
// paused the agent (an operator's pause, or a halted environment): then
// nothing is changed until it resumes it, and a resume verifies everything
// again. The policy and the pause are read from the journal, where the
// server's commands put them, at each resource verified.
//
// Verification and healing hold the agent's enforce lock, which a running
// job holds too: the agent's own writes are never verified half-done, and,
// once done, they match the intent, so they are never drift. The monitor
// reaches the agent's locks only through Agent.enforcing and
// Agent.sliceHashes; its own state has a lock of its own (lock order: see
// Agent).

// monitor is the state of the compliance watch: its goroutines (run, the
// verifier, and events) and arm, which the worker calls, share it.
type monitor struct {
	a   *Agent
	fsw *fsnotify.Watcher

	// mu guards the fields below but status. It is taken under the
	// agent's enforce lock (arm, verify) or alone, never with the agent's
	// mu: it is a leaf.
	mu sync.Mutex
	// An agent may watch tens of thousands of resources: they are held
	// once, in list, and found by index.
	list  []watch
	index map[model.ID]int32 // into list
	// byPath maps a watched path to its resource; shared holds the others
	// of a path watched for several (the account files, the package
	// database).
	byPath   map[string]int32
	shared   map[string][]int32
	dirs     map[string]bool
	polled   []int32
	suspects map[model.ID]bool

	// status is touched by the verifier goroutine (check, calmDown) and
	// by arm, which holds the enforce lock, as check does, and mu, as
	// calmDown does.
	status map[model.ID]*driftState
	poke   chan struct{}
}

// watch is one watched resource.
type watch struct {
	// res is in the journal's slice, which is replaced, never changed in
	// place, when the desired state changes.
	res  *model.Resource
	hash model.Hash
}

// driftState is what the agent last reported of a resource.
type driftState struct {
	drifted  bool
	changes  model.Changes
	recent   []time.Time // drifts seen within the flap window
	flapping bool
	// restate asks the next verification to report whatever it finds (a
	// flapping resource that calmed down).
	restate bool
}

func newMonitor(a *Agent) *monitor {
	m := &monitor{a: a, index: map[model.ID]int32{}, byPath: map[string]int32{}, dirs: map[string]bool{},
		suspects: map[model.ID]bool{}, status: map[model.ID]*driftState{}, poke: make(chan struct{}, 1)}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		a.log.Warn().Err(err).Msg("inotify is not available: drift is found by polling every resource")
	} else {
		m.fsw = fsw
	}
	return m
}

// run watches until ctx ends.
func (m *monitor) run(ctx context.Context) {
	if m.fsw != nil {
		defer m.fsw.Close()
		go m.events(ctx)
	}
	poll := time.NewTicker(m.a.cfg.PollInterval)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
			m.mu.Lock()
			for _, i := range m.polled {
				m.suspects[m.list[i].res.ID] = true
			}
			m.mu.Unlock()
			m.calmDown()
		case <-m.poke:
			// Let a burst of events (truncate, then write) settle.
			if !sleep(ctx, m.a.cfg.Settle) {
				return
			}
		}
		m.verify(ctx)
	}
}

// events turns inotify events into suspects.
func (m *monitor) events(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-m.fsw.Events:
			if !ok {
				return
			}
			p := filepath.Clean(ev.Name)
			m.mu.Lock()
			i, hit := m.byPath[p]
			if hit {
				m.suspects[m.list[i].res.ID] = true
				for _, i := range m.shared[p] {
					m.suspects[m.list[i].res.ID] = true
				}
			}
			m.mu.Unlock()
			if hit {
				m.a.poke(m.poke)
			}
		case err, ok := <-m.fsw.Errors:
			if !ok {
				return
			}
			// An overflowed queue lost events: verify everything.
			m.a.log.Warn().Err(err).Msg("file watch error; verifying every watched resource")
			m.mu.Lock()
			for id := range m.index {
				m.suspects[id] = true
			}
			m.mu.Unlock()
			m.a.poke(m.poke)
		}
	}
}

// arm watches the slice's resources whose last result is deployed, and
// verifies those new to the watch or changed since (all of them when
// verifyAll: at start, drift while the agent was down). settled are the
// resources the job just deployed.
// It returns how many resources it queued for verification. Called with
// the enforce lock held, after a job.
func (m *monitor) arm(verifyAll bool, settled map[model.ID]bool) (queued int) {
	s := m.a.journal.Slice()
	hashes := m.a.sliceHashes()
	list := make([]watch, 0, len(s.Resources))
	index := make(map[model.ID]int32, len(s.Resources))
	byPath := make(map[string]int32, len(s.Resources))
	shared := map[string][]int32{}
	dirs := map[string]bool{}
	var polled []int32
	for k := range s.Resources {
		r := &s.Resources[k]
		last, ok := m.a.journal.Applied(r.ID)
		if !ok || last.State != model.StateDeployed || last.Hash != hashes[r.ID] {
			continue
		}
		h, ok := m.a.reg.Lookup(r.ID.Type)
		if !ok {
			continue
		}
		w, ok := h.(handler.Watcher)
		if !ok {
			continue // exec: verified on the repair interval only
		}
		n := int32(len(list))
		list = append(list, watch{res: r, hash: last.Hash})
		index[r.ID] = n
		paths, poll := w.WatchPaths(r)
		if poll || m.fsw == nil {
			polled = append(polled, n)
		}
		for _, p := range paths {
			p = filepath.Clean(p)
			if _, dup := byPath[p]; dup {
				shared[p] = append(shared[p], n)
			} else {
				byPath[p] = n
			}
			dirs[filepath.Dir(p)] = true
		}
	}
	if m.fsw != nil {
		for d := range dirs {
			if !m.dirs[d] {
				if err := m.fsw.Add(d); err != nil {
					// The directory is gone or unreadable: the repair
					// interval still verifies what lives there.
					m.a.log.Debug().Err(err).Str("dir", d).Msg("cannot watch directory")
					delete(dirs, d)
				}
			}
		}
		for d := range m.dirs {
			if !dirs[d] {
				_ = m.fsw.Remove(d)
			}
		}
	}
	// The caller holds enforce: the monitor's lock nests inside it.
	m.mu.Lock()
	for _, w := range list {
		// What was not watched with this intent before may have changed
		// between the job's apply and the watch being added just now:
		// verify it once, now that an event would be seen.
		if old, ok := m.index[w.res.ID]; verifyAll || !ok || m.list[old].hash != w.hash {
			m.suspects[w.res.ID] = true
		}
	}
	m.list, m.index, m.byPath, m.shared, m.dirs, m.polled = list, index, byPath, shared, dirs, polled
	for id := range m.suspects {
		if _, ok := index[id]; !ok {
			delete(m.suspects, id)
		}
	}
	queued = len(m.suspects)
	for id, st := range m.status {
		if _, ok := index[id]; !ok {
			delete(m.status, id)
		}
		if settled[id] {
			// The job put it back, and its result told the server: a
			// later verification finding it in place is no news.
			st.drifted, st.changes = false, nil
		}
	}
	m.mu.Unlock()
	if queued > 0 {
		m.a.poke(m.poke)
	}
	return queued
}

// suspectAll verifies every watched resource: the drift policy changed, or
// the agent was resumed.
func (m *monitor) suspectAll() {
	m.mu.Lock()
	for id := range m.index {
		m.suspects[id] = true
	}
	n := len(m.suspects)
	m.mu.Unlock()
	if n > 0 {
		m.a.poke(m.poke)
	}
}

// calmDown ends flapping for resources that have not drifted for a flap
// window, and verifies them so their state is reported again.
func (m *monitor) calmDown() {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, st := range m.status {
		if st.flapping && (len(st.recent) == 0 || now.Sub(st.recent[len(st.recent)-1]) >= m.a.cfg.FlapWindow) {
			st.flapping, st.recent, st.restate = false, nil, true
			m.suspects[id] = true
		}
	}
}

// verify checks the suspects and reports (and by policy heals) drift,
// holding the enforce lock: no job changes the host meanwhile.
func (m *monitor) verify(ctx context.Context) {
	m.a.enforcing(func() { m.verifyEnforcing(ctx) })
}

func (m *monitor) verifyEnforcing(ctx context.Context) {
	// Under enforce: the monitor's lock nests inside it (see Agent).
	m.mu.Lock()
	if len(m.suspects) == 0 {
		m.mu.Unlock()
		return
	}
	var todo []model.Resource
	var hashes []model.Hash
	for id := range m.suspects {
		if i, ok := m.index[id]; ok {
			todo = append(todo, *m.list[i].res)
			hashes = append(hashes, m.list[i].hash)
		}
		delete(m.suspects, id)
	}
	m.mu.Unlock()

	var reports []bus.DriftReport
	for i := range todo {
		if ctx.Err() != nil {
			return
		}
		n := len(reports)
		reports = append(reports, m.check(ctx, &todo[i])...)
		for j := n; j < len(reports); j++ {
			reports[j].Hash = hashes[i] // the intent compared against
		}
	}
	m.a.releaseMemory(len(todo))
	if len(reports) == 0 {
		return
	}
	body := bus.Compliance{Generation: m.a.journal.Slice().Generation, Reports: reports}
	if err := m.a.emit(m.a.journal.Begin(), bus.KindCompliance, body); err != nil {
		m.a.log.Error().Err(err).Msg("cannot journal a compliance report")
	}
}

// handsOff is the message of a drift report the agent does not heal
// although its policy says heal.
const handsOff = "not healed: the agent is paused (by an operator, or its environment is halted); resuming it heals"

// check verifies one resource and returns what to report. Whether to heal
// is decided here, resource by resource, from the journal: a pause that
// arrives during a verification stops the heals that follow it.
func (m *monitor) check(ctx context.Context, res *model.Resource) []bus.DriftReport {
	h, ok := m.a.reg.Lookup(res.ID.Type)
	if !ok {
		return nil
	}
	opened, err := m.a.open(res)
	if err != nil {
		m.a.log.Warn().Err(err).Str("resource", res.ID.String()).Msg("cannot verify a watched resource")
		return nil
	}
	res = &opened
	current, exists, err := h.Read(ctx, res)
	if err != nil {
		m.a.log.Warn().Err(err).Str("resource", res.ID.String()).Msg("cannot verify a watched resource")
		return nil
	}
	seen := time.Now()
	changes := handler.ComputeChanges(res, current, exists)
	st := m.status[res.ID]
	if st == nil {
		st = &driftState{}
		m.status[res.ID] = st
	}
	restate := st.restate
	st.restate = false
	if len(changes) == 0 {
		if !st.drifted && !restate {
			return nil
		}
		st.drifted, st.changes = false, nil
		if st.flapping {
			return nil
		}
		return []bus.DriftReport{{ID: res.ID, Compliance: model.Compliant, Seen: seen, Message: "changed back by hand"}}
	}
	redacted := changes.Redact(res)
	heal := m.a.journal.DriftPolicy() == model.DriftHeal
	paused, _ := m.a.journal.Paused()
	var out []bus.DriftReport
	if !st.drifted || restate || !sameChanges(st.changes, redacted) {
		st.recent = append(st.recent, seen)
		for len(st.recent) > 0 && seen.Sub(st.recent[0]) > m.a.cfg.FlapWindow {
			st.recent = st.recent[1:]
		}
		rep := bus.DriftReport{ID: res.ID, Compliance: model.NonCompliant, Changes: redacted, Seen: seen}
		if heal && paused {
			rep.Message = handsOff
		}
		switch {
		case st.flapping:
		case len(st.recent) >= m.a.cfg.FlapCount:
			st.flapping = true
			rep.Flapping = true
			rep.Message = fmt.Sprintf("flapping: drifted %d times within %s; reports are held back until it is stable for as long", len(st.recent), m.a.cfg.FlapWindow)
			out = append(out, rep)
		default:
			out = append(out, rep)
		}
		st.drifted, st.changes = true, redacted
	}
	if !heal || paused {
		return out
	}
	if err := m.heal(ctx, h, res, current, changes); err != nil {
		m.a.log.Error().Err(err).Str("resource", res.ID.String()).Msg("heal failed")
		if !st.flapping {
			out = append(out, bus.DriftReport{ID: res.ID, Compliance: model.NonCompliant, Changes: redacted, Seen: time.Now(),
				HealFailed: true, Message: "heal failed: " + err.Error()})
		}
		return out
	}
	st.drifted, st.changes = false, nil
	if !st.flapping {
		out = append(out, bus.DriftReport{ID: res.ID, Compliance: model.Compliant, Healed: true, Changes: redacted, Seen: time.Now()})
	}
	return out
}

// sameChanges reports whether two drifts of a resource are the same: the
// same attributes, each with the same current and desired values.
func sameChanges(a, b model.Changes) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || !model.Equal(x.Current, y.Current) || !model.Equal(x.Desired, y.Desired) {
			return false
		}
	}
	return true
}

// heal re-applies a drifted resource and checks it converged.
func (m *monitor) heal(ctx context.Context, h handler.Handler, res *model.Resource, current model.Attributes, changes model.Changes) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	if err := h.Apply(ctx, res, current, changes); err != nil {
		return err
	}
	current, exists, err := h.Read(ctx, res)
	if err != nil {
		return err
	}
	if left := handler.ComputeChanges(res, current, exists); len(left) > 0 {
		return fmt.Errorf("still differs after the apply: %v", left.Redact(res))
	}
	return nil
}
