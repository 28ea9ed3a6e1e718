package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/cli/guest"
)

// MadeInitrd is what `tether distribution make-initrd` made.
type MadeInitrd struct {
	// Kernel and Initrd are the files a netboot distribution names.
	Kernel        string `json:"kernel"`
	KernelVersion string `json:"kernel_version"`
	Initrd        string `json:"initrd"`
	Agent         string `json:"agent"`
}

// distributionMakeInitrdCommand is `tether distribution make-initrd DIR`:
// a distribution that boots straight into the agent, from this machine's
// kernel.
func distributionMakeInitrdCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "make-initrd",
		Usage:     "make a netboot distribution that boots straight into tether-agent: this machine's kernel and an initramfs of busybox, its network card's modules and the agent",
		ArgsUsage: "DIR",
		Description: "Writes DIR/vmlinuz (a copy of this machine's newest kernel that has its modules) and\n" +
			"DIR/initrd.gz, whose init brings up eth0 (10.0.2.15/24 via 10.0.2.2: QEMU's user-mode\n" +
			"network) and runs tether-agent with what the kernel command line says:\n" +
			"tether.name, tether.env, tether.token, tether.broker, tether.namespace, tether.labels,\n" +
			"tether.ip, tether.gateway, tether.server_key. Without tether.token there, it reads the same\n" +
			"keys from the words of the user-data on a cloud-init seed (a cdrom labelled cidata), which a\n" +
			"libvirt platform gives a cloud-init distribution's machines. Its state is on the machine's\n" +
			"disk, or in memory without one: for labs, tests and PXE-booted workers. Needs a static busybox (Debian: busybox-static)\n" +
			"and a static tether-agent (--agent; by default the one beside this tether, or on PATH).\n\n" +
			"Example:\n" +
			"   tether distribution make-initrd ~/tether-try/tiny\n" +
			"   tether distribution add tiny --kind netboot --kernel ~/tether-try/tiny/vmlinuz --initrd ~/tether-try/tiny/initrd.gz \\\n" +
			"     --cmdline 'console=ttyS0 tether.name={{.Host}} tether.env={{.Env}} tether.token={{.Token}} tether.broker={{.Settings.broker}}'",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "agent", Usage: "the static tether-agent `FILE` to put in it (default: beside this tether, or on PATH)"},
			&ucli.StringFlag{Name: "kernel", Usage: "the kernel `VERSION` (KVER of /boot/vmlinuz-KVER; default: the newest that has its modules)"},
			outputFlag(),
		},
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			dir := c.Args().First()
			if dir == "" || c.NArg() > 1 {
				return usageError("tether distribution make-initrd DIR: say where to write vmlinuz and initrd.gz")
			}
			agent, err := findAgent(c.String("agent"))
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context, 5*time.Minute)
			defer cancel()
			g, err := guest.Build(ctx, dir, guest.Options{Agent: agent, Kernel: c.String("kernel")})
			switch {
			case errors.Is(err, guest.ErrNoKernel):
				return fmt.Errorf("%w: install one (Debian: apt-get install linux-image-amd64), or name one with --kernel", err)
			case errors.Is(err, guest.ErrNotStatic):
				return fmt.Errorf("%w: the initramfs holds no libraries: build tether-agent with CGO_ENABLED=0 (make build), and install busybox-static", err)
			case err != nil:
				return err
			}
			made := MadeInitrd{Kernel: filepath.Join(dir, "vmlinuz"), KernelVersion: g.KernelVersion, Initrd: filepath.Join(dir, "initrd.gz"), Agent: agent}
			if err := copyFile(g.Kernel, made.Kernel); err != nil {
				return err
			}
			if err := os.Rename(g.Initramfs, made.Initrd); err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, made)
			}
			fmt.Fprintf(term.stdout, "kernel %s (Linux %s)\ninitrd %s (tether-agent from %s)\n", made.Kernel, made.KernelVersion, made.Initrd, agent)
			return nil
		},
	}
}

// findAgent finds the tether-agent to put in an initramfs.
func findAgent(given string) (string, error) {
	if given != "" {
		return filepath.Abs(given)
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "tether-agent")
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("tether-agent"); err == nil {
		return filepath.Abs(p)
	}
	return "", usageError("no tether-agent beside this tether nor on PATH: install the tether-agent package, build it (make build: bin/tether-agent), or give --agent FILE")
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
