// Package sshtest starts a private OpenSSH server for tests: its own
// configuration, host key and authorized key in a temporary directory,
// listening on a free port of 127.0.0.1, letting this process's user (root)
// in with a key. It gives the handler suites an SSH target to this machine
// (Targets), beside the local one.
package sshtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/agent/target/ssh"
	"github.com/tetherhq/tether/model/testenv"
)

// Sshd is where Debian's openssh-server puts the daemon.
const Sshd = "/usr/sbin/sshd"

// Server is one private sshd.
type Server struct {
	// Addr is 127.0.0.1:port.
	Addr string
	// HostKey is the server's public host key, authorized_keys format.
	HostKey string
	// ClientKey is the PEM private key the server lets the user in with.
	ClientKey []byte
	// User is this process's user, whom the server lets in.
	User string

	dir    string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once sshd was reaped
	stderr *bytes.Buffer
}

// missing says why this machine cannot run a private sshd ("" when it can).
func missing() string {
	if _, err := os.Stat(Sshd); err != nil {
		return Sshd + " is missing: install openssh-server (make setup)"
	}
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		return "ssh-keygen is missing: install openssh-client (make setup)"
	}
	if os.Geteuid() != 0 {
		return "a private sshd needs root (privilege separation, logging in as this user)"
	}
	return ""
}

// Start starts a private sshd for the test, stopped when it ends. Without
// sshd or root the test skips (fails under CI: testenv.Need).
func Start(t testing.TB) *Server {
	t.Helper()
	why := missing()
	testenv.Need(t, why == "", why)
	s, err := start(t)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func start(t testing.TB) (*Server, error) {
	u, err := user.Current()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	s := &Server{dir: dir, User: u.Username}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege separation directory
		return nil, fmt.Errorf("sshd's privilege separation directory: %w", err)
	}
	if err := Keygen(filepath.Join(dir, "host")); err != nil {
		return nil, err
	}
	if err := Keygen(filepath.Join(dir, "client")); err != nil {
		return nil, err
	}
	host, err := os.ReadFile(filepath.Join(dir, "host.pub"))
	if err != nil {
		return nil, err
	}
	s.HostKey = strings.TrimSpace(string(host))
	if s.ClientKey, err = os.ReadFile(filepath.Join(dir, "client")); err != nil {
		return nil, err
	}
	if err := copyFile(filepath.Join(dir, "client.pub"), filepath.Join(dir, "authorized_keys")); err != nil {
		return nil, err
	}
	// The port is free when chosen; another process may take it before
	// sshd binds it: then sshd exits, and another port is tried.
	for attempt := 1; ; attempt++ {
		if err = s.listen(); err == nil || attempt == 5 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	t.Cleanup(s.stop)
	return s, nil
}

// listen picks a free port, writes sshd's configuration for it and
// starts sshd.
func (s *Server) listen() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.Addr = l.Addr().String()
	_ = l.Close()
	_, port, _ := net.SplitHostPort(s.Addr)
	config := strings.Join([]string{
		"Port " + port,
		"ListenAddress 127.0.0.1",
		"HostKey " + filepath.Join(s.dir, "host"),
		"PidFile " + filepath.Join(s.dir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(s.dir, "authorized_keys"),
		"StrictModes no", // the temporary directory is below /tmp, writable by all
		"UsePAM no",
		"PermitRootLogin yes",
		"PasswordAuthentication yes",
		"KbdInteractiveAuthentication no",
		"Subsystem sftp internal-sftp",
		"MaxSessions 100",
		"MaxStartups 100",
		"LogLevel ERROR",
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(s.dir, "sshd_config"), []byte(config), 0o600); err != nil {
		return err
	}
	return s.run()
}

// Keygen writes a new ed25519 key pair, unencrypted: path (the private key,
// OpenSSH PEM) and path.pub (authorized_keys format).
func Keygen(path string) error {
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tether-test", "-f", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ssh-keygen: %v: %s", err, out)
	}
	return nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// run starts sshd and waits until it answers.
func (s *Server) run() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(Sshd, "-D", "-e", "-f", filepath.Join(s.dir, "sshd_config"))
	s.stderr = &bytes.Buffer{}
	cmd.Stderr = s.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start sshd: %w", err)
	}
	s.cmd = cmd
	exited := make(chan struct{})
	s.exited = exited
	go func() { _ = cmd.Wait(); close(exited) }() // stop waits for it
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("sshd exited at start: %s", s.stderr)
		default:
		}
		if banner(s.Addr) {
			return nil
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			s.cmd = nil
			return fmt.Errorf("sshd does not answer on %s: %s", s.Addr, s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// banner reports whether an SSH server answers on addr.
func banner(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-")
}

// Fingerprint returns ssh-keygen's SHA256 fingerprint of the public key
// in file (authorized_keys format).
func Fingerprint(file string) (string, error) {
	out, err := exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", file).Output()
	if err != nil {
		return "", fmt.Errorf("ssh-keygen -l %s: %w", file, err)
	}
	fields := strings.Fields(string(out)) // 256 SHA256:… comment (ED25519)
	if len(fields) < 2 {
		return "", fmt.Errorf("ssh-keygen -l %s: %q", file, out)
	}
	return fields[1], nil
}

// HostKeyFingerprint is the fingerprint of the server's host key.
func (s *Server) HostKeyFingerprint(t testing.TB) string {
	t.Helper()
	f, err := Fingerprint(filepath.Join(s.dir, "host.pub"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// NewHostKey restarts sshd with a new host key, as a reinstalled host (or
// one in the way) would offer.
func (s *Server) NewHostKey(t testing.TB) {
	t.Helper()
	s.stop()
	for _, f := range []string{"host", "host.pub"} {
		if err := os.Remove(filepath.Join(s.dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := Keygen(filepath.Join(s.dir, "host")); err != nil {
		t.Fatal(err)
	}
	host, err := os.ReadFile(filepath.Join(s.dir, "host.pub"))
	if err != nil {
		t.Fatal(err)
	}
	s.HostKey = strings.TrimSpace(string(host))
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
}

// Restart stops sshd, with every connection it serves (as a reboot or a
// restart of the host's sshd would drop them), and starts it again on the
// same address with the same keys.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
}

// stop kills sshd and the processes it started (one per connection,
// each in a session of its own), by their ids, and waits for sshd.
func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	for _, p := range Descendants(pid) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
}

// Pid is sshd's process id (0 when stopped).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Descendants returns the ids of the processes below pid, read from
// /proc.
func Descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, children[p]...)
		queue = append(queue, children[p]...)
	}
	return out
}

// Config returns the configuration of a target reaching the server as the
// user, with its key, the host key pinned.
func (s *Server) Config() ssh.Config {
	c := ssh.Default()
	c.Address, c.User, c.PrivateKey, c.HostKey = s.Addr, s.User, s.ClientKey, s.HostKey
	return c
}

// Dial connects a target to the server, closed when the test ends.
func (s *Server) Dial(t testing.TB) *ssh.Target {
	t.Helper()
	target, err := ssh.Dial(context.Background(), s.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = target.Close() })
	return target
}

// Target is the handler suites' SSH target: every case's file system and
// commands through one connection to the server, as this process's user.
func (s *Server) Target(t testing.TB) handlertest.Target {
	return HandlerTarget(s.Dial(t))
}

// HandlerTarget is target as a suite's target.
func HandlerTarget(target *ssh.Target) handlertest.Target {
	return handlertest.Target{
		Name:           "ssh",
		TimeResolution: time.Second, // SFTP's modification times
		Runtime: func(_ testing.TB, root string) handler.Runtime {
			return handler.Runtime{Root: root, FS: target, Run: target}
		},
	}
}

// Targets returns the targets of handlertest.Targets and an SSH target to
// a private sshd started for the test. Where sshd cannot run, it says so
// and returns the others, so the local runs go on; under CI it fails
// the test instead (testenv.Required).
func Targets(t testing.TB) []handlertest.Target {
	t.Helper()
	targets := handlertest.Targets()
	if why := missing(); why != "" {
		if testenv.Required() {
			t.Fatal(why)
		}
		t.Logf("SKIPPED the ssh target: %s", why)
		return targets
	}
	return append(targets, Start(t).Target(t))
}

// Log is what sshd wrote to its standard error since it last started.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}
