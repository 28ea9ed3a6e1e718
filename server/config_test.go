package server

import (
	"errors"
	"testing"
	"time"
)

func TestConfig(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Errorf("Default: %v", err)
	}
	// Zero and negative settings take the defaults, as they always did.
	got := Config{Consumers: -1, LeadEvery: time.Minute}.withDefaults()
	want := Default()
	want.LeadEvery = time.Minute
	if got.Consumers != want.Consumers || got.MaxBatch != want.MaxBatch || got.LeadEvery != want.LeadEvery ||
		got.AgentCacheTTL != want.AgentCacheTTL || got.KeepIngested != want.KeepIngested {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// The agent connection limit: zero is the default, negative no limit.
	if got := (Config{}).withDefaults().MaxAgentConnections; got != 2 {
		t.Errorf("MaxAgentConnections 0: got %d, want the default 2", got)
	}
	if got := (Config{MaxAgentConnections: -1}).withDefaults().MaxAgentConnections; got != -1 {
		t.Errorf("MaxAgentConnections -1: got %d, want -1 (no limit)", got)
	}
	if err := (Config{Key: make([]byte, 10)}).Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("a short key: got %v, want an error wrapping ErrConfig", err)
	}
}
