package guest

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/testenv"
)

// needGuestTools skips (fails under CI) without QEMU, a kernel with its
// modules or a static busybox.
func needGuestTools(t *testing.T) string {
	t.Helper()
	qemu, err := exec.LookPath("qemu-system-x86_64")
	testenv.Need(t, err == nil, "no qemu-system-x86_64 here: install qemu-system-x86 (make setup)")
	_, err = pickKernel("/", "")
	testenv.Need(t, err == nil, fmt.Sprintf("no kernel to boot (%v): install linux-image-amd64 (make setup)", err))
	_, err = readStatic("/bin/busybox", "busybox")
	testenv.Need(t, err == nil, fmt.Sprintf("no static /bin/busybox (%v): install busybox-static (make setup)", err))
	return qemu
}

// console is a guest's serial console, read line by line as it comes.
type console struct {
	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced at each line
	done  chan struct{} // closed at the end of output
}

func readConsole(r *bufio.Reader) *console {
	c := &console{more: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				c.mu.Lock()
				c.lines = append(c.lines, strings.TrimRight(line, "\r\n"))
				close(c.more)
				c.more = make(chan struct{})
				c.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	return c
}

// await returns the first line from the from-th on that holds want, and
// its index.
func (c *console) await(ctx context.Context, from int, want string) (string, int, error) {
	for {
		c.mu.Lock()
		for i := from; i < len(c.lines); i++ {
			if line := c.lines[i]; strings.Contains(line, want) {
				c.mu.Unlock()
				return line, i, nil
			}
		}
		from = len(c.lines)
		more := c.more
		c.mu.Unlock()
		select {
		case <-more:
		case <-c.done:
			return "", 0, fmt.Errorf("the console ended without %q", want)
		case <-ctx.Done():
			return "", 0, fmt.Errorf("no %q on the console: %w", want, ctx.Err())
		}
	}
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n")
}

// qmp sends one command to QEMU's machine protocol socket and waits for its
// answer.
func qmp(ctx context.Context, sock, command string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	dec := json.NewDecoder(conn)
	var greeting map[string]any
	if err := dec.Decode(&greeting); err != nil {
		return fmt.Errorf("qmp greeting: %w", err)
	}
	for _, c := range []string{"qmp_capabilities", command} {
		if _, err := fmt.Fprintf(conn, `{"execute":%q}`+"\n", c); err != nil {
			return err
		}
		for {
			var msg map[string]any
			if err := dec.Decode(&msg); err != nil {
				return fmt.Errorf("qmp %s: %w", c, err)
			}
			if e, ok := msg["error"]; ok {
				return fmt.Errorf("qmp %s: %v", c, e)
			}
			if _, ok := msg["return"]; ok {
				break
			}
		}
	}
	return nil
}

// agentBinary is tether-agent, built once for the package's tests.
var agentBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tether-guest-test-")
	if err != nil {
		return "", err
	}
	agentDir = dir
	p := filepath.Join(dir, "tether-agent")
	return p, BuildAgent(context.Background(), p)
})

// agentDir holds agentBinary's build, removed by TestMain.
var agentDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if agentDir != "" {
		os.RemoveAll(agentDir)
	}
	os.Exit(code)
}

// machine is a guest running under QEMU.
type machine struct {
	console *console
	qmp     string     // QEMU's machine protocol socket
	exited  chan error // QEMU's end
	started time.Time
}

// boot starts QEMU on the guest, with software emulation and 256 MiB, its
// first serial port on the test's pipe and a virtio network card on
// QEMU's user-mode network. The console is logged when the test fails, or
// runs with -v.
func boot(ctx context.Context, t *testing.T, qemu string, g Guest, b Boot) *machine {
	t.Helper()
	cmdline, err := b.Cmdline()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	cmd := exec.CommandContext(ctx, qemu, "-accel", "tcg", "-m", "256", "-nographic",
		"-kernel", g.Kernel, "-initrd", g.Initramfs, "-append", cmdline,
		// No option ROM: the kernel boots directly, so iPXE is not
		// needed, and the machine starts sooner without it.
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,romfile=",
		"-no-reboot", "-qmp", "unix:"+sock+",server=on,wait=off")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	m := &machine{qmp: sock, exited: make(chan error, 1), started: time.Now()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.console = readConsole(bufio.NewReader(out))
	go func() {
		<-m.console.done
		m.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() || testing.Verbose() {
			t.Logf("--- the guest's console ---\n%s", m.console)
		}
	})
	return m
}

// expect waits for a console line holding want from the from-th line on,
// and returns it with its index.
func (m *machine) expect(ctx context.Context, t *testing.T, from int, want string) (string, int) {
	t.Helper()
	line, i, err := m.console.await(ctx, from, want)
	if err != nil {
		t.Fatal(err)
	}
	return line, i
}

// powerButton presses the ACPI power button and waits for the agent to
// stop cleanly and for QEMU to end, the guest powered off.
func (m *machine) powerButton(ctx context.Context, t *testing.T, from int) {
	t.Helper()
	if err := qmp(ctx, m.qmp, "system_powerdown"); err != nil {
		t.Fatalf("press the power button: %v", err)
	}
	_, i := m.expect(ctx, t, from, StoppingLine)
	m.expect(ctx, t, i, ExitedLine+"0; poweroff")
	select {
	case err := <-m.exited:
		if err != nil {
			t.Fatalf("qemu ended with %v after the guest powered off, want a clean exit", err)
		}
	case <-ctx.Done():
		t.Fatal("qemu still runs after the guest powered off")
	}
}

// TestGuestBootsAndStopsOnThePowerButton boots the guest under QEMU
// (software emulation, as on machines without KVM) and follows its serial
// console: init starts, eth0 gets its address, the agent starts with the
// name and environment of the kernel command line; then the ACPI power
// button stops the agent with SIGTERM (a clean exit) and powers the
// machine off, which ends QEMU.
func TestGuestBootsAndStopsOnThePowerButton(t *testing.T) {
	qemu := needGuestTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	start := time.Now()
	agent, err := agentBinary()
	if err != nil {
		t.Fatal(err)
	}
	agentBuilt := time.Since(start)
	g, err := Build(ctx, t.TempDir(), Options{Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(g.Initramfs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tether-agent built in %s, the guest in %s more: kernel %s, initramfs %.1f MiB, modules %s", agentBuilt.Round(time.Millisecond),
		(time.Since(start) - agentBuilt).Round(time.Millisecond), g.KernelVersion, float64(fi.Size())/(1<<20), strings.Join(g.Modules, " "))

	// A token that carries a server key's fingerprint, as `tether agent
	// token create` prints one: the agent starts with it (one without
	// would not) and waits to be enrolled.
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	token, err := model.NewEnrollmentToken(pub)
	if err != nil {
		t.Fatal(err)
	}
	m := boot(ctx, t, qemu, g, Boot{Name: "g1", Env: "test", Token: token})
	_, i := m.expect(ctx, t, 0, InitLine)
	toInit := time.Since(m.started)
	line, i := m.expect(ctx, t, i, NetworkLine)
	if want := NetworkLine + "10.0.2.15/24, default route via 10.0.2.2"; line != want {
		t.Errorf("got %q, want %q", line, want)
	}
	m.expect(ctx, t, i, "inet 10.0.2.15/24") // ip addr, as the guest sees it
	_, i = m.expect(ctx, t, i, StartingLine+"g1 in test")
	// The agent's own line, once it holds its key and starts for its
	// environment.
	_, i = m.expect(ctx, t, i, "tether agent: g1 in environment test, broker amqp://")
	toAgent := time.Since(m.started)
	t.Logf("boot: init after %s, the agent after %s", toInit.Round(time.Millisecond), toAgent.Round(time.Millisecond))

	pressed := time.Now()
	m.powerButton(ctx, t, i)
	t.Logf("powered off %s after the power button", time.Since(pressed).Round(time.Millisecond))
}

// TestGuestLoadsCompressedModules: a kernel whose modules are compressed
// (xz on newer Debian kernels, gzip elsewhere) gives a guest that works as
// well. Here the power button's modules are: evdev xz'd (init unpacks it
// with busybox unxz) and button gzip'd (Build unpacks it), in a copy of
// this machine's module tree; every module loads and the power button
// still stops the machine.
func TestGuestLoadsCompressedModules(t *testing.T) {
	qemu := needGuestTools(t)
	xz, err := exec.LookPath("xz")
	testenv.Need(t, err == nil, "no xz here: install xz-utils")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	kver, err := pickKernel("/", "")
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join("/lib/modules", kver)
	km, err := readKernelModules(real)
	if err != nil {
		t.Fatal(err)
	}
	files, err := km.loadOrder(DefaultModules)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	mods := filepath.Join(root, "lib/modules", kver)
	for _, d := range []string{"boot", "bin", mods} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"boot/vmlinuz-" + kver: "/boot/vmlinuz-" + kver, "bin/busybox": "/bin/busybox"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	dep, err := os.ReadFile(filepath.Join(real, "modules.dep"))
	if err != nil {
		t.Fatal(err)
	}
	compressed := map[string]string{} // plain file: its compressed name
	for _, f := range files {
		src, dst := filepath.Join(real, f), filepath.Join(mods, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		switch moduleName(f) {
		case "evdev":
			// As the kernel's own build compresses modules.
			out, err := exec.Command(xz, "-c", "--check=crc32", "--lzma2=dict=1MiB", src).Output()
			if err != nil {
				t.Fatalf("xz %s: %v", src, err)
			}
			if err := os.WriteFile(dst+".xz", out, 0o644); err != nil {
				t.Fatal(err)
			}
			compressed[f] = f + ".xz"
		case "button":
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			w, err := os.Create(dst + ".gz")
			if err != nil {
				t.Fatal(err)
			}
			zw := gzip.NewWriter(w)
			if _, err := zw.Write(b); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			compressed[f] = f + ".gz"
		default:
			if err := os.Symlink(src, dst); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(compressed) != 2 {
		t.Fatalf("got evdev and button among %v: %v, want both", files, compressed)
	}
	for plain, c := range compressed {
		dep = []byte(strings.ReplaceAll(string(dep), plain+":", c+":"))
		dep = []byte(strings.ReplaceAll(string(dep), " "+plain, " "+c))
	}
	if err := os.WriteFile(filepath.Join(mods, "modules.dep"), dep, 0o644); err != nil {
		t.Fatal(err)
	}

	agent, err := agentBinary()
	if err != nil {
		t.Fatal(err)
	}
	g, err := Build(ctx, t.TempDir(), Options{Agent: agent, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{compressed["kernel/drivers/input/evdev.ko"], "kernel/drivers/acpi/button.ko"} {
		if !slices.Contains(g.Modules, want) {
			t.Errorf("got modules %v, want %s among them", g.Modules, want)
		}
	}
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	token, err := model.NewEnrollmentToken(pub)
	if err != nil {
		t.Fatal(err)
	}
	m := boot(ctx, t, qemu, g, Boot{Name: "g2", Env: "test", Token: token})
	_, i := m.expect(ctx, t, 0, "tether agent: g2 in environment test")
	if s := m.console.String(); strings.Contains(s, "tether-guest: cannot load") {
		t.Errorf("a module did not load:\n%s", s)
	}
	m.powerButton(ctx, t, i)
}
