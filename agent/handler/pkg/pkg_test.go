package pkg

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/model"
)

func res(name string, attrs model.Attributes) model.Resource {
	return handlertest.NamedResource(Kind, name, attrs)
}

// The real apt on this machine installs and purges Debian's `hello` (a
// 50 kB package with no dependencies beyond libc).
func TestAptRealPackage(t *testing.T) {
	handlertest.NeedRoot(t)
	handlertest.NeedCommands(t, "apt-get", "dpkg-query", "apt-cache")
	ctx := context.Background()
	host := handler.Runtime{}
	purge := func() {
		if err := (apt{host}).remove(ctx, "hello"); err != nil {
			t.Logf("purging hello: %v", err)
		}
	}
	purge()
	t.Cleanup(purge)
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { return New(handler.Runtime{Sync: rt.Sync}) },
		Cases: []handlertest.Case{{
			Name:     "hello at the latest version",
			Resource: res("hello", model.Attributes{"version": Latest, "provider": "apt"}),
			Check: func(t *testing.T, _ string, _ *model.Resource) {
				out, err := host.Output(ctx, nil, "/usr/bin/hello")
				if err != nil || !strings.Contains(string(out), "Hello, world!") {
					t.Fatalf("the installed hello says %q (%v)", out, err)
				}
			},
		}},
		Invalid: []handlertest.Invalid{
			{Name: "option-like name", Resource: res("-x", nil)},
			{Name: "unknown provider", Resource: res("x", model.Attributes{"provider": "pacman"})},
			{Name: "version with spaces", Resource: res("x", model.Attributes{"version": "1 2"})},
		},
	})
	// An exact version reads back as the installed version; a version
	// apt does not know fails with apt's reason.
	h := New(host)
	r := res("hello", model.Attributes{"version": "0.0-nonexistent"})
	if err := h.Apply(ctx, &r, nil, handler.ComputeChanges(&r, nil, false)); err == nil || !strings.Contains(err.Error(), "was not found") {
		t.Fatalf("installing a version apt does not have: %v", err)
	}
}

// fakeRPM is a host with dnf and rpm, as a recorded command runner sees it:
// not the real tools (there are none here), a model of their answers.
type fakeRPM struct {
	mu        sync.Mutex
	installed map[string]string
	available map[string][]string // versions, oldest first
}

func (f *fakeRPM) respond(args []string) (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := args[len(args)-1]
	switch {
	case args[0] == "rpm":
		if v, ok := f.installed[name]; ok {
			return v + "\n", 0
		}
		return "package " + name + " is not installed\n", 1
	case slices.Contains(args, "repoquery"):
		if vs := f.available[name]; len(vs) > 0 {
			return vs[len(vs)-1] + "\n", 0
		}
		return "", 0
	case slices.Contains(args, "install"), slices.Contains(args, "upgrade"), slices.Contains(args, "downgrade"):
		base, version := name, ""
		for n, vs := range f.available {
			for _, v := range vs {
				if name == n+"-"+v {
					base, version = n, v
				}
			}
		}
		vs := f.available[base]
		if len(vs) == 0 {
			return "No match for argument: " + name, 1
		}
		if version == "" {
			if _, ok := f.installed[base]; ok && !slices.Contains(args, "upgrade") {
				return "already installed", 0
			}
			version = vs[len(vs)-1]
		}
		if cur, ok := f.installed[base]; ok && slices.Contains(args, "install") && slices.Index(vs, version) < slices.Index(vs, cur) {
			return "already installed at a newer version", 0 // dnf install does not downgrade
		}
		f.installed[base] = version
		return "Complete!", 0
	case slices.Contains(args, "remove"):
		delete(f.installed, name)
		return "Complete!", 0
	}
	return "unexpected command", 2
}

// dnf is not on this machine: its provider runs against a recorded
// command runner answering like dnf and rpm would.
func TestDnfRecorded(t *testing.T) {
	fake := &fakeRPM{installed: map[string]string{}, available: map[string][]string{"nginx": {"1.20.1-14.el9", "1.24.0-1.el9"}}}
	rec := &handlertest.Recorder{Respond: fake.respond}
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { rt.Run = rec; rt.PackageManager = "dnf"; return New(rt) },
		Cases: []handlertest.Case{{
			Name:     "old version, then latest",
			Resource: res("nginx", model.Attributes{"version": "1.20.1-14.el9"}),
			Update:   new(res("nginx", model.Attributes{"version": Latest})),
		}},
	})
	calls := strings.Join(rec.Calls(), "\n")
	for _, want := range []string{
		"dnf --assumeyes install -- nginx-1.20.1-14.el9",
		"dnf --assumeyes upgrade -- nginx",
		"dnf --assumeyes remove -- nginx",
	} {
		if !strings.Contains(calls, want) {
			t.Errorf("no %q among the commands run:\n%s", want, calls)
		}
	}
	// Back to the old version: install leaves it, downgrade moves it.
	fake.installed["nginx"] = "1.24.0-1.el9"
	rec.Reset()
	h := New(handler.Runtime{Run: rec, PackageManager: "dnf"})
	r := res("nginx", model.Attributes{"version": "1.20.1-14.el9"})
	cur, exists, err := h.Read(context.Background(), &r)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Apply(context.Background(), &r, cur, handler.ComputeChanges(&r, cur, exists)); err != nil {
		t.Fatal(err)
	}
	if fake.installed["nginx"] != "1.20.1-14.el9" || !slices.Contains(rec.Calls(), "dnf --assumeyes downgrade -- nginx-1.20.1-14.el9") {
		t.Fatalf("downgrade: installed %s after %v", fake.installed["nginx"], rec.Calls())
	}
}

// apk is not on this machine either: the same, answering like apk.
func TestApkRecorded(t *testing.T) {
	installed := map[string]string{}
	available := map[string]string{"curl": "8.5.0-r0"}
	var mu sync.Mutex
	rec := &handlertest.Recorder{Respond: func(args []string) (string, int) {
		mu.Lock()
		defer mu.Unlock()
		name := args[len(args)-1]
		switch args[1] {
		case "list":
			m := available
			if args[2] == "--installed" {
				m = installed
			}
			if v, ok := m[name]; ok {
				return fmt.Sprintf("%s-%s x86_64 {%s} (MIT) [installed]\n", name, v, name), 0
			}
			return "", 0
		case "add":
			n, v, _ := strings.Cut(name, "=")
			if v == "" {
				v = available[n]
			}
			installed[n] = v
			return "OK", 0
		case "del":
			delete(installed, name)
			return "OK", 0
		}
		return "unexpected", 2
	}}
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { rt.Run = rec; rt.PackageManager = "apk"; return New(rt) },
		Cases: []handlertest.Case{{
			Name:     "any version, then latest",
			Resource: res("curl", nil),
			Update:   new(res("curl", model.Attributes{"version": Latest, "provider": "apk"})),
			Check: func(t *testing.T, _ string, r *model.Resource) {
				mu.Lock()
				defer mu.Unlock()
				want := "8.5.0-r0"
				if r.Attributes["version"] == Latest {
					want = "8.6.0-r0"
				}
				if installed["curl"] != want {
					t.Fatalf("installed %v, want curl %s", installed, want)
				}
				available["curl"] = "8.6.0-r0" // a new release: latest must move to it
			},
		}},
	})
	if calls := rec.Calls(); !slices.Contains(calls, "apk add --no-interactive -- curl") || !slices.Contains(calls, "apk add --no-interactive --upgrade -- curl") ||
		!slices.Contains(calls, "apk del --no-interactive -- curl") {
		t.Fatalf("commands run: %v", calls)
	}
}
