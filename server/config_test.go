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
	if err := (Config{Key: make([]byte, 10)}).Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("a short key: got %v, want an error wrapping ErrConfig", err)
	}
}
