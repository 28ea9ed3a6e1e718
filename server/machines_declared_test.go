package server_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/secret"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// declaredRig is a server compiling the models of m, whose environment
// "test" enrolls by token and deploys on its own, with agent hv serving a
// fake hypervisor (and no platform, distribution or host made yet).
func declaredRig(t *testing.T, m *models) (*rig, *fakePlatform) {
	t.Helper()
	settings := record.DefaultEnvSettings()
	settings.AutoDeploy = true
	settings.Enrollment = record.EnrollToken
	r := startRig(t, server.Config{Sources: m}, map[string]record.EnvSettings{"test": settings, "nosource": settings})
	r.waitCompiles()
	hv := newFakePlatform(r)
	r.startAgentWith(agent.Config{Env: "test", Name: "hv", ServerKey: r.srv.PublicKey(), Platforms: []handler.MachineDriver{hv}, InventoryInterval: 200 * time.Millisecond})
	waitFor(t, "hv waiting for acceptance", func() bool { _, err := r.store.GetAgent(r.ctx, "test", "hv"); return err == nil })
	if _, err := r.srv.AgentAction(r.ctx, "test", "hv", record.AgentAccept); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "hv's hypervisor discovered", func() bool { _, err := r.srv.Machines().GetPlatform(r.ctx, "test", "hv-libvirt"); return err == nil })
	return r, hv
}

// machinesModel is a model declaring platform lab (line 1), distribution
// tiny (line 7, with a secret) and hosts vm1 (line 16) with cpus as its
// setting (and a secret) and vm2 (line 23) unless without; and a file for
// vm1's machine.
func machinesModel(cpus string, withVM2 bool) string {
	s := `platform "lab" {
  driver   = "libvirt"
  agent    = "hv"
  settings = { memory_mib = 256 }
}

distribution "tiny" {
  kind    = "netboot"
  kernel  = "/boot/vmlinuz"
  initrd  = "/boot/tiny.gz"
  cmdline = "console=ttyS0 tether.name={{.Host}} tether.env={{.Env}} tether.token={{.Token}} tether.broker={{.Settings.broker}}"
  params  = [{ name = "root_password", type = "secret", required = true }]
  settings = { root_password = "hunter2" }
}

host "vm1" {
  platform     = "lab"
  distribution = "tiny"
  settings     = { cpus = ` + cpus + `, root_password = "vm1's own" }
  file "/motd" { content = "made from the model" }
}
`
	if withVM2 {
		s += `
host "vm2" {
  platform     = "lab"
  distribution = "tiny"
  applications = ["web"]
}
`
	}
	return s
}

// compiledAt asks for a compile and returns its report, which must have
// compiled revision rev (others, asked for by agents joining, may end
// before it).
func (r *rig) compiledAt(rev string) record.Compile {
	r.t.Helper()
	if _, err := r.srv.RequestCompile(r.ctx, "test", "alice"); err != nil {
		r.t.Fatalf("request a compile: %v", err)
	}
	c := r.finishedBy("alice")
	if c.Revision != rev {
		r.t.Fatalf("compile %s of revision %s, want %s", c.ID, c.Revision, rev)
	}
	return c
}

// finishedBy returns the report of the next compile to end that by asked
// for.
func (r *rig) finishedBy(by string) record.Compile {
	r.t.Helper()
	for {
		c := r.finished()
		if slices.ContainsFunc(c.Triggers, func(t record.Trigger) bool { return t.By == by }) {
			return c
		}
	}
}

func (r *rig) halt(halted bool) {
	r.t.Helper()
	if _, err := r.srv.UpdateEnvSettings(r.ctx, "test", func(s *record.EnvSettings) error { s.Halted = halted; return nil }); err != nil {
		r.t.Fatal(err)
	}
}

// diagnostic is the first of c's diagnostics of severity whose message
// holds part, or fails.
func diagnostic(t *testing.T, c record.Compile, severity, part string) record.CompileDiagnostic {
	t.Helper()
	for _, d := range c.Diagnostics {
		if d.Severity == severity && strings.Contains(d.Message, part) {
			return d
		}
	}
	t.Fatalf("compile %s (%s): no %s saying %q in %+v", c.ID, c.Outcome, severity, part, c.Diagnostics)
	return record.CompileDiagnostic{}
}

// A model declaring a platform, a distribution and hosts makes them
// (taking over an operator's record of one of its names), refuses an
// operator's change of them naming the model's file, follows the model
// when it drops a host or changes a setting, provisions its hosts once
// the environment is no longer halted (resuming compiles it), keeps a
// provisioned host the model drops (as an operator's, with a warning),
// and fails a compile whose declaration the server refuses.
func TestMachinesDeclaredInModel(t *testing.T) {
	m := &models{files: map[string]map[string]string{}, rev: map[string]string{}}
	r, hv := declaredRig(t, m)
	ms := r.srv.Machines()
	// An operator's distribution of the name the model takes.
	if _, err := ms.PutDistribution(r.ctx, record.Distribution{Env: "test", Name: "tiny", Kind: record.DistNetboot, Kernel: "/operators/vmlinuz", Initrd: "/operators/initrd"}); err != nil {
		t.Fatal(err)
	}
	r.halt(true)

	m.set("test", "r1", map[string]string{"main.hcl": machinesModel("1", true)})
	c := r.compiledAt("r1")
	if !c.Outcome.Succeeded() {
		t.Fatalf("first compile %+v, want a success", c)
	}
	p, err := ms.GetPlatform(r.ctx, "test", "lab")
	if err != nil || p.DeclaredIn != "main.hcl:1" || p.Agent != "hv" || p.Settings["memory_mib"] != int64(256) {
		t.Fatalf("platform lab %+v (%v), want the model's, declared at main.hcl:1", p, err)
	}
	d, err := ms.GetDistribution(r.ctx, "test", "tiny")
	if err != nil || d.DeclaredIn != "main.hcl:7" || d.Kernel != "/boot/vmlinuz" {
		t.Fatalf("distribution tiny %+v (%v), want the model's (it wins over the operator's), declared at main.hcl:7", d, err)
	}
	vm1, vm2 := r.host("vm1"), r.host("vm2")
	if vm1.DeclaredIn != "main.hcl:16" || vm1.Settings["cpus"] != int64(1) || vm1.State != record.HostDefined ||
		vm2.DeclaredIn != "main.hcl:23" || len(vm2.Applications) != 1 || vm2.Applications[0] != "web" || vm2.State != record.HostDefined {
		t.Fatalf("hosts %+v and %+v, want the model's, defined while the environment is halted", vm1, vm2)
	}
	if w := diagnostic(t, c, "warning", "halted"); w.File != "main.hcl" || w.Line != 16 {
		t.Fatalf("warning %+v, want it at vm1's block, main.hcl:16", w)
	}

	// Secrets are sealed at rest; compiled again, nothing changes.
	stored, err := r.store.GetDistribution(r.ctx, "test", "tiny")
	storedVM1, herr := r.store.GetHost(r.ctx, "test", "vm1")
	if err != nil || herr != nil || !strings.HasPrefix(fmt.Sprint(stored.Settings["root_password"]), secret.ValuePrefix) ||
		!strings.HasPrefix(fmt.Sprint(storedVM1.Settings["root_password"]), secret.ValuePrefix) {
		t.Fatalf("stored distribution %+v (%v) and host vm1 %+v (%v): want their secrets sealed", stored, err, storedVM1, herr)
	}
	if shown := r.host("vm1").Settings["root_password"]; shown != record.SecretShown {
		t.Fatalf("vm1's root password shown as %v, want %s", shown, record.SecretShown)
	}
	if again := r.compiledAt("r1"); !again.Outcome.Succeeded() {
		t.Fatalf("same model again: %+v", again)
	}
	if d2, _ := r.store.GetDistribution(r.ctx, "test", "tiny"); !d2.UpdatedAt.Equal(stored.UpdatedAt) {
		t.Fatalf("distribution tiny rewritten by a compile of the same model (updated at %s, then %s)", stored.UpdatedAt, d2.UpdatedAt)
	}

	// What the model declares changes with the model only.
	for _, tc := range []struct {
		what string
		try  func() error
		want string
	}{
		{"change the platform", func() error {
			_, err := ms.PutPlatform(r.ctx, record.Platform{Env: "test", Name: "lab", Driver: record.DriverLibvirt, Agent: "hv"})
			return err
		}, "platform lab is declared in the model (main.hcl:1): change it there"},
		{"delete the platform", func() error { return ms.DeletePlatform(r.ctx, "test", "lab") }, "platform lab is declared in the model (main.hcl:1)"},
		{"change the distribution", func() error {
			_, err := ms.PutDistribution(r.ctx, record.Distribution{Env: "test", Name: "tiny", Kind: record.DistNetboot, Kernel: "k", Initrd: "i"})
			return err
		}, "distribution tiny is declared in the model (main.hcl:7)"},
		{"delete the distribution", func() error { return ms.DeleteDistribution(r.ctx, "test", "tiny") }, "distribution tiny is declared in the model (main.hcl:7)"},
		{"delete a host", func() error { return ms.DeleteHost(r.ctx, "test", "vm2") }, "host vm2 is declared in the model (main.hcl:23): change it there"},
		{"add a host of its name", func() error {
			_, err := ms.AddHost(r.ctx, record.Host{Env: "test", Name: "vm2", Platform: "lab", Distribution: "tiny"})
			return err
		}, "vm2"},
	} {
		err := tc.try()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, model.ErrConflict) && !errors.Is(err, model.ErrExists) {
			t.Errorf("%s: %v, want a conflict saying %q", tc.what, err, tc.want)
		}
	}
	if p2, _ := ms.GetPlatform(r.ctx, "test", "lab"); p2.Settings["memory_mib"] != int64(256) || p2.DeclaredIn == "" {
		t.Fatalf("platform after refused changes: %+v", p2)
	}

	// The model drops vm2 (defined: deleted) and changes vm1's setting.
	m.set("test", "r2", map[string]string{"main.hcl": machinesModel("2", false)})
	c = r.compiledAt("r2")
	if !c.Outcome.Succeeded() {
		t.Fatalf("second compile %+v, want a success", c)
	}
	if _, err := ms.ShowHost(r.ctx, "test", "vm2"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("host vm2 the model dropped: %v, want it deleted", err)
	}
	if vm1, err := r.store.GetHost(r.ctx, "test", "vm1"); err != nil || vm1.Settings["cpus"] != int64(2) || vm1.DeclaredIn != "main.hcl:16" ||
		!strings.HasPrefix(fmt.Sprint(vm1.Settings["root_password"]), secret.ValuePrefix) {
		t.Fatalf("host vm1 %+v, want cpus 2 as the model now says, its secret sealed", vm1)
	}

	// Resumed, the environment compiles and the model's host is made.
	r.halt(false)
	c = r.finishedBy("environment resumed")
	if !c.Outcome.Succeeded() {
		t.Fatalf("compile on resuming %+v, want a success", c)
	}
	r.waitHost("vm1", record.HostProvisioned)
	waitFor(t, "vm1's file deployed", func() bool { return hv.content("vm1", "motd") == "made from the model" })
	waitFor(t, "vm1's instance: its machine on lab, its agent enrolled", func() bool {
		inst := r.instance("vm1")
		return inst != nil && inst.Platform == "lab" && inst.Agent == "vm1"
	})
	machine := r.instance("vm1").ID
	hv.mu.Lock()
	cpus := hv.machines["test.vm1"].spec.Settings["cpus"]
	hv.mu.Unlock()
	if fmt.Sprint(cpus) != "2" {
		t.Fatalf("vm1's machine made with cpus %v, want the model's 2", cpus)
	}
	// Compiled again, the provisioned host is left as it is.
	if again := r.compiledAt("r2"); !again.Outcome.Succeeded() || r.host("vm1").State != record.HostProvisioned {
		t.Fatalf("compile again: %+v, host %+v", again, r.host("vm1"))
	}

	// A setting changed for the provisioned host: it keeps its machine.
	m.set("test", "r2b", map[string]string{"main.hcl": machinesModel("3", false)})
	if c := r.compiledAt("r2b"); !c.Outcome.Succeeded() {
		t.Fatalf("compile of a changed setting: %+v", c)
	}
	if vm1, inst := r.host("vm1"), r.instance("vm1"); vm1.Settings["cpus"] != int64(3) || vm1.State != record.HostProvisioned ||
		inst == nil || inst.ID != machine || !hv.has("test.vm1") {
		t.Fatalf("host vm1 %+v, instance %+v: want cpus 3, still provisioned, its machine %s kept", vm1, inst, machine)
	}

	// The model drops vm1 while it has a machine, and with it lab and
	// tiny: they stay, as an operator's, with warnings saying what to do.
	m.set("test", "r3", map[string]string{"main.hcl": "host \"web-1\" {}\n"})
	c = r.compiledAt("r3")
	if !c.Outcome.Succeeded() {
		t.Fatalf("third compile %+v, want a success", c)
	}
	diagnostic(t, c, "warning", "host vm1 is no longer declared in the model, but it is provisioned: it stays, now an operator's host: destroy its machine first (tether host destroy vm1)")
	diagnostic(t, c, "warning", "platform lab is no longer declared in the model, but host vm1 uses it")
	diagnostic(t, c, "warning", "distribution tiny is no longer declared in the model, but host vm1 uses it")
	if vm1 := r.host("vm1"); vm1.DeclaredIn != "" || vm1.State != record.HostProvisioned {
		t.Fatalf("host vm1 %+v, want it kept, provisioned, no longer the model's", vm1)
	}
	if _, err := ms.Destroy(r.ctx, "test", "vm1", "alice"); err != nil {
		t.Fatal(err)
	}
	r.waitHost("vm1", record.HostDefined)
	if err := ms.DeleteHost(r.ctx, "test", "vm1"); err != nil {
		t.Fatalf("the operator deletes the host the model left: %v", err)
	}
	if err := ms.DeletePlatform(r.ctx, "test", "lab"); err != nil {
		t.Fatalf("the operator deletes the platform the model left: %v", err)
	}

	// A declaration the server refuses fails the compile at its place.
	m.set("test", "r4", map[string]string{"main.hcl": strings.Replace(machinesModel("1", false), `driver   = "libvirt"`, `driver   = "xen"`, 1)})
	released, err := r.store.ReleasedVersion(r.ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	c = r.compiledAt("r4")
	if c.Outcome != record.CompileFailed || c.Version != 0 {
		t.Fatalf("compile of a refused platform %+v, want failed", c)
	}
	if e := diagnostic(t, c, "error", `unknown driver "xen"`); e.File != "main.hcl" || e.Line != 1 {
		t.Fatalf("error %+v, want it at platform lab's block, main.hcl:1", e)
	}
	if v, _ := r.store.ReleasedVersion(r.ctx, "test"); v.Number != released.Number {
		t.Fatalf("released version %d after the refused compile, want still %d", v.Number, released.Number)
	}
	if _, err := ms.GetPlatform(r.ctx, "test", "lab"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("the refused platform: %v, want none", err)
	}
}

// An application's machine settings are a layer of the context of each
// host that lists it, over its distribution's and under the host's own
// (the host's page says where each value came from), and reach the
// machine made; one the server refuses fails the compile at the
// application's block.
func TestApplicationSettingsInHostContext(t *testing.T) {
	m := &models{files: map[string]map[string]string{}, rev: map[string]string{}}
	r, hv := declaredRig(t, m)
	r.halt(true)
	model := func(web string) string {
		return `platform "lab" {
  driver = "libvirt"
  agent  = "hv"
}

distribution "tiny" {
  kind    = "netboot"
  kernel  = "/boot/vmlinuz"
  initrd  = "/boot/tiny.gz"
  cmdline = "tether.token={{.Token}}"
}

application "web" {
  machine_settings = ` + web + `
  file "/motd" { content = "web" }
}

host "vm3" {
  platform     = "lab"
  distribution = "tiny"
  settings     = { cpus = 3 }
  apply "web" {}
}
`
	}
	m.set("test", "r1", map[string]string{"main.hcl": model(`{ memory_mib = 768, cpus = 2 }`)})
	if c := r.compiledAt("r1"); !c.Outcome.Succeeded() {
		t.Fatalf("compile %+v, want a success", c)
	}
	v, err := r.srv.Machines().ShowHost(r.ctx, "test", "vm3")
	if err != nil {
		t.Fatal(err)
	}
	from := map[string]string{}
	for _, c := range v.Context {
		from[c.Name] = fmt.Sprint(c.Value, " from ", c.From)
	}
	if from["memory_mib"] != "768 from application web" || from["cpus"] != "3 from host vm3" || strings.Join(v.Applications, ",") != "web" {
		t.Fatalf("vm3's applications %v and context %v: want memory_mib from application web, cpus from the host", v.Applications, from)
	}

	m.set("test", "r2", map[string]string{"main.hcl": model(`{ colour = "blue" }`)})
	c := r.compiledAt("r2")
	if c.Outcome.Succeeded() {
		t.Fatalf("compile of an unknown machine setting %+v, want a failure", c)
	}
	if e := diagnostic(t, c, "error", "machine_settings.colour: unknown setting"); e.File != "main.hcl" || e.Line != 13 {
		t.Fatalf("error %+v, want it at application web's block, main.hcl:13", e)
	}

	// Resumed with the model mended, the host is made with it.
	m.set("test", "r3", map[string]string{"main.hcl": model(`{ memory_mib = 768, cpus = 2 }`)})
	r.halt(false)
	r.waitHost("vm3", record.HostProvisioned)
	hv.mu.Lock()
	memory := hv.machines["test.vm3"].spec.Settings["memory_mib"]
	hv.mu.Unlock()
	if fmt.Sprint(memory) != "768" {
		t.Fatalf("vm3's machine made with memory_mib %v, want its application's 768", memory)
	}
}
