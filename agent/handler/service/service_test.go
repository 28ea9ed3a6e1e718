package service

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/testenv"
)

func res(name string, attrs model.Attributes) model.Resource {
	return handlertest.NamedResource(Kind, name, attrs)
}

// The real SysV provider on this machine, with Debian's cron daemon (its
// package is installed for the test and purged after it): stopped and
// disabled, started and enabled, restarted by a refresh, purged.
func TestSysVRealDaemon(t *testing.T) {
	handlertest.NeedRoot(t)
	handlertest.NeedCommands(t, "apt-get", "service", "update-rc.d")
	testenv.Need(t, DetectManager() == "sysv", "this host runs "+DetectManager()+", not SysV init scripts")
	ctx := context.Background()
	host := handler.Runtime{}
	apt := func(args ...string) {
		t.Helper()
		base := []string{"apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=300"}
		if _, err := host.Output(ctx, []string{"DEBIAN_FRONTEND=noninteractive"}, append(base, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat("/etc/init.d/cron"); err != nil {
		apt("install", "--no-install-recommends", "cron")
		t.Cleanup(func() { apt("remove", "--purge", "cron") })
	}
	// The package may or may not have started it: start from running.
	if _, err := host.Output(ctx, nil, "service", "cron", "start"); err != nil {
		t.Fatal(err)
	}
	h := New(host)
	running := func(want bool) func(t *testing.T, _ string, _ *model.Resource) {
		return func(t *testing.T, _ string, _ *model.Resource) {
			out, err := host.Exec(ctx, "service", "cron", "status")
			if err != nil || (out.ExitCode == 0) != want {
				t.Fatalf("service cron status: exit %d (%v), want running=%v", out.ExitCode, err, want)
			}
		}
	}
	handlertest.Run(t, handlertest.Suite{
		New: func(handler.Runtime) handler.Handler { return h },
		Cases: []handlertest.Case{{
			Name:     "stop and disable, then start and enable",
			Resource: res("cron", model.Attributes{"state": "stopped", "enabled": false}),
			Update:   new(res("cron", model.Attributes{"state": "running", "enabled": true})),
			Check: func(t *testing.T, root string, r *model.Resource) {
				running(r.Attributes["state"] == "running")(t, root, r)
				if on, _ := (sysv{host}).enabled(ctx, "cron"); on != r.Attributes["enabled"] {
					t.Fatalf("enabled=%v, want %v", on, r.Attributes["enabled"])
				}
			},
		}},
		Invalid: []handlertest.Invalid{
			{Name: "path as name", Resource: res("/etc/init.d/cron", nil)},
			{Name: "bad state", Resource: res("cron", model.Attributes{"state": "up"})},
		},
	})

	// A refresh restarts the running daemon: a new process id.
	r := res("cron.service", model.Attributes{"state": "running"})
	if err := h.Apply(ctx, &r, nil, handler.Changes{"state": {Current: "stopped", Desired: "running"}}); err != nil {
		t.Fatal(err)
	}
	before := pid(t)
	did, err := h.Refresh(ctx, &r, nil)
	if err != nil || did != "restarted" {
		t.Fatalf("Refresh: %q %v", did, err)
	}
	if after := pid(t); after == before {
		t.Fatalf("cron still runs as process %s after a restart", after)
	}
	// Just started in this deploy: no second start.
	if did, err := h.Refresh(ctx, &r, handler.Changes{"state": {Current: "stopped", Desired: "running"}}); err != nil || did != "" {
		t.Fatalf("Refresh after a start: %q %v", did, err)
	}
	if _, err := host.Output(ctx, nil, "service", "cron", "stop"); err != nil {
		t.Fatal(err)
	}
}

func pid(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/var/run/crond.pid")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// fakeInit is a host's init system as a recorded command runner answers
// for it: the state of one service, changed by the commands it receives.
type fakeInit struct {
	mu               sync.Mutex
	running, enabled bool
}

func (f *fakeInit) set(running, enabled *bool, v bool) (string, int) {
	if running != nil {
		*running = v
	}
	if enabled != nil {
		*enabled = v
	}
	return "", 0
}

func (f *fakeInit) systemctl(args []string) (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch args[1] {
	case "show":
		return "loaded\n", 0
	case "is-active":
		return "", map[bool]int{true: 0, false: 3}[f.running]
	case "is-enabled":
		return map[bool]string{true: "enabled\n", false: "disabled\n"}[f.enabled], map[bool]int{true: 0, false: 1}[f.enabled]
	case "enable", "disable":
		return f.set(nil, &f.enabled, args[1] == "enable")
	case "start", "stop":
		return f.set(&f.running, nil, args[1] == "start")
	case "restart", "reload", "daemon-reload":
		return "", 0
	}
	return "unexpected", 2
}

func (f *fakeInit) openrc(args []string) (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case args[0] == "rc-service" && args[1] == "--exists":
		return "", 0
	case args[0] == "rc-service" && args[2] == "status":
		return "", map[bool]int{true: 0, false: 3}[f.running]
	case args[0] == "rc-service":
		if args[2] == "start" || args[2] == "stop" {
			return f.set(&f.running, nil, args[2] == "start")
		}
		return "", 0
	case args[0] == "rc-update" && args[1] == "show":
		if f.enabled {
			return "             nginx | default\n", 0
		}
		return "", 0
	case args[0] == "rc-update":
		return f.set(nil, &f.enabled, args[1] == "add")
	}
	return "unexpected", 2
}

// systemd and OpenRC do not run on this machine: their providers run
// against a recorded command runner answering like systemctl, rc-service
// and rc-update would, and the test checks the commands they issue.
func TestRecordedManagers(t *testing.T) {
	for _, tc := range []struct {
		manager string
		respond func(*fakeInit) func([]string) (string, int)
		want    []string
	}{
		{"systemd", func(f *fakeInit) func([]string) (string, int) { return f.systemctl },
			[]string{"systemctl enable -- nginx", "systemctl start -- nginx", "systemctl daemon-reload", "systemctl reload -- nginx", "systemctl stop -- nginx", "systemctl disable -- nginx"}},
		{"openrc", func(f *fakeInit) func([]string) (string, int) { return f.openrc },
			[]string{"rc-update add nginx default", "rc-service nginx start", "rc-service nginx reload", "rc-service nginx stop", "rc-update del nginx default"}},
	} {
		t.Run(tc.manager, func(t *testing.T) {
			fake := &fakeInit{}
			rec := &handlertest.Recorder{Respond: tc.respond(fake)}
			var h *Handler
			handlertest.Run(t, handlertest.Suite{
				New: func(rt handler.Runtime) handler.Handler {
					rt.Run, rt.ServiceManager = rec, tc.manager
					h = New(rt)
					return h
				},
				Cases: []handlertest.Case{{
					Name:     "start and enable",
					Resource: res("nginx", model.Attributes{"state": "running", "enabled": true, "reload": "reload"}),
					Check: func(t *testing.T, _ string, r *model.Resource) {
						if did, err := h.Refresh(context.Background(), r, nil); err != nil || did != "reloaded" {
							t.Fatalf("Refresh: %q %v", did, err)
						}
					},
				}},
			})
			calls := rec.Calls()
			for _, want := range tc.want {
				if !slices.Contains(calls, want) {
					t.Errorf("no %q among the commands:\n%s", want, strings.Join(calls, "\n"))
				}
			}
		})
	}
}
