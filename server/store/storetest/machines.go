package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

func libvirtPlatform(env, name string) record.Platform {
	return record.Platform{Env: env, Name: name, Driver: record.DriverLibvirt, Agent: "hv1",
		Settings: map[string]any{"memory_mib": int64(2048)}, Templates: map[string]string{"domain": "<domain/>"}}
}

func netbootDistribution(env, name string) record.Distribution {
	return record.Distribution{Env: env, Name: name, Kind: record.DistNetboot, Kernel: "/boot/vmlinuz", Initrd: "/boot/initrd",
		Cmdline: "console=ttyS0", InstallFormat: record.InstallCloudInit, Install: "#cloud-config\n",
		Params:   []record.Param{{Name: "disk", Type: record.ParamInt, Default: 20, Min: 1, Max: 100, Doc: "disk"}, {Name: "locale", Type: record.ParamString, Doc: "locale"}},
		Settings: map[string]any{"locale": "en_GB"}}
}

// mustMachineBase stores platform p1 and distribution d1 in env.
func mustMachineBase(t *testing.T, s store.Store, env string) {
	t.Helper()
	if _, err := s.PutPlatform(ctx, libvirtPlatform(env, "p1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutDistribution(ctx, netbootDistribution(env, "d1")); err != nil {
		t.Fatal(err)
	}
}

func mustHost(t *testing.T, s store.Store, env, name string) record.Host {
	t.Helper()
	h, err := s.CreateHost(ctx, record.Host{Env: env, Name: name, Platform: "p1", Distribution: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func testPlatforms(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	got, err := s.PutPlatform(ctx, libvirtPlatform("prod", "p1"))
	if err != nil {
		t.Fatal(err)
	}
	// The driver's defaults are filled in, the given settings kept.
	want := map[string]any{"uri": "qemu:///system", "network": "user", "pool": "default", "domain_type": "qemu",
		"memory_mib": int64(2048), "cpus": int64(1), "disk_gib": int64(8), "broker": "amqp://10.0.2.2:5672/",
		"log_dir": "/var/log/libvirt/qemu"}
	if !reflect.DeepEqual(got.Settings, want) || got.CreatedAt.IsZero() || got.UpdatedAt.IsZero() {
		t.Fatalf("stored platform %+v, want settings %v and its times", got, want)
	}
	read, err := s.GetPlatform(ctx, "prod", "p1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(read, got) {
		t.Fatalf("read back %+v, want %+v", read, got)
	}

	// Replaced: the new settings, the creation time kept.
	p := libvirtPlatform("prod", "p1")
	p.Agent, p.Settings, p.Templates, p.Discovered = "hv2", map[string]any{"cpus": 4}, nil, true
	again, err := s.PutPlatform(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if again.Agent != "hv2" || again.Settings["cpus"] != int64(4) || again.Settings["memory_mib"] != int64(1024) || again.Templates != nil ||
		!again.Discovered || !again.CreatedAt.Equal(got.CreatedAt) {
		t.Fatalf("replaced platform %+v (first stored %+v)", again, got)
	}
	if _, err := s.PutPlatform(ctx, record.Platform{Env: "prod", Name: "pxe", Driver: record.DriverPXE, Agent: "boot", Settings: map[string]any{"tftp_root": "/srv/tftp"}}); err != nil {
		t.Fatal(err)
	}
	if list, err := s.ListPlatforms(ctx, "prod"); err != nil || len(list) != 2 || list[0].Name != "p1" || list[1].Name != "pxe" {
		t.Fatalf("list: %+v (%v), want p1 and pxe", list, err)
	}

	refused := []struct {
		name  string
		p     record.Platform
		want  error
		field string
	}{
		{"unknown driver", record.Platform{Env: "prod", Name: "x", Driver: "vmware", Agent: "hv1"}, model.ErrInvalid, "driver"},
		{"no agent", record.Platform{Env: "prod", Name: "x", Driver: record.DriverLibvirt}, model.ErrInvalid, "agent"},
		{"unknown setting", record.Platform{Env: "prod", Name: "x", Driver: record.DriverLibvirt, Agent: "hv1", Settings: map[string]any{"colour": "red"}}, model.ErrInvalid, "settings.colour"},
		{"setting of the wrong type", record.Platform{Env: "prod", Name: "x", Driver: record.DriverLibvirt, Agent: "hv1", Settings: map[string]any{"cpus": "four"}}, model.ErrInvalid, "settings.cpus"},
		{"no name", record.Platform{Env: "prod", Driver: record.DriverLibvirt, Agent: "hv1"}, model.ErrInvalid, "platform"},
		{"unknown environment", libvirtPlatform("nope", "p1"), model.ErrNotFound, "nope"},
	}
	for _, tt := range refused {
		_, err := s.PutPlatform(ctx, tt.p)
		if !errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), tt.field) {
			t.Errorf("%s: got %v, want %v naming %s", tt.name, err, tt.want, tt.field)
		}
	}
	if _, err := s.GetPlatform(ctx, "prod", "x"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a refused platform: got %v, want ErrNotFound", err)
	}

	if err := s.DeletePlatform(ctx, "prod", "pxe"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePlatform(ctx, "prod", "pxe"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("deleted twice: got %v, want ErrNotFound", err)
	}
}

func testDistributions(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	got, err := s.PutDistribution(ctx, netbootDistribution("prod", "d1"))
	if err != nil {
		t.Fatal(err)
	}
	// The parameters' defaults are filled in, with their bounds kept.
	if want := map[string]any{"disk": int64(20), "locale": "en_GB"}; !reflect.DeepEqual(got.Settings, want) {
		t.Fatalf("settings %v, want %v", got.Settings, want)
	}
	read, err := s.GetDistribution(ctx, "prod", "d1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(read, got) {
		t.Fatalf("read back %+v, want %+v", read, got)
	}
	if read.Params[0].Min != 1 || read.Params[0].Max != 100 || read.Params[0].Default != int64(20) {
		t.Fatalf("parameter read back as %+v, want its default and bounds", read.Params[0])
	}

	img := record.Distribution{Env: "prod", Name: "debian", Kind: record.DistImage, Images: map[string]string{"p1": "/images/debian.qcow2"}}
	if got, err = s.PutDistribution(ctx, img); err != nil || got.Images["p1"] != "/images/debian.qcow2" || got.Kernel != "" {
		t.Fatalf("image distribution stored as %+v (%v)", got, err)
	}
	// Replaced by a netboot one.
	nb := netbootDistribution("prod", "debian")
	nb.InstallFormat, nb.Install, nb.Params, nb.Settings = "", "", nil, nil
	if got, err = s.PutDistribution(ctx, nb); err != nil || got.Kind != record.DistNetboot || got.Images != nil || got.InstallFormat != record.InstallNone || got.Params != nil {
		t.Fatalf("replaced distribution %+v (%v)", got, err)
	}
	if list, err := s.ListDistributions(ctx, "prod"); err != nil || len(list) != 2 || list[0].Name != "d1" || list[1].Name != "debian" {
		t.Fatalf("list: %+v (%v), want d1 and debian", list, err)
	}

	refused := []struct {
		name  string
		d     record.Distribution
		field string
	}{
		{"unknown kind", record.Distribution{Env: "prod", Name: "x", Kind: "iso"}, "kind"},
		{"netboot without kernel", record.Distribution{Env: "prod", Name: "x", Kind: record.DistNetboot, Initrd: "i"}, "kernel"},
		{"install template missing", record.Distribution{Env: "prod", Name: "x", Kind: record.DistNetboot, Kernel: "k", Initrd: "i", InstallFormat: record.InstallPreseed}, "install"},
		{"image without images", record.Distribution{Env: "prod", Name: "x", Kind: record.DistImage}, "images"},
		{"setting out of range", func() record.Distribution {
			d := netbootDistribution("prod", "x")
			d.Settings = map[string]any{"disk": 1000}
			return d
		}(), "settings.disk"},
	}
	for _, tt := range refused {
		_, err := s.PutDistribution(ctx, tt.d)
		if !errors.Is(err, model.ErrInvalid) || !strings.Contains(fmt.Sprint(err), tt.field) {
			t.Errorf("%s: got %v, want ErrInvalid naming %s", tt.name, err, tt.field)
		}
	}
	if _, err := s.PutDistribution(ctx, netbootDistribution("nope", "d1")); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("unknown environment: got %v, want ErrNotFound", err)
	}

	if err := s.DeleteDistribution(ctx, "prod", "debian"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDistribution(ctx, "prod", "debian"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("deleted twice: got %v, want ErrNotFound", err)
	}
}

func testHosts(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "dev")
	mustMachineBase(t, s, "prod")
	h := record.Host{Env: "prod", Name: "web1", Platform: "p1", Distribution: "d1", Applications: []string{"web"},
		Labels: map[string]string{"role": "web"}, Settings: map[string]any{"cpus": int64(2)}}
	got, err := s.CreateHost(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != record.HostDefined || got.StateSince.IsZero() || got.CreatedAt.IsZero() || got.Reason != "" || got.Instance != "" {
		t.Fatalf("new host %+v, want defined since now", got)
	}
	read, err := s.GetHost(ctx, "prod", "web1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(read, got) || !reflect.DeepEqual(read.Applications, h.Applications) || !reflect.DeepEqual(read.Labels, h.Labels) ||
		!reflect.DeepEqual(read.Settings, h.Settings) {
		t.Fatalf("read back %+v, want %+v", read, got)
	}
	if _, err := s.CreateHost(ctx, h); !errors.Is(err, model.ErrExists) {
		t.Fatalf("created twice: got %v, want ErrExists", err)
	}
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	failed, err := s.CreateHost(ctx, record.Host{Env: "prod", Name: "db1", Platform: "p1", Distribution: "d1", State: record.HostFailed, Reason: "timed out", StateSince: since})
	if err != nil || failed.State != record.HostFailed || failed.Reason != "timed out" || !failed.StateSince.Equal(since) {
		t.Fatalf("host created failed: %+v (%v)", failed, err)
	}
	if list, err := s.ListHosts(ctx, "prod"); err != nil || len(list) != 2 || list[0].Name != "db1" || list[1].Name != "web1" {
		t.Fatalf("list: %+v (%v), want db1 and web1", list, err)
	}

	refused := []struct {
		name  string
		h     record.Host
		want  error
		field string
	}{
		{"bad name", record.Host{Env: "prod", Name: "Web 1", Platform: "p1", Distribution: "d1"}, model.ErrInvalid, "name"},
		{"no platform", record.Host{Env: "prod", Name: "x", Distribution: "d1"}, model.ErrInvalid, "platform"},
		{"bad application", record.Host{Env: "prod", Name: "x", Platform: "p1", Distribution: "d1", Applications: []string{"a b"}}, model.ErrInvalid, "applications[0]"},
		{"unknown state", record.Host{Env: "prod", Name: "x", Platform: "p1", Distribution: "d1", State: "lost"}, model.ErrInvalid, "state"},
		{"unknown platform", record.Host{Env: "prod", Name: "x", Platform: "p9", Distribution: "d1"}, model.ErrNotFound, "platform \"p9\""},
		{"unknown distribution", record.Host{Env: "prod", Name: "x", Platform: "p1", Distribution: "d9"}, model.ErrNotFound, "distribution \"d9\""},
		{"another environment's platform", record.Host{Env: "dev", Name: "x", Platform: "p1", Distribution: "d1"}, model.ErrNotFound, "platform \"p1\""},
		{"unknown environment", record.Host{Env: "nope", Name: "x", Platform: "p1", Distribution: "d1"}, model.ErrNotFound, "nope"},
	}
	for _, tt := range refused {
		_, err := s.CreateHost(ctx, tt.h)
		if !errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), tt.field) {
			t.Errorf("%s: got %v, want %v naming %s", tt.name, err, tt.want, tt.field)
		}
	}

	// A platform or distribution a host uses stays.
	if err := s.DeletePlatform(ctx, "prod", "p1"); !errors.Is(err, model.ErrConflict) || !strings.Contains(err.Error(), "db1") {
		t.Fatalf("delete a platform in use: got %v, want ErrConflict naming host db1", err)
	}
	if err := s.DeleteDistribution(ctx, "prod", "d1"); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("delete a distribution in use: got %v, want ErrConflict", err)
	}
	if _, err := s.GetPlatform(ctx, "prod", "p1"); err != nil {
		t.Fatalf("the platform in use: %v", err)
	}
	for _, name := range []string{"web1", "db1"} {
		if err := s.DeleteHost(ctx, "prod", name); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteHost(ctx, "prod", "web1"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("deleted twice: got %v, want ErrNotFound", err)
	}
	if err := s.DeletePlatform(ctx, "prod", "p1"); err != nil {
		t.Fatalf("delete a platform no host uses: %v", err)
	}
	if err := s.DeleteDistribution(ctx, "prod", "d1"); err != nil {
		t.Fatalf("delete a distribution no host uses: %v", err)
	}
}

func testHostMoves(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustMachineBase(t, s, "prod")
	h := mustHost(t, s, "prod", "web1")
	steps := []struct {
		from     record.HostState
		event    record.HostEvent
		reason   string
		instance string
		want     record.HostState
		instWant string
	}{
		{"", record.HostProvision, "", "", record.HostProvisioning, ""},
		{record.HostProvisioning, record.HostFail, "no call home in 10m", "dom-1", record.HostFailed, "dom-1"},
		{record.HostFailed, record.HostProvision, "", "", record.HostProvisioning, "dom-1"},
		{record.HostProvisioning, record.HostEnrolled, "", "dom-2", record.HostProvisioned, "dom-2"},
		{"", record.HostDestroy, "", "", record.HostDeprovisioning, "dom-2"},
		{record.HostDeprovisioning, record.HostDestroyed, "", "", record.HostDefined, ""},
	}
	last := h
	for _, st := range steps {
		got, err := s.MoveHost(ctx, "prod", "web1", st.from, st.event, st.reason, st.instance)
		if err != nil {
			t.Fatalf("%s from %s: %v", st.event, last.State, err)
		}
		if got.State != st.want || got.Reason != st.reason || got.Instance != st.instWant || got.StateSince.Before(last.StateSince) {
			t.Fatalf("%s from %s: %+v, want %s with reason %q and instance %q", st.event, last.State, got, st.want, st.reason, st.instWant)
		}
		if read, err := s.GetHost(ctx, "prod", "web1"); err != nil || !reflect.DeepEqual(read, got) {
			t.Fatalf("after %s: read back %+v (%v), want %+v", st.event, read, err, got)
		}
		last = got
	}

	// Refused moves change nothing.
	refused := []struct {
		name  string
		from  record.HostState
		event record.HostEvent
		want  error
	}{
		{"enrolled while defined", "", record.HostEnrolled, model.ErrConflict},
		{"destroyed while defined", "", record.HostDestroyed, model.ErrConflict},
		{"from a state it is not in", record.HostFailed, record.HostProvision, model.ErrConflict},
		{"unknown event", "", "explode", model.ErrConflict},
	}
	for _, tt := range refused {
		if _, err := s.MoveHost(ctx, "prod", "web1", tt.from, tt.event, "why", "dom-9"); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	if read, err := s.GetHost(ctx, "prod", "web1"); err != nil || !reflect.DeepEqual(read, last) {
		t.Fatalf("after refused moves: %+v (%v), want it unchanged: %+v", read, err, last)
	}

	// The second of two moves from one state, taken one after the other,
	// finds the host moved on: refused, though its state would allow it.
	if _, err := s.MoveHost(ctx, "prod", "web1", record.HostDefined, record.HostProvision, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MoveHost(ctx, "prod", "web1", record.HostProvisioning, record.HostEnrolled, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MoveHost(ctx, "prod", "web1", record.HostProvisioning, record.HostFail, "late", ""); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("fail from provisioning, once provisioned: got %v, want ErrConflict", err)
	}
	if read, err := s.GetHost(ctx, "prod", "web1"); err != nil || read.State != record.HostProvisioned || read.Reason != "" {
		t.Fatalf("after the late move: %+v (%v), want it provisioned", read, err)
	}
	if _, err := s.MoveHost(ctx, "prod", "nope", "", record.HostProvision, "", ""); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("move an unknown host: got %v, want ErrNotFound", err)
	}
	// A host enrolled before its machine was reported gets its instance
	// once; one that has an instance keeps it.
	read, _ := s.GetHost(ctx, "prod", "web1")
	want := read.Instance
	if want == "" {
		if ok, err := s.LinkHostInstance(ctx, "prod", "web1", "dom-late"); !ok || err != nil {
			t.Fatalf("link the instance of a host without one: %v, %v", ok, err)
		}
		want = "dom-late"
	}
	if ok, err := s.LinkHostInstance(ctx, "prod", "web1", "dom-other"); ok || err != nil {
		t.Fatalf("link another instance to a host that has one: %v, %v; want nothing done", ok, err)
	}
	if read, err := s.GetHost(ctx, "prod", "web1"); err != nil || read.Instance != want {
		t.Fatalf("after the links: %+v (%v), want instance %s", read, err, want)
	}
}

// testConcurrentHostMoves: the agent enrolling and the timeout failing
// one provisioning host at once: one wins, the other is refused, never
// both applied one after the other.
func testConcurrentHostMoves(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustMachineBase(t, s, "prod")
	for round := range 10 {
		name := fmt.Sprint("web", round)
		mustHost(t, s, "prod", name)
		if _, err := s.MoveHost(ctx, "prod", name, record.HostDefined, record.HostProvision, "", ""); err != nil {
			t.Fatal(err)
		}
		events := []record.HostEvent{record.HostEnrolled, record.HostFail}
		wants := []record.HostState{record.HostProvisioned, record.HostFailed}
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, ev := range events {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = s.MoveHost(ctx, "prod", name, record.HostProvisioning, ev, string(ev), "")
			}()
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Fatalf("round %d: both moves applied", round)
			case !errors.Is(err, model.ErrConflict):
				t.Fatalf("round %d: %s: got %v, want ErrConflict or success", round, events[i], err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: neither move applied: %v", round, errs)
		}
		got, err := s.GetHost(ctx, "prod", name)
		if err != nil || got.State != wants[won] || got.Reason != string(events[won]) {
			t.Fatalf("round %d: %s won, host is %+v (%v), want %s", round, events[won], got, err, wants[won])
		}
	}
}

func testInstances(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustMachineBase(t, s, "prod")
	mustHost(t, s, "prod", "web1")
	booted := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	i := record.Instance{Env: "prod", ID: "dom-1", Platform: "p1", Host: "web1", Agent: "web1", Power: record.PowerRunning, BootedAt: &booted,
		Addresses: []string{"10.0.0.5", "fe80::1"}, Hardware: map[string]any{"cpus": int64(2), "model": "q35"}, Labels: map[string]string{"rack": "a"}}
	got, err := s.PutInstance(ctx, i)
	if err != nil {
		t.Fatal(err)
	}
	if got.SeenAt.IsZero() || got.BootedAt == nil || !got.BootedAt.Equal(booted) {
		t.Fatalf("stored instance %+v, want seen now and booted at %s", got, booted)
	}
	read, err := s.GetInstance(ctx, "prod", "dom-1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(read, got) || !reflect.DeepEqual(read.Hardware, i.Hardware) || !reflect.DeepEqual(read.Addresses, i.Addresses) {
		t.Fatalf("read back %+v, want %+v", read, got)
	}

	// Discovered: no host, power unknown until told.
	disc, err := s.PutInstance(ctx, record.Instance{Env: "prod", ID: "agent:stray"})
	if err != nil || disc.Power != record.PowerUnknown || disc.BootedAt != nil || disc.Host != "" {
		t.Fatalf("discovered instance %+v (%v), want power unknown", disc, err)
	}
	// One instance per host.
	claim := record.Instance{Env: "prod", ID: "agent:stray", Host: "web1"}
	if _, err := s.PutInstance(ctx, claim); !errors.Is(err, model.ErrConflict) || !strings.Contains(err.Error(), "dom-1") {
		t.Fatalf("a second instance of host web1: got %v, want ErrConflict naming dom-1", err)
	}
	if read, err := s.GetInstance(ctx, "prod", "agent:stray"); err != nil || read.Host != "" {
		t.Fatalf("the refused claim changed the instance: %+v (%v)", read, err)
	}
	// Replacing the host's own instance is no second claim.
	i.Power, i.BootedAt = record.PowerStopped, nil
	if got, err = s.PutInstance(ctx, i); err != nil || got.Power != record.PowerStopped || got.BootedAt != nil || got.Host != "web1" {
		t.Fatalf("replaced instance %+v (%v)", got, err)
	}
	if list, err := s.ListInstances(ctx, "prod"); err != nil || len(list) != 2 || list[0].ID != "agent:stray" || list[1].ID != "dom-1" {
		t.Fatalf("list: %+v (%v)", list, err)
	}

	refused := []struct {
		name  string
		i     record.Instance
		want  error
		field string
	}{
		{"no id", record.Instance{Env: "prod"}, model.ErrInvalid, "id"},
		{"unknown power", record.Instance{Env: "prod", ID: "x", Power: "warm"}, model.ErrInvalid, "power"},
		{"bad host", record.Instance{Env: "prod", ID: "x", Host: "a b"}, model.ErrInvalid, "host"},
		{"unknown environment", record.Instance{Env: "nope", ID: "x"}, model.ErrNotFound, "nope"},
	}
	for _, tt := range refused {
		_, err := s.PutInstance(ctx, tt.i)
		if !errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), tt.field) {
			t.Errorf("%s: got %v, want %v naming %s", tt.name, err, tt.want, tt.field)
		}
	}

	if err := s.DeleteInstance(ctx, "prod", "dom-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteInstance(ctx, "prod", "dom-1"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("deleted twice: got %v, want ErrNotFound", err)
	}
	// With dom-1 gone, the host is free for another.
	if _, err := s.PutInstance(ctx, claim); err != nil {
		t.Fatalf("claim a host whose instance went: %v", err)
	}
}

// testMachinesGoWithEnv: deleting an environment deletes its machines,
// and another environment's stay.
func testMachinesGoWithEnv(t *testing.T, s store.Store) {
	for _, env := range []string{"prod", "dev"} {
		mustEnv(t, s, env)
		mustMachineBase(t, s, env)
		mustHost(t, s, env, "web1")
		if _, err := s.PutInstance(ctx, record.Instance{Env: env, ID: "dom-1", Host: "web1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteEnv(ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	counts := func(env string) [4]int {
		p, err1 := s.ListPlatforms(ctx, env)
		d, err2 := s.ListDistributions(ctx, env)
		h, err3 := s.ListHosts(ctx, env)
		i, err4 := s.ListInstances(ctx, env)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			t.Fatal(err)
		}
		return [4]int{len(p), len(d), len(h), len(i)}
	}
	if got := counts("prod"); got != [4]int{} {
		t.Fatalf("after the environment went: %v platforms, distributions, hosts, instances; want none", got)
	}
	if got := counts("dev"); got != [4]int{1, 1, 1, 1} {
		t.Fatalf("another environment's: %v, want one of each", got)
	}
	// An environment made again with the name starts empty.
	mustEnv(t, s, "prod")
	mustMachineBase(t, s, "prod")
	if got := counts("prod"); got != [4]int{1, 1, 0, 0} {
		t.Fatalf("the environment made again: %v", got)
	}
}

// testMachinesDeclaredInModel: where a model declares a platform, a
// distribution or a host is kept with it, replaced with it, and cleared
// when an operator's record replaces the model's.
func testMachinesDeclaredInModel(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	p := libvirtPlatform("prod", "p1")
	p.DeclaredIn = "main.hcl:3"
	if got, err := s.PutPlatform(ctx, p); err != nil || got.DeclaredIn != "main.hcl:3" {
		t.Fatalf("platform declared in the model: %+v (%v)", got, err)
	}
	d := netbootDistribution("prod", "d1")
	d.DeclaredIn = "machines/d.hcl:12"
	if got, err := s.PutDistribution(ctx, d); err != nil || got.DeclaredIn != "machines/d.hcl:12" {
		t.Fatalf("distribution declared in the model: %+v (%v)", got, err)
	}
	h, err := s.CreateHost(ctx, record.Host{Env: "prod", Name: "web1", Platform: "p1", Distribution: "d1", DeclaredIn: "main.hcl:20"})
	if err != nil || h.DeclaredIn != "main.hcl:20" {
		t.Fatalf("host declared in the model: %+v (%v)", h, err)
	}
	if read, err := s.GetPlatform(ctx, "prod", "p1"); err != nil || read.DeclaredIn != "main.hcl:3" {
		t.Fatalf("read back %+v (%v)", read, err)
	}
	if read, err := s.GetDistribution(ctx, "prod", "d1"); err != nil || read.DeclaredIn != "machines/d.hcl:12" {
		t.Fatalf("read back %+v (%v)", read, err)
	}
	if list, err := s.ListHosts(ctx, "prod"); err != nil || len(list) != 1 || list[0].DeclaredIn != "main.hcl:20" {
		t.Fatalf("listed %+v (%v)", list, err)
	}
	p.DeclaredIn = ""
	if got, err := s.PutPlatform(ctx, p); err != nil || got.DeclaredIn != "" {
		t.Fatalf("platform replaced by an operator's: %+v (%v), want no longer the model's", got, err)
	}
	d.DeclaredIn = "main.hcl:\x07"
	if _, err := s.PutDistribution(ctx, d); !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "declared_in") {
		t.Fatalf("a control character where it is declared: %v, want ErrInvalid naming declared_in", err)
	}
}

// testUpdateHost: a host's blueprint changes in place, its state and
// machine untouched; a host with a machine keeps its platform and
// distribution.
func testUpdateHost(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustMachineBase(t, s, "prod")
	if _, err := s.PutPlatform(ctx, libvirtPlatform("prod", "p2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutDistribution(ctx, netbootDistribution("prod", "d2")); err != nil {
		t.Fatal(err)
	}
	was := mustHost(t, s, "prod", "web1")
	change := record.Host{Env: "prod", Name: "web1", Platform: "p2", Distribution: "d2", Applications: []string{"web", "ntp"},
		Labels: map[string]string{"role": "web"}, Settings: map[string]any{"cpus": int64(4)}, DeclaredIn: "main.hcl:7",
		State: record.HostProvisioned, Reason: "ignored", Instance: "ignored"}
	got, err := s.UpdateHost(ctx, change)
	if err != nil {
		t.Fatal(err)
	}
	if got.Platform != "p2" || got.Distribution != "d2" || !reflect.DeepEqual(got.Applications, change.Applications) ||
		!reflect.DeepEqual(got.Labels, change.Labels) || !reflect.DeepEqual(got.Settings, change.Settings) || got.DeclaredIn != "main.hcl:7" {
		t.Fatalf("updated host %+v, want %+v", got, change)
	}
	if got.State != record.HostDefined || got.Reason != "" || got.Instance != "" || !got.StateSince.Equal(was.StateSince) || !got.CreatedAt.Equal(was.CreatedAt) {
		t.Fatalf("updated host %+v: its state changed (was %+v)", got, was)
	}
	if read, err := s.GetHost(ctx, "prod", "web1"); err != nil || !reflect.DeepEqual(read, got) {
		t.Fatalf("read back %+v (%v), want %+v", read, err, got)
	}

	// With a machine: the platform and distribution stay, the rest changes.
	if _, err := s.MoveHost(ctx, "prod", "web1", "", record.HostProvision, "", "dom-1"); err != nil {
		t.Fatal(err)
	}
	change = record.Host{Env: "prod", Name: "web1", Platform: "p1", Distribution: "d1", Settings: map[string]any{"cpus": int64(8)}}
	got, err = s.UpdateHost(ctx, change)
	if err != nil {
		t.Fatal(err)
	}
	if got.Platform != "p2" || got.Distribution != "d2" || got.Settings["cpus"] != int64(8) || got.Applications != nil || got.Labels != nil ||
		got.DeclaredIn != "" || got.State != record.HostProvisioning || got.Instance != "dom-1" {
		t.Fatalf("host with a machine updated to %+v: want its platform and distribution kept, the rest changed", got)
	}

	refused := []struct {
		name  string
		h     record.Host
		want  error
		field string
	}{
		{"unknown host", record.Host{Env: "prod", Name: "nope", Platform: "p1", Distribution: "d1"}, model.ErrNotFound, "nope"},
		{"bad application", record.Host{Env: "prod", Name: "web1", Platform: "p1", Distribution: "d1", Applications: []string{"a b"}}, model.ErrInvalid, "applications[0]"},
		{"unknown environment", record.Host{Env: "none", Name: "web1", Platform: "p1", Distribution: "d1"}, model.ErrNotFound, "none"},
	}
	for _, tt := range refused {
		if _, err := s.UpdateHost(ctx, tt.h); !errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), tt.field) {
			t.Errorf("%s: got %v, want %v naming %s", tt.name, err, tt.want, tt.field)
		}
	}
	other := mustHost(t, s, "prod", "db1")
	other.Platform = "p9"
	if _, err := s.UpdateHost(ctx, other); !errors.Is(err, model.ErrNotFound) || !strings.Contains(err.Error(), `platform "p9"`) {
		t.Fatalf("a defined host moved to an unknown platform: %v, want ErrNotFound naming it", err)
	}
	if read, err := s.GetHost(ctx, "prod", "db1"); err != nil || read.Platform != "p1" {
		t.Fatalf("after the refused update: %+v (%v), want it unchanged", read, err)
	}
}

// testApplications: an environment's applications are replaced at once,
// as given; a bad one or one named twice changes nothing; they go with
// the environment.
func testApplications(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	apps := []record.Application{
		{Env: "prod", Name: "web", MachineSettings: map[string]any{"memory_mib": 2048, "locale": "fr_BE"}, DeclaredIn: "main.hcl:3"},
		{Env: "prod", Name: "db", MachineSettings: map[string]any{"disk_gib": 40}, DeclaredIn: "db.hcl:1"},
	}
	got, err := s.SetApplications(ctx, "prod", apps)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "db" || got[1].Name != "web" || got[1].MachineSettings["memory_mib"] != int64(2048) ||
		got[1].MachineSettings["locale"] != "fr_BE" || got[0].DeclaredIn != "db.hcl:1" || got[0].UpdatedAt.IsZero() {
		t.Fatalf("stored %+v, want db and web as given, by name", got)
	}
	read, err := s.ListApplications(ctx, "prod")
	if err != nil || !reflect.DeepEqual(read, got) {
		t.Fatalf("read back %+v (%v), want %+v", read, err, got)
	}

	for _, bad := range [][]record.Application{
		{{Env: "prod", Name: "a b"}},
		{{Env: "prod", Name: "web"}, {Env: "prod", Name: "web"}},
	} {
		if _, err := s.SetApplications(ctx, "prod", bad); !errors.Is(err, model.ErrInvalid) {
			t.Errorf("set %+v: %v, want ErrInvalid", bad, err)
		}
	}
	if read, _ := s.ListApplications(ctx, "prod"); !reflect.DeepEqual(read, got) {
		t.Fatalf("a refused set changed the applications: %+v", read)
	}

	// Replaced: what is not given again is gone.
	if got, err = s.SetApplications(ctx, "prod", apps[1:]); err != nil || len(got) != 1 || got[0].Name != "db" {
		t.Fatalf("replaced: %+v (%v), want db alone", got, err)
	}
	if got, err = s.SetApplications(ctx, "prod", nil); err != nil || len(got) != 0 {
		t.Fatalf("emptied: %+v (%v)", got, err)
	}
	if _, err := s.SetApplications(ctx, "nowhere", apps); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("applications of no environment: %v, want ErrNotFound", err)
	}

	if _, err := s.SetApplications(ctx, "prod", apps); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteEnv(ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	mustEnv(t, s, "prod")
	if read, err := s.ListApplications(ctx, "prod"); err != nil || len(read) != 0 {
		t.Fatalf("a new environment of an old one's name has its applications: %+v (%v)", read, err)
	}
}
