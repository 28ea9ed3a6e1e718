package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// driftPackage is a small Debian package (tree: 110 kB, only libc) that no
// handler test touches, so package tests running at the same time do not
// race this one for it.
const driftPackage = "tree"

// TestRealHostDriftHealed deploys, on this machine's own /etc and package
// database, a package, a user and a root-owned file under drift_policy=heal,
// then does what operators do by hand: chown the file, edit /etc/passwd
// with vipw, remove the package with dpkg. Each is reported as drift with
// what was found, re-applied, and reported healed.
func TestRealHostDriftHealed(t *testing.T) {
	handlertest.NeedRoot(t)
	handlertest.NeedCommands(t, "apt-get", "dpkg", "dpkg-query", "useradd", "userdel", "vipw")
	ctx := context.Background()
	const user = "tether-drift-u"
	wasInstalled := dpkgInstalled(driftPackage)

	s := newFakeServer(t)
	s.patience = 3 * time.Minute // apt fetches the package, twice
	var seen int
	r := start(t, s, "host", t.TempDir(), "", nil)
	t.Cleanup(func() {
		// Stop the agent first: it would heal what the cleanup removes.
		r.stop()
		_ = exec.CommandContext(ctx, "userdel", user).Run()
		if !wasInstalled {
			if out, err := dpkg(ctx, "--purge", driftPackage); err != nil {
				t.Logf("purging %s: %v\n%s", driftPackage, err, out)
			}
		}
	})
	s.next(&seen, "host", bus.KindHello)
	s.enroll("host")

	path := filepath.Join(t.TempDir(), "owned.conf")
	f := file("host", path, "owned by root\n")
	f.Attributes["owner"], f.Attributes["group"], f.Attributes["mode"] = "root", "root", "0644"
	pkg := named("package", driftPackage, model.Attributes{"version": "installed"})
	u := named("user", user, model.Attributes{"shell": "/bin/sh", "home": "/nonexistent"})
	results := s.deploy(&seen, "host", 1, "d1", model.DriftHeal, f, pkg, u)
	for _, id := range []model.ID{f.ID, pkg.ID, u.ID} {
		if res := results[id]; res.State != model.StateDeployed {
			t.Fatalf("%s: %s %s", id, res.State, res.Message)
		}
	}

	t.Logf("deployed %s, %s and %s", f.ID, pkg.ID, u.ID)

	// expect reads the next reports about id: the drift, then the heal.
	expect := func(id model.ID, check func(model.Changes) bool) {
		t.Helper()
		q := &reports{s: s, from: &seen, agent: "host", id: id}
		d := q.next()
		if d.Compliance != model.NonCompliant || !check(d.Changes) {
			t.Fatalf("%s: drift report %+v", id, d)
		}
		if h := q.next(); h.Compliance != model.Compliant || !h.Healed {
			t.Fatalf("%s: heal report %+v, want healed", id, h)
		}
		t.Logf("%s: drift seen and healed", id)
	}

	// The owner of the file, changed with chown.
	if err := os.Chown(path, 1, 1); err != nil {
		t.Fatal(err)
	}
	expect(f.ID, func(c model.Changes) bool { return c["owner"].Current == "daemon" && c["owner"].Desired == "root" })
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil || st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("after healing the file is owned by %d:%d (%v), want 0:0", st.Uid, st.Gid, err)
	}

	// /etc/passwd, edited by hand with vipw (which locks it as useradd
	// does): the user's shell changed.
	editor := filepath.Join(t.TempDir(), "editor")
	script := "#!/bin/sh\nsed -i 's|^" + user + ":\\(.*\\):/bin/sh$|" + user + ":\\1:/bin/bash|' \"$1\"\n"
	if err := os.WriteFile(editor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// vipw keeps an edit only if the copy's mtime, in whole seconds,
	// differs from the file's: wait out the second useradd wrote it in.
	var pw syscall.Stat_t
	if err := syscall.Stat("/etc/passwd", &pw); err != nil {
		t.Fatal(err)
	}
	if wait := time.Until(time.Unix(pw.Mtim.Sec+1, 0)); wait > 0 {
		time.Sleep(wait)
	}
	vipw := exec.CommandContext(ctx, "vipw")
	vipw.Env = append(os.Environ(), "EDITOR="+editor, "VISUAL="+editor)
	out, err := vipw.CombinedOutput()
	if err != nil || strings.Contains(string(out), "unchanged") {
		t.Fatalf("vipw did not edit /etc/passwd: %v\n%s", err, out)
	}
	expect(u.ID, func(c model.Changes) bool {
		return c["shell"].Current == "/bin/bash" && c["shell"].Desired == "/bin/sh"
	})
	if l := passwdLine(t, user); !strings.HasSuffix(l, ":/bin/sh") {
		t.Fatalf("after healing /etc/passwd holds %q", l)
	}

	// The package, removed with dpkg behind the agent's back.
	if out, err := dpkg(ctx, "--remove", driftPackage); err != nil {
		t.Fatalf("dpkg --remove: %v\n%s", err, out)
	}
	expect(pkg.ID, func(c model.Changes) bool { return c.Created() })
	if !dpkgInstalled(driftPackage) {
		t.Fatalf("%s is not installed after healing", driftPackage)
	}
}

func named(kind, name string, attrs model.Attributes) model.Resource {
	r := handlertest.NamedResource(kind, name, attrs)
	r.ID.Agent = "host"
	return r
}

// dpkg runs dpkg with args. dpkg does not wait for its lock, which the
// package and service tests' apt-get hold while they run beside this
// package: while another holds it, it tries again, as an operator would.
func dpkg(ctx context.Context, args ...string) ([]byte, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		out, err := exec.CommandContext(ctx, "dpkg", args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "lock") || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func dpkgInstalled(name string) bool {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Status}", name).Output()
	return err == nil && strings.TrimSpace(string(out)) == "install ok installed"
}

func passwdLine(t *testing.T, user string) string {
	t.Helper()
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if strings.HasPrefix(l, user+":") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
