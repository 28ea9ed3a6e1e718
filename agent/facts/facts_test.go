package facts

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A fake Alpine host under OpenRC in a Kubernetes pod: every fact comes
// from the files and tools the host has.
func TestFakeHost(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"etc/os-release": "NAME=\"Alpine Linux\"\nID=alpine\nVERSION_ID=3.20.1\n",
		"proc/meminfo":   "MemTotal:        2048000 kB\nMemFree: 1 kB\n",
		"proc/1/cgroup":  "0::/kubepods/besteffort/pod1234/abcd\n",
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "run/openrc"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := Host{
		Root: root,
		Interfaces: func() ([]Interface, error) {
			return []Interface{
				{Name: "lo", Loop: true, Up: true, Addrs: []net.IP{net.ParseIP("127.0.0.1")}},
				{Name: "eth0", Up: true, MAC: "02:00:00:00:00:01", Addrs: []net.IP{net.ParseIP("fe80::1"), net.ParseIP("10.1.2.3"), net.ParseIP("2001:db8::3")}},
				{Name: "eth1", Up: false, Addrs: []net.IP{net.ParseIP("10.9.9.9")}},
			}, nil
		},
		LookPath: func(name string) (string, error) {
			if name == "apk" {
				return "/sbin/apk", nil
			}
			return "", errors.New("not found")
		},
	}
	f := h.Gather(t.Context())
	osf := f["os"].(map[string]any)
	checks := map[string][2]any{
		"os.family":       {osf["family"], "alpine"},
		"os.release":      {osf["release"], "3.20.1"},
		"os.name":         {osf["name"], "Alpine Linux"},
		"memory.total_mb": {f["memory"].(map[string]any)["total_mb"], int64(2000)},
		"ipv4":            {f["ipv4"], "10.1.2.3"},
		"ipv6":            {f["ipv6"], "2001:db8::3"},
		"package_manager": {f["package_manager"], "apk"},
		"service_manager": {f["service_manager"], "openrc"},
		"virtualization":  {f["virtualization"], "kubernetes"},
		"cpus":            {f["cpus"], runtime.NumCPU()},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %v (%T), want %v", name, c[0], c[0], c[1])
		}
	}
	ifs := f["interfaces"].(map[string]any)
	if _, ok := ifs["lo"]; ok {
		t.Error("loopback reported as an interface")
	}
	eth0 := ifs["eth0"].(map[string]any)
	if v4 := eth0["ipv4"].([]string); len(v4) != 1 || v4[0] != "10.1.2.3" || eth0["mac"] != "02:00:00:00:00:01" {
		t.Errorf("eth0 = %v", eth0)
	}
	if v6 := eth0["ipv6"].([]string); len(v6) != 2 {
		t.Errorf("eth0 ipv6 = %v, want the link-local and the global address", v6)
	}
}

func TestFamilies(t *testing.T) {
	for id, want := range map[[2]string]string{
		{"ubuntu", "debian"}: "debian", {"rocky", "rhel centos fedora"}: "redhat", {"fedora", ""}: "redhat",
		{"opensuse-leap", "suse opensuse"}: "suse", {"nixos", ""}: "nixos",
	} {
		var like []string
		if id[1] != "" {
			like = strings.Fields(id[1])
		}
		if got := family(id[0], like); got != want {
			t.Errorf("family(%q, %q) = %q, want %q", id[0], id[1], got, want)
		}
	}
}

// The real host: the facts agree with what the standard library says.
func TestRealHost(t *testing.T) {
	f := Gather(t.Context())
	if name, _ := os.Hostname(); f["hostname"] != name {
		t.Errorf("hostname %v, want %q", f["hostname"], name)
	}
	if runtime.GOOS == "linux" {
		if f["memory"].(map[string]any)["total_mb"].(int64) <= 0 {
			t.Errorf("memory %v", f["memory"])
		}
		if f["kernel"].(map[string]any)["release"] == "" {
			t.Errorf("kernel %v", f["kernel"])
		}
		if _, err := os.Stat("/etc/os-release"); err == nil && f["os"] == nil {
			t.Error("no os facts although /etc/os-release exists")
		}
	}
}

// Custom facts come from *.json files in Dir; what cannot be read, and a
// key that would replace a built-in fact, is named in custom_fact_errors.
func TestCustomFacts(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("app.json", `{"app": {"port": 8080, "tier": "front"}, "datacenter": "par1"}`)
	write("z-later.json", `{"datacenter": "ams1"}`)
	write("broken.json", `{"oops": `)
	write("list.json", `[1, 2]`)
	write("arch.json", `{"arch": "sparc"}`)
	write("notes.txt", `{"ignored": true}`)
	write("big.json", `{"x": "`+strings.Repeat("a", 70<<10)+`"}`)

	f := Host{Dir: dir}.Gather(t.Context())
	app, _ := f["app"].(map[string]any)
	if app["port"] != 8080.0 || app["tier"] != "front" {
		t.Fatalf("app facts %v", f["app"])
	}
	if f["datacenter"] != "ams1" {
		t.Fatalf("datacenter %v: want the later file's (files are read in name order)", f["datacenter"])
	}
	if f["arch"] != runtime.GOARCH {
		t.Fatalf("arch %v: a custom fact replaced a built-in one", f["arch"])
	}
	if _, ok := f["ignored"]; ok {
		t.Fatal("a .txt file was read")
	}
	errs, _ := f["custom_fact_errors"].([]string)
	joined := strings.Join(errs, "\n")
	for _, want := range []string{"broken.json: not a JSON object", "list.json: not a JSON object", `arch.json: "arch" is a built-in fact`, "big.json: larger than 64 KiB"} {
		if !strings.Contains(joined, want) {
			t.Errorf("custom_fact_errors %q: want %q", errs, want)
		}
	}
	if _, ok := (Host{}).Gather(t.Context())["custom_fact_errors"]; ok {
		t.Fatal("no directory, yet errors")
	}
}

// A cached gatherer hands out its copy until the ttl passes, unless asked
// for fresh facts (Fresh), which it gathers again once older than a second.
func TestCachedFresh(t *testing.T) {
	n := 0
	g := Cached(time.Hour, func(context.Context) map[string]any { n++; return map[string]any{"n": n} })
	ctx := t.Context()
	for _, c := range []context.Context{ctx, ctx, Fresh(ctx)} {
		if g(c)["n"] != 1 {
			t.Fatalf("gathered %d times within a second, want once", n)
		}
	}
	time.Sleep(freshAge + 50*time.Millisecond)
	if g(ctx)["n"] != 1 {
		t.Fatal("gathered again before the ttl without being asked")
	}
	if g(Fresh(ctx))["n"] != 2 || g(ctx)["n"] != 2 {
		t.Fatalf("fresh facts: gathered %d times, want 2, and kept", n)
	}
}
