package guest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// DefaultModules are the modules a guest loads when Options name none: the
// virtio network card (virtio_pci finds the device, virtio_net drives it),
// the ACPI power button and the event devices it reports through (busybox
// acpid reads /dev/input/event*), and the virtio disk with the file
// system the agent keeps its state on (ext4, which mounts ext2, with the
// checksum it asks the crypto API for), and the SATA cdrom of a cloud-init
// seed with its file system (ahci, sr_mod, isofs). Their dependencies
// come from modules.dep.
var DefaultModules = []string{"virtio_pci", "virtio_net", "button", "evdev", "virtio_blk", "crc32c_generic", "ext4", "ahci", "sr_mod", "isofs"}

// ErrNoModule: a module Options name is neither in the kernel's
// modules.dep nor built into it.
var ErrNoModule = errors.New("no such kernel module")

// moduleName is how modprobe names a module: the file's base name without
// .ko and a compression suffix, dashes as underscores.
func moduleName(file string) string {
	base := path.Base(file)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// kernelModules is what a kernel's /lib/modules/KVER says of its modules.
type kernelModules struct {
	dir     string
	path    map[string]string   // name: file, relative to dir
	deps    map[string][]string // name: the names it needs, as listed
	builtin map[string]bool
}

func readKernelModules(dir string) (*kernelModules, error) {
	km := &kernelModules{dir: dir, path: map[string]string{}, deps: map[string][]string{}, builtin: map[string]bool{}}
	b, err := os.ReadFile(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w (depmod writes modules.dep)", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		file, deps, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%s line %d: %q is not FILE: DEPENDENCIES", filepath.Join(dir, "modules.dep"), n, line)
		}
		name := moduleName(file)
		km.path[name] = file
		for _, d := range strings.Fields(deps) {
			km.deps[name] = append(km.deps[name], moduleName(d))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "modules.dep"), err)
	}
	// A module built into this kernel needs no loading (another
	// kernel's configuration may build in what Debian's has as modules).
	if b, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			km.builtin[moduleName(f)] = true
		}
	}
	return km, nil
}

// loadOrder returns the files of the named modules and of everything they
// need, each after what it needs, as modprobe would load them: a module's
// dependencies, as modules.dep lists them, from the last (modprobe's
// order). Built-in modules are left out.
func (km *kernelModules) loadOrder(names []string) ([]string, error) {
	var order []string
	done := map[string]bool{}
	var visit func(name string, from []string) error
	visit = func(name string, from []string) error {
		name = moduleName(name)
		if done[name] {
			return nil
		}
		for _, f := range from {
			if f == name {
				return fmt.Errorf("kernel module %s depends on itself through %s", name, strings.Join(from, " → "))
			}
		}
		file, ok := km.path[name]
		if !ok {
			if km.builtin[name] {
				done[name] = true
				return nil
			}
			if len(from) > 0 {
				return fmt.Errorf("%w: %s (needed by %s) in %s", ErrNoModule, name, from[len(from)-1], km.dir)
			}
			return fmt.Errorf("%w: %s in %s", ErrNoModule, name, km.dir)
		}
		deps, chain := km.deps[name], append(from[:len(from):len(from)], name)
		for i := len(deps) - 1; i >= 0; i-- {
			if err := visit(deps[i], chain); err != nil {
				return err
			}
		}
		done[name] = true
		order = append(order, file)
		return nil
	}
	for _, n := range names {
		if err := visit(n, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleImage reads a module file as the guest gets it, and the name it
// has there. A gzip'd module is unpacked here (the standard library reads
// gzip); an xz one (Debian's kernels from 6.x on may compress modules so)
// keeps its .ko.xz name, and the guest's init unpacks it with busybox's
// unxz before insmod, since the standard library has no xz reader. Other
// compressions are refused.
func moduleImage(dir, file string) (data []byte, name string, err error) {
	full := filepath.Join(dir, file)
	switch {
	case strings.HasSuffix(file, ".ko"), strings.HasSuffix(file, ".ko.xz"):
		data, err = os.ReadFile(full)
		return data, file, err
	case strings.HasSuffix(file, ".ko.gz"):
		f, err := os.Open(full)
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", full, err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return nil, "", fmt.Errorf("%s: %w", full, err)
		}
		return data, strings.TrimSuffix(file, ".gz"), nil
	}
	return nil, "", fmt.Errorf("kernel module %s: compressed in a way the guest cannot load (want .ko, .ko.gz or .ko.xz)", full)
}
