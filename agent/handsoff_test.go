package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// handled waits until agent handled every command sent to it so far: the
// inbox is in order, so the answer to a facts refresh sent last comes after
// them.
func (s *fakeServer) handled(from *int, agent string) {
	s.t.Helper()
	s.send(agent, bus.KindFactsRefresh, bus.Empty{})
	s.next(from, agent, bus.KindFacts)
}

// leftAlone asserts that q's next report is the drift of an edit the agent
// did not heal, and that path still holds the edit.
func leftAlone(t *testing.T, q *reports, path, edit string) {
	t.Helper()
	d := q.next()
	if d.Compliance != model.NonCompliant || d.Changes["content"].Current != edit || d.Message != handsOff {
		t.Fatalf("drift while paused: %+v, want non_compliant, %q", d, handsOff)
	}
	// A heal is reported in the same message as the drift it heals.
	if len(q.queued) > 0 {
		t.Fatalf("while paused the agent reported %+v after the drift", q.queued)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != edit {
		t.Fatalf("while paused the file holds %q (%v), want the edit %q left alone", b, err, edit)
	}
}

// A paused agent reports drift and heals none, even under drift_policy
// heal; the pause outlives a restart; a resume heals what drifted.
func TestPausedAgentDoesNotHeal(t *testing.T) {
	s := newFakeServer(t)
	root, dir := t.TempDir(), t.TempDir()
	var seen int
	r := start(t, s, "web", dir, root, nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	motd := file("web", "/motd", "hello\n")
	s.deploy(&seen, "web", 1, "d1", model.DriftHeal, motd)
	path := filepath.Join(root, "motd")
	q := &reports{s: s, from: &seen, agent: "web", id: motd.ID}

	s.send("web", bus.KindPause, bus.Empty{})
	s.handled(&seen, "web")
	replace(t, path, "edited while paused\n")
	leftAlone(t, q, path, "edited while paused\n")

	// Restarted, it is still paused: the drift it finds at start is
	// reported again, and left alone.
	r.stop()
	start(t, s, "web", dir, root, nil)
	leftAlone(t, q, path, "edited while paused\n")

	s.send("web", bus.KindResume, bus.Empty{})
	if h := q.next(); h.Compliance != model.Compliant || !h.Healed {
		t.Fatalf("after the resume: %+v, want healed", h)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "hello\n" {
		t.Fatalf("after the resume the file holds %q (%v), want it healed", b, err)
	}
}

// A pause stops the job in progress; the job runs again once resumed.
func TestPauseStopsTheRunningJob(t *testing.T) {
	s := newFakeServer(t)
	g := newGate()
	var seen int
	start(t, s, "web", t.TempDir(), t.TempDir(), g)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	s.full("web", 1, gated("web", "slow"))
	s.send("web", bus.KindDeploy, bus.Deploy{DeployID: "d1", Mode: bus.DeployIncremental, Generation: 1})
	<-g.entered
	s.send("web", bus.KindPause, bus.Empty{})
	s.handled(&seen, "web")
	if n := len(g.entered); n != 0 {
		t.Fatalf("the job ran again %d times while paused", n)
	}
	s.send("web", bus.KindResume, bus.Empty{})
	<-g.entered
	close(g.open)
	results, last := s.results(&seen, "web", "d1")
	if last.Error != "" || results[gated("web", "slow").ID].State != model.StateDeployed {
		t.Fatalf("after the resume deploy d1 ended %+v (%s), want slow deployed", results, last.Error)
	}
}

// A settings command changes the drift policy at once, without a deploy:
// from heal to alert an edit is only reported; back to heal the drift seen
// is healed.
func TestSettingsChangeTheDriftPolicy(t *testing.T) {
	s := newFakeServer(t)
	root := t.TempDir()
	var seen int
	start(t, s, "web", t.TempDir(), root, nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	motd := file("web", "/motd", "hello\n")
	s.deploy(&seen, "web", 1, "d1", model.DriftHeal, motd)
	path := filepath.Join(root, "motd")
	q := &reports{s: s, from: &seen, agent: "web", id: motd.ID}

	s.send("web", bus.KindSettings, bus.Settings{DriftPolicy: model.DriftAlert})
	s.handled(&seen, "web")
	replace(t, path, "edited under alert\n")
	if d := q.next(); d.Compliance != model.NonCompliant || d.Message != "" || len(q.queued) > 0 {
		t.Fatalf("drift under alert: %+v then %+v, want reported only", d, q.queued)
	}
	if b, _ := os.ReadFile(path); string(b) != "edited under alert\n" {
		t.Fatalf("under alert the file holds %q, want the edit", b)
	}
	s.send("web", bus.KindSettings, bus.Settings{DriftPolicy: model.DriftHeal})
	if h := q.next(); h.Compliance != model.Compliant || !h.Healed {
		t.Fatalf("back to heal: %+v, want healed", h)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "hello\n" {
		t.Fatalf("back to heal the file holds %q (%v)", b, err)
	}
}
