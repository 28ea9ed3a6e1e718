package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// tether runs a command that must succeed and returns its standard
// output.
func tether(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := invoke(t, args...)
	if code != 0 {
		t.Fatalf("tether %s: exit %d: %s", strings.Join(args, " "), code, errs)
	}
	return out
}

// tetherFails runs a command that must exit with code, saying says on
// standard error.
func tetherFails(t *testing.T, code int, says string, args ...string) {
	t.Helper()
	got, _, errs := invoke(t, args...)
	if got != code || !strings.Contains(errs, says) {
		t.Fatalf("tether %s: exit %d %q, want %d saying %q", strings.Join(args, " "), got, errs, code, says)
	}
}

// TestPlatformCommands: add takes typed settings and a template from a
// file, list and show name the platform and its settings, -o json is the
// platform as the API answers it; update changes only what it is told;
// bad input is refused saying what to do.
func TestPlatformCommands(t *testing.T) {
	newTestAPI(t)
	dir := t.TempDir()
	domain := filepath.Join(dir, "domain.xml")
	if err := os.WriteFile(domain, []byte("<domain type='{{.DomainType}}'><name>{{.Name}}</name><memory unit='MiB'>{{.MemoryMiB}}</memory></domain>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := tether(t, "platform", "add", "kvm", "--agent", "hv1", "--set", "memory_mib=2048", "--set", "network=default", "--template", "domain=@"+domain)
	if !strings.Contains(out, "hv1") || !strings.Contains(out, "memory_mib") || !strings.Contains(out, "2048") || !strings.Contains(out, "domain") {
		t.Fatalf("add:\n%s", out)
	}
	if out := tether(t, "platform", "list"); !strings.Contains(out, "kvm") || !strings.Contains(out, "libvirt") || !strings.Contains(out, "qemu:///system") {
		t.Fatalf("list:\n%s", out)
	}
	var p record.Platform
	if err := json.Unmarshal([]byte(tether(t, "platform", "show", "kvm", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	if p.Agent != "hv1" || p.Settings["memory_mib"] != float64(2048) || p.Settings["network"] != "default" || !strings.Contains(p.Templates["domain"], "{{.MemoryMiB}}") {
		t.Fatalf("show -o json: %+v", p)
	}
	tether(t, "platform", "update", "kvm", "--set", "cpus=2", "--unset", "memory_mib")
	p = record.Platform{}
	if err := json.Unmarshal([]byte(tether(t, "platform", "list", "-o", "json")), &[]*record.Platform{&p}); err != nil {
		t.Fatal(err)
	}
	if p.Settings["cpus"] != float64(2) || p.Settings["memory_mib"] != float64(1024) || p.Settings["network"] != "default" || p.Templates["domain"] == "" {
		t.Fatalf("after update: %+v, want cpus 2, memory back to its default, the rest kept", p)
	}

	tetherFails(t, exitUsage, "tether platform update kvm changes it", "platform", "add", "kvm", "--agent", "hv1")
	tetherFails(t, exitUsage, "--set memory_mib=lots: want a whole number", "platform", "add", "kvm2", "--agent", "hv1", "--set", "memory_mib=lots")
	tetherFails(t, exitFailed, `unknown driver "vmware": want one of libvirt, pxe`, "platform", "add", "kvm2", "--agent", "hv1", "--driver", "vmware")
	tetherFails(t, exitFailed, "settings.colour: unknown setting", "platform", "add", "kvm2", "--agent", "hv1", "--set", "colour=blue")
	tetherFails(t, exitFailed, `Required flag "agent" not set`, "platform", "add", "kvm2")
	tetherFails(t, exitFailed, "tether platform list shows the platforms", "platform", "show", "nope")
	tetherFails(t, exitFailed, "agent hv1, which the server has never heard from", "platform", "inventory", "kvm")
	if out := tether(t, "platform", "delete", "kvm"); !strings.Contains(out, "platform kvm deleted") {
		t.Fatalf("delete: %s", out)
	}
	if out := tether(t, "platform", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("list after delete: %s, want []", out)
	}
}

// TestDistributionCommands: a netboot distribution with an install
// template from a file, typed parameters and a secret; list and show
// hide the secret, and an update keeps it; an image distribution.
func TestDistributionCommands(t *testing.T) {
	a := newTestAPI(t)
	tmpl := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(tmpl, []byte("#cloud-config\nhostname: {{.Host}}\npassword: {{.Settings.root_password}}\nswap: {{.Settings.swap_mib}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tether(t, "distribution", "add", "debian", "--kernel", "/srv/vmlinuz", "--initrd", "/srv/initrd", "--cmdline", "console=ttyS0,115200 hostname={{.Host}}",
		"--install-format", "cloud-init", "--install", "@"+tmpl, "--param", "swap_mib:int=512", "--param", "root_password:secret", "--param", "motd:string",
		"--set", "root_password=hunter2", "--set", "motd=42")
	out := tether(t, "distribution", "show", "debian")
	if !strings.Contains(out, "console=ttyS0,115200") || !strings.Contains(out, "swap_mib") || !strings.Contains(out, "(secret)") || strings.Contains(out, "hunter2") {
		t.Fatalf("show:\n%s\nwant the command line whole, the parameters, the secret hidden", out)
	}
	var d record.Distribution
	if err := json.Unmarshal([]byte(tether(t, "distribution", "show", "debian", "-o", "json")), &d); err != nil {
		t.Fatal(err)
	}
	// 42 is a string: the parameter motd says so.
	if d.Settings["motd"] != "42" || d.Settings["swap_mib"] != float64(512) || d.Settings["root_password"] != record.SecretShown || !strings.Contains(d.Install, "{{.Settings.swap_mib}}") {
		t.Fatalf("show -o json: %+v", d)
	}
	was, err := a.st.GetDistribution(context.Background(), "prod", "debian")
	if err != nil || !strings.HasPrefix(fmt.Sprint(was.Settings["root_password"]), "sealed:") {
		t.Fatalf("stored: %+v %v, want the secret sealed", was.Settings, err)
	}
	tether(t, "distribution", "update", "debian", "--set", "swap_mib=1024")
	stored, err := a.st.GetDistribution(context.Background(), "prod", "debian")
	if err != nil || stored.Settings["root_password"] != was.Settings["root_password"] || stored.Settings["swap_mib"] != int64(1024) && stored.Settings["swap_mib"] != float64(1024) {
		t.Fatalf("stored after the update: %+v %v, want the secret kept, swap_mib 1024", stored.Settings, err)
	}
	tether(t, "distribution", "add", "gold", "--kind", "image", "--image", "kvm=debian-12.qcow2")
	if out := tether(t, "distribution", "list"); !strings.Contains(out, "debian") || !strings.Contains(out, "netboot") || !strings.Contains(out, "kvm=debian-12.qcow2") {
		t.Fatalf("list:\n%s", out)
	}
	var ds []record.Distribution
	if err := json.Unmarshal([]byte(tether(t, "distribution", "list", "-o", "json")), &ds); err != nil || len(ds) != 2 {
		t.Fatalf("list -o json: %+v %v", ds, err)
	}
	tetherFails(t, exitUsage, `--param x:float: type "float"`, "distribution", "add", "bad", "--kernel", "/k", "--initrd", "/i", "--param", "x:float")
	tetherFails(t, exitUsage, "--set swap_mib=big: want a whole number", "distribution", "update", "debian", "--set", "swap_mib=big")
	tetherFails(t, exitFailed, "uses .Settings.colour, which no platform driver, host or parameter of the distribution declares", "distribution", "add", "bad", "--kernel", "/k", "--initrd", "/i", "--cmdline", "c={{.Settings.colour}}")
	tetherFails(t, exitFailed, "tether distribution list shows the distributions", "distribution", "delete", "nope")
	tether(t, "distribution", "delete", "gold")
}

// answerMachines stands in for the agent serving platform kvm (hv1): it
// takes the machine commands the server sends it and reports them done,
// through the server's machines room as the ingest does; a provisioned
// machine's agent then enrolls with the host's token. A host named
// broken… fails: the driver has no room for its disk.
func answerMachines(t *testing.T, a *testAPI) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	if err := a.bus.DeclareInbox(ctx, "prod", "hv1"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- a.bus.ConsumeInbox(ctx, "prod", "hv1", func(ctx context.Context, d bus.Delivery) error {
			var m bus.Machine
			if err := d.Envelope.DecodeBody(&m); err != nil {
				return err
			}
			rep := bus.MachineReport{OpID: m.OpID, Op: m.Op, Platform: m.Platform, Host: m.Host}
			if m.Op == model.MachineProvision && strings.HasPrefix(m.Host, "broken") {
				rep.Error = "storage pool default: no space left"
				return a.srv.Machines().Report(ctx, record.Agent{Env: "prod", Name: "hv1"}, rep)
			}
			if m.Op == model.MachineProvision {
				rep.Instances = []model.InstanceState{{ID: uuid.NewString(), Name: m.Spec.Name, Host: m.Host, Power: "running", Addresses: []string{"10.0.2.15"}}}
			}
			if err := a.srv.Machines().Report(ctx, record.Agent{Env: "prod", Name: "hv1"}, rep); err != nil {
				return err
			}
			if m.Op != model.MachineProvision {
				return nil
			}
			toks, err := a.st.ListEnrollTokens(ctx, "prod")
			if err != nil {
				return err
			}
			for _, tok := range toks {
				if tok.Host == m.Host {
					return a.srv.Machines().Enrolled(ctx, "prod", m.Host, tok)
				}
			}
			return nil
		})
	}()
	t.Cleanup(func() { stop(); <-done })
}

// TestHostCommands: a host added with typed settings is listed and shown
// with its context; provisioning against a platform whose agent was never
// heard from fails, saying why; once the agent is there, provision
// --wait ends provisioned, the instance is listed, a provisioned host is
// not deleted, its machine is controlled, reprovisioned and destroyed.
func TestHostCommands(t *testing.T) {
	a := newTestAPI(t)
	tether(t, "platform", "add", "kvm", "--agent", "hv1", "--set", "cpus=2")
	tether(t, "distribution", "add", "debian", "--kernel", "/srv/vmlinuz", "--initrd", "/srv/initrd", "--param", "motd:string=hello")

	out := tether(t, "host", "add", "web-1", "--platform", "kvm", "--distribution", "debian", "--app", "web", "--label", "role=web",
		"--set", "memory_mib=512", "--set", "motd=01", "--set", "provision_timeout=600")
	if !strings.Contains(out, "tether host provision web-1") {
		t.Fatalf("add: %s, want the next step", out)
	}
	tetherFails(t, exitFailed, "tether host show web-1", "host", "add", "web-1", "--platform", "kvm", "--distribution", "debian")
	tetherFails(t, exitFailed, "host web-2: platform esx: environment prod has no platform so named (tether platform list", "host", "add", "web-2", "--platform", "esx", "--distribution", "debian")
	tetherFails(t, exitUsage, "--set cpus=many: want a whole number", "host", "add", "web-2", "--platform", "kvm", "--distribution", "debian", "--set", "cpus=many")
	if out := tether(t, "host", "list"); !strings.Contains(out, "web-1") || !strings.Contains(out, "defined") || !strings.Contains(out, "kvm") || strings.Contains(out, "\033[") {
		t.Fatalf("list:\n%s\nwant web-1 defined, without escape codes", out)
	}
	out = tether(t, "host", "show", "web-1")
	for _, want := range []string{"cpus", "platform kvm", "memory_mib", "host web-1", "motd", "01", "prod.web-1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show:\n%s\nwant %q in its context", out, want)
		}
	}
	var v record.HostView
	if err := json.Unmarshal([]byte(tether(t, "host", "show", "web-1", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.State != record.HostDefined || v.Settings["motd"] != "01" || v.Settings["memory_mib"] != float64(512) || len(v.Context) == 0 {
		t.Fatalf("show -o json: %+v", v)
	}

	// No agent serves kvm yet: the host fails, and says why.
	tetherFails(t, exitFailed, "platform kvm is served by agent hv1, which the server has never heard from", "host", "provision", "web-1", "--wait")
	if out := tether(t, "host", "list"); !strings.Contains(out, "failed") || !strings.Contains(out, "never heard from") {
		t.Fatalf("list after the failure:\n%s", out)
	}

	answerMachines(t, a)
	code, out, errs := invoke(t, "host", "provision", "web-1", "--wait")
	if code != 0 || !strings.Contains(out, "host web-1 provisioned") || !strings.Contains(out, "10.0.2.15") {
		t.Fatalf("provision --wait: exit %d\n%s\n%s", code, out, errs)
	}
	tether(t, "host", "add", "broken-1", "--platform", "kvm", "--distribution", "debian")
	tetherFails(t, exitFailed, "host broken-1 failed: platform kvm: storage pool default: no space left (tether host show broken-1", "host", "provision", "broken-1", "--wait")
	tether(t, "host", "delete", "broken-1")

	var is []record.Instance
	if err := json.Unmarshal([]byte(tether(t, "instance", "list", "-o", "json")), &is); err != nil || len(is) != 1 || is[0].Host != "web-1" || is[0].Agent != "web-1" {
		t.Fatalf("instance list -o json: %+v %v", is, err)
	}
	if out := tether(t, "instance", "list"); !strings.Contains(out, is[0].ID) || !strings.Contains(out, "running") {
		t.Fatalf("instance list:\n%s", out)
	}
	if out := tether(t, "instance", "show", is[0].ID); !strings.Contains(out, "web-1") || !strings.Contains(out, "10.0.2.15") {
		t.Fatalf("instance show:\n%s", out)
	}
	tetherFails(t, exitFailed, "tether instance list shows the instances", "instance", "show", "nope")
	tetherFails(t, exitFailed, "destroy its machine first (tether host destroy web-1)", "host", "delete", "web-1")
	if out := tether(t, "host", "reboot", "web-1"); !strings.Contains(out, "reboot sent") {
		t.Fatalf("reboot: %s", out)
	}

	// Halted: hands off.
	tether(t, "env", "halt")
	tetherFails(t, exitFailed, "environment prod is halted", "host", "stop", "web-1")
	tether(t, "env", "resume")

	var h record.HostView
	if err := json.Unmarshal([]byte(tether(t, "host", "reprovision", "web-1", "--wait", "-o", "json")), &h); err != nil || h.State != record.HostProvisioned || h.Instance == nil || h.Instance.ID == is[0].ID {
		t.Fatalf("reprovision --wait -o json: %+v %v, want provisioned on a new instance", h, err)
	}
	if out := tether(t, "host", "destroy", "web-1", "--wait"); !strings.Contains(out, "host web-1 defined") {
		t.Fatalf("destroy --wait: %s", out)
	}
	tetherFails(t, exitFailed, "host web-1 is defined: it has no machine to start", "host", "start", "web-1")
	if out := tether(t, "host", "delete", "web-1"); !strings.Contains(out, "host web-1 deleted") {
		t.Fatalf("delete: %s", out)
	}
	tetherFails(t, exitFailed, "tether host list shows the hosts", "host", "show", "web-1")
}

// Host states are coloured on a terminal only, never under NO_COLOR.
func TestHostListColour(t *testing.T) {
	newTestAPI(t)
	tether(t, "platform", "add", "kvm", "--agent", "hv1")
	tether(t, "distribution", "add", "debian", "--kernel", "/srv/vmlinuz", "--initrd", "/srv/initrd")
	tether(t, "host", "add", "web-1", "--platform", "kvm", "--distribution", "debian")
	invoke(t, "host", "provision", "web-1") // fails: nothing serves kvm
	asTerminal(t)
	if out := tether(t, "host", "list"); !strings.Contains(out, "\033[31mfailed\033[0m") {
		t.Fatalf("list on a terminal: %q, want failed in red", out)
	}
	t.Setenv("NO_COLOR", "1")
	if out := tether(t, "host", "list"); strings.Contains(out, "\033[") {
		t.Fatalf("list under NO_COLOR: %q, want no escape codes", out)
	}
}

// TestHostUpdateCommand: update reads the host, changes what its flags
// say (--set merges, typed by the host's new distribution; --app and
// --label add, --drop-… and --unset remove) and saves it, its secret
// kept; a host with a machine keeps its platform, its labels change;
// nothing to change, a bad value or a missing host is refused, saying
// what to do.
func TestHostUpdateCommand(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	tether(t, "platform", "add", "kvm", "--agent", "hv1")
	tether(t, "platform", "add", "lab", "--agent", "hv2", "--set", "cpus=4")
	tether(t, "distribution", "add", "debian", "--kernel", "/srv/vmlinuz", "--initrd", "/srv/initrd", "--param", "motd:string=hello", "--param", "root_password:secret")
	tether(t, "host", "add", "web-1", "--platform", "kvm", "--distribution", "debian", "--app", "web", "--label", "role=web",
		"--set", "memory_mib=512", "--set", "root_password=s3cret")
	was, err := a.st.GetHost(ctx, "prod", "web-1")
	if err != nil || !strings.HasPrefix(fmt.Sprint(was.Settings["root_password"]), "sealed:") {
		t.Fatalf("stored: %+v %v, want the secret sealed", was.Settings, err)
	}

	out := tether(t, "host", "update", "web-1", "--platform", "lab", "--app", "db", "--label", "tier=gold", "--set", "memory_mib=1024", "--set", "motd=01")
	if !strings.Contains(out, "host web-1 updated: platform lab, distribution debian, applications web,db, labels role=web,tier=gold") {
		t.Fatalf("update: %s", out)
	}
	var v record.HostView
	if err := json.Unmarshal([]byte(tether(t, "host", "show", "web-1", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	// 01 is a string: the distribution's parameter motd says so.
	if v.Platform != "lab" || strings.Join(v.Applications, ",") != "web,db" || v.Labels["role"] != "web" || v.Labels["tier"] != "gold" ||
		v.Settings["memory_mib"] != float64(1024) || v.Settings["motd"] != "01" || v.Settings["root_password"] != record.SecretShown {
		t.Fatalf("show -o json after the update: %+v", v.Host)
	}
	stored, err := a.st.GetHost(ctx, "prod", "web-1")
	if err != nil || stored.Settings["root_password"] != was.Settings["root_password"] {
		t.Fatalf("stored after the update: %+v %v, want the sealed secret kept", stored.Settings, err)
	}

	var h record.Host
	if err := json.Unmarshal([]byte(tether(t, "host", "update", "web-1", "--drop-app", "web", "--drop-label", "role", "--unset", "memory_mib", "-o", "json")), &h); err != nil {
		t.Fatal(err)
	}
	if strings.Join(h.Applications, ",") != "db" || len(h.Labels) != 1 || h.Labels["tier"] != "gold" || h.Settings["memory_mib"] != nil || h.Settings["motd"] != "01" {
		t.Fatalf("update -o json: %+v, want db alone, tier alone, memory_mib gone, motd kept", h)
	}

	tetherFails(t, exitUsage, "nothing to change: give --platform", "host", "update", "web-1")
	tetherFails(t, exitUsage, "--set cpus=many: want a whole number", "host", "update", "web-1", "--set", "cpus=many")
	tetherFails(t, exitFailed, "host web-1: settings.colour: unknown setting", "host", "update", "web-1", "--set", "colour=blue")
	tetherFails(t, exitFailed, "host web-1: platform esx: environment prod has no platform so named", "host", "update", "web-1", "--platform", "esx")
	tetherFails(t, exitFailed, "tether host list shows the hosts", "host", "update", "nope", "--set", "cpus=2")

	// Its machine keeps the platform it was made on; the rest changes,
	// for its next machine.
	if _, err := a.st.MoveHost(ctx, "prod", "web-1", record.HostDefined, record.HostAdopt, "", "agent:web-1"); err != nil {
		t.Fatal(err)
	}
	tetherFails(t, exitFailed, "host web-1 is provisioned: its machine was made on platform lab with distribution debian: destroy it first (tether host destroy web-1)",
		"host", "update", "web-1", "--platform", "kvm")
	if out := tether(t, "host", "update", "web-1", "--label", "role=cache"); !strings.Contains(out, "labels role=cache,tier=gold") ||
		!strings.Contains(out, "tether host reprovision web-1 makes it again") {
		t.Fatalf("update of a provisioned host: %s", out)
	}
	if out := tether(t, "host", "update", "--help"); !strings.Contains(out, "tether host update web-1 --set memory_mib=4096") {
		t.Fatalf("update --help: %s, want an example", out)
	}
}
