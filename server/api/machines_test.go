package api_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/secret"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// refused sends a request that must be refused with status and code, its
// message saying says; it returns the message.
func (r *rig) refused(token, method, path string, body any, status int, code, says string) string {
	r.t.Helper()
	var e api.Body
	got, gotCode := r.do(token, method, path, body, &e)
	if got != status || gotCode != code || !strings.Contains(e.Error.Message, says) {
		msg := ""
		if e.Error != nil {
			msg = e.Error.Message
		}
		r.t.Fatalf("%s %s: %d %s %q, want %d %s saying %q", method, path, got, gotCode, msg, status, code, says)
	}
	return e.Error.Message
}

// cloudInit is a netboot distribution's install template: the host's
// name, a setting of its own, and the token its machine's agent enrolls
// with.
const cloudInit = "#cloud-config\nhostname: {{.Host}}\nwrite_files:\n  - path: /etc/tether/token\n    content: {{.Token}}\n  - path: /etc/motd\n    content: {{.Settings.motd}} {{.Settings.root_password}}\n"

// TestPlatformsAPI: a platform is put with its driver's defaults filled
// in, listed and shown to viewers; an unknown driver, a setting of the
// wrong type or unknown, a template using what its driver lacks are
// refused naming the field; viewers change nothing; one a host uses is
// not deleted; an inventory needs the platform's agent.
func TestPlatformsAPI(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	viewer := r.token("view", record.RoleViewer, "prod")
	operator := r.token("op", record.RoleOperator, "prod")
	base := "/api/v1/envs/prod/platforms"

	var p record.Platform
	r.must(operator, "PUT", base+"/kvm", `{"driver":"libvirt","agent":"hv1","settings":{"memory_mib":2048,"network":"default"}}`, &p, 200)
	if p.Name != "kvm" || p.Driver != "libvirt" || p.Agent != "hv1" || p.Settings["memory_mib"] != float64(2048) || p.Settings["cpus"] != float64(1) || p.Settings["uri"] != "qemu:///system" {
		t.Fatalf("put: %+v, want kvm with its settings and the driver's defaults", p)
	}
	var list []record.Platform
	r.must(viewer, "GET", base, nil, &list, 200)
	if len(list) != 1 || list[0].Name != "kvm" {
		t.Fatalf("list: %+v, want kvm", list)
	}
	r.must(viewer, "GET", base+"/kvm", nil, &p, 200)
	if p.Settings["network"] != "default" {
		t.Fatalf("show: %+v", p)
	}
	// Replaced whole: what is left out takes its default again.
	r.must(operator, "PUT", base+"/kvm", `{"driver":"libvirt","agent":"hv1","settings":{"cpus":2}}`, &p, 200)
	if p.Settings["cpus"] != float64(2) || p.Settings["memory_mib"] != float64(1024) {
		t.Fatalf("replaced: %+v, want cpus 2 and memory back to its default", p.Settings)
	}

	for _, tt := range []struct {
		name, body string
		status     int
		code, says string
	}{
		{"unknown driver", `{"driver":"vmware","agent":"hv1"}`, 422, "invalid", `driver: unknown driver "vmware": want one of libvirt, pxe`},
		{"wrong-typed setting", `{"driver":"libvirt","agent":"hv1","settings":{"memory_mib":"lots"}}`, 422, "invalid", "settings.memory_mib: want a whole number, got a string"},
		{"a fraction", `{"driver":"libvirt","agent":"hv1","settings":{"cpus":1.5}}`, 422, "invalid", "settings.cpus: want a whole number, got a number"},
		{"out of range", `{"driver":"libvirt","agent":"hv1","settings":{"cpus":0}}`, 422, "invalid", "settings.cpus: 0 is out of range"},
		{"unknown setting", `{"driver":"libvirt","agent":"hv1","settings":{"colour":"blue"}}`, 422, "invalid", "settings.colour: unknown setting"},
		{"setting of the wrong type", `{"driver":"pxe","agent":"hv1","settings":{"tftp_root":true}}`, 422, "invalid", "settings.tftp_root: want a string"},
		{"no agent", `{"driver":"libvirt"}`, 422, "invalid", "platform kvm2: agent"},
		{"template of another driver", `{"driver":"libvirt","agent":"hv1","templates":{"ipxe":"#!ipxe"}}`, 422, "invalid", "templates.ipxe: the libvirt driver has no template so named: want domain"},
		{"template variable", `{"driver":"libvirt","agent":"hv1","templates":{"domain":"<domain>{{.Colour}}</domain>"}}`, 422, "invalid", "uses Colour, which is not set"},
		{"unknown field", `{"driver":"libvirt","agent":"hv1","colour":"blue"}`, 400, "unknown_field", "colour"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r.refused(operator, "PUT", base+"/kvm2", tt.body, tt.status, tt.code, tt.says)
		})
	}
	r.must(viewer, "PUT", base+"/kvm2", `{"driver":"libvirt","agent":"hv1"}`, nil, 403)
	r.must(viewer, "DELETE", base+"/kvm", nil, nil, 403)
	r.refused(viewer, "GET", base+"/kvm2", nil, 404, "not_found", "platform kvm2")

	// The platform's agent never said hello: an inventory cannot reach it.
	r.refused(operator, "POST", base+"/kvm/inventory", nil, 503, "unavailable", "platform kvm is served by agent hv1, which the server has never heard from")
	if err := r.bus.DeclareInbox(context.Background(), "prod", "hv1"); err != nil {
		t.Fatal(err)
	}
	r.must(operator, "POST", base+"/kvm/inventory", nil, &p, 202)
	if p.Name != "kvm" {
		t.Fatalf("inventory: %+v, want the platform", p)
	}
	r.must(viewer, "POST", base+"/kvm/inventory", nil, nil, 403)

	// A platform a host uses stays, and keeps its driver.
	r.must(operator, "PUT", "/api/v1/envs/prod/distributions/tiny", api.DistributionRequest{Kind: record.DistNetboot, Kernel: "/srv/vmlinuz", Initrd: "/srv/initrd"}, nil, 200)
	r.must(operator, "POST", "/api/v1/envs/prod/hosts", api.HostRequest{Name: "web-1", Platform: "kvm", Distribution: "tiny"}, nil, 201)
	r.refused(operator, "DELETE", base+"/kvm", nil, 409, "conflict", "platform kvm: host web-1 uses it")
	r.refused(operator, "PUT", base+"/kvm", `{"driver":"pxe","agent":"hv1","settings":{"tftp_root":"/srv/tftp"}}`, 409, "conflict", "host web-1 is made by its libvirt driver")
	r.must(operator, "DELETE", "/api/v1/envs/prod/hosts/web-1", nil, nil, 204)
	r.must(operator, "DELETE", base+"/kvm", nil, nil, 204)
	r.must(viewer, "GET", base+"/kvm", nil, nil, 404)
	r.refused(operator, "DELETE", base+"/kvm", nil, 404, "not_found", "platform kvm")

	var audit []record.AuditEntry
	r.must(r.admin, "GET", "/api/v1/audit?env=prod", nil, &audit, 200)
	for _, want := range []string{"platform.put kvm", "platform.inventory kvm", "platform.delete kvm"} {
		found := false
		for _, e := range audit {
			found = found || e.Action+" "+e.Target == want
		}
		if !found {
			t.Errorf("the audit log has no %s: %+v", want, audit)
		}
	}
}

// TestDistributionsAPI: netboot and image distributions with typed
// parameters; a secret is shown hidden and kept when the distribution is
// saved again with it hidden; a template naming a setting nothing
// declares, or a parameter's default of the wrong type, is refused; an
// image distribution does not fit a platform it has no image for.
func TestDistributionsAPI(t *testing.T) {
	r := newRig(t, openSQLite(t))
	ctx := context.Background()
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	viewer := r.token("view", record.RoleViewer, "prod")
	base := "/api/v1/envs/prod/distributions"
	r.must(r.admin, "PUT", "/api/v1/envs/prod/platforms/kvm", api.PlatformRequest{Driver: "libvirt", Agent: "hv1"}, nil, 200)

	debian := api.DistributionRequest{Kind: record.DistNetboot, Kernel: "/srv/debian/vmlinuz", Initrd: "/srv/debian/initrd.gz",
		Cmdline: "console=ttyS0 hostname={{.Host}}", InstallFormat: record.InstallCloudInit, Install: cloudInit,
		Params: []record.Param{{Name: "motd", Type: record.ParamString, Default: "hello", Doc: "the message of the day"},
			{Name: "root_password", Type: record.ParamSecret, Doc: "root's password"},
			{Name: "swap_mib", Type: record.ParamInt, Default: 512, Doc: "swap"}},
		Settings: map[string]any{"root_password": "hunter2"}}
	var d record.Distribution
	r.must(r.admin, "PUT", base+"/debian", debian, &d, 200)
	if d.Name != "debian" || d.Settings["root_password"] != record.SecretShown || d.Settings["motd"] != "hello" || d.Settings["swap_mib"] != float64(512) {
		t.Fatalf("put: %+v, want the settings with their defaults, the secret hidden", d.Settings)
	}
	var list []record.Distribution
	r.must(viewer, "GET", base, nil, &list, 200)
	if len(list) != 1 || list[0].Settings["root_password"] != record.SecretShown {
		t.Fatalf("list: %+v, want debian, its secret hidden", list)
	}
	// The secret is sealed at rest; saved again as it was read, it keeps
	// its value.
	was, err := r.st.GetDistribution(ctx, "prod", "debian")
	if err != nil || !secret.IsSealedValue(fmt.Sprint(was.Settings["root_password"])) {
		t.Fatalf("stored: %+v %v, want the secret sealed", was.Settings, err)
	}
	debian.Settings = map[string]any{"root_password": record.SecretShown, "motd": "welcome"}
	r.must(r.admin, "PUT", base+"/debian", debian, &d, 200)
	stored, err := r.st.GetDistribution(ctx, "prod", "debian")
	if err != nil || stored.Settings["root_password"] != was.Settings["root_password"] || stored.Settings["motd"] != "welcome" {
		t.Fatalf("stored: %+v %v, want the secret kept and motd changed", stored.Settings, err)
	}

	for _, tt := range []struct {
		name string
		body any
		says string
	}{
		{"unknown kind", `{"kind":"tarball"}`, `kind: unknown kind "tarball": want netboot or image`},
		{"netboot without a kernel", `{"kind":"netboot","initrd":"/x"}`, "kernel and initrd: a netboot distribution needs both"},
		{"install without a template", `{"kind":"netboot","kernel":"/k","initrd":"/i","install_format":"kickstart"}`, "a kickstart distribution needs its install template"},
		{"template naming nothing declared", `{"kind":"netboot","kernel":"/k","initrd":"/i","cmdline":"x={{.Settings.colour}}"}`, "uses .Settings.colour, which no platform driver, host or parameter of the distribution declares"},
		{"default of the wrong type", `{"kind":"netboot","kernel":"/k","initrd":"/i","params":[{"name":"swap_mib","type":"int","default":"big","doc":"swap"}]}`, "params[0].default: want a whole number, got a string"},
		{"setting of the wrong type", `{"kind":"netboot","kernel":"/k","initrd":"/i","params":[{"name":"fast","type":"bool","doc":"go fast"}],"settings":{"fast":"yes"}}`, "settings.fast: want true or false, got a string"},
		{"image without images", `{"kind":"image"}`, "an image distribution needs an image for at least one platform"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r.refused(r.admin, "PUT", base+"/bad", tt.body, 422, "invalid", tt.says)
		})
	}
	r.must(viewer, "PUT", base+"/bad", `{"kind":"image","images":{"kvm":"gold.qcow2"}}`, nil, 403)

	// An image distribution fits only the platforms it has an image for.
	r.must(r.admin, "PUT", base+"/gold", api.DistributionRequest{Kind: record.DistImage, Images: map[string]string{"other": "gold.qcow2"}}, nil, 200)
	r.refused(r.admin, "POST", "/api/v1/envs/prod/hosts", api.HostRequest{Name: "db-1", Platform: "kvm", Distribution: "gold"}, 422, "invalid",
		"host db-1: distribution gold has no image for platform kvm")
	r.must(r.admin, "PUT", base+"/gold", api.DistributionRequest{Kind: record.DistImage, Images: map[string]string{"kvm": "gold.qcow2"}}, nil, 200)
	r.must(r.admin, "POST", "/api/v1/envs/prod/hosts", api.HostRequest{Name: "db-1", Platform: "kvm", Distribution: "gold"}, nil, 201)
	r.refused(r.admin, "DELETE", base+"/gold", nil, 409, "conflict", "distribution gold: host db-1 uses it")
	r.must(r.admin, "DELETE", base+"/debian", nil, nil, 204)
	r.refused(viewer, "GET", base+"/debian", nil, 404, "not_found", "distribution debian")
}

// TestHostsAPI walks a host through its life: added (refused for a
// missing platform, settings of the wrong type, a name taken), shown
// with its context, provisioning refused while the environment is
// halted and failing when its platform's agent was never heard from;
// then provisioned: the agent gets the machine to make, its report
// records the instance, the machine's agent enrolling with the host's
// token makes it provisioned; a provisioned host is not deleted; its
// machine is started, stopped and rebooted, then destroyed, and the host
// deleted.
func TestHostsAPI(t *testing.T) {
	r := newRig(t, openSQLite(t))
	ctx := context.Background()
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	viewer := r.token("view", record.RoleViewer, "prod")
	op := r.token("op", record.RoleOperator, "prod")
	hosts := "/api/v1/envs/prod/hosts"
	r.must(op, "PUT", "/api/v1/envs/prod/platforms/kvm", api.PlatformRequest{Driver: "libvirt", Agent: "hv1", Settings: map[string]any{"cpus": 2}}, nil, 200)
	r.must(op, "PUT", "/api/v1/envs/prod/distributions/debian", api.DistributionRequest{Kind: record.DistNetboot, Kernel: "/srv/vmlinuz", Initrd: "/srv/initrd",
		InstallFormat: record.InstallCloudInit, Install: cloudInit,
		Params: []record.Param{{Name: "motd", Type: record.ParamString, Default: "hello", Doc: "the message of the day"},
			{Name: "root_password", Type: record.ParamSecret, Default: "changeme", Doc: "root's password"}}}, nil, 200)

	for _, tt := range []struct {
		name   string
		req    api.HostRequest
		status int
		code   string
		says   string
	}{
		{"missing platform", api.HostRequest{Name: "web-1", Platform: "esx", Distribution: "debian"}, 404, "not_found", "host web-1: platform esx: environment prod has no platform so named"},
		{"missing distribution", api.HostRequest{Name: "web-1", Platform: "kvm", Distribution: "arch"}, 404, "not_found", "distribution arch: environment prod has no distribution so named"},
		{"wrong-typed setting", api.HostRequest{Name: "web-1", Platform: "kvm", Distribution: "debian", Settings: map[string]any{"cpus": "two"}}, 422, "invalid", "host web-1: settings.cpus: want a whole number, got a string"},
		{"unknown setting", api.HostRequest{Name: "web-1", Platform: "kvm", Distribution: "debian", Settings: map[string]any{"colour": "blue"}}, 422, "invalid", "host web-1: settings.colour: unknown setting"},
		{"bad name", api.HostRequest{Name: "web 1", Platform: "kvm", Distribution: "debian"}, 422, "invalid", "host: name"},
		{"no name", api.HostRequest{Platform: "kvm", Distribution: "debian"}, 422, "invalid", "name is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r.refused(op, "POST", hosts, tt.req, tt.status, tt.code, tt.says)
		})
	}
	r.must(viewer, "POST", hosts, api.HostRequest{Name: "web-1", Platform: "kvm", Distribution: "debian"}, nil, 403)

	var h record.Host
	r.must(op, "POST", hosts, api.HostRequest{Name: "web-1", Platform: "kvm", Distribution: "debian", Applications: []string{"web"},
		Labels: map[string]string{"role": "web"}, Settings: map[string]any{"memory_mib": 512, "motd": "hi", "root_password": "s3cret"}}, &h, 201)
	if h.State != record.HostDefined || h.Name != "web-1" {
		t.Fatalf("added: %+v, want web-1 defined", h)
	}
	r.refused(op, "POST", hosts, api.HostRequest{Name: "web-1", Platform: "kvm", Distribution: "debian"}, 409, "exists", "host web-1")
	var list []record.Host
	r.must(viewer, "GET", hosts, nil, &list, 200)
	if len(list) != 1 || list[0].Settings["root_password"] != record.SecretShown || list[0].Settings["motd"] != "hi" {
		t.Fatalf("list: %+v, want web-1, its secret hidden", list)
	}
	// show reads the host afresh (decoding into a used value would keep
	// what the answer leaves out).
	show := func() record.HostView {
		t.Helper()
		var v record.HostView
		r.must(viewer, "GET", hosts+"/web-1", nil, &v, 200)
		return v
	}
	v := show()
	from := map[string]string{}
	for _, c := range v.Context {
		from[c.Name] = c.From
		if c.Name == "root_password" && (c.Value != record.SecretShown || !c.Secret) {
			t.Errorf("context %+v: want the secret hidden", c)
		}
	}
	if from["cpus"] != "platform kvm" || from["memory_mib"] != "host web-1" || from["uri"] != "platform kvm" || from["motd"] != "host web-1" ||
		v.Machine != "prod.web-1" || v.Instance != nil || v.Settings["root_password"] != record.SecretShown {
		t.Fatalf("show: %+v (from %v), want each setting with where it came from", v, from)
	}
	r.refused(viewer, "GET", hosts+"/nope", nil, 404, "not_found", "host nope")

	// Halted: nothing is made.
	r.must(op, "POST", "/api/v1/envs/prod/halt", nil, nil, 200)
	r.refused(op, "POST", hosts+"/web-1/provision", nil, 409, "halted", "environment prod is halted")
	r.must(op, "POST", "/api/v1/envs/prod/resume", nil, nil, 200)

	// The platform's agent was never heard from: the host fails, saying so.
	why := r.refused(op, "POST", hosts+"/web-1/provision", nil, 503, "unavailable", "platform kvm is served by agent hv1, which the server has never heard from")
	v = show()
	if v.State != record.HostFailed || v.Reason != why {
		t.Fatalf("after provisioning without the platform's agent: %s %q, want failed saying %q", v.State, v.Reason, why)
	}

	// Its agent is there: it gets the machine to make, with the host's
	// token in the install template.
	if err := r.bus.DeclareInbox(ctx, "prod", "hv1"); err != nil {
		t.Fatal(err)
	}
	cmds := make(chan bus.Machine, 10)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- r.bus.ConsumeInbox(cctx, "prod", "hv1", func(_ context.Context, d bus.Delivery) error {
			var m bus.Machine
			if err := d.Envelope.DecodeBody(&m); err != nil {
				return err
			}
			cmds <- m
			return nil
		})
	}()
	t.Cleanup(func() { stop(); <-done })
	next := func(want model.MachineOp) bus.Machine {
		t.Helper()
		select {
		case m := <-cmds:
			if m.Op != want {
				t.Fatalf("the platform's agent got %s, want %s", m.Op, want)
			}
			return m
		case <-time.After(30 * time.Second):
			t.Fatalf("the platform's agent got no %s", want)
		}
		return bus.Machine{}
	}
	r.must(viewer, "POST", hosts+"/web-1/provision", nil, nil, 403)
	r.must(op, "POST", hosts+"/web-1/provision", nil, &h, 202)
	if h.State != record.HostProvisioning {
		t.Fatalf("provision: %+v, want provisioning", h)
	}
	m := next(model.MachineProvision)
	var tok record.EnrollmentToken
	toks, err := r.st.ListEnrollTokens(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range toks {
		if x.Host == "web-1" {
			tok = x
		}
	}
	if m.Platform != "kvm" || m.Spec == nil || m.Spec.Name != "prod.web-1" || fmt.Sprint(m.Spec.Settings["memory_mib"]) != "512" ||
		!strings.Contains(m.Spec.Seed["user-data"], "hostname: web-1") || !strings.Contains(m.Spec.Seed["user-data"], "hi s3cret") || tok.ID == "" {
		t.Fatalf("machine command %+v (spec %+v), token %+v: want web-1's machine with its settings and a token bound to it", m, m.Spec, tok)
	}
	// A libvirt machine's user-data is its seed's: no boot file needs a
	// TFTP root.
	if len(m.Spec.Files) != 0 {
		t.Errorf("boot files %v, want none: the user-data goes on the seed", m.Spec.Files)
	}
	r.refused(op, "POST", hosts+"/web-1/provision", nil, 409, "conflict", "a provisioning host cannot provision")
	r.refused(op, "DELETE", hosts+"/web-1", nil, 409, "conflict", "host web-1 is provisioning: destroy its machine first")

	// The platform's agent made it; the machine's agent enrolls.
	id := uuid.NewString()
	booted := time.Now().Add(-time.Minute).UTC()
	if err := r.srv.Machines().Report(ctx, record.Agent{Env: "prod", Name: "hv1"}, bus.MachineReport{OpID: m.OpID, Op: model.MachineProvision, Platform: "kvm", Host: "web-1",
		Instances: []model.InstanceState{{ID: id, Name: "prod.web-1", Host: "web-1", Power: "running", BootedAt: &booted, Addresses: []string{"10.0.2.15"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := r.srv.Machines().Enrolled(ctx, "prod", "web-1", tok); err != nil {
		t.Fatal(err)
	}
	v = show()
	if v.State != record.HostProvisioned || v.Host.Instance != id || v.Instance == nil || v.Instance.Power != record.PowerRunning || v.Instance.Agent != "web-1" {
		t.Fatalf("after enrolling: %+v instance %+v, want provisioned with its running instance", v.Host, v.Instance)
	}
	var insts []record.Instance
	r.must(viewer, "GET", "/api/v1/envs/prod/instances", nil, &insts, 200)
	if len(insts) != 1 || insts[0].ID != id || insts[0].Host != "web-1" || insts[0].Platform != "kvm" {
		t.Fatalf("instances: %+v, want web-1's", insts)
	}
	var inst record.Instance
	r.must(viewer, "GET", "/api/v1/envs/prod/instances/"+id, nil, &inst, 200)
	if inst.ID != id || len(inst.Addresses) != 1 {
		t.Fatalf("instance: %+v", inst)
	}
	r.refused(viewer, "GET", "/api/v1/envs/prod/instances/"+url.PathEscape("agent:nope"), nil, 404, "not_found", "instance agent:nope")

	r.refused(op, "DELETE", hosts+"/web-1", nil, 409, "conflict", "host web-1 is provisioned: destroy its machine first (tether host destroy web-1)")
	for _, ctl := range []model.MachineOp{model.MachineStart, model.MachineStop, model.MachineReboot} {
		r.must(viewer, "POST", hosts+"/web-1/"+string(ctl), nil, nil, 403)
		r.must(op, "POST", hosts+"/web-1/"+string(ctl), nil, &h, 202)
		if c := next(ctl); c.Machine != "prod.web-1" || h.State != record.HostProvisioned {
			t.Fatalf("%s: sent %+v, answered %+v", ctl, c, h)
		}
	}
	r.must(op, "POST", "/api/v1/envs/prod/halt", nil, nil, 200)
	r.refused(op, "POST", hosts+"/web-1/reboot", nil, 409, "halted", "machines are neither made nor controlled while it is")
	r.refused(op, "POST", hosts+"/web-1/destroy", nil, 409, "halted", "tether env resume prod")
	r.must(op, "POST", "/api/v1/envs/prod/resume", nil, nil, 200)

	r.must(viewer, "POST", hosts+"/web-1/destroy", nil, nil, 403)
	r.must(op, "POST", hosts+"/web-1/destroy", nil, &h, 202)
	if h.State != record.HostDeprovisioning {
		t.Fatalf("destroy: %+v, want deprovisioning", h)
	}
	d := next(model.MachineDestroy)
	if err := r.srv.Machines().Report(ctx, record.Agent{Env: "prod", Name: "hv1"}, bus.MachineReport{OpID: d.OpID, Op: model.MachineDestroy, Platform: "kvm", Host: "web-1"}); err != nil {
		t.Fatal(err)
	}
	v = show()
	if v.State != record.HostDefined || v.Instance != nil {
		t.Fatalf("after the destroy: %+v, want defined without an instance", v)
	}
	r.refused(op, "POST", hosts+"/web-1/start", nil, 409, "conflict", "host web-1 is defined: it has no machine to start")
	r.refused(op, "POST", hosts+"/nope/start", nil, 404, "not_found", "host nope")
	r.must(op, "DELETE", hosts+"/web-1", nil, nil, 204)
	r.must(viewer, "GET", hosts, nil, &list, 200)
	if len(list) != 0 {
		t.Fatalf("hosts after the delete: %+v", list)
	}

	// A machine that runs an agent already is adopted into the defined
	// host of its name; an agent that is not accepted, or none, is not.
	if err := r.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web-7", PublicKey: make([]byte, 32), State: record.AgentAccepted, LastSeen: time.Now(), Connected: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web-7", "web-8"} {
		r.must(op, "POST", hosts, api.HostRequest{Name: name, Platform: "kvm", Distribution: "debian"}, nil, 201)
	}
	r.must(viewer, "POST", hosts+"/web-7/adopt", nil, nil, 403)
	r.refused(op, "POST", hosts+"/web-8/adopt", nil, 404, "not_found", "web-8")
	r.must(op, "POST", hosts+"/web-7/adopt", nil, &h, 200)
	if h.State != record.HostProvisioned || h.Instance != "agent:web-7" {
		t.Fatalf("adopted: %+v, want provisioned with agent web-7's machine", h)
	}
	r.refused(op, "POST", hosts+"/web-7/adopt", nil, 409, "conflict", "host")

	// Each change is in the audit log as its route's action, by who asked.
	var audit []record.AuditEntry
	r.must(r.admin, "GET", "/api/v1/audit?env=prod&limit=200", nil, &audit, 200)
	actions := map[string]string{}
	for _, e := range audit {
		actions[e.Action+" "+e.Target] = e.Actor
	}
	for _, want := range []string{"host.create web-1", "host.provision web-1", "host.start web-1", "host.stop web-1", "host.reboot web-1", "host.destroy web-1", "host.delete web-1"} {
		if !strings.HasPrefix(actions[want], "op (") {
			t.Errorf("audit: %s by %q, want by the operator's token (%v)", want, actions[want], actions)
		}
	}
}

// TestHostUpdateAPI: PUT replaces an operator's host's blueprint, checked
// as a new host's is; a secret sent back as it is shown keeps its sealed
// value; a host with a machine keeps its platform and distribution (its
// labels change); a host the model declares, a setting of the wrong
// type, a "(secret)" with nothing to keep are refused, saying so.
func TestHostUpdateAPI(t *testing.T) {
	r := newRig(t, openSQLite(t))
	ctx := context.Background()
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	viewer := r.token("view", record.RoleViewer, "prod")
	op := r.token("op", record.RoleOperator, "prod")
	hosts := "/api/v1/envs/prod/hosts"
	r.must(op, "PUT", "/api/v1/envs/prod/platforms/kvm", api.PlatformRequest{Driver: "libvirt", Agent: "hv1"}, nil, 200)
	r.must(op, "PUT", "/api/v1/envs/prod/platforms/lab", api.PlatformRequest{Driver: "libvirt", Agent: "hv2", Settings: map[string]any{"cpus": 4}}, nil, 200)
	r.must(op, "PUT", "/api/v1/envs/prod/distributions/debian", api.DistributionRequest{Kind: record.DistNetboot, Kernel: "/srv/vmlinuz", Initrd: "/srv/initrd",
		InstallFormat: record.InstallCloudInit, Install: cloudInit,
		Params: []record.Param{{Name: "motd", Type: record.ParamString, Default: "hello", Doc: "the message of the day"},
			{Name: "root_password", Type: record.ParamSecret, Default: "changeme", Doc: "root's password"}}}, nil, 200)
	r.must(op, "PUT", "/api/v1/envs/prod/distributions/tiny", api.DistributionRequest{Kind: record.DistNetboot, Kernel: "/srv/vmlinuz", Initrd: "/srv/initrd"}, nil, 200)
	r.must(op, "POST", hosts, api.HostRequest{Name: "web-1", Platform: "kvm", Distribution: "debian", Applications: []string{"web"},
		Labels: map[string]string{"role": "web"}, Settings: map[string]any{"memory_mib": 512, "root_password": "s3cret"}}, nil, 201)
	was, err := r.st.GetHost(ctx, "prod", "web-1")
	if err != nil || !secret.IsSealedValue(fmt.Sprint(was.Settings["root_password"])) {
		t.Fatalf("stored: %+v %v, want the secret sealed", was.Settings, err)
	}

	// Defined: everything changes, and the secret sent back as it is
	// shown keeps its value.
	var h record.Host
	r.must(op, "PUT", hosts+"/web-1", api.HostUpdate{Platform: "lab", Distribution: "debian", Applications: []string{"web", "db"},
		Labels: map[string]string{"role": "db"}, Settings: map[string]any{"memory_mib": 1024, "root_password": record.SecretShown}}, &h, 200)
	if h.Platform != "lab" || strings.Join(h.Applications, ",") != "web,db" || h.Labels["role"] != "db" || h.Settings["memory_mib"] != float64(1024) ||
		h.Settings["root_password"] != record.SecretShown || h.State != record.HostDefined {
		t.Fatalf("updated: %+v, want it on lab running web and db, its secret hidden", h)
	}
	stored, err := r.st.GetHost(ctx, "prod", "web-1")
	if err != nil || stored.Settings["root_password"] != was.Settings["root_password"] || stored.Settings["memory_mib"] != int64(1024) {
		t.Fatalf("stored after the update: %+v %v, want the sealed secret kept and memory 1024", stored.Settings, err)
	}
	var v record.HostView
	r.must(viewer, "GET", hosts+"/web-1", nil, &v, 200)
	from := map[string]string{}
	for _, c := range v.Context {
		from[c.Name] = c.From
	}
	if from["cpus"] != "platform lab" || from["memory_mib"] != "host web-1" {
		t.Fatalf("show after the update: context from %v, want cpus from platform lab", from)
	}
	// Replaced whole: what is left out is gone (read into a fresh value:
	// one used before keeps what the answer leaves out).
	h = record.Host{}
	r.must(op, "PUT", hosts+"/web-1", api.HostUpdate{Platform: "lab", Distribution: "debian", Settings: map[string]any{"root_password": record.SecretShown}}, &h, 200)
	if len(h.Applications) != 0 || len(h.Labels) != 0 || h.Settings["memory_mib"] != nil {
		t.Fatalf("replaced: %+v, want no applications, labels nor memory of its own", h)
	}
	r.must(viewer, "PUT", hosts+"/web-1", api.HostUpdate{Platform: "kvm", Distribution: "debian"}, nil, 403)

	for _, tt := range []struct {
		name   string
		host   string
		body   any
		status int
		code   string
		says   string
	}{
		{"wrong-typed setting", "web-1", api.HostUpdate{Platform: "lab", Distribution: "debian", Settings: map[string]any{"cpus": "two"}}, 422, "invalid", "host web-1: settings.cpus: want a whole number, got a string"},
		{"unknown setting", "web-1", api.HostUpdate{Platform: "lab", Distribution: "debian", Settings: map[string]any{"colour": "blue"}}, 422, "invalid", "host web-1: settings.colour: unknown setting"},
		{"missing platform", "web-1", api.HostUpdate{Platform: "esx", Distribution: "debian"}, 404, "not_found", "host web-1: platform esx: environment prod has no platform so named"},
		{"missing distribution", "web-1", api.HostUpdate{Platform: "lab", Distribution: "arch", Settings: map[string]any{"root_password": record.SecretShown}}, 404, "not_found", "host web-1: distribution arch: environment prod has no distribution so named"},
		{"a secret with nothing to keep", "web-1", api.HostUpdate{Platform: "lab", Distribution: "tiny", Settings: map[string]any{"root_password": record.SecretShown}}, 422, "invalid",
			`host web-1: settings.root_password: "(secret)" stands for the secret value it had, and it had none to keep`},
		{"bad label", "web-1", api.HostUpdate{Platform: "lab", Distribution: "debian", Labels: map[string]string{"bad key": "x"}}, 422, "invalid", "bad key"},
		{"no such host", "nope", api.HostUpdate{Platform: "lab", Distribution: "debian"}, 404, "not_found", "host nope: environment prod has no host so named (tether host add nope adds it)"},
		{"a name in the body", "web-1", `{"name":"web-2","platform":"lab","distribution":"debian"}`, 400, "unknown_field", "name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r.refused(op, "PUT", hosts+"/"+tt.host, tt.body, tt.status, tt.code, tt.says)
		})
	}
	if after, err := r.st.GetHost(ctx, "prod", "web-1"); err != nil || after.Platform != "lab" || after.Distribution != "debian" ||
		after.Settings["root_password"] != was.Settings["root_password"] {
		t.Fatalf("after the refused updates: %+v %v, want it as it was", after, err)
	}

	// With a machine, its platform and distribution stay; the rest
	// changes.
	if _, err := r.st.MoveHost(ctx, "prod", "web-1", record.HostDefined, record.HostAdopt, "", "agent:web-1"); err != nil {
		t.Fatal(err)
	}
	r.refused(op, "PUT", hosts+"/web-1", api.HostUpdate{Platform: "kvm", Distribution: "debian"}, 409, "conflict",
		"host web-1 is provisioned: its machine was made on platform lab with distribution debian: destroy it first (tether host destroy web-1), then change its platform lab to kvm")
	r.refused(op, "PUT", hosts+"/web-1", api.HostUpdate{Platform: "kvm", Distribution: "tiny"}, 409, "conflict",
		"change its platform lab to kvm and its distribution debian to tiny")
	h = record.Host{}
	r.must(op, "PUT", hosts+"/web-1", api.HostUpdate{Platform: "lab", Distribution: "debian", Labels: map[string]string{"role": "cache"},
		Settings: map[string]any{"root_password": "n3w"}}, &h, 200)
	if h.State != record.HostProvisioned || h.Platform != "lab" || h.Labels["role"] != "cache" || h.Settings["root_password"] != record.SecretShown {
		t.Fatalf("provisioned host updated: %+v, want its labels changed, still provisioned on lab", h)
	}
	if after, err := r.st.GetHost(ctx, "prod", "web-1"); err != nil || after.Settings["root_password"] == was.Settings["root_password"] ||
		!secret.IsSealedValue(fmt.Sprint(after.Settings["root_password"])) {
		t.Fatalf("after a new secret: %+v %v, want a new sealed value", after.Settings, err)
	}

	// A host the model declares changes with the model only.
	if _, err := r.st.CreateHost(ctx, record.Host{Env: "prod", Name: "vm1", Platform: "kvm", Distribution: "tiny", DeclaredIn: "main.hcl:16"}); err != nil {
		t.Fatal(err)
	}
	r.refused(op, "PUT", hosts+"/vm1", api.HostUpdate{Platform: "kvm", Distribution: "tiny", Labels: map[string]string{"role": "web"}}, 409, "conflict",
		"host vm1 is declared in the model (main.hcl:16): change it there")

	var audit []record.AuditEntry
	r.must(r.admin, "GET", "/api/v1/audit?env=prod&limit=200", nil, &audit, 200)
	updates := 0
	for _, e := range audit {
		if e.Action == "host.update" && e.Target == "web-1" && strings.HasPrefix(e.Actor, "op (") {
			updates++
		}
	}
	if updates != 3 {
		t.Errorf("audit: %d host.update web-1 by the operator, want the 3 that were done: %+v", updates, audit)
	}
}
