// Package guest builds an agent initramfs: a machine that boots straight
// into Tether's agent (`tether distribution make-initrd`; the virtual
// machine the end-to-end tests boot): the machine's own kernel and an
// initramfs of a static busybox, the kernel
// modules of a virtio network card and of the ACPI power button, and the
// static agent-only binary, tether-agent. Its /init brings up eth0 on
// QEMU's user-mode network (10.0.2.15/24; 10.0.2.2 is the host's loopback,
// so the agent reaches a broker on the host at 10.0.2.2:5672), then runs
// `tether-agent run` with what the kernel command line says (Boot; without
// a token there, also what the user-data of a cloud-init NoCloud seed says,
// a cdrom labelled cidata: a word tether.KEY=VALUE is a key), its
// state on the machine's first disk (formatted on the first boot: the
// machine keeps its identity across reboots; in memory without one) and
// its log on the console. The power button
// stops the agent with SIGTERM and powers the machine off; so does the
// agent's end, however it comes.
//
// The guest boots under QEMU alone or libvirt, with direct kernel boot
// (the kernel, the initramfs and a command line) or over PXE. Nothing here
// starts a machine: the tests do, with the tool they test.
//
// The initramfs is a gzip'd newc cpio written here, with no cpio tool. The
// agent is tether-agent rather than the full tether binary: it is the one
// hosts are given (make packages), it is a third of the size, and a
// smaller initramfs unpacks faster in a guest without hardware
// acceleration.
package guest

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"debug/elf"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Console lines the guest's init prints, for tests to wait for.
const (
	// InitLine begins init's first line: "tether-guest: init on Linux KVER".
	InitLine = "tether-guest: init on Linux "
	// NetworkLine begins the line saying eth0 is configured: "tether-guest:
	// eth0 is 10.0.2.15/24, default route via 10.0.2.2".
	NetworkLine = "tether-guest: eth0 is "
	// StartingLine begins the line printed just before the agent starts:
	// "tether-guest: starting agent NAME in ENV".
	StartingLine = "tether-guest: starting agent "
	// StoppingLine is part of the line printed when the power button
	// (or SIGUSR2 to init) asks the agent to stop.
	StoppingLine = "poweroff requested: stopping the agent"
	// ExitedLine begins the line printed once the agent has exited,
	// just before the machine powers off: "tether-guest: the agent exited
	// with status N; poweroff".
	ExitedLine = "tether-guest: the agent exited with status "
)

// AgentPackage is the agent-only command BuildAgent builds.
const AgentPackage = "github.com/tetherhq/tether/cli/tether-agent"

// Options say how to build a guest; the zero value builds the usual one.
type Options struct {
	// Agent is a ready static tether-agent binary (BuildAgent makes one);
	// "" builds one into the guest's directory. Callers that build many
	// guests build it once and pass it.
	Agent string
	// Busybox is a static busybox; "" is /bin/busybox (Debian's
	// busybox-static).
	Busybox string
	// Kernel is the version of the kernel to boot, KVER of
	// /boot/vmlinuz-KVER and /lib/modules/KVER; "" picks the newest
	// kernel that has both.
	Kernel string
	// Modules are the kernel modules init loads, by name, each with the
	// modules it depends on; nil is DefaultModules.
	Modules []string
	// Root is where /boot and /lib/modules are looked for; "" is "/".
	Root string
}

// Guest is a built guest, ready for direct kernel boot or PXE.
type Guest struct {
	// Kernel is the kernel image, the machine's own /boot/vmlinuz-KVER.
	Kernel string
	// KernelVersion is its KVER.
	KernelVersion string
	// Initramfs is the gzip'd newc cpio: busybox, the modules, the
	// agent and /init.
	Initramfs string
	// Modules are the module files init loads, in that order, relative
	// to /lib/modules/KVER.
	Modules []string
}

// ErrNoKernel: no /boot/vmlinuz-KVER with its /lib/modules/KVER
// (Debian's linux-image-amd64 installs one).
var ErrNoKernel = errors.New("no kernel to boot")

// ErrNotStatic: a binary the guest runs is dynamically linked, and the
// initramfs holds no libraries.
var ErrNotStatic = errors.New("not a statically linked executable")

//go:embed rootfs
var rootfs embed.FS

// Build writes the guest's initramfs (initramfs.gz) into dir, and, without
// Options.Agent, the tether-agent binary it holds (tether-agent).
func Build(ctx context.Context, dir string, opts Options) (Guest, error) {
	root := cmp.Or(opts.Root, "/")
	kver, err := pickKernel(root, opts.Kernel)
	if err != nil {
		return Guest{}, err
	}
	g := Guest{Kernel: filepath.Join(root, "boot", "vmlinuz-"+kver), KernelVersion: kver, Initramfs: filepath.Join(dir, "initramfs.gz")}
	// QEMU reads the kernel as the user that runs it: say so here,
	// rather than leave it to a machine that does not start.
	f, err := os.Open(g.Kernel)
	if err != nil {
		return Guest{}, fmt.Errorf("guest kernel: %w", err)
	}
	f.Close()

	busybox := cmp.Or(opts.Busybox, filepath.Join(root, "bin", "busybox"))
	bb, err := readStatic(busybox, "busybox (install busybox-static)")
	if err != nil {
		return Guest{}, err
	}
	agentPath := opts.Agent
	if agentPath == "" {
		agentPath = filepath.Join(dir, "tether-agent")
		if err := BuildAgent(ctx, agentPath); err != nil {
			return Guest{}, err
		}
	}
	agent, err := readStatic(agentPath, "the agent (build it with CGO_ENABLED=0)")
	if err != nil {
		return Guest{}, err
	}

	moddir := filepath.Join(root, "lib", "modules", kver)
	km, err := readKernelModules(moddir)
	if err != nil {
		return Guest{}, err
	}
	names := opts.Modules
	if names == nil {
		names = DefaultModules
	}
	files, err := km.loadOrder(names)
	if err != nil {
		return Guest{}, err
	}

	out, err := os.Create(g.Initramfs)
	if err != nil {
		return Guest{}, fmt.Errorf("guest initramfs: %w", err)
	}
	defer out.Close()
	bw := bufio.NewWriterSize(out, 1<<20)
	// The fastest level: the initramfs is built for every test run;
	// here 6.4 MiB in 0.2 s, against 5.7 MiB in 0.5 s at the default.
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		return Guest{}, err
	}
	a := &newc{w: zw}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "dev", "proc", "sys", "run", "tmp", "root", "var/lib", "etc/tether-guest"} {
		a.dir(d, 0o755)
	}
	a.charDev("dev/console", 0o600, 5, 1)
	a.file("bin/busybox", 0o755, bb)
	a.file("bin/tether-agent", 0o755, agent)
	a.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	a.file("etc/group", 0o644, []byte("root:x:0:\n"))
	a.file("etc/os-release", 0o644, []byte("NAME=\"Tether test guest\"\nID=tether-guest\nPRETTY_NAME=\"Tether test guest (busybox)\"\n"))
	// init and the power button's handler: scripts, all executable.
	if err := fs.WalkDir(rootfs, "rootfs", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := rootfs.ReadFile(p)
		if err != nil {
			return err
		}
		a.file(strings.TrimPrefix(p, "rootfs/"), 0o755, b)
		return nil
	}); err != nil {
		return Guest{}, err
	}
	var list strings.Builder
	for _, f := range files {
		data, name, err := moduleImage(moddir, f)
		if err != nil {
			return Guest{}, err
		}
		inGuest := path.Join("lib/modules", kver, filepath.ToSlash(name))
		a.file(inGuest, 0o644, data)
		fmt.Fprintf(&list, "/%s\n", inGuest)
		g.Modules = append(g.Modules, name)
	}
	a.file("etc/tether-guest/modules", 0o644, []byte(list.String()))
	if err := a.close(); err != nil {
		return Guest{}, fmt.Errorf("guest initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		return Guest{}, fmt.Errorf("guest initramfs: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return Guest{}, fmt.Errorf("guest initramfs: %w", err)
	}
	if err := out.Close(); err != nil {
		return Guest{}, fmt.Errorf("guest initramfs: %w", err)
	}
	return g, nil
}

// BuildAgent builds the static agent-only binary (AgentPackage) into
// dst, stripped. It runs `go build` in the current directory, which must
// be inside this module (a test's is).
func BuildAgent(ctx context.Context, dst string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", dst, AgentPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", AgentPackage, err, out)
	}
	return nil
}

// readStatic reads an executable that must run without a dynamic linker.
func readStatic(path, what string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", what, path, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s: %s: %w", what, path, ErrNotStatic)
		}
	}
	return b, nil
}

// pickKernel returns want if /boot/vmlinuz-want and /lib/modules/want are
// under root, or, for "", the newest version that has both.
func pickKernel(root, want string) (string, error) {
	has := func(kver string) bool {
		_, errK := os.Stat(filepath.Join(root, "boot", "vmlinuz-"+kver))
		_, errM := os.Stat(filepath.Join(root, "lib", "modules", kver, "modules.dep"))
		return errK == nil && errM == nil
	}
	if want != "" {
		if !has(want) {
			return "", fmt.Errorf("%w: kernel %s needs %s and %s", ErrNoKernel, want,
				filepath.Join(root, "boot", "vmlinuz-"+want), filepath.Join(root, "lib", "modules", want, "modules.dep"))
		}
		return want, nil
	}
	images, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	var found []string
	for _, img := range images {
		if kver := strings.TrimPrefix(filepath.Base(img), "vmlinuz-"); has(kver) {
			found = append(found, kver)
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("%w: no %s with its modules in %s (install linux-image-amd64)", ErrNoKernel,
			filepath.Join(root, "boot", "vmlinuz-*"), filepath.Join(root, "lib", "modules"))
	}
	slices.SortFunc(found, compareVersions)
	return found[len(found)-1], nil
}

// compareVersions orders kernel versions as numbers where they are
// numbers: 6.1.0-57 before 6.1.0-100.
func compareVersions(a, b string) int {
	for a != "" && b != "" {
		da, ra := leadingRun(a)
		db, rb := leadingRun(b)
		na, errA := strconv.Atoi(da)
		nb, errB := strconv.Atoi(db)
		switch {
		case errA == nil && errB == nil && na != nb:
			return cmp.Compare(na, nb)
		case (errA != nil || errB != nil) && da != db:
			return strings.Compare(da, db)
		}
		a, b = ra, rb
	}
	return cmp.Compare(len(a), len(b))
}

// leadingRun splits s after its first run of digits or of other runes.
func leadingRun(s string) (string, string) {
	digit := unicode.IsDigit(rune(s[0]))
	for i, r := range s {
		if unicode.IsDigit(r) != digit {
			return s[:i], s[i:]
		}
	}
	return s, ""
}
