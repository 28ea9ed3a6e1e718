package server_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// fakePlatform is a platform driver whose machines are agents of the
// rig: a machine "boots" by starting an agent named after its host with
// the enrollment token its kernel command line carries. It lets the
// server's side of machines be tested without a hypervisor (the libvirt
// driver is tested against libvirtd, and end to end in cli/e2e).
type fakePlatform struct {
	r  *rig
	mu sync.Mutex
	// machines by name; fail makes the provisioning of a host fail,
	// mute boots a host's machine without its agent.
	machines map[string]*fakeMachine
	fail     map[string]string
	mute     map[string]bool
	// roots are the machines' file systems, by host; ops what was done,
	// in order.
	roots map[string]string
	ops   []string
}

type fakeMachine struct {
	spec   model.MachineSpec
	id     string
	booted time.Time
	stop   func()
}

func newFakePlatform(r *rig) *fakePlatform {
	return &fakePlatform{r: r, machines: map[string]*fakeMachine{}, fail: map[string]string{}, mute: map[string]bool{}, roots: map[string]string{}}
}

func (f *fakePlatform) Driver() string { return record.DriverLibvirt }
func (f *fakePlatform) Close() error   { return nil }

func (f *fakePlatform) Provision(_ context.Context, spec model.MachineSpec) (model.InstanceState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if why := f.fail[spec.Host]; why != "" {
		return model.InstanceState{}, errors.New(why)
	}
	if m, ok := f.machines[spec.Name]; ok {
		return f.state(m), nil
	}
	m := &fakeMachine{spec: spec, id: fmt.Sprintf("uuid-%s", spec.Name)}
	f.machines[spec.Name] = m
	f.boot(m)
	return f.state(m), nil
}

// boot starts the machine's agent with the token of its command line.
func (f *fakePlatform) boot(m *fakeMachine) {
	m.booted = time.Now().UTC()
	if f.mute[m.spec.Host] {
		m.stop = func() {}
		return
	}
	token := ""
	for _, w := range strings.Fields(m.spec.Boot.Cmdline) {
		if v, ok := strings.CutPrefix(w, "tether.token="); ok {
			token = v
		}
	}
	m.stop = f.startAgent(agent.Config{Env: "test", Name: m.spec.Host, Token: token, StateDir: f.r.t.TempDir()})
}

// startAgent runs a machine's agent below the machine's own root (the
// rig's roots are the test's to read).
func (f *fakePlatform) startAgent(cfg agent.Config) (stop func()) {
	root := f.roots[cfg.Name]
	if root == "" {
		root = f.r.t.TempDir()
		f.roots[cfg.Name] = root
	}
	reg, err := builtin.Registry(handler.Runtime{Root: root, Sync: handler.NewSyncGroup()})
	if err != nil {
		f.r.t.Error(err)
		return func() {}
	}
	a, err := agent.New(cfg, f.r.bus, reg, zerolog.Nop())
	if err != nil {
		f.r.t.Error(err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(f.r.ctx)
	done := make(chan struct{})
	f.r.wg.Add(1)
	go func() {
		defer f.r.wg.Done()
		defer close(done)
		defer a.Close()
		if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			f.r.t.Errorf("agent %s: %v", cfg.Name, err)
		}
	}()
	return func() { cancel(); <-done }
}

// content is what the file at path holds on host's machine.
func (f *fakePlatform) content(host, path string) string {
	f.mu.Lock()
	root := f.roots[host]
	f.mu.Unlock()
	b, _ := os.ReadFile(filepath.Join(root, path))
	return string(b)
}

func (f *fakePlatform) state(m *fakeMachine) model.InstanceState {
	power := string(record.PowerStopped)
	var booted *time.Time
	if m.stop != nil {
		power, booted = string(record.PowerRunning), &m.booted
	}
	return model.InstanceState{ID: m.id, Name: m.spec.Name, Host: m.spec.Host, Power: power, BootedAt: booted,
		Hardware: map[string]any{"memory_mib": m.spec.Settings["memory_mib"]}}
}

func (f *fakePlatform) Control(_ context.Context, name string, op model.MachineOp, _ time.Duration) (model.InstanceState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, string(op)+" "+name)
	m, ok := f.machines[name]
	if !ok {
		return model.InstanceState{}, fmt.Errorf("no machine %s", name)
	}
	if m.stop != nil && (op == model.MachineStop || op == model.MachineReboot) {
		m.stop()
		m.stop = nil
	}
	if m.stop == nil && (op == model.MachineStart || op == model.MachineReboot) {
		time.Sleep(10 * time.Millisecond) // a reboot takes time
		f.boot(m)
	}
	return f.state(m), nil
}

func (f *fakePlatform) Destroy(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, "destroy "+name)
	if m, ok := f.machines[name]; ok {
		if m.stop != nil {
			m.stop()
		}
		delete(f.machines, name)
		// Its disk goes with it.
		_ = os.RemoveAll(f.roots[m.spec.Host])
		delete(f.roots, m.spec.Host)
	}
	return nil
}

func (f *fakePlatform) Inventory(context.Context) (model.PlatformState, []model.InstanceState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []model.InstanceState
	for _, m := range f.machines {
		out = append(out, f.state(m))
	}
	return model.PlatformState{Driver: record.DriverLibvirt, URI: "fake:///", Hostname: "hv"}, out, nil
}

func (f *fakePlatform) spec(name string) model.MachineSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.machines[name]; ok {
		return m.spec
	}
	return model.MachineSpec{}
}

func (f *fakePlatform) has(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.machines[name]
	return ok
}

// machinesRig is a rig whose environment enrolls by token and deploys on
// its own, with agent hv serving platform lab (a fake hypervisor),
// distribution tiny and host vm1 on them.
func machinesRig(t *testing.T, cfg server.Config) (*rig, *fakePlatform) {
	t.Helper()
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = true
	settings.Enrollment = record.EnrollToken
	r := startRig(t, cfg, map[string]record.EnvSettings{"test": settings})
	hv := newFakePlatform(r)
	r.startAgentWith(agent.Config{Env: "test", Name: "hv", ServerKey: r.srv.PublicKey(), Platforms: []handler.MachineDriver{hv}, InventoryInterval: 200 * time.Millisecond})
	waitFor(t, "hv waiting for acceptance", func() bool { _, err := r.store.GetAgent(r.ctx, "test", "hv"); return err == nil })
	if _, err := r.srv.AgentAction(r.ctx, "test", "hv", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	m := r.srv.Machines()
	waitFor(t, "hv's hypervisor discovered", func() bool { _, err := m.GetPlatform(r.ctx, "test", "hv-libvirt"); return err == nil })
	if _, err := m.PutPlatform(r.ctx, record.Platform{Env: "test", Name: "lab", Driver: record.DriverLibvirt, Agent: "hv"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutDistribution(r.ctx, record.Distribution{Env: "test", Name: "tiny", Kind: record.DistNetboot, Kernel: "/boot/vmlinuz", Initrd: "/boot/tiny.gz",
		Cmdline:       "console=ttyS0 tether.name={{.Host}} tether.env={{.Env}} tether.token={{.Token}} tether.broker={{.Settings.broker}}",
		Params:        []record.Param{{Name: "root_password", Type: record.ParamSecret, Required: true, Doc: "root's password"}},
		Settings:      map[string]any{"root_password": "hunter2"},
		InstallFormat: record.InstallCloudInit, Install: "#cloud-config\npassword: {{.Settings.root_password}}\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddHost(r.ctx, record.Host{Env: "test", Name: "vm1", Platform: "lab", Distribution: "tiny", Settings: map[string]any{"memory_mib": 256}}); err != nil {
		t.Fatal(err)
	}
	return r, hv
}

func (r *rig) host(name string) record.Host {
	r.t.Helper()
	v, err := r.srv.Machines().ShowHost(r.ctx, "test", name)
	if err != nil {
		r.t.Fatal(err)
	}
	return v.Host
}

func (r *rig) instance(host string) *record.Instance {
	r.t.Helper()
	v, err := r.srv.Machines().ShowHost(r.ctx, "test", host)
	if err != nil {
		r.t.Fatal(err)
	}
	return v.Instance
}

func (r *rig) waitHost(name string, state record.HostState) record.Host {
	r.t.Helper()
	waitFor(r.t, "host "+name+" "+string(state), func() bool { return r.host(name).State == state })
	return r.host(name)
}

// A host is provisioned through the agent serving its platform, its
// machine's agent enrolls with the host's one-time token (the environment
// takes no agent without one), the host's resources deploy with no
// operator step, its machine is stopped, started, rebooted and destroyed,
// and the host is defined again, its agent forgotten.
func TestMachinesFromBlueprints(t *testing.T) {
	r, hv := machinesRig(t, server.Config{StopGrace: time.Second})
	m := r.srv.Machines()
	r.release(file("vm1", "/motd", "made from a blueprint"))
	// The environment's machine settings are the first layer of the
	// host's context.
	if _, err := r.srv.UpdateEnvSettings(r.ctx, "test", func(s *record.EnvSettings) error { return s.Set("machine_settings", `{"cpus": 2}`) }); err != nil {
		t.Fatal(err)
	}

	h, err := m.Provision(r.ctx, "test", "vm1", "alice")
	if err != nil || h.State != record.HostProvisioning {
		t.Fatalf("provision: %+v, %v", h, err)
	}
	if _, err := m.Provision(r.ctx, "test", "vm1", "alice"); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("provisioning twice: %v, want a conflict", err)
	}
	h = r.waitHost("vm1", record.HostProvisioned)
	// The root password is sealed at rest, shown nowhere, and in clear in
	// the machine's install template only.
	d, err := m.GetDistribution(r.ctx, "test", "tiny")
	if err != nil || strings.Contains(fmt.Sprint(d.Settings), "hunter2") {
		t.Fatalf("the distribution at rest: %+v, %v: want its root password sealed", d.Settings, err)
	}
	if v, _ := m.ShowHost(r.ctx, "test", "vm1"); strings.Contains(fmt.Sprint(v.Context), "hunter2") {
		t.Fatalf("the host's context shows its root password: %+v", v.Context)
	}
	if got := hv.spec("test.vm1").Settings["cpus"]; fmt.Sprint(got) != "2" {
		t.Fatalf("the machine's cpus %v (%T): want the environment's 2", got, got)
	}
	if v, _ := m.ShowHost(r.ctx, "test", "vm1"); !slices.ContainsFunc(v.Context, func(c record.ContextValue) bool { return c.Name == "cpus" && c.From == "environment" }) {
		t.Fatalf("vm1's context %+v: want cpus from the environment", v.Context)
	}
	if got := hv.spec("test.vm1").Seed["user-data"]; got != "#cloud-config\npassword: hunter2\n" {
		t.Fatalf("the machine's user-data %q: want the password in clear", got)
	}
	waitFor(t, "vm1's file deployed", func() bool { return hv.content("vm1", "motd") == "made from a blueprint" })
	inst := r.instance("vm1")
	if inst == nil || inst.Agent != "vm1" || inst.Power != record.PowerRunning || h.Instance != inst.ID || inst.Platform != "lab" {
		t.Fatalf("instance %+v of host %+v: want vm1's, running, on lab", inst, h)
	}
	if toks, _ := r.store.ListEnrollTokens(r.ctx, "test"); len(toks) != 0 {
		t.Fatalf("tokens left after enrollment: %+v", toks)
	}
	booted := *inst.BootedAt

	if _, err := m.Control(r.ctx, "test", "vm1", model.MachineStop, "alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "vm1 stopped", func() bool { return r.instance("vm1").Power == record.PowerStopped })
	if _, err := m.Control(r.ctx, "test", "vm1", model.MachineStart, "alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "vm1 running", func() bool { return r.instance("vm1").Power == record.PowerRunning })
	booted = *r.instance("vm1").BootedAt
	if _, err := m.Control(r.ctx, "test", "vm1", model.MachineReboot, "alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "vm1 rebooted", func() bool { i := r.instance("vm1"); return i.BootedAt != nil && i.BootedAt.After(booted) })

	// Controls sent at once are carried out in the order they were sent.
	hv.mu.Lock()
	hv.ops = nil
	hv.mu.Unlock()
	for _, op := range []model.MachineOp{model.MachineStop, model.MachineStart, model.MachineStop} {
		if _, err := m.Control(r.ctx, "test", "vm1", op, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Destroy(r.ctx, "test", "vm1", "alice"); err != nil {
		t.Fatal(err)
	}
	r.waitHost("vm1", record.HostDefined)
	hv.mu.Lock()
	ops := strings.Join(hv.ops, ", ")
	hv.mu.Unlock()
	if ops != "stop test.vm1, start test.vm1, stop test.vm1, destroy test.vm1" {
		t.Fatalf("the machine's operations: %s, want them in the order they were sent", ops)
	}
	if hv.has("test.vm1") || r.instance("vm1") != nil {
		t.Fatal("the destroyed machine or its instance is still there")
	}
	if _, err := r.store.GetAgent(r.ctx, "test", "vm1"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("the destroyed machine's agent: %v, want forgotten", err)
	}
	// Every move was audited and told on the stream.
	audit, err := r.store.Audit(r.ctx, record.AuditFilter{Env: "test", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range audit {
		if e.Target == "vm1" {
			actions = append(actions, e.Action)
		}
	}
	for _, want := range []string{"host.provision", "host.enrolled", "host.destroy", "host.destroyed", "instance.stop", "instance.start", "instance.reboot"} {
		if !strings.Contains(strings.Join(actions, " "), want) {
			t.Fatalf("audit of vm1 %v: no %s", actions, want)
		}
	}

	// Made again from the same blueprint: a new machine, a new agent.
	if _, err := m.Provision(r.ctx, "test", "vm1", "alice"); err != nil {
		t.Fatal(err)
	}
	r.waitHost("vm1", record.HostProvisioned)
	waitFor(t, "vm1's file deployed", func() bool { return hv.content("vm1", "motd") == "made from a blueprint" })
}

// Provisioning that fails leaves the host failed with the driver's reason
// (or, when the machine's agent never calls home, with the timeout's) and
// its machine destroyed; other hosts are not disturbed; a halted
// environment makes and controls no machine.
func TestMachinesThatFail(t *testing.T) {
	r, hv := machinesRig(t, server.Config{ProvisionTimeout: 2 * time.Second})
	m := r.srv.Machines()
	for _, name := range []string{"bad", "mute"} {
		if _, err := m.AddHost(r.ctx, record.Host{Env: "test", Name: name, Platform: "lab", Distribution: "tiny"}); err != nil {
			t.Fatal(err)
		}
	}
	hv.mu.Lock()
	hv.fail["bad"] = "storage pool default not found"
	hv.mute["mute"] = true
	hv.mu.Unlock()
	for _, name := range []string{"bad", "mute", "vm1"} {
		if _, err := m.Provision(r.ctx, "test", name, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	bad := r.waitHost("bad", record.HostFailed)
	if !strings.Contains(bad.Reason, "storage pool default not found") || !strings.Contains(bad.Reason, "platform lab") {
		t.Fatalf("bad's reason %q: want the driver's, naming the platform", bad.Reason)
	}
	mute := r.waitHost("mute", record.HostFailed)
	if !strings.Contains(mute.Reason, "did not enroll within 2s") {
		t.Fatalf("mute's reason %q: want the timeout", mute.Reason)
	}
	waitFor(t, "mute's machine destroyed", func() bool { return !hv.has("test.mute") })
	if h := r.waitHost("vm1", record.HostProvisioned); h.Reason != "" {
		t.Fatalf("vm1 disturbed: %+v", h)
	}
	// A failed host is provisioned again, or deleted.
	if err := m.DeleteHost(r.ctx, "test", "bad"); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteHost(r.ctx, "test", "vm1"); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("deleting a provisioned host: %v, want a conflict", err)
	}

	if _, err := r.srv.UpdateEnvSettings(r.ctx, "test", func(s *record.EnvSettings) error { s.Halted = true; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, try := range []func() error{
		func() error { _, err := m.Provision(r.ctx, "test", "mute", "alice"); return err },
		func() error { _, err := m.Control(r.ctx, "test", "vm1", model.MachineStop, "alice"); return err },
		func() error { _, err := m.Destroy(r.ctx, "test", "vm1", "alice"); return err },
	} {
		if err := try(); !errors.Is(err, record.ErrHalted) || !strings.Contains(err.Error(), "halted") {
			t.Fatalf("a machine made or controlled while halted: %v", err)
		}
	}
}

// Blueprints that cannot work are refused naming the field, before
// anything is made.
func TestMachineBlueprintsRefused(t *testing.T) {
	r, _ := machinesRig(t, server.Config{})
	m := r.srv.Machines()
	for _, tc := range []struct {
		name string
		try  func() error
		want string
	}{
		{"unknown driver", func() error {
			_, err := m.PutPlatform(r.ctx, record.Platform{Env: "test", Name: "x", Driver: "vmware", Agent: "hv"})
			return err
		}, "driver: unknown driver"},
		{"setting of the wrong type", func() error {
			_, err := m.PutPlatform(r.ctx, record.Platform{Env: "test", Name: "x", Driver: "libvirt", Agent: "hv", Settings: map[string]any{"memory_mib": "lots"}})
			return err
		}, "settings.memory_mib: want a whole number"},
		{"template of unknown variables", func() error {
			_, err := m.PutPlatform(r.ctx, record.Platform{Env: "test", Name: "x", Driver: "libvirt", Agent: "hv", Templates: map[string]string{"domain": "<domain>{{.Memory}}</domain>"}})
			return err
		}, "Memory"},
		{"install template of an unknown setting", func() error {
			_, err := m.PutDistribution(r.ctx, record.Distribution{Env: "test", Name: "y", Kind: record.DistNetboot, Kernel: "k", Initrd: "i", Cmdline: "root={{.Settings.rootfs}}"})
			return err
		}, ".Settings.rootfs"},
		{"distribution that does not fit", func() error {
			if _, err := m.PutDistribution(r.ctx, record.Distribution{Env: "test", Name: "img", Kind: record.DistImage, Images: map[string]string{"other": "debian.qcow2"}}); err != nil {
				return err
			}
			_, err := m.AddHost(r.ctx, record.Host{Env: "test", Name: "vm2", Platform: "lab", Distribution: "img"})
			return err
		}, "no image for platform lab"},
		{"host setting of the wrong type", func() error {
			_, err := m.AddHost(r.ctx, record.Host{Env: "test", Name: "vm2", Platform: "lab", Distribution: "tiny", Settings: map[string]any{"cpus": true}})
			return err
		}, "settings.cpus"},
		{"host of no platform", func() error {
			_, err := m.AddHost(r.ctx, record.Host{Env: "test", Name: "vm2", Platform: "nowhere", Distribution: "tiny"})
			return err
		}, "nowhere"},
	} {
		err := tc.try()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// A machine that runs an agent already (a discovered instance) is adopted
// into a host of its name: the host is provisioned with it; one machine
// is not two hosts'; destroying the host lets the machine go, its agent
// stays.
func TestMachineAdoption(t *testing.T) {
	r, _ := machinesRig(t, server.Config{})
	m := r.srv.Machines()
	r.startAgentWith(agent.Config{Env: "test", Name: "old", ServerKey: r.srv.PublicKey()})
	waitFor(t, "old waiting for acceptance", func() bool { _, err := r.store.GetAgent(r.ctx, "test", "old"); return err == nil })
	if _, err := r.srv.AgentAction(r.ctx, "test", "old", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	discovered := func() *record.Instance {
		all, err := m.Instances(r.ctx, "test")
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range all {
			if i.Agent == "old" {
				return &i
			}
		}
		return nil
	}
	if i := discovered(); i == nil || i.ID != "agent:old" || i.Host != "" {
		t.Fatalf("old's machine %+v: want a discovered instance, no host's", i)
	}
	for _, name := range []string{"old", "other"} {
		if _, err := m.AddHost(r.ctx, record.Host{Env: "test", Name: name, Platform: "lab", Distribution: "tiny"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Adopt(r.ctx, "test", "old", "other", "alice"); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("adopting old into host other: %v, want refused", err)
	}
	h, err := m.Adopt(r.ctx, "test", "old", "old", "alice")
	if err != nil || h.State != record.HostProvisioned || h.Instance != "agent:old" {
		t.Fatalf("adopt: %+v, %v", h, err)
	}
	if i := discovered(); i == nil || i.Host != "old" {
		t.Fatalf("old's machine %+v: want host old's", i)
	}
	if _, err := m.Adopt(r.ctx, "test", "old", "old", "alice"); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("adopting twice: %v, want a conflict", err)
	}
	if h, err := m.Destroy(r.ctx, "test", "old", "alice"); err != nil || h.State != record.HostDefined {
		t.Fatalf("destroying an adopted host: %+v, %v; want defined at once", h, err)
	}
	if _, err := r.store.GetAgent(r.ctx, "test", "old"); err != nil {
		t.Fatalf("the adopted machine's agent after its host let it go: %v", err)
	}
}

// What a compromised host can do with machines: a host's token is spent
// by its own machine's agent only (another name is refused, and a replay
// once it is spent too); an agent that serves no platform, or another
// platform, cannot report machines of it.
func TestMachinesHostile(t *testing.T) {
	r, hv := machinesRig(t, server.Config{})
	m := r.srv.Machines()
	hv.mu.Lock()
	hv.mute["vm1"] = true // the machine boots, its agent does not: the test speaks for it
	hv.mu.Unlock()
	if _, err := m.Provision(r.ctx, "test", "vm1", "alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "vm1's machine made", func() bool { return hv.has("test.vm1") })
	token := ""
	for _, w := range strings.Fields(hv.spec("test.vm1").Boot.Cmdline) {
		if v, ok := strings.CutPrefix(w, "tether.token="); ok {
			token = v
		}
	}
	pubOf := func(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

	// Another name with vm1's token: not enrolled, the token not spent.
	_, thief, _ := bus.GenerateKey()
	r.forge(thief, 1, bus.KindHello, "thief", bus.Hello{PublicKey: pubOf(thief), Token: token})
	if msg := r.security(); !strings.Contains(msg, "the enrollment token of host vm1") {
		t.Fatalf("security alert %q: want the token of another host named", msg)
	}
	waitFor(t, "thief's hello refused", func() bool {
		a, err := r.store.GetAgent(r.ctx, "test", "thief")
		return err == nil && strings.Contains(a.Note, "bound to host vm1")
	})
	if a := r.agentRecord("thief"); a.State == record.AgentAccepted {
		t.Fatalf("thief enrolled with vm1's token: %+v", a)
	}
	// vm1's own agent enrolls with it: vm1 is provisioned.
	_, own, _ := bus.GenerateKey()
	r.forge(own, 1, bus.KindHello, "vm1", bus.Hello{PublicKey: pubOf(own), Token: token})
	r.waitHost("vm1", record.HostProvisioned)
	// Spent: a second machine claiming to be vm1 with it is refused.
	_, second, _ := bus.GenerateKey()
	r.forge(second, 1, bus.KindHello, "vm1", bus.Hello{PublicKey: pubOf(second), Token: token})
	if msg := r.security(); !strings.Contains(msg, "another key") {
		t.Fatalf("security alert %q: want the second key on vm1's name refused", msg)
	}
	if !pubOf(own).Equal(ed25519.PublicKey(r.agentRecord("vm1").PublicKey)) {
		t.Fatal("vm1's key was swapped with its spent token")
	}

	// vm1, compromised, reports that platform lab destroyed vm1: it does
	// not serve lab.
	r.forge(own, 2, bus.KindMachineReport, "vm1", bus.MachineReport{Op: model.MachineDestroy, Platform: "lab", Host: "vm1"})
	if msg := r.security(); !strings.Contains(msg, "which agent hv serves") {
		t.Fatalf("security alert %q: want the report of another agent's platform refused", msg)
	}
	if h := r.host("vm1"); h.State != record.HostProvisioned {
		t.Fatalf("vm1 after a forged report: %+v", h)
	}
}
