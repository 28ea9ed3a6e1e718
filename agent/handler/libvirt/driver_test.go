package libvirt

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/testenv"
)

const install = "install libvirt-daemon-system, libvirt-daemon-driver-qemu, qemu-system-x86 and qemu-utils, and start libvirtd as root (virtlogd -d; libvirtd -d)"

// testDriver connects to the machine's libvirtd, or skips (fails where
// tests must run) naming what to install.
func testDriver(t *testing.T) *Driver {
	t.Helper()
	_, err := os.Stat(defaultSocket)
	testenv.Need(t, err == nil, "no libvirtd socket at "+defaultSocket+": "+install)
	_, err = exec.LookPath("qemu-img")
	testenv.Need(t, err == nil, "no qemu-img (libvirt makes qcow2 volumes with it): "+install)
	d, err := New(DefaultURI)
	testenv.Need(t, err == nil, fmt.Sprintf("%v: %s", err, install))
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// bootFiles are the machine's own kernel and initrd: the guest boots far
// enough to run.
func bootFiles(t *testing.T) (kernel, initrd string) {
	t.Helper()
	kernels, _ := filepath.Glob("/boot/vmlinuz-*")
	for _, k := range slices.Backward(kernels) {
		i := "/boot/initrd.img-" + strings.TrimPrefix(filepath.Base(k), "vmlinuz-")
		if _, err := os.Stat(i); err == nil {
			return k, i
		}
	}
	testenv.Need(t, false, "no kernel and initrd in /boot (/boot/vmlinuz-*, /boot/initrd.img-*): install linux-image-amd64")
	return "", ""
}

// sharedDir is a directory of the test's that QEMU (running as another
// user) can reach.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func unique(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// testPool makes a storage pool of the test's own, a directory removed
// with its volumes at the end.
func testPool(t *testing.T, d *Driver) string {
	t.Helper()
	name := unique("tether-test-")
	def := libvirtxml.StoragePool{Type: "dir", Name: name, Target: &libvirtxml.StoragePoolTarget{Path: sharedDir(t)}}
	doc, err := def.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		pool, err := l.StoragePoolDefineXML(doc, 0)
		if err != nil {
			return err
		}
		return l.StoragePoolCreate(pool, lv.StoragePoolCreateNormal)
	})
	if err != nil {
		t.Fatalf("make pool %s: %v", name, err)
	}
	t.Cleanup(func() {
		err := d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
			pool, err := l.StoragePoolLookupByName(name)
			if err != nil {
				return err
			}
			vols, _, err := l.StoragePoolListAllVolumes(pool, 1, 0)
			if err != nil {
				return err
			}
			for _, v := range vols {
				if err := l.StorageVolDelete(v, lv.StorageVolDeleteNormal); err != nil {
					return err
				}
			}
			if err := l.StoragePoolDestroy(pool); err != nil {
				return err
			}
			return l.StoragePoolUndefine(pool)
		})
		if err != nil {
			t.Errorf("remove pool %s: %v", name, err)
		}
	})
	return name
}

// addVolume makes an empty volume in a pool.
func addVolume(t *testing.T, d *Driver, pool, name, format string, bytes uint64) {
	t.Helper()
	def := libvirtxml.StorageVolume{Name: name, Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: bytes},
		Target: &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}}}
	doc, err := def.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	err = d.call(context.Background(), callTimeout, func(l *lv.Libvirt) error {
		p, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		_, err = l.StorageVolCreateXML(p, doc, 0)
		return err
	})
	if err != nil {
		t.Fatalf("make volume %s in pool %s: %v", name, pool, err)
	}
}

// volumes lists the volumes of a pool.
func volumes(t *testing.T, d *Driver, pool string) []string {
	t.Helper()
	var names []string
	err := d.call(context.Background(), callTimeout, func(l *lv.Libvirt) error {
		p, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		if err := l.StoragePoolRefresh(p, 0); err != nil {
			return err
		}
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		for _, v := range vols {
			names = append(names, v.Name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// testSpec is a small machine booting the host's kernel, in pool, its
// serial console in a directory of the test's. The numbers are as JSON
// gives them.
func testSpec(t *testing.T, pool string) model.MachineSpec {
	t.Helper()
	kernel, initrd := bootFiles(t)
	name := unique("tether-test-")
	return model.MachineSpec{
		Host: "host-" + name, Name: name,
		Settings: map[string]any{"pool": pool, "memory_mib": float64(192), "cpus": float64(1), "disk_gib": float64(1), "log_dir": sharedDir(t)},
		Boot:     model.MachineBoot{Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0"},
	}
}

// destroyAtEnd destroys the machine when the test ends, whatever happened,
// and removes the log libvirt keeps of its QEMU.
func destroyAtEnd(t *testing.T, d *Driver, name string) {
	t.Cleanup(func() {
		if err := d.Destroy(context.Background(), name); err != nil {
			t.Errorf("destroy %s: %v", name, err)
		}
		if err := os.Remove(filepath.Join(DefaultLogDir, name+".log")); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Error(err)
		}
	})
}

func inventoried(t *testing.T, d *Driver, name string) (model.InstanceState, bool) {
	t.Helper()
	_, insts, err := d.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range insts {
		if in.Name == name {
			return in, true
		}
	}
	return model.InstanceState{}, false
}

func TestMachineLifecycle(t *testing.T) {
	d := testDriver(t)
	ctx := context.Background()
	pool := testPool(t, d)
	spec := testSpec(t, pool)
	destroyAtEnd(t, d, spec.Name)

	st, err := d.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if st.Power != "running" || st.Name != spec.Name || st.Host != spec.Host || st.ID == "" || st.BootedAt == nil {
		t.Fatalf("provisioned %+v, want %s running, from host %s, with an ID and a boot time", st, spec.Name, spec.Host)
	}
	wantHW := map[string]any{"memory_mib": int64(192), "cpus": 1, "disk_gib": int64(1)}
	for k, v := range wantHW {
		if st.Hardware[k] != v {
			t.Errorf("hardware %s: got %v (%T), want %v", k, st.Hardware[k], st.Hardware[k], v)
		}
	}
	if got := volumes(t, d, pool); !slices.Equal(got, []string{spec.Name + ".qcow2"}) {
		t.Errorf("volumes %v, want the machine's disk", got)
	}

	// The host is on the domain, for Inventory to read back.
	p, insts, err := d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Driver != "libvirt" || p.URI != DefaultURI || p.Version == "" || p.Hostname == "" || p.CPUs < 1 || p.MemoryMiB < 1 {
		t.Errorf("platform %+v", p)
	}
	i := slices.IndexFunc(insts, func(in model.InstanceState) bool { return in.ID == st.ID })
	if i < 0 {
		t.Fatalf("inventory %+v: no %s", insts, st.ID)
	}
	if in := insts[i]; in.Host != spec.Host || in.Power != "running" || in.BootedAt == nil || !in.BootedAt.Equal(*st.BootedAt) {
		t.Errorf("inventory: %+v, want %s running from host %s, booted at %v", in, spec.Name, spec.Host, st.BootedAt)
	}

	// The guest writes its console to the serial log.
	serial := filepath.Join(spec.Settings["log_dir"].(string), spec.Name+"-serial.log")
	waitFor(t, 90*time.Second, "the kernel's banner in "+serial, func() bool {
		b, _ := os.ReadFile(serial)
		return strings.Contains(string(b), "Linux version")
	})

	// Provisioning again reports the machine; from another host, refuses.
	again, err := d.Provision(ctx, spec)
	if err != nil || again.ID != st.ID || again.Power != "running" {
		t.Errorf("provision again: %+v, %v; want %s as it is", again, err, st.ID)
	}
	other := spec
	other.Host = "someone-else"
	if _, err := d.Provision(ctx, other); err == nil || !strings.Contains(err.Error(), "made from host "+spec.Host) {
		t.Errorf("provision from another host: %v, want a refusal naming host %s", err, spec.Host)
	}

	// The stock initrd ignores ACPI: the stop forces it off after the grace.
	st, err = d.Control(ctx, spec.Name, model.MachineStop, time.Second)
	if err != nil || st.Power != "stopped" || st.BootedAt != nil {
		t.Fatalf("stop: %+v, %v; want stopped", st, err)
	}
	if st, err = d.Control(ctx, spec.Name, model.MachineStop, time.Second); err != nil || st.Power != "stopped" {
		t.Errorf("stop again: %+v, %v; want stopped", st, err)
	}
	if in, _ := inventoried(t, d, spec.Name); in.Power != "stopped" || in.Host != spec.Host {
		t.Errorf("inventory after stop: %+v, want stopped, from host %s", in, spec.Host)
	}

	started, err := d.Control(ctx, spec.Name, model.MachineStart, 0)
	if err != nil || started.Power != "running" || started.BootedAt == nil || !started.BootedAt.After(*again.BootedAt) {
		t.Fatalf("start: %+v, %v; want running, booted after %v", started, err, again.BootedAt)
	}

	// A reboot, by ID: stopped and started, so it boots anew.
	rebooted, err := d.Control(ctx, st.ID, model.MachineReboot, time.Second)
	if err != nil || rebooted.Power != "running" || rebooted.BootedAt == nil || !rebooted.BootedAt.After(*started.BootedAt) {
		t.Fatalf("reboot: %+v, %v; want running, booted after %v", rebooted, err, started.BootedAt)
	}

	if _, err := d.Control(ctx, spec.Name, model.MachineDestroy, time.Second); err == nil {
		t.Error("Control destroy: no error, want one sending it to Destroy")
	}

	if err := d.Destroy(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	if _, found := inventoried(t, d, spec.Name); found {
		t.Error("the domain is still there after destroy")
	}
	if got := volumes(t, d, pool); len(got) != 0 {
		t.Errorf("volumes %v after destroy, want none", got)
	}
	if _, err := os.Stat(serial); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serial log after destroy: %v, want it gone", err)
	}
	if _, err := d.Control(ctx, spec.Name, model.MachineStart, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("start after destroy: %v, want ErrNotFound", err)
	}
	if err := d.Destroy(ctx, spec.Name); err != nil {
		t.Errorf("destroy again: %v, want nil", err)
	}
}

func TestProvisionFailureLeavesNothing(t *testing.T) {
	d := testDriver(t)
	pool := testPool(t, d)
	tests := []struct {
		name string
		edit func(*model.MachineSpec)
		want []string
	}{
		{"a template with an unknown field", func(s *model.MachineSpec) {
			s.Template = strings.Replace(DefaultTemplate(), "{{.CPUs}}", "{{.Cores}}", 1)
		}, []string{"template:", "unknown field .Cores"}},
		{"a template that is not a domain", func(s *model.MachineSpec) {
			s.Template = "<domain type='qemu'><name>{{.Name}}</name>"
		}, []string{"template:", "not a libvirt domain"}},
		{"a pool that is not there", func(s *model.MachineSpec) {
			s.Settings["pool"] = "tether-no-such-pool"
		}, []string{"pool: storage pool tether-no-such-pool not found on qemu:///system", "virsh pool-define-as"}},
		{"a domain libvirt refuses to define", func(s *model.MachineSpec) {
			s.Template = strings.Replace(DefaultTemplate(), "<vcpu>{{.CPUs}}</vcpu>", "<vcpu>{{.CPUs}}</vcpu><no-such-element/>", 1)
		}, []string{"define:"}},
		{"a kernel that is not there", func(s *model.MachineSpec) {
			s.Boot.Kernel = "/nonexistent/vmlinuz"
		}, []string{"start:", "/nonexistent/vmlinuz"}},
		{"a seed file no cdrom can hold", func(s *model.MachineSpec) {
			s.Seed = map[string]string{"user-data": "#cloud-config\n", "User Data": "x"}
		}, []string{"seed: iso 9660 file name \"User Data\""}},
		{"a template without the seed's cdrom", func(s *model.MachineSpec) {
			s.Seed = map[string]string{"user-data": "#cloud-config\n"}
			s.Template = strings.Replace(DefaultTemplate(), "{{- if .SeedPath}}", "{{- if false}}", 1)
		}, []string{"domain template: the machine has a cloud-init seed", "{{.SeedPath}}"}},
		{"a domain libvirt refuses to define, after the seed is made", func(s *model.MachineSpec) {
			s.Seed = map[string]string{"user-data": "#cloud-config\n"}
			s.Template = strings.Replace(DefaultTemplate(), "<vcpu>{{.CPUs}}</vcpu>", "<vcpu>{{.CPUs}}</vcpu><no-such-element/>", 1)
		}, []string{"define:"}},
		{"a boot file outside the TFTP directory", func(s *model.MachineSpec) {
			s.Settings["tftp_root"] = sharedDir(t)
			s.Files = map[string]string{"boot.ipxe": "#!ipxe\n", "../escape": "x"}
		}, []string{"files:", "../escape"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := testSpec(t, pool)
			tt.edit(&spec)
			destroyAtEnd(t, d, spec.Name)
			_, err := d.Provision(context.Background(), spec)
			if err == nil {
				t.Fatal("provisioned, want an error")
			}
			t.Log(err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q: want it to say %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "provision "+spec.Name+": ") {
				t.Errorf("error %q: want it to name the machine", err)
			}
			if _, found, err := d.find(context.Background(), spec.Name); err != nil || found {
				t.Errorf("domain %s after the failure: %v, %v; want none", spec.Name, found, err)
			}
			if got := volumes(t, d, pool); len(got) != 0 {
				t.Errorf("volumes %v after the failure, want none", got)
			}
			if left, _ := os.ReadDir(spec.Settings["log_dir"].(string)); len(left) != 0 {
				t.Errorf("files %v in the log directory after the failure, want none", left)
			}
			if root, ok := spec.Settings["tftp_root"].(string); ok {
				if left, _ := os.ReadDir(root); len(left) != 0 {
					t.Errorf("files %v under the TFTP root after the failure, want none", left)
				}
			}
		})
	}
}

func TestProvisionFromGoldImage(t *testing.T) {
	d := testDriver(t)
	ctx := context.Background()
	pool := testPool(t, d)
	addVolume(t, d, pool, "gold.qcow2", "qcow2", 1<<30)

	spec := testSpec(t, pool)
	spec.Boot = model.MachineBoot{Image: "gold.qcow2"}
	spec.Settings["disk_gib"] = int64(2)
	destroyAtEnd(t, d, spec.Name)
	st, err := d.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if st.Power != "running" || st.Hardware["disk_gib"] != int64(2) {
		t.Errorf("provisioned %+v, want running with a disk of 2 GiB", st)
	}
	if got, want := volumes(t, d, pool), []string{"gold.qcow2", spec.Name + ".qcow2"}; !slices.Equal(got, want) {
		t.Errorf("volumes %v, want %v", got, want)
	}
	if err := d.Destroy(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	if got := volumes(t, d, pool); !slices.Equal(got, []string{"gold.qcow2"}) {
		t.Errorf("volumes %v after destroy, want the gold image only", got)
	}

	missing := testSpec(t, pool)
	missing.Boot = model.MachineBoot{Image: "no-such.qcow2"}
	if _, err := d.Provision(ctx, missing); err == nil || !strings.Contains(err.Error(), "volume: gold image no-such.qcow2 is not a volume of storage pool "+pool) {
		t.Errorf("provision from a missing image: %v, want an error naming it", err)
	}
}

// A machine with a cloud-init seed has it as a read-only cdrom of a
// volume in its pool: an ISO 9660 image labelled cidata holding its
// user-data and a meta-data naming it. Destroy removes the volume, also
// from a driver that did not make it (an agent restarted).
func TestProvisionWithSeed(t *testing.T) {
	d := testDriver(t)
	ctx := context.Background()
	pool := testPool(t, d)
	spec := testSpec(t, pool)
	userData := "#cloud-config\nhostname: web-1\n"
	spec.Seed = map[string]string{"user-data": userData}
	destroyAtEnd(t, d, spec.Name)

	st, err := d.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if st.Power != "running" {
		t.Errorf("provisioned %+v, want running", st)
	}
	seedVol := spec.Name + ".seed.iso"
	if got, want := volumes(t, d, pool), []string{spec.Name + ".qcow2", seedVol}; !slices.Equal(got, want) {
		t.Fatalf("volumes %v, want %v", got, want)
	}

	var img bytes.Buffer
	var seedPath, doc string
	var meta *machineMeta
	err = d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		p, err := l.StoragePoolLookupByName(pool)
		if err != nil {
			return err
		}
		vol, err := l.StorageVolLookupByName(p, seedVol)
		if err != nil {
			return err
		}
		if seedPath, err = l.StorageVolGetPath(vol); err != nil {
			return err
		}
		if err := l.StorageVolDownload(vol, &img, 0, 0, 0); err != nil {
			return err
		}
		dom, err := l.DomainLookupByName(spec.Name)
		if err != nil {
			return err
		}
		if doc, err = l.DomainGetXMLDesc(dom, 0); err != nil {
			return err
		}
		meta, err = domainMeta(l, dom)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := readISO(img.Bytes())
	if err != nil {
		t.Fatalf("the seed volume (%d bytes): %v", img.Len(), err)
	}
	wantMeta := "instance-id: \"" + spec.Name + "\"\nlocal-hostname: \"" + spec.Host + "\"\n"
	if v.label != "cidata" || len(v.files) != 2 || string(v.files["user-data"]) != userData || string(v.files["meta-data"]) != wantMeta {
		t.Errorf("seed labelled %q with %v (user-data %q, meta-data %q); want cidata with user-data %q and meta-data %q",
			v.label, keys(v.files), v.files["user-data"], v.files["meta-data"], userData, wantMeta)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(doc); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(dom.Devices.Disks, func(d libvirtxml.DomainDisk) bool { return d.Device == "cdrom" })
	if i < 0 {
		t.Fatalf("no cdrom in the domain:\n%s", doc)
	}
	if cd := dom.Devices.Disks[i]; cd.ReadOnly == nil || cd.Source == nil || cd.Source.File == nil || cd.Source.File.File != seedPath {
		t.Errorf("cdrom %+v, want a read-only one of %s", cd, seedPath)
	}
	if meta == nil || meta.Seed == nil || *meta.Seed != (metaVolume{Pool: pool, Name: seedVol}) {
		t.Errorf("domain metadata %+v, want the seed %s of pool %s recorded", meta, seedVol, pool)
	}

	// An agent restarted: a new driver finds the seed in the domain's
	// metadata.
	again, err := New(DefaultURI)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.Destroy(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	if got := volumes(t, d, pool); len(got) != 0 {
		t.Errorf("volumes %v after destroy, want none", got)
	}

	// A seed volume an earlier machine left is not taken: the provision
	// fails naming it, and the disk it made is removed.
	addVolume(t, d, pool, seedVol, "raw", 2048)
	_, err = d.Provision(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), "seed: volume "+seedVol+" is already in storage pool "+pool) {
		t.Errorf("provision beside a left seed: %v, want an error naming it", err)
	}
	if got := volumes(t, d, pool); !slices.Equal(got, []string{seedVol}) {
		t.Errorf("volumes %v after the failure, want the left seed only", got)
	}
}

func TestNetworkBoot(t *testing.T) {
	d := testDriver(t)
	ctx := context.Background()
	pool := testPool(t, d)
	root := sharedDir(t)
	spec := testSpec(t, pool)
	kernel, initrd := spec.Boot.Kernel, spec.Boot.Initrd
	spec.Boot = model.MachineBoot{Network: true, Kernel: kernel, Initrd: initrd}
	spec.Settings["tftp_root"] = root
	script := "#!ipxe\nkernel tftp://10.0.2.2/" + filepath.Base(kernel) + " console=ttyS0\ninitrd tftp://10.0.2.2/" + filepath.Base(initrd) + "\nboot\n"
	spec.Files = map[string]string{"boot.ipxe": script, "seed/user-data": "#cloud-config\n"}
	destroyAtEnd(t, d, spec.Name)

	st, err := d.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if st.Power != "running" {
		t.Errorf("provisioned %+v, want running", st)
	}
	dir := filepath.Join(root, spec.Name)
	if b, err := os.ReadFile(filepath.Join(dir, "boot.ipxe")); err != nil || string(b) != script {
		t.Errorf("boot.ipxe: %q, %v; want the script", b, err)
	}
	if target, err := os.Readlink(filepath.Join(dir, filepath.Base(kernel))); err != nil || target != kernel {
		t.Errorf("kernel link: %q, %v; want %s", target, err, kernel)
	}
	var doc string
	err = d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		dom, err := l.DomainLookupByName(spec.Name)
		if err != nil {
			return err
		}
		doc, err = l.DomainGetXMLDesc(dom, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc, "tftp="+dir+",bootfile=boot.ipxe") || !strings.Contains(doc, "<boot dev='network'/>") {
		t.Errorf("domain XML without the PXE network:\n%s", doc)
	}
	// iPXE fetched the script, the kernel and the initrd over TFTP, and
	// the kernel writes to the serial console.
	serial := filepath.Join(spec.Settings["log_dir"].(string), spec.Name+"-serial.log")
	waitFor(t, 3*time.Minute, "the kernel's banner in "+serial, func() bool {
		b, _ := os.ReadFile(serial)
		return strings.Contains(string(b), "Linux version")
	})

	if err := d.Destroy(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	if left, err := os.ReadDir(root); err != nil || len(left) != 0 {
		t.Errorf("TFTP root after destroy: %v, %v; want it empty", left, err)
	}
}

// A libvirt that accepts the connection and never answers does not hang
// the driver: the caller's context ends the call.
func TestSilentLibvirtDoesNotHang(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "silent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		ln.Close()
		for c := range accepted {
			c.Close()
		}
	}()

	remote, dial, err := parseURI("qemu+unix:///system?socket=" + sock)
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{uri: "qemu+unix:///system?socket=" + sock, remote: remote, dial: dial}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err = d.Inventory(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("inventory of a silent libvirt: %v, want the context's deadline", err)
	}

	_, err = New("qemu+unix:///system?socket=" + filepath.Join(t.TempDir(), "none.sock"))
	if err == nil || !strings.Contains(err.Error(), "none.sock is not answering: start libvirtd") {
		t.Errorf("New with no libvirt: %v, want an error naming the URI and saying to start libvirtd", err)
	}
}

// waitFor polls until ok, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
