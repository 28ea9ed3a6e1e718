package ownagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/testenv"
)

func TestParseSpecs(t *testing.T) {
	cases := []struct {
		name              string
		agents, platforms []string
		want              []Spec
		wantErr           string
	}{
		{name: "agents", agents: []string{"prod/hv1", "lab/hv1"}, want: []Spec{{Env: "prod", Name: "hv1"}, {Env: "lab", Name: "hv1"}}},
		{name: "platforms", agents: []string{"prod/hv1", "prod/hv2"}, platforms: []string{"prod/hv2=libvirt", "prod/hv2=pxe=qemu:///system"},
			want: []Spec{{Env: "prod", Name: "hv1"}, {Env: "prod", Name: "hv2", Platforms: []string{"libvirt", "pxe=qemu:///system"}}}},
		{name: "no slash", agents: []string{"hv1"}, wantErr: "want ENV/NAME"},
		{name: "bad env", agents: []string{"Prod!/hv1"}, wantErr: `--own-agent "Prod!/hv1"`},
		{name: "bad name", agents: []string{"prod/hv 1"}, wantErr: `--own-agent "prod/hv 1"`},
		{name: "twice", agents: []string{"prod/hv1", "prod/hv1"}, wantErr: "given twice"},
		{name: "platform of another agent", agents: []string{"prod/hv1"}, platforms: []string{"prod/hv2=libvirt"}, wantErr: "add --own-agent prod/hv2"},
		{name: "platform without a driver", agents: []string{"prod/hv1"}, platforms: []string{"prod/hv1"}, wantErr: "want ENV/NAME=DRIVER"},
		{name: "unknown driver", agents: []string{"prod/hv1"}, platforms: []string{"prod/hv1=vmware"}, wantErr: `unknown driver "vmware"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSpecs(tc.agents, tc.platforms)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.EqualFunc(got, tc.want, func(a, b Spec) bool {
				return a.Env == b.Env && a.Name == b.Name && slices.Equal(a.Platforms, b.Platforms)
			}) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// logLine is one line of the supervisor's log.
type logLine struct {
	Level, Message, Error, Stack string
}

func readLog(t *testing.T, b *testenv.SyncBuffer) []logLine {
	t.Helper()
	var out []logLine
	for _, s := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if s == "" {
			continue
		}
		var l logLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("log line %q: %v", s, err)
		}
		out = append(out, l)
	}
	return out
}

// An agent that stops (an error, a panic) is started again, each stop
// logged once; an environment missing is said once however often it is
// looked for, and the agent starts once it exists; the end of ctx stops
// it for good.
func TestSuperviseRestartsWhatStops(t *testing.T) {
	var logs testenv.SyncBuffer
	log := zerolog.New(&logs)
	cfg := Default()
	cfg.Retry, cfg.RetryMax, cfg.EnvRetry = time.Millisecond, 4*time.Millisecond, time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	missing := 3 // the environment is created after the third look
	envExists := func(context.Context) error {
		if missing > 0 {
			missing--
			return fmt.Errorf("%w: prod", errNoEnv)
		}
		return nil
	}
	steps := []func(context.Context) error{
		func(context.Context) error { return errors.New("inbox: bus closed") },
		func(context.Context) error { panic("handler bug") },
		func(context.Context) error { return nil },
		func(ctx context.Context) error { cancel(); <-ctx.Done(); return ctx.Err() },
	}
	calls := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		supervise(ctx, cfg, Spec{Env: "prod", Name: "hv1"}, log, envExists, func(ctx context.Context) error {
			calls++
			if calls > len(steps) {
				t.Errorf("started %d times, want %d", calls, len(steps))
				<-ctx.Done()
				return ctx.Err()
			}
			return steps[calls-1](ctx)
		})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("supervise did not return once its context ended")
	}
	if calls != len(steps) {
		t.Fatalf("started %d times, want %d", calls, len(steps))
	}
	lines := readLog(t, &logs)
	var msgs []string
	for _, l := range lines {
		msgs = append(msgs, l.Level+": "+l.Message)
	}
	want := []string{
		"warn: environment prod does not exist: the server's own agent hv1 starts once it does; create it with: tether env create prod",
		"info: the environment exists now: the server's own agent starts",
		"warn: the server's own agent stopped; starting it again",
		"warn: the server's own agent stopped; starting it again",
		"warn: the server's own agent stopped; starting it again",
		"info: the server's own agent stopped with the server",
	}
	if !slices.Equal(msgs, want) {
		t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
	if lines[2].Error != "inbox: bus closed" {
		t.Errorf("first stop logged with error %q, want the agent's", lines[2].Error)
	}
	if lines[3].Error != "panic: handler bug" || !strings.Contains(lines[3].Stack, "ownagent") {
		t.Errorf("panic logged as %q with stack %q, want the panic and where it was", lines[3].Error, lines[3].Stack)
	}
	if lines[4].Error != "it stopped without saying why" {
		t.Errorf("a start that returned nil logged as %q", lines[4].Error)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Default()
	ok.StateDir, ok.ServerKey = t.TempDir(), make([]byte, 32)
	ok.Env = func(context.Context, string) error { return nil }
	ok.Token = func(context.Context, string, string) (string, error) { return "", nil }
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, change := range map[string]func(*Config){
		"no state dir":       func(c *Config) { c.StateDir = "" },
		"no server key":      func(c *Config) { c.ServerKey = nil },
		"no token maker":     func(c *Config) { c.Token = nil },
		"retry cap below it": func(c *Config) { c.RetryMax = c.Retry / 2 },
	} {
		c := ok
		change(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: valid, want an error", name)
		}
	}
}

// The label is one an agent may announce and a model may select by: the
// server's compiles take it in their inventory.
func TestLabelFitsAgentsAndModels(t *testing.T) {
	labels := map[string]string{LabelKey: LabelValue}
	if err := model.ValidateLabels(labels); err != nil {
		t.Fatalf("agents' labels: %v", err)
	}
	inv := model.Inventory{Agents: []model.InventoryAgent{{Name: "hv1", Labels: labels}}}
	if err := inv.Validate(); err != nil {
		t.Fatalf("the compile's inventory: %v", err)
	}
}
