// Package facts gathers what an agent reports about its host: names,
// operating system, kernel, hardware, addresses, the package and service
// managers its handlers will use, and virtualisation when it can tell. Facts
// are sent in hello and again whenever they change; models read them as
// host.facts.PATH (host.facts.os.family, host.facts.ipv4).
package facts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Host is where facts are read from; tests point it at a fake tree.
type Host struct {
	// Root prefixes the files read (/etc/os-release, /proc/meminfo, …);
	// "" is the real host.
	Root string
	// Interfaces lists network interfaces; nil uses net.Interfaces.
	Interfaces func() ([]Interface, error)
	// LookPath finds a program; nil uses exec.LookPath.
	LookPath func(string) (string, error)
	// Dir holds custom facts: every *.json file in it is a JSON object
	// whose keys become facts (host.facts.KEY). The built-in facts win a
	// name both have. "" reads none.
	Dir string
}

// Interface is one network interface and its addresses.
type Interface struct {
	Name  string
	MAC   string
	Up    bool
	Loop  bool
	Addrs []net.IP
}

// Gather returns the facts of the real host.
func Gather(ctx context.Context) map[string]any { return Host{}.Gather(ctx) }

// Gather returns the host's facts as JSON values. A fact that cannot be
// read is left out (never guessed): a model that needs it sees it unknown.
func (h Host) Gather(ctx context.Context) map[string]any {
	out := map[string]any{"arch": runtime.GOARCH, "cpus": runtime.NumCPU()}
	if name, err := os.Hostname(); err == nil {
		out["hostname"] = name
		if fqdn := fqdn(ctx, name); fqdn != "" {
			out["fqdn"] = fqdn
		}
	}
	if osr := h.osRelease(); len(osr) > 0 {
		out["os"] = osr
	}
	var uts syscall.Utsname
	if err := syscall.Uname(&uts); err == nil {
		out["kernel"] = map[string]any{"name": cstr(uts.Sysname[:]), "release": cstr(uts.Release[:])}
		out["machine"] = cstr(uts.Machine[:])
	}
	if mem := h.memory(); mem > 0 {
		out["memory"] = map[string]any{"total_mb": mem / (1 << 20)}
	}
	h.addresses(out)
	if pm := h.packageManager(); pm != "" {
		out["package_manager"] = pm
	}
	out["service_manager"] = h.serviceManager()
	if v := h.virtualization(); v != "" {
		out["virtualization"] = v
	}
	h.custom(out)
	return out
}

// Bounds of the custom facts: a directory of them is a host's own notes,
// not a data store.
const (
	maxCustomFiles    = 100
	maxCustomFileSize = 64 << 10
)

// custom adds the facts of the *.json files in h.Dir to out, in name
// order; a later file's key replaces an earlier one's, a built-in fact is
// never replaced. What cannot be read is listed in the fact
// custom_fact_errors, for an operator to see in tether agent facts.
func (h Host) custom(out map[string]any) {
	if h.Dir == "" {
		return
	}
	builtin := map[string]bool{}
	for k := range out {
		builtin[k] = true
	}
	var errs []string
	names, err := filepath.Glob(filepath.Join(h.Dir, "*.json"))
	if err != nil {
		return
	}
	slices.Sort(names)
	if len(names) > maxCustomFiles {
		errs = append(errs, fmt.Sprintf("%d files: only the first %d are read", len(names), maxCustomFiles))
		names = names[:maxCustomFiles]
	}
	for _, name := range names {
		base := filepath.Base(name)
		b, err := readBounded(name, maxCustomFileSize)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", base, err))
			continue
		}
		var facts map[string]any
		if err := json.Unmarshal(b, &facts); err != nil || facts == nil {
			errs = append(errs, fmt.Sprintf("%s: not a JSON object: %v", base, err))
			continue
		}
		for k, v := range facts {
			if builtin[k] {
				errs = append(errs, fmt.Sprintf("%s: %q is a built-in fact: kept the built-in", base, k))
				continue
			}
			out[k] = v
		}
	}
	if len(errs) > 0 {
		out["custom_fact_errors"] = errs
	}
}

// readBounded reads a regular file of at most limit bytes.
func readBounded(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d KiB", limit>>10)
	}
	return b, err
}

func (h Host) path(p string) string { return h.Root + p }

func (h Host) read(p string) []byte {
	b, _ := os.ReadFile(h.path(p))
	return b
}

// osRelease reads /etc/os-release: family (debian, redhat, alpine, suse,
// arch, or the distribution's own ID), name, release and id.
func (h Host) osRelease() map[string]any {
	kv := map[string]string{}
	b := h.read("/etc/os-release")
	if b == nil {
		b = h.read("/usr/lib/os-release")
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			kv[k] = strings.Trim(v, `"'`)
		}
	}
	if kv["ID"] == "" {
		return nil
	}
	out := map[string]any{"id": kv["ID"], "family": family(kv["ID"], strings.Fields(kv["ID_LIKE"]))}
	if kv["NAME"] != "" {
		out["name"] = kv["NAME"]
	}
	if kv["VERSION_ID"] != "" {
		out["release"] = kv["VERSION_ID"]
	}
	if kv["VERSION_CODENAME"] != "" {
		out["codename"] = kv["VERSION_CODENAME"]
	}
	return out
}

func family(id string, like []string) string {
	for _, f := range append([]string{id}, like...) {
		switch f {
		case "debian", "ubuntu":
			return "debian"
		case "rhel", "fedora", "centos":
			return "redhat"
		case "alpine", "arch", "gentoo":
			return f
		case "suse", "opensuse":
			return "suse"
		}
	}
	return id
}

// memory returns MemTotal of /proc/meminfo in bytes.
func (h Host) memory() int64 {
	sc := bufio.NewScanner(bytes.NewReader(h.read("/proc/meminfo")))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// addresses sets interfaces (name → mac, ipv4, ipv6) and ipv4/ipv6, the
// first global address of an interface that is up and not loopback.
func (h Host) addresses(out map[string]any) {
	list := h.Interfaces
	if list == nil {
		list = hostInterfaces
	}
	ifs, err := list()
	if err != nil {
		return
	}
	all := map[string]any{}
	for _, i := range ifs {
		if i.Loop {
			continue
		}
		v4, v6 := []string{}, []string{}
		for _, ip := range i.Addrs {
			if ip.To4() != nil {
				v4 = append(v4, ip.String())
			} else {
				v6 = append(v6, ip.String())
			}
			if !i.Up || !ip.IsGlobalUnicast() {
				continue
			}
			key := "ipv6"
			if ip.To4() != nil {
				key = "ipv4"
			}
			if _, ok := out[key]; !ok {
				out[key] = ip.String()
			}
		}
		entry := map[string]any{"ipv4": v4, "ipv6": v6, "up": i.Up}
		if i.MAC != "" {
			entry["mac"] = i.MAC
		}
		all[i.Name] = entry
	}
	out["interfaces"] = all
}

func hostInterfaces() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]Interface, 0, len(ifs))
	for _, i := range ifs {
		e := Interface{Name: i.Name, MAC: i.HardwareAddr.String(), Up: i.Flags&net.FlagUp != 0, Loop: i.Flags&net.FlagLoopback != 0}
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				e.Addrs = append(e.Addrs, n.IP)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// packageManager names the first of apt, dnf, yum (as dnf's provider
// does not drive yum, it is reported as is), apk found.
func (h Host) packageManager() string {
	look := h.LookPath
	if look == nil {
		look = exec.LookPath
	}
	for _, c := range [][2]string{{"apt", "dpkg-query"}, {"dnf", "dnf"}, {"yum", "yum"}, {"apk", "apk"}} {
		if _, err := look(c[1]); err == nil {
			return c[0]
		}
	}
	return ""
}

// serviceManager names the init system that runs: systemd's own test
// (/run/systemd/system), OpenRC's (/run/openrc), else SysV init scripts.
func (h Host) serviceManager() string {
	if st, err := os.Stat(h.path("/run/systemd/system")); err == nil && st.IsDir() {
		return "systemd"
	}
	if st, err := os.Stat(h.path("/run/openrc")); err == nil && st.IsDir() {
		return "openrc"
	}
	return "sysv"
}

// virtualization tells containers (docker, podman, lxc, kubernetes) from
// their marks, and virtual machines from the DMI vendor strings.
func (h Host) virtualization() string {
	if _, err := os.Stat(h.path("/.dockerenv")); err == nil {
		return "docker"
	}
	if _, err := os.Stat(h.path("/run/.containerenv")); err == nil {
		return "podman"
	}
	if env := h.read("/proc/1/environ"); env != nil {
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("container=")); ok && len(v) > 0 {
				return string(v)
			}
		}
	}
	cg := string(h.read("/proc/1/cgroup"))
	for _, c := range [][2]string{{"kubepods", "kubernetes"}, {"docker", "docker"}, {"lxc", "lxc"}} {
		if strings.Contains(cg, c[0]) {
			return c[1]
		}
	}
	dmi := strings.ToLower(string(h.read("/sys/class/dmi/id/sys_vendor")) + " " + string(h.read("/sys/class/dmi/id/product_name")))
	for _, v := range [][2]string{{"qemu", "kvm"}, {"kvm", "kvm"}, {"vmware", "vmware"}, {"virtualbox", "virtualbox"},
		{"xen", "xen"}, {"microsoft corporation", "hyperv"}, {"amazon ec2", "kvm"}, {"google", "kvm"}} {
		if strings.Contains(dmi, v[0]) {
			return v[1]
		}
	}
	if slices.Contains(strings.Fields(string(h.read("/proc/cpuinfo"))), "hypervisor") {
		return "vm"
	}
	return ""
}

// fqdn returns the host's fully qualified name as its resolver knows it
// (like hostname -f), or "" when it cannot tell within a second.
func fqdn(ctx context.Context, name string) string {
	if strings.Contains(name, ".") {
		return name
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if cname, err := net.DefaultResolver.LookupCNAME(ctx, name); err == nil {
		if c := strings.TrimSuffix(cname, "."); strings.Contains(c, ".") {
			return c
		}
	}
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		names, err := net.DefaultResolver.LookupAddr(ctx, a)
		if err != nil {
			continue
		}
		for _, n := range names {
			if n = strings.TrimSuffix(n, "."); strings.HasPrefix(n, name+".") {
				return n
			}
		}
	}
	return ""
}

func cstr(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

type freshKey struct{}

// freshAge is how old facts a Fresh gathering takes from a cache: several
// agents of one process asked at once share one gathering.
const freshAge = time.Second

// Fresh asks a Cached gatherer for facts gathered now (within a second),
// not a copy up to its ttl old: an operator's facts-refresh after changing
// the host.
func Fresh(ctx context.Context) context.Context { return context.WithValue(ctx, freshKey{}, true) }

// Cached returns a gatherer that gathers at most once per ttl and hands out
// copies of that: several agents hosted by one process on one host (or a
// benchmark's thousand) share one gathering.
func Cached(ttl time.Duration, gather func(context.Context) map[string]any) func(context.Context) map[string]any {
	var (
		mu   sync.Mutex
		at   time.Time
		last map[string]any
	)
	return func(ctx context.Context) map[string]any {
		mu.Lock()
		defer mu.Unlock()
		if last == nil || time.Since(at) >= ttl || (ctx.Value(freshKey{}) != nil && time.Since(at) >= freshAge) {
			last, at = gather(ctx), time.Now()
		}
		return maps.Clone(last)
	}
}

// Providers returns the package and service managers the facts name, for
// the handlers' runtime.
func Providers(f map[string]any) (packageManager, serviceManager string) {
	packageManager, _ = f["package_manager"].(string)
	serviceManager, _ = f["service_manager"].(string)
	return packageManager, serviceManager
}
