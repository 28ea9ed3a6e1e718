package agent

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent/journal"
)

// Zero and negative settings take the defaults, as they always did; a
// negative ReleaseMemoryAt keeps meaning never.
func TestConfigDefaults(t *testing.T) {
	comparable := func(c Config) Config {
		c.Facts = nil // a func: compared apart
		return c
	}
	want := Default()
	want.Env, want.Name = "prod", "web-1"
	for _, tt := range []struct {
		name string
		cfg  Config
		want Config
	}{
		{name: "zero", cfg: Config{Env: "prod", Name: "web-1"}, want: want},
		{name: "negative", cfg: Config{Env: "prod", Name: "web-1", Parallelism: -1, Heartbeat: -time.Second, MaxCommandAge: -1}, want: want},
		{name: "release memory never", cfg: Config{Env: "prod", Name: "web-1", ReleaseMemoryAt: -1}, want: func() Config {
			w := want
			w.ReleaseMemoryAt = -1
			return w
		}()},
		{name: "set", cfg: Config{Env: "prod", Name: "web-1", Heartbeat: time.Minute}, want: func() Config {
			w := want
			w.Heartbeat = time.Minute
			return w
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cfg.withDefaults()
			if got.Facts == nil {
				t.Error("no facts gatherer")
			}
			if !reflect.DeepEqual(comparable(got), comparable(tt.want)) {
				t.Errorf("got %+v, want %+v", comparable(got), comparable(tt.want))
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	valid := Default()
	valid.Env, valid.Name = "prod", "web-1"
	for _, tt := range []struct {
		name   string
		change func(*Config)
	}{
		{"no env", func(c *Config) { c.Env = "" }},
		{"bad name", func(c *Config) { c.Name = "Web 1" }},
		{"short server key", func(c *Config) { c.ServerKey = make([]byte, 5) }},
		{"retry cap below the retry", func(c *Config) { c.HelloRetryMax = c.HelloRetry - 1 }},
		{"journal", func(c *Config) { c.Journal = journal.Config{CompactAt: -1} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.change(&c)
			if err := c.Validate(); !errors.Is(err, ErrConfig) {
				t.Errorf("got %v, want an error wrapping ErrConfig", err)
			}
		})
	}
}
