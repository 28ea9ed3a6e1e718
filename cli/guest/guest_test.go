package guest

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// cpioEntry is one entry of a newc archive as the kernel reads it.
type cpioEntry struct {
	name         string
	mode         uint32
	rmajor, rmin uint32
	data         string
}

// readNewc reads a newc archive strictly: magic, hexadecimal fields, the
// four-byte alignment of names and data, and the trailer at the end.
func readNewc(b []byte) ([]cpioEntry, error) {
	var out []cpioEntry
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if len(b)-off < 110 {
			return nil, fmt.Errorf("offset %d: a truncated header", off)
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			return nil, fmt.Errorf("offset %d: magic %q", off, h[:6])
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				panic(err)
			}
			return int(v)
		}
		size, namesize := field(6), field(11)
		name := string(b[off+110 : off+110+namesize])
		if !strings.HasSuffix(name, "\x00") {
			return nil, fmt.Errorf("offset %d: name %q not NUL-terminated", off, name)
		}
		name = strings.TrimSuffix(name, "\x00")
		data := align(off + 110 + namesize)
		end := align(data + size)
		if end > len(b) {
			return nil, fmt.Errorf("%s: data past the end", name)
		}
		if name == "TRAILER!!!" {
			if end != len(b) {
				return nil, fmt.Errorf("%d bytes after the trailer", len(b)-end)
			}
			return out, nil
		}
		out = append(out, cpioEntry{name: name, mode: uint32(field(1)), rmajor: uint32(field(9)), rmin: uint32(field(10)), data: string(b[data : data+size])})
		off = end
	}
}

func TestNewcWritesWhatTheKernelReads(t *testing.T) {
	var buf bytes.Buffer
	a := &newc{w: &buf}
	a.file("/etc/acpi/PWRF/00000080", 0o755, []byte("#!/bin/sh\nkill -USR2 1\n"))
	a.dir("etc", 0o755) // written already, as a parent
	a.charDev("dev/console", 0o600, 5, 1)
	a.symlink("bin/sh", "busybox")
	a.file("empty", 0o644, nil)
	a.file("abc", 0o644, []byte("abc")) // odd lengths: padding
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	got, err := readNewc(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []cpioEntry{
		{name: "etc", mode: 0o040755},
		{name: "etc/acpi", mode: 0o040755},
		{name: "etc/acpi/PWRF", mode: 0o040755},
		{name: "etc/acpi/PWRF/00000080", mode: 0o100755, data: "#!/bin/sh\nkill -USR2 1\n"},
		{name: "dev", mode: 0o040755},
		{name: "dev/console", mode: 0o020600, rmajor: 5, rmin: 1},
		{name: "bin", mode: 0o040755},
		{name: "bin/sh", mode: 0o120777, data: "busybox"},
		{name: "empty", mode: 0o100644},
		{name: "abc", mode: 0o100644, data: "abc"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%v\nwant\n%v", got, want)
	}
}

// modulesDep is a part of Debian 6.1's modules.dep, and a module that
// needs itself.
const modulesDep = `kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/drivers/acpi/button.ko.xz:
kernel/drivers/input/evdev.ko.gz:
kernel/drivers/loop/loop-a.ko: kernel/drivers/loop/loop-b.ko
kernel/drivers/loop/loop-b.ko: kernel/drivers/loop/loop-a.ko
kernel/drivers/missing/needs.ko: kernel/drivers/missing/gone.ko
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/crypto/crc32c_generic.ko:
kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko
kernel/lib/crc16.ko:
kernel/fs/mbcache.ko:
kernel/fs/jbd2/jbd2.ko:
kernel/drivers/ata/ahci.ko: kernel/drivers/ata/libahci.ko kernel/drivers/ata/libata.ko kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko
kernel/drivers/ata/libahci.ko: kernel/drivers/ata/libata.ko kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko
kernel/drivers/ata/libata.ko: kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko
kernel/drivers/scsi/scsi_mod.ko: kernel/drivers/scsi/scsi_common.ko
kernel/drivers/scsi/scsi_common.ko:
kernel/drivers/scsi/sr_mod.ko: kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko kernel/drivers/cdrom/cdrom.ko
kernel/drivers/cdrom/cdrom.ko:
kernel/fs/isofs/isofs.ko: kernel/drivers/cdrom/cdrom.ko
`

func TestModulesLoadInDependencyOrder(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(modulesDep), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/drivers/block/loop.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	km, err := readKernelModules(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		names []string
		want  string // module names in order, or the error
	}{
		{DefaultModules, "virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net button evdev virtio_blk crc32c_generic jbd2 mbcache crc16 ext4 scsi_common scsi_mod libata libahci ahci cdrom sr_mod isofs"},
		{[]string{"virtio-net"}, "virtio_ring virtio failover net_failover virtio_net"},
		{[]string{"loop", "failover"}, "failover"}, // built in: nothing to load
		{[]string{"loop_a"}, "kernel module loop_a depends on itself through loop_a → loop_b"},
		{[]string{"needs"}, "no such kernel module: gone (needed by needs) in " + dir},
		{[]string{"e1000"}, "no such kernel module: e1000 in " + dir},
	} {
		t.Run(strings.Join(tc.names, ","), func(t *testing.T) {
			files, err := km.loadOrder(tc.names)
			var got []string
			for _, f := range files {
				got = append(got, moduleName(f))
			}
			if err != nil {
				got = []string{err.Error()}
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("got %q, want %q", strings.Join(got, " "), tc.want)
			}
		})
	}
}

func TestModuleImages(t *testing.T) {
	dir := t.TempDir()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, "ELF gzip'd")
	zw.Close()
	for name, data := range map[string][]byte{"a.ko": []byte("ELF plain"), "b.ko.gz": gz.Bytes(), "c.ko.xz": []byte("xz as is"), "d.ko.zst": []byte("zstd")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ file, wantName, wantData string }{
		{"a.ko", "a.ko", "ELF plain"},
		{"b.ko.gz", "b.ko", "ELF gzip'd"},
		{"c.ko.xz", "c.ko.xz", "xz as is"},
	} {
		data, name, err := moduleImage(dir, tc.file)
		if err != nil || name != tc.wantName || string(data) != tc.wantData {
			t.Errorf("%s: got %q, %q, %v; want %q, %q", tc.file, name, data, err, tc.wantName, tc.wantData)
		}
	}
	if _, _, err := moduleImage(dir, "d.ko.zst"); err == nil || !strings.Contains(err.Error(), "want .ko, .ko.gz or .ko.xz") {
		t.Errorf("a zstd module: got %v, want a refusal naming the compressions the guest loads", err)
	}
}

func TestBootCmdline(t *testing.T) {
	for _, tc := range []struct {
		boot Boot
		want string
	}{
		{Boot{}, "console=ttyS0"},
		{Boot{Name: "g1", Env: "test", Token: "tether-enroll.abc.def"}, "console=ttyS0 tether.name=g1 tether.env=test tether.token=tether-enroll.abc.def"},
		{Boot{Env: "prod", ServerKey: "SHA256:x/y+z", Broker: "amqp://10.0.2.2:5672/", Labels: []string{"role=web", "dc=a"}, IP: "10.0.2.16/24", Gateway: "10.0.2.2", LogLevel: "debug", Console: "tty0"},
			"console=tty0 tether.env=prod tether.server_key=SHA256:x/y+z tether.broker=amqp://10.0.2.2:5672/ tether.labels=role=web,dc=a tether.ip=10.0.2.16/24 tether.gateway=10.0.2.2 tether.log_level=debug"},
		{Boot{Name: "a b"}, `guest boot Name "a b": cannot go on the kernel command line (no blanks or quotes)`},
		{Boot{Token: `x"`}, `guest boot Token "x\"": cannot go on the kernel command line (no blanks or quotes)`},
		{Boot{Labels: []string{"a=1,b=2"}}, `guest boot Labels "a=1,b=2": cannot go on the kernel command line (want KEY=VALUE without a comma)`},
		{Boot{Labels: []string{"role"}}, `guest boot Labels "role": cannot go on the kernel command line (want KEY=VALUE without a comma)`},
	} {
		got, err := tc.boot.Cmdline()
		if err != nil {
			if !errors.Is(err, ErrCmdline) {
				t.Errorf("%+v: got %v, want ErrCmdline", tc.boot, err)
			}
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.boot, got, tc.want)
		}
	}
}

func TestPickKernel(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{
		"boot/vmlinuz-6.1.0-9-amd64", "lib/modules/6.1.0-9-amd64/modules.dep",
		"boot/vmlinuz-6.1.0-57-amd64", "lib/modules/6.1.0-57-amd64/modules.dep",
		"boot/vmlinuz-6.12.0-1-amd64",                             // no modules
		"lib/modules/6.18.44-fc/modules.dep",                      // no image
		"boot/vmlinuz-6.1.0-100-rt", "lib/modules/6.1.0-100-rt/x", // no modules.dep
	} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := pickKernel(root, ""); err != nil || got != "6.1.0-57-amd64" {
		t.Errorf("newest: got %q, %v; want 6.1.0-57-amd64", got, err)
	}
	if got, err := pickKernel(root, "6.1.0-9-amd64"); err != nil || got != "6.1.0-9-amd64" {
		t.Errorf("asked for: got %q, %v; want 6.1.0-9-amd64", got, err)
	}
	for _, want := range []string{"6.12.0-1-amd64", "6.18.44-fc"} {
		if _, err := pickKernel(root, want); !errors.Is(err, ErrNoKernel) {
			t.Errorf("%s: got %v, want ErrNoKernel", want, err)
		}
	}
	if _, err := pickKernel(t.TempDir(), ""); !errors.Is(err, ErrNoKernel) || !strings.Contains(err.Error(), "install linux-image-amd64") {
		t.Errorf("no kernel at all: got %v, want ErrNoKernel naming the package", err)
	}
}

func TestCompareVersions(t *testing.T) {
	ordered := []string{"5.10.0-30-amd64", "6.1.0-9-amd64", "6.1.0-57-amd64", "6.1.0-57-amd64-rt", "6.1.0-100-amd64", "6.12.0-1-amd64"}
	for i := range ordered {
		for j := range ordered {
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			if got := compareVersions(ordered[i], ordered[j]); got != want {
				t.Errorf("compareVersions(%s, %s): got %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}

// TestBuildRefuses: a guest that could not boot is refused while it is
// built, naming what is wrong.
func TestBuildRefuses(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"boot/vmlinuz-6.1.0-57-amd64", "lib/modules/6.1.0-57-amd64/modules.dep"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(modulesDep), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dynamic := filepath.Join(root, "dynamic")
	if err := os.WriteFile(dynamic, dynamicELF(), 0o755); err != nil {
		t.Fatal(err)
	}
	notELF := filepath.Join(root, "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	static := staticELF(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts Options
		is   error
		says string
	}{
		{"no kernel", Options{Root: t.TempDir()}, ErrNoKernel, "install linux-image-amd64"},
		{"dynamic busybox", Options{Root: root, Busybox: dynamic}, ErrNotStatic, "install busybox-static"},
		{"no busybox", Options{Root: root}, os.ErrNotExist, "busybox (install busybox-static)"},
		{"dynamic agent", Options{Root: root, Busybox: static, Agent: dynamic}, ErrNotStatic, "the agent (build it with CGO_ENABLED=0)"},
		{"agent not ELF", Options{Root: root, Busybox: static, Agent: notELF}, nil, "the agent (build it with CGO_ENABLED=0): " + notELF},
		{"no module", Options{Root: root, Busybox: static, Agent: static, Modules: []string{"e1000"}}, ErrNoModule, "e1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(ctx, t.TempDir(), tc.opts)
			if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v, want an error (%v) saying %q", err, tc.is, tc.says)
			}
		})
	}
}

// TestBuildWritesTheInitramfs builds a guest from a module tree of its own
// and reads the initramfs back: init and the power button's handler,
// executable; the console device init's output goes to; busybox and the
// agent; the modules, a gzip'd one unpacked and an xz'd one kept for init
// to unpack, listed for init in load order.
func TestBuildWritesTheInitramfs(t *testing.T) {
	static := staticELF(t)
	root := t.TempDir()
	const kver = "6.1.0-57-amd64"
	files := map[string][]byte{"boot/vmlinuz-" + kver: []byte("kernel"), "lib/modules/" + kver + "/modules.dep": []byte(modulesDep)}
	for _, line := range strings.Split(strings.TrimSpace(modulesDep), "\n") {
		f, _, _ := strings.Cut(line, ":")
		files["lib/modules/"+kver+"/"+f] = []byte("module " + moduleName(f))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, "module evdev")
	zw.Close()
	files["lib/modules/"+kver+"/kernel/drivers/input/evdev.ko.gz"] = gz.Bytes()
	for f, b := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g, err := Build(context.Background(), t.TempDir(), Options{Root: root, Busybox: static, Agent: static})
	if err != nil {
		t.Fatal(err)
	}
	if g.Kernel != filepath.Join(root, "boot/vmlinuz-"+kver) || g.KernelVersion != kver {
		t.Errorf("got kernel %s (%s), want %s", g.Kernel, g.KernelVersion, filepath.Join(root, "boot/vmlinuz-"+kver))
	}
	wantModules := []string{
		"kernel/drivers/virtio/virtio_ring.ko", "kernel/drivers/virtio/virtio.ko", "kernel/drivers/virtio/virtio_pci_modern_dev.ko",
		"kernel/drivers/virtio/virtio_pci_legacy_dev.ko", "kernel/drivers/virtio/virtio_pci.ko", "kernel/net/core/failover.ko",
		"kernel/drivers/net/net_failover.ko", "kernel/drivers/net/virtio_net.ko", "kernel/drivers/acpi/button.ko.xz", "kernel/drivers/input/evdev.ko",
		"kernel/drivers/block/virtio_blk.ko", "kernel/crypto/crc32c_generic.ko", "kernel/fs/jbd2/jbd2.ko", "kernel/fs/mbcache.ko", "kernel/lib/crc16.ko", "kernel/fs/ext4/ext4.ko",
		"kernel/drivers/scsi/scsi_common.ko", "kernel/drivers/scsi/scsi_mod.ko", "kernel/drivers/ata/libata.ko", "kernel/drivers/ata/libahci.ko",
		"kernel/drivers/ata/ahci.ko", "kernel/drivers/cdrom/cdrom.ko", "kernel/drivers/scsi/sr_mod.ko", "kernel/fs/isofs/isofs.ko",
	}
	if !slices.Equal(g.Modules, wantModules) {
		t.Errorf("got modules %v, want %v", g.Modules, wantModules)
	}
	raw, err := os.ReadFile(g.Initramfs)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	archive, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := readNewc(archive)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]cpioEntry{}
	for _, e := range entries {
		if _, dup := got[e.name]; dup {
			t.Errorf("%s written twice", e.name)
		}
		if parent := filepath.Dir(e.name); parent != "." {
			if _, ok := got[parent]; !ok {
				t.Errorf("%s before its directory %s", e.name, parent)
			}
		}
		got[e.name] = e
	}
	bb, err := os.ReadFile(static)
	if err != nil {
		t.Fatal(err)
	}
	var list strings.Builder
	for _, m := range wantModules {
		fmt.Fprintf(&list, "/lib/modules/%s/%s\n", kver, m)
	}
	for _, want := range []cpioEntry{
		{name: "init", mode: 0o100755},
		{name: "etc/acpi/PWRF/00000080", mode: 0o100755},
		{name: "dev/console", mode: 0o020600, rmajor: 5, rmin: 1},
		{name: "bin/busybox", mode: 0o100755, data: string(bb)},
		{name: "bin/tether-agent", mode: 0o100755, data: string(bb)},
		{name: "etc/tether-guest/modules", mode: 0o100644, data: list.String()},
		{name: "lib/modules/" + kver + "/kernel/drivers/input/evdev.ko", mode: 0o100644, data: "module evdev"},
		{name: "lib/modules/" + kver + "/kernel/drivers/acpi/button.ko.xz", mode: 0o100644, data: "module button"},
		{name: "var/lib", mode: 0o040755},
	} {
		e, ok := got[want.name]
		if want.data == "" {
			e.data = ""
		}
		if !ok || e != want {
			t.Errorf("%s: got %+v (there: %v), want %+v", want.name, e, ok, want)
		}
	}
	init := got["init"].data
	if !strings.HasPrefix(init, "#!/bin/busybox sh\n") {
		t.Errorf("init: got %.60q…, want busybox's shell script", init)
	}
	// What the package says of init, init does.
	for _, want := range []string{"broker=" + DefaultBroker + "\n", "ip=10.0.2.15/24\n", "gateway=10.0.2.2\n", "name=guest\n",
		InitLine, NetworkLine, StartingLine, strings.Replace(StoppingLine, "poweroff", "$after", 1), ExitedLine} {
		if !strings.Contains(init, want) {
			t.Errorf("init does not hold %q", want)
		}
	}
}

// staticELF returns a statically linked executable: /bin/busybox where it
// is one, else skips.
func staticELF(t *testing.T) string {
	t.Helper()
	if _, err := readStatic("/bin/busybox", "busybox"); err != nil {
		t.Skipf("SKIPPED: no static /bin/busybox to stand for a static executable (%v): install busybox-static", err)
	}
	return "/bin/busybox"
}

// dynamicELF is the smallest ELF the elf package reads that asks for a
// dynamic linker: a 64-bit header and one PT_INTERP program header.
func dynamicELF() []byte {
	b := make([]byte, 64+56)
	copy(b, "\x7fELF\x02\x01\x01")
	le := func(off int, v uint64, n int) {
		for i := 0; i < n; i++ {
			b[off+i] = byte(v >> (8 * i))
		}
	}
	le(16, 2, 2)    // ET_EXEC
	le(18, 62, 2)   // EM_X86_64
	le(20, 1, 4)    // EV_CURRENT
	le(32, 64, 8)   // e_phoff
	le(52, 64, 2)   // e_ehsize
	le(54, 56, 2)   // e_phentsize
	le(56, 1, 2)    // e_phnum
	le(58, 64, 2)   // e_shentsize
	le(64, 3, 4)    // p_type PT_INTERP
	le(64+8, 0, 8)  // p_offset
	le(64+32, 0, 8) // p_filesz
	return b
}
