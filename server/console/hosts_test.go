package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/server/record"
)

// machines gives environment prod platform lab (served by agent hv,
// whose inbox exists when hvUp) and distribution tiny (with a secret
// setting), and hosts on them: vm1 defined, vm2 provisioned with its
// machine running for three hours, vm3 failed.
func (r *rig) machines(hvUp bool) {
	r.t.Helper()
	ctx := context.Background()
	room := r.srv.Machines()
	if hvUp {
		if err := r.bus.DeclareInbox(ctx, "prod", "hv"); err != nil {
			r.t.Fatal(err)
		}
	}
	if _, err := room.PutPlatform(ctx, record.Platform{Env: "prod", Name: "lab", Driver: record.DriverLibvirt, Agent: "hv",
		Settings: map[string]any{"memory_mib": int64(512), "pool": "lab-disks"}}); err != nil {
		r.t.Fatal(err)
	}
	if _, err := room.PutDistribution(ctx, record.Distribution{Env: "prod", Name: "tiny", Kind: record.DistNetboot,
		Kernel: "/srv/tiny/vmlinuz", Initrd: "/srv/tiny/initrd.img", Cmdline: "console=ttyS0 tether.token={{.Token}}",
		Params:   []record.Param{{Name: "root_password", Type: record.ParamSecret, Doc: "root's password"}},
		Settings: map[string]any{"root_password": "hush"}}); err != nil {
		r.t.Fatal(err)
	}
	for _, h := range []record.Host{
		{Env: "prod", Name: "vm1", Platform: "lab", Distribution: "tiny"},
		{Env: "prod", Name: "vm2", Platform: "lab", Distribution: "tiny", Applications: []string{"web"}, Settings: map[string]any{"cpus": int64(2)}},
		{Env: "prod", Name: "vm3", Platform: "lab", Distribution: "tiny"},
	} {
		if _, err := room.AddHost(ctx, h); err != nil {
			r.t.Fatal(err)
		}
	}
	move := func(name string, from record.HostState, ev record.HostEvent, reason, instance string) {
		if _, err := r.st.MoveHost(ctx, "prod", name, from, ev, reason, instance); err != nil {
			r.t.Fatal(err)
		}
	}
	move("vm2", record.HostDefined, record.HostProvision, "", "")
	move("vm2", record.HostProvisioning, record.HostEnrolled, "", "d2f1a7c0-0b1e-4c43-9b1e-2f0b7c1e5a10")
	booted := time.Now().Add(-3*time.Hour - 5*time.Minute)
	if _, err := r.st.PutInstance(ctx, record.Instance{Env: "prod", ID: "d2f1a7c0-0b1e-4c43-9b1e-2f0b7c1e5a10", Platform: "lab", Host: "vm2", Agent: "vm2",
		Power: record.PowerRunning, BootedAt: &booted, Addresses: []string{"10.0.2.15"}, Hardware: map[string]any{"cpus": 2, "memory_mib": 512},
		SeenAt: time.Now()}); err != nil {
		r.t.Fatal(err)
	}
	move("vm3", record.HostDefined, record.HostProvision, "", "")
	move("vm3", record.HostProvisioning, record.HostFail, "platform lab: the pool lab-disks is full", "")
}

func (r *rig) host(name string) record.Host {
	r.t.Helper()
	h, err := r.st.GetHost(context.Background(), "prod", name)
	if err != nil {
		r.t.Fatal(err)
	}
	return h
}

// row is the machines page's row of host name.
func (b *browser) row(name string) string {
	b.t.Helper()
	i := strings.Index(b.page, `<tr data-host="`+name+`"`)
	if i < 0 {
		b.t.Fatalf("the machines page has no row of %s:\n%s", name, b.page)
	}
	row := b.page[i:]
	return row[:strings.Index(row, "</tr>")]
}

// The machines pages show hosts with their state, power and uptime, a
// host with its context (secrets hidden) and instance, the platforms,
// distributions and instances; each host gets the actions its state
// allows, and an operator only.
func TestMachinePages(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.seed()
	r.machines(true)
	b := r.browser().login("", "ada", r.user("ada", record.RoleAdmin))

	b.get("/envs/prod")
	b.has("navigation", `href="/envs/prod/hosts"`, ">Machines</a>")
	if b.get("/envs/prod/hosts"); b.code != http.StatusOK {
		t.Fatalf("GET /envs/prod/hosts: %d\n%s", b.code, b.page)
	}
	b.has("machines page", "Machines of prod", `data-live-env="prod"`, `aria-current="page">Hosts`)
	for _, tc := range []struct {
		host      string
		want, not []string
	}{
		{"vm1", []string{`<span class="state muted"><span aria-hidden="true">○</span> defined</span>`, `value="provision"`},
			[]string{`value="start"`, `value="stop"`, "Destroy…"}},
		{"vm2", []string{`<span class="state good"><span aria-hidden="true">✔</span> provisioned</span>`, `<span class="state good"><span aria-hidden="true">●</span> running</span>`,
			"3h 5m", `href="/envs/prod/agents/vm2"`, `value="stop"`, `value="reboot"`, `href="/envs/prod/hosts/vm2/destroy"`},
			[]string{`value="provision"`, `value="start"`}},
		{"vm3", []string{`<span class="state bad"><span aria-hidden="true">✖</span> failed</span>`, `<p class="reason">platform lab: the pool lab-disks is full</p>`,
			`value="provision"`, `href="/envs/prod/hosts/vm3/destroy"`},
			[]string{`value="start"`, `value="stop"`}},
	} {
		row := b.row(tc.host)
		for _, w := range tc.want {
			if !strings.Contains(row, w) {
				t.Errorf("%s's row does not say %q:\n%s", tc.host, w, row)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(row, w) {
				t.Errorf("%s's row says %q:\n%s", tc.host, w, row)
			}
		}
	}

	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/envs/prod/hosts/vm2", []string{"Host vm2", "provisioned", "prod.vm2", "web", "cpus=2",
			// its context, with where each value came from
			"<code>memory_mib</code></th><td><code>512</code></td><td>platform lab</td>",
			"<code>cpus</code></th><td><code>2</code></td><td>host vm2</td>",
			"<code>root_password</code></th><td><em>(secret)</em></td><td>distribution tiny</td>",
			// its instance
			"d2f1a7c0-0b1e-4c43-9b1e-2f0b7c1e5a10", "10.0.2.15", "3h 5m", "<code>memory_mib</code>",
			// its history, from the audit log
			"History"}},
		{"/envs/prod/hosts/vm3", []string{"failed", "the pool lab-disks is full", "No machine", `value="provision"`}},
		{"/envs/prod/platforms", []string{"Platforms and distributions of prod", `id="platform-lab"`, "libvirt", `href="/envs/prod/agents/hv"`,
			"memory_mib=512", "pool=lab-disks", `id="distribution-tiny"`, "netboot", "/srv/tiny/vmlinuz", "root_password=(secret)"}},
		{"/envs/prod/instances", []string{"Instances of prod", "d2f1a7c0-0b1e-4c43-9b1e-2f0b7c1e5a10", `href="/envs/prod/hosts/vm2"`, "running", "10.0.2.15"}},
	} {
		if b.get(tc.path); b.code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", tc.path, b.code, b.page)
		}
		b.has(tc.path, tc.want...)
		b.hasNot(tc.path, "hush")
	}
	// The live part alone, for the page's script.
	b.get("/envs/prod/hosts?fragment=1")
	b.has("fragment", `data-host="vm2"`)
	b.hasNot("fragment", "<html", "Log out")
	b.get("/envs/prod/hosts/nothing")
	if b.code != http.StatusNotFound {
		t.Fatalf("a host that does not exist: %d, want 404\n%s", b.code, b.page)
	}

	// A viewer sees the machines, and no button.
	v := r.browser().login("", "vera", r.user("vera", record.RoleViewer))
	v.get("/envs/prod/hosts")
	v.has("viewer's machines page", "vm1", "vm2", "vm3")
	v.hasNot("viewer's machines page", `value="provision"`, `value="stop"`, "Destroy…")
	v.get("/envs/prod/hosts/vm2")
	v.hasNot("viewer's host page", `value="stop"`, "Destroy…", "History")
}

// Actions on machines go through the API: audited, refused to a viewer,
// refused while the environment is halted (the page says why); a
// provision whose platform's agent the server never heard from fails
// the host, with the reason shown; destroying a machine needs its host's
// name typed.
func TestMachineActions(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.seed()
	r.machines(true)
	ctx := context.Background()
	op := r.browser().login("", "otto", r.user("otto", record.RoleOperator))

	// Stop vm2's machine: sent to its platform's agent.
	op.get("/envs/prod/hosts")
	op.post("/envs/prod/hosts", url.Values{"action": {"stop"}, "host": {"vm2"}})
	op.has("stop", "vm2: stop sent to its platform&#39;s agent", "Machines of prod")
	// From a host's page, back to it.
	op.get("/envs/prod/hosts/vm2")
	op.post("/envs/prod/hosts", url.Values{"action": {"reboot"}, "host": {"vm2"}, "from": {"/envs/prod/hosts/vm2"}})
	op.has("reboot", "vm2: reboot sent", "Host vm2")
	// Provision vm1: its platform's agent's inbox is there; vm1 is
	// provisioning, and the audit log says who.
	op.get("/envs/prod/hosts")
	op.post("/envs/prod/hosts", url.Values{"action": {"provision"}, "host": {"vm1"}})
	op.has("provision", "vm1: provisioning")
	if h := r.host("vm1"); h.State != record.HostProvisioning {
		t.Fatalf("vm1 after provision: %s, want provisioning", h.State)
	}
	entries, err := r.st.Audit(ctx, record.AuditFilter{Env: "prod", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	audited := map[string]bool{}
	for _, e := range entries {
		if strings.Contains(e.Actor, "otto") {
			audited[e.Action+" "+e.Target] = true
		}
	}
	for _, want := range []string{"host.provision vm1", "host.stop vm2", "host.reboot vm2"} {
		if !audited[want] {
			t.Errorf("the audit log has no %s by otto: %v", want, audited)
		}
	}
	// The host's page shows an admin its history.
	admin := r.browser().login("", "ada", r.user("ada", record.RoleAdmin))
	admin.get("/envs/prod/hosts/vm1")
	admin.has("vm1's history", "History", "<code>host.provision</code>", "user otto")

	// A viewer's post is refused by the API, and changes nothing.
	v := r.browser().login("", "vera", r.user("vera", record.RoleViewer))
	v.get("/envs/prod/hosts")
	v.post("/envs/prod/hosts", url.Values{"action": {"provision"}, "host": {"vm3"}})
	if h := r.host("vm3"); v.code != http.StatusForbidden || h.State != record.HostFailed {
		t.Fatalf("a viewer provisioning vm3: %d, vm3 %s; want 403 and failed still", v.code, h.State)
	}
	// A post without the session's CSRF token changes nothing.
	op.post("/envs/prod/hosts", url.Values{"action": {"provision"}, "host": {"vm3"}, "csrf": {"forged"}})
	if h := r.host("vm3"); op.code != http.StatusForbidden || h.State != record.HostFailed {
		t.Fatalf("provision with a forged CSRF token: %d, vm3 %s; want 403 and failed still", op.code, h.State)
	}

	// Halted: the page says so, and the room refuses with its reason.
	r.apiCall("POST", "/envs/prod/halt", nil, http.StatusOK)
	op.get("/envs/prod/hosts")
	op.has("halted", "This environment is halted")
	op.post("/envs/prod/hosts", url.Values{"action": {"provision"}, "host": {"vm3"}})
	if op.code < 400 {
		t.Fatalf("provision while halted: %d, want refused", op.code)
	}
	op.has("refused while halted", `class="error"`, "environment prod is halted: machines are neither made nor controlled", `data-host="vm3"`)
	if h := r.host("vm3"); h.State != record.HostFailed {
		t.Fatalf("vm3 after a provision while halted: %s, want failed still", h.State)
	}
	r.apiCall("POST", "/envs/prod/resume", nil, http.StatusOK)

	// Destroy: confirmed by typing the host's name; anything else
	// destroys nothing.
	op.get("/envs/prod/hosts/vm2/destroy")
	op.has("destroy confirmation", "Destroy the machine of host vm2?", "Type the host's name", `name="confirm"`, "prod.vm2")
	op.post("/envs/prod/hosts/vm2/destroy", url.Values{"confirm": {"vm3"}})
	if op.code != http.StatusBadRequest {
		t.Fatalf("destroy with the wrong name: %d, want 400", op.code)
	}
	op.has("wrong name", "you typed &#34;vm3&#34;, not the host&#39;s name vm2: nothing was destroyed")
	if h := r.host("vm2"); h.State != record.HostProvisioned {
		t.Fatalf("vm2 after a destroy with the wrong name: %s, want provisioned", h.State)
	}
	op.post("/envs/prod/hosts/vm2/destroy", url.Values{"confirm": {"vm2"}})
	op.has("destroy", "vm2: destroying its machine", "Machines of prod")
	if h := r.host("vm2"); h.State != record.HostDeprovisioning {
		t.Fatalf("vm2 after destroy: %s, want deprovisioning", h.State)
	}
	v.get("/envs/prod/hosts/vm3/destroy")
	v.post("/envs/prod/hosts/vm3/destroy", url.Values{"confirm": {"vm3"}})
	if h := r.host("vm3"); v.code != http.StatusForbidden || h.State != record.HostFailed {
		t.Fatalf("a viewer destroying vm3: %d, vm3 %s; want 403 and failed still", v.code, h.State)
	}
}

// A provision whose platform's agent the server never heard from fails
// the host at once: the page shows the room's reason, and the host's
// row says failed with it.
func TestProvisionWithoutItsAgent(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.seed()
	r.machines(false)
	op := r.browser().login("", "otto", r.user("otto", record.RoleOperator))
	op.get("/envs/prod/hosts")
	op.post("/envs/prod/hosts", url.Values{"action": {"provision"}, "host": {"vm1"}})
	if op.code < 400 {
		t.Fatalf("provision with the platform's agent unknown: %d, want refused", op.code)
	}
	op.has("refusal", "platform lab is served by agent hv, which the server has never heard from")
	h := r.host("vm1")
	if h.State != record.HostFailed || !strings.Contains(h.Reason, "never heard from") {
		t.Fatalf("vm1 after a provision its platform's agent cannot get: %+v, want failed saying why", h)
	}
	row := op.row("vm1")
	for _, want := range []string{"failed", "never heard from", `value="provision"`} {
		if !strings.Contains(row, want) {
			t.Fatalf("vm1's row does not say %q:\n%s", want, row)
		}
	}
}
