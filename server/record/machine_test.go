package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
)

// A platform's settings are its driver's, typed, with the driver's
// defaults; each mistake is refused naming the field.
func TestPlatformSettings(t *testing.T) {
	p := Platform{Name: "lab", Driver: DriverLibvirt, Agent: "hv-1", Settings: map[string]any{"memory_mib": float64(256)}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Settings["memory_mib"] != int64(256) || p.Settings["uri"] != "qemu:///system" || p.Settings["cpus"] != int64(1) {
		t.Fatalf("settings %v: want memory_mib 256 as given, the driver's uri and cpus", p.Settings)
	}
	// JSON numbers decoded with UseNumber are taken too.
	var fromAPI map[string]any
	dec := json.NewDecoder(strings.NewReader(`{"cpus": 2}`))
	dec.UseNumber()
	if err := dec.Decode(&fromAPI); err != nil {
		t.Fatal(err)
	}
	q := Platform{Name: "lab", Driver: DriverLibvirt, Agent: "hv-1", Settings: fromAPI}
	if err := q.Validate(); err != nil || q.Settings["cpus"] != int64(2) {
		t.Fatalf("cpus from JSON: %v %v", q.Settings, err)
	}
	bad := []struct {
		p    Platform
		want string
	}{
		{Platform{Name: "lab", Driver: "vmware", Agent: "hv-1"}, `driver: unknown driver "vmware": want one of libvirt, pxe`},
		{Platform{Name: "lab", Driver: DriverLibvirt, Agent: "hv-1", Settings: map[string]any{"memory": 1}}, "settings.memory: unknown setting"},
		{Platform{Name: "lab", Driver: DriverLibvirt, Agent: "hv-1", Settings: map[string]any{"cpus": "two"}}, "settings.cpus: want a whole number, got a string"},
		{Platform{Name: "lab", Driver: DriverLibvirt, Agent: "hv-1", Settings: map[string]any{"cpus": 1.5}}, "settings.cpus: want a whole number, got a number"},
		{Platform{Name: "lab", Driver: DriverLibvirt, Agent: "hv-1", Settings: map[string]any{"cpus": 0}}, "settings.cpus: 0 is out of range: want 1 to 256"},
		{Platform{Name: "lab", Driver: DriverLibvirt, Agent: "hv-1", Settings: map[string]any{"uri": 5}}, "settings.uri: want a string, got a number"},
		{Platform{Name: "boot", Driver: DriverPXE, Agent: "hv-1", Settings: map[string]any{"tftp_root": true}}, "settings.tftp_root: want a string, got a boolean"},
		{Platform{Name: "", Driver: DriverPXE, Agent: "hv-1"}, "platform: a name is required"},
		{Platform{Name: "lab", Driver: DriverLibvirt, Agent: "no way"}, "platform lab: agent:"},
		{Platform{Name: "lab", Driver: DriverLibvirt, Agent: "hv-1", Templates: map[string]string{"domain": strings.Repeat("x", MaxTemplate+1)}}, "templates.domain: 262145 bytes"},
	}
	for _, b := range bad {
		err := b.p.Validate()
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: got %v, want an error containing %q", b.p, err, b.want)
		}
	}
}

func TestDistribution(t *testing.T) {
	d := Distribution{Name: "tiny", Kind: DistNetboot, Kernel: "/boot/vmlinuz", Initrd: "/srv/initrd.gz",
		Params:   []Param{{Name: "locale", Type: ParamString, Default: "C.UTF-8"}, {Name: "root_password", Type: ParamSecret, Required: true, Doc: "root's password"}},
		Settings: map[string]any{"root_password": "s3cret"}}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.InstallFormat != InstallNone || d.Settings["locale"] != "C.UTF-8" || d.Settings["root_password"] != "s3cret" {
		t.Fatalf("distribution %+v: want no install template, the locale's default and the password given", d)
	}
	bad := []struct {
		d    Distribution
		want string
	}{
		{Distribution{Name: "x", Kind: "iso"}, `kind: unknown kind "iso"`},
		{Distribution{Name: "x", Kind: DistNetboot, Kernel: "/k"}, "kernel and initrd: a netboot distribution needs both"},
		{Distribution{Name: "x", Kind: DistNetboot, Kernel: "/k", Initrd: "/i", InstallFormat: InstallPreseed}, "install: a preseed distribution needs its install template"},
		{Distribution{Name: "x", Kind: DistNetboot, Kernel: "/k", Initrd: "/i", InstallFormat: "autoyast", Install: "x"}, `install_format: unknown format "autoyast"`},
		{Distribution{Name: "x", Kind: DistImage}, "images: an image distribution needs an image"},
		{Distribution{Name: "x", Kind: DistImage, Images: map[string]string{"lab": "debian.qcow2"}, Kernel: "/k"}, "kernel and initrd: an image distribution boots its image"},
		{Distribution{Name: "x", Kind: DistImage, Images: map[string]string{"lab": "debian.qcow2"}, InstallFormat: InstallPreseed, Install: "d-i"}, `install_format: "preseed": an image distribution takes cloud-init user-data`},
		{Distribution{Name: "x", Kind: DistImage, Images: map[string]string{"lab": "debian.qcow2"}, InstallFormat: InstallCloudInit}, "install: a cloud-init distribution needs its install template"},
		{Distribution{Name: "x", Kind: DistImage, Images: map[string]string{"lab": "debian.qcow2"}, Install: "#cloud-config\n"}, "install: an install template needs its format"},
		{Distribution{Name: "x", Kind: DistNetboot, Kernel: "/k", Initrd: "/i", Install: "#cloud-config\n"}, "install: an install template needs its format"},
		{Distribution{Name: "x", Kind: DistNetboot, Kernel: "/k", Initrd: "/i", Params: []Param{{Name: "root_password", Type: ParamSecret, Required: true, Doc: "root's password"}}}, "settings.root_password: required (root's password)"},
		{Distribution{Name: "x", Kind: DistNetboot, Kernel: "/k", Initrd: "/i", Params: []Param{{Name: "a", Type: ParamInt}, {Name: "a", Type: ParamInt}}}, "params[1]: a is declared twice"},
		{Distribution{Name: "x", Kind: DistNetboot, Kernel: "/k", Initrd: "/i", Params: []Param{{Name: "n", Type: ParamInt, Default: "three"}}}, "params[0].default: want a whole number"},
	}
	for _, b := range bad {
		err := b.d.Validate()
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: got %v, want an error containing %q", b.d, err, b.want)
		}
	}
	// A gold image with cloud-init takes user-data, for its seed.
	cloud := Distribution{Name: "cloud", Kind: DistImage, Images: map[string]string{"lab": "debian.qcow2"}, InstallFormat: InstallCloudInit, Install: "#cloud-config\n"}
	if err := cloud.Validate(); err != nil {
		t.Fatalf("an image distribution with cloud-init user-data: %v", err)
	}
	img := Distribution{Name: "gold", Kind: DistImage, Images: map[string]string{"lab": "debian.qcow2"}}
	if err := img.Validate(); err != nil || img.InstallFormat != InstallNone {
		t.Fatalf("an image distribution without an install template: %v, format %q; want none", err, img.InstallFormat)
	}
	if err := img.Fits(Platform{Name: "lab", Driver: DriverLibvirt}); err != nil {
		t.Fatal(err)
	}
	if err := img.Fits(Platform{Name: "other", Driver: DriverLibvirt}); err == nil || !strings.Contains(err.Error(), "no image for platform other") {
		t.Fatalf("an image distribution on a platform it has no image for: %v", err)
	}
}

// Every state × event: the moves the state machine allows, and the
// refusal of every other, saying what the host can do.
func TestHostStateMachine(t *testing.T) {
	events := []HostEvent{HostProvision, HostEnrolled, HostFail, HostDestroy, HostDestroyed}
	want := map[HostState]map[HostEvent]HostState{
		HostDefined:        {HostProvision: HostProvisioning},
		HostProvisioning:   {HostEnrolled: HostProvisioned, HostFail: HostFailed, HostDestroy: HostDeprovisioning},
		HostProvisioned:    {HostDestroy: HostDeprovisioning, HostFail: HostFailed},
		HostFailed:         {HostProvision: HostProvisioning, HostDestroy: HostDeprovisioning},
		HostDeprovisioning: {HostDestroyed: HostDefined, HostFail: HostFailed},
	}
	for state, moves := range want {
		for _, e := range events {
			got, err := state.Move(e)
			if next, ok := moves[e]; ok {
				if err != nil || got != next {
					t.Errorf("%s × %s: got %s %v, want %s", state, e, got, err, next)
				}
				continue
			}
			if !errors.Is(err, model.ErrConflict) || got != state || !strings.Contains(err.Error(), "it can:") {
				t.Errorf("%s × %s: got %s %v, want a conflict naming what it can do", state, e, got, err)
			}
		}
	}
	if _, err := HostState("lost").Move(HostProvision); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("an unknown state: %v", err)
	}
	h := Host{Name: "web-3", Platform: "lab", Distribution: "tiny", Applications: []string{"web"}}
	if err := h.Validate(); err != nil || h.State != HostDefined {
		t.Fatalf("a new host: %+v %v, want defined", h, err)
	}
	for _, b := range []Host{{Name: "web 3", Platform: "lab", Distribution: "tiny"}, {Name: "web-3", Distribution: "tiny"}, {Name: "web-3", Platform: "lab", Distribution: "tiny", State: "gone"}} {
		if err := b.Validate(); err == nil {
			t.Errorf("%+v: valid, want refused", b)
		}
	}
}

func TestInstanceUptime(t *testing.T) {
	now := time.Now()
	booted := now.Add(-90 * time.Second)
	if got := (Instance{Power: PowerRunning, BootedAt: &booted}).Uptime(now); got != 90*time.Second {
		t.Fatalf("uptime %v, want 90s", got)
	}
	if got := (Instance{Power: PowerStopped, BootedAt: &booted}).Uptime(now); got != 0 {
		t.Fatalf("uptime of a stopped instance %v, want 0", got)
	}
}

// A refusal of a change of machines is of its kind for errors.Is, and
// says only its own words (what the API shows).
func TestRefuse(t *testing.T) {
	err := fmt.Errorf("add host: %w", Refuse(model.ErrNotFound, "host %s: platform %s: none", "web-1", "kvm"))
	var me *MachineError
	if !errors.Is(err, model.ErrNotFound) || errors.Is(err, model.ErrConflict) || !errors.As(err, &me) || me.Msg != "host web-1: platform kvm: none" {
		t.Fatalf("got %v (%+v), want a not-found refusal saying its words", err, me)
	}
	if _, err := HostDefined.Move(HostDestroy); !errors.As(err, &me) || me.Error() != "a defined host cannot destroy (it can: adopt, provision)" {
		t.Fatalf("a move refused: %v, want a refusal saying what the host can do", err)
	}
}

// A host's context: the environment's machine settings, under the
// platform's (a driver's default does not hide them), the distribution's,
// its applications' and the host's, each value saying where it came from; the
// environment's settings are checked as they are set.
func TestHostContextLayers(t *testing.T) {
	p := Platform{Name: "lab", Driver: DriverLibvirt, Agent: "hv", Settings: map[string]any{"cpus": 2}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	d := Distribution{Name: "tiny", Kind: DistNetboot, Kernel: "/k", Initrd: "/i", Params: []Param{{Name: "locale", Type: ParamString, Default: "C"}}}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	h := Host{Name: "vm1", Platform: "lab", Distribution: "tiny", Applications: []string{"db", "web", "ntp"}, Settings: map[string]any{"disk_gib": 2}}
	env := map[string]any{"memory_mib": float64(512), "cpus": 4, "disk_gib": 4, "tftp_root": "/srv/tftp"}
	apps := []Application{
		{Name: "db", MachineSettings: map[string]any{"locale": "en_GB", "disk_gib": 40}},
		{Name: "web", MachineSettings: map[string]any{"locale": "fr_BE", "tftp_root": "/x"}},
		{Name: "cache", MachineSettings: map[string]any{"cpus": 8}}, // not the host's
	}
	for i := range apps {
		if err := apps[i].Validate(); err != nil {
			t.Fatal(err)
		}
		if err := apps[i].CheckSettings([]Distribution{d}); err != nil {
			t.Fatal(err)
		}
	}
	cv, values, err := HostContext(env, p, d, apps, h)
	if err != nil {
		t.Fatal(err)
	}
	from := map[string]string{}
	for _, c := range cv {
		from[c.Name] = fmt.Sprint(c.Value, " from ", c.From)
	}
	for name, want := range map[string]string{
		"memory_mib": "512 from environment",       // the platform's is its driver's default
		"cpus":       "2 from platform lab",        // the platform's own
		"disk_gib":   "2 from host vm1",            // the host's own, over its application's
		"locale":     "fr_BE from application web", // the later of the host's applications, over the distribution's default
	} {
		if from[name] != want {
			t.Errorf("%s: %s, want %s", name, from[name], want)
		}
	}
	if _, ok := values["tftp_root"]; ok {
		t.Error("another driver's setting of the environment or of an application reached a libvirt host's context")
	}
	if _, _, err := HostContext(env, p, d, []Application{{Name: "web", MachineSettings: map[string]any{"cpus": "many"}}}, h); err == nil ||
		!strings.Contains(err.Error(), "application web: machine_settings.cpus: want a whole number") {
		t.Errorf("an application's setting of the wrong type: %v, want an error naming it", err)
	}
	for _, tt := range []struct {
		app  Application
		says string
	}{
		{Application{Name: "web", MachineSettings: map[string]any{"colour": "blue"}, DeclaredIn: "main.hcl:3"}, "application web (main.hcl:3): machine_settings.colour: unknown setting"},
		{Application{Name: "web", MachineSettings: map[string]any{"memory_mib": true}}, "application web: machine_settings.memory_mib: want a whole number"},
		{Application{Name: "web", MachineSettings: map[string]any{"root_password": "x"}}, "machine_settings.root_password: a secret is set on a distribution or a host"},
	} {
		dists := []Distribution{{Name: "deb", Params: []Param{{Name: "root_password", Type: ParamSecret}}}}
		if err := tt.app.CheckSettings(dists); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("check %+v: %v, want an error saying %q", tt.app.MachineSettings, err, tt.says)
		}
	}
	if err := (&Application{Name: "a b"}).Validate(); err == nil || !strings.Contains(err.Error(), "application") {
		t.Errorf("an application of a bad name: %v", err)
	}
	var s EnvSettings = DefaultEnvSettings()
	if err := s.Set("machine_settings", `{"memory_mib": 512, "broker": "amqp://10.0.2.2:5672/"}`); err != nil || s.MachineSettings["memory_mib"] != int64(512) {
		t.Fatalf("set machine_settings: %v, %+v", err, s.MachineSettings)
	}
	if got, _ := s.Get("machine_settings"); got != `{"broker":"amqp://10.0.2.2:5672/","memory_mib":512}` {
		t.Fatalf("get machine_settings: %s", got)
	}
	for value, says := range map[string]string{
		`{"colour": "blue"}`:       "machine_settings.colour: unknown setting",
		`{"memory_mib": "lots"}`:   "machine_settings.memory_mib: want a whole number",
		`{"memory_mib": 1.5}`:      "memory_mib: 1.5 is not a whole number",
		`{"provision_timeout": 1}`: "machine_settings.provision_timeout: 1 is out of range",
		`not json`:                 "machine_settings",
	} {
		if err := s.Set("machine_settings", value); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("set machine_settings %s: %v, want an error saying %q", value, err, says)
		}
	}
	if s.MachineSettings["memory_mib"] != int64(512) {
		t.Fatalf("a refused value changed the settings: %+v", s.MachineSettings)
	}
}
