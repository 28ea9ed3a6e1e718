package ssh_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/agent/target/ssh"
	"github.com/tetherhq/tether/agent/target/ssh/sshtest"
)

// TestAgentlessFS checks the SSH target's file system against the contract
// every path-based handler relies on.
func TestAgentlessFS(t *testing.T) {
	s := sshtest.Start(t)
	handlertest.RunFS(t, s.Target(t))
}

func TestAgentlessRun(t *testing.T) {
	s := sshtest.Start(t)
	target := s.Dial(t)
	ctx := context.Background()
	dir := t.TempDir()
	out, err := target.Run(ctx, handler.Command{
		Args:  []string{"sh", "-c", `printf '%s|%s|' "$GREETING" "$(pwd)"; cat; echo oops >&2; exit 3`},
		Env:   []string{"GREETING=it's me"},
		Dir:   dir,
		Stdin: []byte("from stdin"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "it's me|" + dir + "|from stdin"; string(out.Stdout) != want {
		t.Errorf("stdout: got %q, want %q", out.Stdout, want)
	}
	if string(out.Stderr) != "oops\n" || out.ExitCode != 3 {
		t.Errorf("stderr, exit: got %q, %d, want %q, 3", out.Stderr, out.ExitCode, "oops\n")
	}
	if _, err := target.Run(ctx, handler.Command{Args: []string{"true"}, Env: []string{"TOKEN=s3cr3t-value"}, Secrets: []string{"s3cr3t-value"}}); !errors.Is(err, handler.ErrSecretInArgs) {
		t.Errorf("a secret in the environment: got %v, want handler.ErrSecretInArgs", err)
	}
	if _, err := target.Run(ctx, handler.Command{Args: []string{"true"}, Files: []*os.File{os.Stdin}}); !errors.Is(err, ssh.ErrUnsupported) {
		t.Errorf("inherited files: got %v, want ssh.ErrUnsupported", err)
	}
}

// TestAgentlessCommandTimeout: a command over its timeout is killed, the
// error names it, and the connection serves the next command.
func TestAgentlessCommandTimeout(t *testing.T) {
	s := sshtest.Start(t)
	target := s.Dial(t)
	ctx := context.Background()
	_, err := target.Run(ctx, handler.Command{Args: []string{"sleep", "60"}, Timeout: time.Second})
	if !errors.Is(err, handler.ErrTimeout) || !strings.Contains(err.Error(), "sleep 60") {
		t.Fatalf("got %v, want handler.ErrTimeout naming sleep 60", err)
	}
	// The command is gone: no sleep left below sshd (it may take the host
	// a moment to reap it).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if !sleeping(s.Pid()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep 60 still runs on the host after its timeout")
		}
	}
	out, err := target.Run(ctx, handler.Command{Args: []string{"echo", "still here"}})
	if err != nil || string(out.Stdout) != "still here\n" {
		t.Fatalf("after a timeout: got %q, %v, want the connection usable", out.Stdout, err)
	}
}

// sleeping reports whether a sleep runs below the sshd process pid.
func sleeping(pid int) bool {
	for _, p := range sshtest.Descendants(pid) {
		if b, err := os.ReadFile(filepath.Join("/proc", itoa(p), "cmdline")); err == nil && strings.HasPrefix(string(b), "sleep\x0060") {
			return true
		}
	}
	return false
}

// TestAgentlessHostKeyChanged: a host offering another key than the one
// pinned, or than the one trusted on first use, is refused before anything
// is sent, and the error says what to do.
func TestAgentlessHostKeyChanged(t *testing.T) {
	s := sshtest.Start(t)
	other := filepath.Join(t.TempDir(), "other")
	if err := sshtest.Keygen(other); err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(other + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	otherPrint, err := sshtest.Fingerprint(other + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	offered := s.HostKeyFingerprint(t)
	for name, pin := range map[string]string{"key": string(pub), "fingerprint": otherPrint} {
		t.Run("pinned "+name, func(t *testing.T) {
			cfg := s.Config()
			cfg.HostKey = pin
			target, err := ssh.Dial(context.Background(), cfg)
			assertChanged(t, err, s.Addr, otherPrint, offered)
			if target != nil {
				t.Fatal("Dial returned a target")
			}
		})
	}
	t.Run("the pinned fingerprint", func(t *testing.T) {
		cfg := s.Config()
		cfg.HostKey = offered
		target, err := ssh.Dial(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		_ = target.Close()
	})

	t.Run("trusted on first use", func(t *testing.T) {
		cfg := s.Config()
		cfg.HostKey = ""
		var seen []string
		cfg.TrustOnFirstUse = func(host, key, fingerprint string) error {
			seen = append(seen, host+" "+key+" "+fingerprint)
			return nil
		}
		target, err := ssh.Dial(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer target.Close()
		if want := s.Addr + " " + strings.TrimSuffix(s.HostKey, " tether-test") + " " + offered; len(seen) != 1 || seen[0] != want {
			t.Fatalf("TrustOnFirstUse saw %q, want once %q", seen, want)
		}
		// The host comes back with another key: the next operation is
		// refused, and changes nothing.
		s.NewHostKey(t)
		p := filepath.Join(t.TempDir(), "f")
		err = target.WriteFile(p, strings.NewReader("x"), 0o644, -1, -1)
		if errors.Is(err, ssh.ErrConnectionLost) { // the old connection's end, seen first
			err = target.WriteFile(p, strings.NewReader("x"), 0o644, -1, -1)
		}
		assertChanged(t, err, s.Addr, offered, s.HostKeyFingerprint(t))
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the file was written through a refused connection: %v", err)
		}
		if len(seen) != 1 {
			t.Fatalf("TrustOnFirstUse asked again: %q", seen)
		}
	})
}

func assertChanged(t *testing.T, err error, host, want, got string) {
	t.Helper()
	if !errors.Is(err, ssh.ErrHostKeyChanged) {
		t.Fatalf("got %v, want ssh.ErrHostKeyChanged", err)
	}
	var changed *ssh.HostKeyChangedError
	if !errors.As(err, &changed) || changed.Host != host || changed.Want != want || changed.Got != got {
		t.Fatalf("got %+v, want host %s, pinned %s, offered %s", changed, host, want, got)
	}
	for _, s := range []string{host, want, got, "pin it"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("the error %q does not say %q", err, s)
		}
	}
}

// TestAgentlessAuthRefused: a wrong password or key is a clear
// authentication error, not a connection one.
func TestAgentlessAuthRefused(t *testing.T) {
	s := sshtest.Start(t)
	other := filepath.Join(t.TempDir(), "other")
	if err := sshtest.Keygen(other); err != nil {
		t.Fatal(err)
	}
	otherKey, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	for name, set := range map[string]func(*ssh.Config){
		"password": func(c *ssh.Config) { c.PrivateKey, c.Password = nil, "not the password" },
		"key":      func(c *ssh.Config) { c.PrivateKey = otherKey },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := s.Config()
			set(&cfg)
			_, err := ssh.Dial(context.Background(), cfg)
			if !errors.Is(err, ssh.ErrAuth) || !strings.Contains(err.Error(), cfg.User+"@"+s.Addr) {
				t.Fatalf("got %v, want ssh.ErrAuth naming %s@%s", err, cfg.User, s.Addr)
			}
		})
	}
	t.Run("invalid config", func(t *testing.T) {
		cfg := s.Config()
		cfg.PrivateKey, cfg.HostKey = []byte("not a key"), "not a key either"
		_, err := ssh.Dial(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "private key") || !strings.Contains(err.Error(), "host key") {
			t.Fatalf("got %v, want an error naming the private key and the host key", err)
		}
	})
}

// TestAgentlessRedial: sshd killed and restarted between operations (its
// connections with it): the operation that finds the connection dead fails
// saying so, and the next one connects again.
func TestAgentlessRedial(t *testing.T) {
	s := sshtest.Start(t)
	target := s.Dial(t)
	root := t.TempDir()
	if err := target.WriteFile(filepath.Join(root, "a"), strings.NewReader("a"), 0o644, -1, -1); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	var err error
	for range 2 { // at most one operation fails, with ErrConnectionLost
		if _, err = target.Lstat(filepath.Join(root, "a")); err == nil {
			break
		}
		if !errors.Is(err, ssh.ErrConnectionLost) {
			t.Fatalf("after a restart: got %v, want ssh.ErrConnectionLost or success", err)
		}
	}
	if err != nil {
		t.Fatalf("the operation after the lost one: %v", err)
	}
	s.Restart(t)
	var out handler.Output
	for range 2 {
		if out, err = target.Run(context.Background(), handler.Command{Args: []string{"cat", filepath.Join(root, "a")}}); err == nil {
			break
		}
		if !errors.Is(err, ssh.ErrConnectionLost) {
			t.Fatalf("a command after a restart: got %v, want ssh.ErrConnectionLost or success", err)
		}
	}
	if err != nil || string(out.Stdout) != "a" {
		t.Fatalf("a command after the lost one: got %q, %v", out.Stdout, err)
	}
}

// TestAgentlessConcurrent: operations from many goroutines share the
// connection.
func TestAgentlessConcurrent(t *testing.T) {
	s := sshtest.Start(t)
	target := s.Dial(t)
	root := t.TempDir()
	errs := make(chan error, 40)
	for i := range 20 {
		go func() {
			p := filepath.Join(root, itoa(i))
			if err := target.WriteFile(p, strings.NewReader(p), 0o640, -1, -1); err != nil {
				errs <- err
				return
			}
			same, err := target.SameContent(p, p)
			if err == nil && !same {
				err = errors.New(p + ": other content")
			}
			errs <- err
		}()
		go func() {
			_, err := target.Run(context.Background(), handler.Command{Args: []string{"true"}})
			errs <- err
		}()
	}
	for range 40 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
