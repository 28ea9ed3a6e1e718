package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/cli/guest"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server/record"
)

// Machines made from blueprints, for real: libvirtd on this machine makes
// QEMU guests (software emulation) that boot the machine's own kernel and
// a busybox initramfs holding tether-agent; the guest reaches the broker
// through QEMU's user-mode network (10.0.2.2 is this machine's loopback),
// so nothing leaves the machine.

// guestBroker is the broker as a guest reaches it: this machine's, with
// the tests' user (agents that log in as themselves take no user).
const guestBroker = "amqp://guest:guest@10.0.2.2:5672/"

var (
	guestOnce  sync.Once
	guestBuilt guest.Guest
	guestErr   error
)

// testGuest builds the test guest once per run, in a directory QEMU (which
// libvirt may run as another user) can read.
func testGuest(t testing.TB) guest.Guest {
	t.Helper()
	guestOnce.Do(func() {
		dir := filepath.Join(filepath.Dir(tetherBin), "guest")
		if guestErr = os.MkdirAll(dir, 0o755); guestErr != nil {
			return
		}
		for d := dir; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
			_ = os.Chmod(d, 0o755)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		guestBuilt, guestErr = guest.Build(ctx, dir, guest.Options{})
	})
	if guestErr != nil {
		t.Fatalf("build the test guest: %v", guestErr)
	}
	return guestBuilt
}

// needVMs skips (loudly; fails under CI) unless libvirtd answers as root.
func needVMs(t testing.TB) {
	t.Helper()
	testenv.Need(t, os.Geteuid() == 0, "making machines under libvirt needs root")
	_, err := exec.LookPath("virsh")
	testenv.Need(t, err == nil, "no virsh here: install libvirt-clients (make setup)")
	out, err := exec.Command("virsh", "-c", "qemu:///system", "version").CombinedOutput()
	testenv.Need(t, err == nil, fmt.Sprintf("libvirtd does not answer (%v: %s): start it (.ci/libvirtd, or make setup)", err, strings.TrimSpace(string(out))))
}

// virsh runs virsh against the system libvirtd.
func virsh(args ...string) (string, error) {
	out, err := exec.Command("virsh", append([]string{"-c", "qemu:///system"}, args...)...).CombinedOutput()
	return string(out), err
}

// machineLab is a cluster with agent hv serving this machine's libvirt,
// a storage pool and a serial-console directory of the test's own, and
// the test guest as distribution tiny.
type machineLab struct {
	*cluster
	pool, pooldir, logs, tftp string
	g                         guest.Guest
	hv                        *proc
	hvState                   string
}

func newMachineLab(t testing.TB) *machineLab {
	t.Helper()
	needVMs(t)
	g := testGuest(t)
	c := newCluster(t)
	l := &machineLab{cluster: c, g: g, pool: "tether-e2e-" + randHex(6)}
	base := filepath.Join(filepath.Dir(tetherBin), l.pool)
	l.pooldir, l.logs, l.tftp = filepath.Join(base, "disks"), filepath.Join(base, "logs"), filepath.Join(base, "tftp")
	for _, d := range []string{l.pooldir, l.logs, l.tftp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := virsh("pool-create-as", l.pool, "dir", "--target", l.pooldir); err != nil {
		t.Fatalf("virsh pool-create-as: %v: %s", err, out)
	}
	t.Cleanup(func() {
		// Whatever a failed test left: the environment's machines and
		// the pool.
		out, _ := virsh("list", "--all", "--name")
		for _, name := range strings.Fields(out) {
			if strings.HasPrefix(name, env+".") {
				_, _ = virsh("destroy", name)
				_, _ = virsh("undefine", name)
			}
		}
		_, _ = virsh("pool-destroy", l.pool)
		_ = os.RemoveAll(base)
	})
	l.hvState = t.TempDir()
	l.hv = c.startAgent("hv", agentOpts{stateDir: l.hvState, root: t.TempDir(), args: []string{"--platform", "libvirt", "--platform", "pxe"}})
	waitFor(t, 60*time.Second, "hv's hypervisor discovered", func() bool {
		code, _, _ := c.run("platform", "show", "hv-libvirt")
		return code == 0
	})
	c.cli("distribution", "add", "tiny", "--kind", "netboot", "--kernel", g.Kernel, "--initrd", g.Initramfs,
		"--cmdline", "console=ttyS0 tether.name={{.Host}} tether.env={{.Env}} tether.token={{.Token}} tether.broker={{.Settings.broker}} tether.namespace="+c.ns)
	return l
}

func (l *machineLab) host(name string) record.Host {
	l.t.Helper()
	var h record.Host
	l.cliJSON(&h, "host", "show", name)
	return h
}

func (l *machineLab) instance(host string) record.Instance {
	l.t.Helper()
	var all []record.Instance
	l.cliJSON(&all, "instance", "list")
	for _, i := range all {
		if i.Host == host {
			return i
		}
	}
	return record.Instance{}
}

// domainGone says whether libvirt has no domain of the name and the pool
// no disk of it.
func (l *machineLab) domainGone(name string) bool {
	if _, err := virsh("dominfo", name); err == nil {
		return false
	}
	_, _ = virsh("pool-refresh", l.pool)
	out, _ := virsh("vol-list", l.pool)
	return !strings.Contains(out, name)
}

// serial is what the guest of a host printed.
func (l *machineLab) serial(host string) string {
	b, _ := os.ReadFile(filepath.Join(l.logs, env+"."+host+"-serial.log"))
	return string(b)
}

// provisionWait provisions host and waits until it is provisioned,
// failing with what its guest printed when it is not within 4 minutes.
func (l *machineLab) provisionWait(host string) {
	l.t.Helper()
	code, out, errb := l.run("host", "provision", host, "--wait", "--timeout", "4m")
	if code != 0 {
		l.t.Fatalf("tether host provision %s --wait: exit %d: %s%s\nguest's console:\n%s", host, code, out, errb, l.serial(host))
	}
}

// timed records how long a step took, for the test's log (the figures of
// docs/performance.md come from the benchmark, not from here).
func timed(t *testing.T, what string, since time.Time) time.Time {
	t.Logf("%-40s %6.1f s", what, time.Since(since).Seconds())
	return time.Now()
}

// A machine from a blueprint: define the platform, distribution and host,
// provision; the VM boots, its agent enrolls with the host's one-time
// token, read from the machine's cloud-init seed (user-data on an ISO 9660
// volume labelled cidata, attached as a cdrom, as a cloud image's
// cloud-init would read it), the host is provisioned and its file is
// deployed (the agent's report, and a dry run that finds nothing to
// change); stop, start and reboot it (its uptime drops); destroy it: the
// host is defined again and neither domain, disk nor seed is left.
func TestProvisionMachineFromBlueprint(t *testing.T) {
	l := newMachineLab(t)
	l.cli("platform", "add", "lab", "--driver", "libvirt", "--agent", "hv", "--set", "pool="+l.pool, "--set", "log_dir="+l.logs, "--set", "memory_mib=256", "--set", "disk_gib=1", "--set", "broker="+guestBroker)
	// Its token reaches the machine on a cloud-init (NoCloud) seed, not
	// on its kernel's command line (the other tests' machines have it
	// there).
	userData := filepath.Join(t.TempDir(), "user-data.tmpl")
	if err := os.WriteFile(userData, []byte("#cloud-config\nhostname: {{.Host}}\n"+
		"# The test guest reads the tether.* words of its user-data:\n"+
		"# tether.name={{.Host}} tether.env={{.Env}} tether.token={{.Token}} tether.broker={{.Settings.broker}} tether.namespace="+l.ns+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.cli("distribution", "add", "seeded", "--kind", "netboot", "--kernel", l.g.Kernel, "--initrd", l.g.Initramfs,
		"--cmdline", "console=ttyS0", "--install-format", "cloud-init", "--install", "@"+userData)
	l.cli("host", "add", "vm1", "--platform", "lab", "--distribution", "seeded", "--set", "provision_timeout=240")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(`host "vm1" {
  file "motd" {
    path    = "/etc/motd"
    content = "made from a blueprint\n"
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	v := l.release(dir)

	start := time.Now()
	step := start
	l.provisionWait("vm1")
	step = timed(t, "define → provisioned (boot, enrollment)", step)
	h := l.host("vm1")
	if h.State != record.HostProvisioned || h.Instance == "" {
		t.Fatalf("host %+v: want provisioned with its instance", h)
	}
	if s := l.serial("vm1"); !strings.Contains(s, "read the user-data of the cidata seed") {
		t.Errorf("the guest's console does not say it read its seed:\n%s", s)
	}
	machine := env + ".vm1"
	if doc, err := virsh("dumpxml", machine); err != nil || !strings.Contains(doc, "device='cdrom'") || !strings.Contains(doc, machine+".seed.iso") ||
		strings.Contains(doc, "tether.token") {
		t.Errorf("domain %s (%v): want its seed as a cdrom and no token on its command line:\n%s", machine, err, doc)
	}
	l.converged(v, 1, 2*time.Minute)
	timed(t, "provisioned → file deployed", step)
	timed(t, "define → application deployed", start)
	if s := l.statuses()["file[vm1,path=/etc/motd]"]; s.State != model.StateDeployed {
		t.Fatalf("status of vm1's file: %+v, want deployed", s)
	}
	// The drift test: a dry run on the machine finds its file as the
	// model wants it.
	var dry struct {
		ID string `json:"id"`
	}
	l.cliJSON(&dry, "env", "dryrun", "--agent", "vm1")
	var rep struct {
		Deploy  *record.Deploy  `json:"deploy"`
		Waiting []string        `json:"waiting"`
		Actions []record.Action `json:"actions"`
	}
	waitFor(t, time.Minute, "the dry run of vm1 answered", func() bool {
		l.cliJSON(&rep, "env", "report", dry.ID)
		return rep.Deploy != nil && rep.Deploy.Answered == 1 && len(rep.Waiting) == 0
	})
	for _, a := range rep.Actions {
		if len(a.Changes) > 0 {
			t.Fatalf("the dry run of vm1 would change %s: %+v (drift)", a.ID, a.Changes)
		}
	}
	inst := l.instance("vm1")
	if inst.Power != record.PowerRunning || inst.Agent != "vm1" || inst.BootedAt == nil {
		t.Fatalf("instance %+v: want running, vm1's", inst)
	}
	booted := *inst.BootedAt

	step = time.Now()
	l.cli("host", "stop", "vm1")
	waitFor(t, 2*time.Minute, "vm1 stopped", func() bool { return l.instance("vm1").Power == record.PowerStopped })
	step = timed(t, "stop", step)
	if !strings.Contains(l.serial("vm1"), "stopping the agent") {
		t.Logf("the guest did not say it stopped its agent: a forced stop?\n%s", l.serial("vm1"))
	}
	l.cli("host", "start", "vm1")
	waitFor(t, 2*time.Minute, "vm1 running again", func() bool { return l.instance("vm1").Power == record.PowerRunning })
	timed(t, "start", step)
	waitFor(t, time.Minute, "vm1's boot time after its start", func() bool {
		i := l.instance("vm1")
		return i.BootedAt != nil && i.BootedAt.After(booted)
	})
	booted = *l.instance("vm1").BootedAt
	// Once its agent is back: a guest still booting does not act on the
	// power button yet (the stop is then forced after the grace period).
	if !poll(2*time.Minute, func() bool { return l.agent("vm1").Online }) {
		t.Fatalf("vm1's agent is not online again after its start: %+v\nguest's console:\n%s", l.agent("vm1").Agent, l.serial("vm1"))
	}
	step = time.Now()
	l.cli("host", "reboot", "vm1")
	waitFor(t, 3*time.Minute, "vm1 rebooted", func() bool {
		i := l.instance("vm1")
		return i.Power == record.PowerRunning && i.BootedAt != nil && i.BootedAt.After(booted)
	})
	step = timed(t, "reboot", step)

	code, out, errb := l.run("host", "destroy", "vm1", "--wait", "--timeout", "2m")
	if code != 0 {
		t.Fatalf("tether host destroy --wait: exit %d: %s%s", code, out, errb)
	}
	timed(t, "destroy", step)
	if h := l.host("vm1"); h.State != record.HostDefined || h.Instance != "" {
		t.Fatalf("destroyed host %+v: want defined, without an instance", h)
	}
	if !l.domainGone(machine) {
		t.Fatal("the destroyed machine's domain, disk or seed is still there")
	}
	if a := l.agent("vm1"); a.Name != "" {
		t.Fatalf("the destroyed machine's agent is still known: %+v", a.Agent)
	}
}

// A machine that boots from the network: the PXE platform's iPXE script
// and TFTP tree, served by QEMU's own TFTP server, boot the same guest.
func TestProvisionOverPXE(t *testing.T) {
	l := newMachineLab(t)
	l.cli("platform", "add", "boot", "--driver", "pxe", "--agent", "hv", "--set", "pool="+l.pool, "--set", "log_dir="+l.logs,
		"--set", "memory_mib=256", "--set", "disk_gib=1", "--set", "broker="+guestBroker, "--set", "tftp_root="+l.tftp)
	l.cli("host", "add", "pxe1", "--platform", "boot", "--distribution", "tiny", "--set", "provision_timeout=240")
	start := time.Now()
	l.provisionWait("pxe1")
	timed(t, "define → provisioned over PXE", start)
	if s := l.serial("pxe1"); !strings.Contains(s, "iPXE") && !strings.Contains(s, guest.StartingLine) {
		t.Logf("the guest's console does not show iPXE:\n%s", s)
	}
	script, err := os.ReadFile(filepath.Join(l.tftp, env+".pxe1", "boot.ipxe"))
	if err != nil || !strings.Contains(string(script), "tftp://10.0.2.2/") || !strings.Contains(string(script), "tether.token=") {
		t.Fatalf("boot.ipxe: %q, %v: want the kernel fetched over TFTP with the host's token", script, err)
	}
	l.cli("host", "destroy", "pxe1", "--wait", "--timeout", "2m")
	if !l.domainGone(env + ".pxe1") {
		t.Fatal("the destroyed machine's domain or disk is still there")
	}
	if entries, _ := os.ReadDir(l.tftp); len(entries) != 0 {
		t.Fatalf("the TFTP tree keeps %d entries of the destroyed machine", len(entries))
	}
}

// Provisioning that cannot work: a template refused before anything is
// made; a machine whose agent never calls home (no token on its command
// line) fails at its timeout and is destroyed; a platform whose agent is
// away fails the same way once its agent is back. Other hosts of the
// environment are not disturbed, and nothing is left behind.
func TestProvisionFailures(t *testing.T) {
	l := newMachineLab(t)
	code, _, errb := l.run("platform", "add", "bad", "--driver", "libvirt", "--agent", "hv", "--template", "domain=<domain>{{.Memory}}</domain>")
	if code == 0 || !strings.Contains(errb, "Memory") {
		t.Fatalf("a template of unknown variables: exit %d: %s; want refused naming it", code, errb)
	}
	code, _, errb = l.run("platform", "add", "bad", "--driver", "libvirt", "--agent", "hv", "--set", "memory_mib=lots")
	if code == 0 || !strings.Contains(errb, "memory_mib") {
		t.Fatalf("a setting of the wrong type: exit %d: %s; want refused naming it", code, errb)
	}
	l.cli("platform", "add", "lab", "--driver", "libvirt", "--agent", "hv", "--set", "pool="+l.pool, "--set", "log_dir="+l.logs, "--set", "memory_mib=256", "--set", "disk_gib=1", "--set", "broker="+guestBroker)
	l.cli("distribution", "add", "mute", "--kind", "netboot", "--kernel", l.g.Kernel, "--initrd", l.g.Initramfs,
		"--cmdline", "console=ttyS0 tether.name={{.Host}} tether.env={{.Env}} tether.namespace="+l.ns)
	l.cli("host", "add", "silent", "--platform", "lab", "--distribution", "mute", "--set", "provision_timeout=15")
	l.cli("host", "add", "ok1", "--platform", "lab", "--distribution", "tiny", "--set", "provision_timeout=240")
	l.cli("host", "provision", "silent")
	code, out, errb := l.run("host", "provision", "ok1", "--wait", "--timeout", "4m")
	if code != 0 {
		t.Fatalf("provision ok1: exit %d: %s%s", code, out, errb)
	}
	waitFor(t, 2*time.Minute, "silent failed", func() bool { return l.host("silent").State == record.HostFailed })
	h := l.host("silent")
	if h.State != record.HostFailed || !strings.Contains(h.Reason, "did not enroll within 15s") {
		t.Fatalf("silent %+v: want failed with the timeout", h)
	}
	waitFor(t, time.Minute, "silent's machine destroyed", func() bool { return l.domainGone(env + ".silent") })
	if h := l.host("ok1"); h.State != record.HostProvisioned {
		t.Fatalf("ok1 disturbed: %+v", h)
	}

	// A platform whose agent is away: the command waits in its inbox;
	// the host fails at its timeout; the agent, back, destroys what it
	// made meanwhile.
	l.cli("host", "add", "away", "--platform", "lab", "--distribution", "tiny", "--set", "provision_timeout=10")
	l.hv.stop()
	l.cli("host", "provision", "away")
	waitFor(t, 90*time.Second, "away failed, its platform away", func() bool { return l.host("away").State == record.HostFailed })
	if h := l.host("away"); !strings.Contains(h.Reason, "did not enroll within 10s") {
		t.Fatalf("away %+v: want failed at its timeout", h)
	}
	l.hv = l.startAgent("hv", agentOpts{stateDir: l.hvState, root: t.TempDir(), args: []string{"--platform", "libvirt", "--platform", "pxe"}})
	// The provision expired in the inbox; the destroy that followed it
	// finds nothing to destroy.
	waitFor(t, time.Minute, "hv back", func() bool { return l.agent("hv").Online })
	time.Sleep(5 * time.Second)
	if !l.domainGone(env + ".away") {
		t.Fatal("the provision that timed out in the inbox of an agent away made a machine when it came back")
	}
	if h := l.host("ok1"); h.State != record.HostProvisioned {
		t.Fatalf("ok1 disturbed: %+v", h)
	}
	l.cli("host", "destroy", "ok1", "--wait", "--timeout", "2m")
	var hosts []json.RawMessage
	l.cliJSON(&hosts, "host", "list")
	if len(hosts) != 3 {
		t.Fatalf("hosts %s: want silent, away and ok1, nothing else", hosts)
	}
}

// BenchmarkProvision measures define → provisioned → application
// deployed for n hosts at once, per step: the driver's work (the
// platform's agent made and started the machine: its instance shows),
// boot and enrollment (the host is provisioned), the first deploy (its
// file is deployed). Figures in docs/performance.md:
//
//	go test ./cli/e2e -run '^$' -bench Provision -benchtime 1x
func BenchmarkProvision(b *testing.B) {
	for _, n := range []int{1, 5} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) { benchProvision(b, n) })
	}
}

func benchProvision(b *testing.B, n int) {
	l := newMachineLab(b)
	l.cli("platform", "add", "lab", "--driver", "libvirt", "--agent", "hv", "--set", "pool="+l.pool, "--set", "log_dir="+l.logs, "--set", "memory_mib=256", "--set", "disk_gib=1", "--set", "broker="+guestBroker)
	var hcl strings.Builder
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("vm%d", i+1)
		l.cli("host", "add", names[i], "--platform", "lab", "--distribution", "tiny", "--set", "provision_timeout=600")
		fmt.Fprintf(&hcl, "host %q {\n  file \"motd\" {\n    path    = \"/etc/motd\"\n    content = \"made from a blueprint\\n\"\n  }\n}\n", names[i])
	}
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	l.release(dir)
	var made, provisioned, deployed, last time.Duration
	for range b.N {
		start := time.Now()
		for _, name := range names {
			l.cli("host", "provision", name)
		}
		seen := map[string][3]time.Duration{}
		for len(seen) < n || !allDeployed(seen) {
			if time.Since(start) > 10*time.Minute {
				b.Fatalf("not every host deployed in 10 minutes: %v", seen)
			}
			// Read over HTTP, not with three processes a poll: the
			// guests share the machine's two cores.
			var hosts []record.Host
			l.getJSON("/envs/"+env+"/hosts", &hosts)
			var insts []record.Instance
			l.getJSON("/envs/"+env+"/instances", &insts)
			var list []record.ResourceStatus
			l.getJSON("/envs/"+env+"/resources", &list)
			sts := map[string]record.ResourceStatus{}
			for _, st := range list {
				sts[st.ID.String()] = st
			}
			now := time.Since(start)
			for _, h := range hosts {
				s := seen[h.Name]
				if h.State == record.HostFailed {
					b.Fatalf("host %s failed: %s", h.Name, h.Reason)
				}
				for _, i := range insts {
					if i.Host == h.Name && s[0] == 0 {
						s[0] = now
					}
				}
				if h.State == record.HostProvisioned && s[1] == 0 {
					s[1] = now
				}
				if st, ok := sts["file["+h.Name+",path=/etc/motd]"]; ok && s[1] != 0 && s[2] == 0 && st.State == model.StateDeployed {
					s[2] = now
				}
				seen[h.Name] = s
			}
			time.Sleep(250 * time.Millisecond)
		}
		for _, s := range seen {
			made, provisioned, deployed = made+s[0], provisioned+s[1], deployed+s[2]
			last = max(last, s[2])
		}
		b.StopTimer()
		for _, name := range names {
			l.cli("host", "destroy", name, "--wait", "--timeout", "2m")
		}
		b.StartTimer()
	}
	per := float64(b.N * n)
	b.ReportMetric(made.Seconds()/per, "s/made")
	b.ReportMetric(provisioned.Seconds()/per, "s/provisioned")
	b.ReportMetric(deployed.Seconds()/per, "s/deployed")
	b.ReportMetric(last.Seconds()/float64(b.N), "s/all-deployed")
}

func allDeployed(seen map[string][3]time.Duration) bool {
	for _, s := range seen {
		if s[2] == 0 {
			return false
		}
	}
	return true
}

// getJSON reads an API path as the admin into v.
func (l *machineLab) getJSON(path string, v any) {
	l.t.Helper()
	req, _ := http.NewRequest("GET", "http://"+l.listen+"/api/v1"+path, nil)
	req.Header.Set("Authorization", "Bearer "+l.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		l.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		l.t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		l.t.Fatalf("GET %s: %v", path, err)
	}
}
