package pkg

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"time"

	"github.com/tetherhq/tether/agent/handler"
)

// apt installs with apt-get and reads with dpkg-query and apt-cache. It
// waits for the dpkg lock (another apt, unattended-upgrades) rather than
// failing, never asks questions, keeps changed configuration files, and
// fetches the package lists once when a package or version is not found in
// them (a fresh host, or a repository just added), and reads the cache
// again while another apt rebuilds it.
type apt struct{ rt handler.Runtime }

var aptEnv = []string{"DEBIAN_FRONTEND=noninteractive", "APT_LISTCHANGES_FRONTEND=none"}

func (a apt) installed(ctx context.Context, name string) (string, bool, error) {
	out, err := a.rt.Exec(ctx, "dpkg-query", "--show", "--showformat=${db:Status-Abbrev}\t${Version}\n", name)
	if err != nil {
		return "", false, err
	}
	if out.ExitCode != 0 { // not known to dpkg at all
		return "", false, nil
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out.Stdout)), "\n") {
		status, version, _ := strings.Cut(line, "\t")
		// ii: installed; hi: installed and held. rc: removed, config left.
		if len(status) >= 2 && status[1] == 'i' {
			return version, true, nil
		}
	}
	return "", false, nil
}

// cacheRetries bounds how often a read of apt's cache is tried again while
// an apt-get update (of another apt, or unattended-upgrades) rebuilds it.
var cacheRetries = []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}

func (a apt) candidate(ctx context.Context, name string) (string, error) {
	out, err := a.rt.Output(ctx, nil, "apt-cache", "policy", "--", name)
	for _, wait := range cacheRetries {
		// "E: Cache is out of sync, can't x-ref a package file": the
		// binary cache is being rebuilt under us.
		if err == nil || !strings.Contains(err.Error(), "out of sync") {
			break
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(wait):
		}
		out, err = a.rt.Output(ctx, nil, "apt-cache", "policy", "--", name)
	}
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Candidate:"); ok {
			if v = strings.TrimSpace(v); v != "(none)" {
				return v, nil
			}
		}
	}
	return "", nil
}

func (a apt) get(ctx context.Context, args ...string) error {
	base := []string{"apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=300",
		"-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"}
	_, err := a.rt.Output(ctx, aptEnv, append(base, args...)...)
	return err
}

func (a apt) install(ctx context.Context, name, version string, _ bool) error {
	spec := name
	if version != "" && version != Latest {
		spec = name + "=" + version
	}
	args := []string{"install", "--no-install-recommends", "--allow-downgrades", "--", spec}
	err := a.get(ctx, args...)
	if err != nil && notFound(err.Error()) {
		if uerr := a.get(ctx, "update"); uerr != nil {
			return uerr
		}
		err = a.get(ctx, args...)
	}
	return err
}

// notFound reports whether apt-get failed for want of package lists that
// name the package or version.
func notFound(msg string) bool {
	for _, s := range []string{"Unable to locate package", "has no installation candidate", "was not found"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (a apt) remove(ctx context.Context, name string) error {
	return a.get(ctx, "remove", "--purge", "--", name)
}

// dnf installs with dnf and reads with rpm and dnf repoquery.
type dnf struct{ rt handler.Runtime }

func (d dnf) installed(ctx context.Context, name string) (string, bool, error) {
	out, err := d.rt.Exec(ctx, "rpm", "--query", "--queryformat", "%{VERSION}-%{RELEASE}\n", "--", name)
	if err != nil || out.ExitCode != 0 {
		return "", false, err
	}
	return firstLine(out.Stdout), true, nil
}

func (d dnf) candidate(ctx context.Context, name string) (string, error) {
	out, err := d.rt.Output(ctx, nil, "dnf", "--quiet", "repoquery", "--latest-limit=1", "--queryformat", "%{version}-%{release}\n", "--", name)
	return firstLine(out), err
}

func (d dnf) install(ctx context.Context, name, version string, present bool) error {
	switch {
	case version == Latest && present:
		_, err := d.rt.Output(ctx, nil, "dnf", "--assumeyes", "upgrade", "--", name)
		return err
	case version != "" && version != Latest:
		// install moves an installed package up to the version; a lower
		// version needs downgrade.
		spec := name + "-" + version
		if _, err := d.rt.Output(ctx, nil, "dnf", "--assumeyes", "install", "--", spec); err != nil {
			return err
		}
		if cur, _, err := d.installed(ctx, name); err != nil || cur == version {
			return err
		}
		_, err := d.rt.Output(ctx, nil, "dnf", "--assumeyes", "downgrade", "--", spec)
		return err
	default:
		_, err := d.rt.Output(ctx, nil, "dnf", "--assumeyes", "install", "--", name)
		return err
	}
}

func (d dnf) remove(ctx context.Context, name string) error {
	_, err := d.rt.Output(ctx, nil, "dnf", "--assumeyes", "remove", "--", name)
	return err
}

// apk installs with apk add and reads with apk list.
type apk struct{ rt handler.Runtime }

// apkVersion finds name's version in apk list output lines such as
// "curl-8.5.0-r0 x86_64 {curl} (curl) [installed]".
func apkVersion(out []byte, name string) string {
	for _, line := range strings.Split(string(out), "\n") {
		pkg, _, _ := strings.Cut(line, " ")
		if v, ok := strings.CutPrefix(pkg, name+"-"); ok && v != "" && v[0] >= '0' && v[0] <= '9' {
			return v
		}
	}
	return ""
}

func (a apk) installed(ctx context.Context, name string) (string, bool, error) {
	out, err := a.rt.Output(ctx, nil, "apk", "list", "--installed", "--", name)
	if err != nil {
		return "", false, err
	}
	v := apkVersion(out, name)
	return v, v != "", nil
}

func (a apk) candidate(ctx context.Context, name string) (string, error) {
	out, err := a.rt.Output(ctx, nil, "apk", "list", "--available", "--", name)
	return apkVersion(out, name), err
}

func (a apk) install(ctx context.Context, name, version string, _ bool) error {
	args := []string{"apk", "add", "--no-interactive"}
	switch version {
	case "":
		args = append(args, "--", name)
	case Latest:
		args = append(args, "--upgrade", "--", name)
	default:
		args = append(args, "--", name+"="+version)
	}
	_, err := a.rt.Output(ctx, nil, args...)
	return err
}

func (a apk) remove(ctx context.Context, name string) error {
	_, err := a.rt.Output(ctx, nil, "apk", "del", "--no-interactive", "--", name)
	return err
}

func firstLine(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(line)
}
