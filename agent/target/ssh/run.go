package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tetherhq/tether/agent/handler"
	cryptossh "golang.org/x/crypto/ssh"
)

// osWriteExcl opens a new file for writing, failing if it exists.
const osWriteExcl = os.O_WRONLY | os.O_CREATE | os.O_EXCL

// ctxFS is the context of file operations: handler.FS takes none, so
// they are bounded by the connection's keepalive instead.
func ctxFS() context.Context { return context.Background() }

// ErrUnsupported is returned (wrapped) for a command this target cannot
// run as asked: one that inherits open files, or runs as another user.
var ErrUnsupported = errors.New("not supported on an SSH target")

// Run implements handler.Runner: one session on the connection per
// command, which runs through the user's shell on the host as
//
//	echo $$ && cd DIR && export NAME=value… && exec ARGS…
//
// each word quoted. Standard input, output and error and the exit status
// are the command's, as on the local host. Over its timeout (the
// command's, else Config.CommandTimeout), or when ctx ends, the command
// and what it started are sent SIGKILL and its session closed: the error names it and wraps
// handler.ErrTimeout or the context's error, and the connection stays
// usable. Environment values appear in the host's process list while the
// shell starts, so a command whose Env holds one of its Secrets is refused,
// as one whose arguments do.
func (t *Target) Run(ctx context.Context, c handler.Command) (handler.Output, error) {
	if len(c.Args) == 0 {
		return handler.Output{}, errors.New("run: empty command")
	}
	if err := c.CheckSecrets(); err != nil {
		return handler.Output{}, err
	}
	if err := checkEnvSecrets(c); err != nil {
		return handler.Output{}, err
	}
	if len(c.Files) > 0 || c.Credential != nil {
		return handler.Output{}, fmt.Errorf("run %s on %s: inherited files and another user's credentials are %w", c, t.name, ErrUnsupported)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = t.cfg.CommandTimeout
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%w after %s: %s on %s", handler.ErrTimeout, timeout, c, t.name))
		defer cancel()
	}
	conn, err := t.get(ctx)
	if err != nil {
		return handler.Output{}, fmt.Errorf("%s: %w", c, err)
	}
	s, err := conn.ssh.NewSession()
	if err != nil {
		if lost(conn, err) {
			err = t.lostError(conn, err)
		}
		return handler.Output{}, fmt.Errorf("%s: start a session: %w", c, err)
	}
	defer s.Close()
	var stdout pidStdout
	var stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	if c.Stdin != nil {
		s.Stdin = bytes.NewReader(c.Stdin)
	}
	if err := s.Start(commandLine(c)); err != nil {
		if lost(conn, err) {
			err = t.lostError(conn, err)
		}
		return handler.Output{}, fmt.Errorf("%s: %w", c, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }() // ends with the session; Run waits for it
	select {
	case err = <-done:
	case <-ctx.Done():
		t.kill(conn, s, stdout.group())
		select {
		case <-done:
		case <-time.After(t.cfg.DialTimeout):
			// The host keeps the session open: give up the connection
			// (the next operation dials again), which ends it.
			t.drop(conn)
			<-done
		}
		out := handler.Output{Stdout: stdout.bytes(), Stderr: stderr.Bytes(), ExitCode: -1}
		if cause := context.Cause(ctx); errors.Is(cause, handler.ErrTimeout) {
			return out, cause
		}
		return out, fmt.Errorf("%s: %w", c, ctx.Err())
	}
	out := handler.Output{Stdout: stdout.bytes(), Stderr: stderr.Bytes()}
	var exit *cryptossh.ExitError
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &exit):
		out.ExitCode = exit.ExitStatus()
		if exit.Signal() != "" {
			out.ExitCode = -1
		}
		return out, nil
	case lost(conn, err) || errors.As(err, new(*cryptossh.ExitMissingError)):
		return out, fmt.Errorf("%s: %w", c, t.lostError(conn, err))
	}
	return out, fmt.Errorf("%s: %w", c, err)
}

// kill ends a command that overran: SIGKILL to its process group (sshd
// makes each session's command a group leader, and the command line
// prints its id first), from a session of its own, since OpenSSH refuses
// the protocol's signal request to a root login; the signal request too,
// for servers that take it; then the session is closed.
func (t *Target) kill(conn *conn, s *cryptossh.Session, group int) {
	_ = s.Signal(cryptossh.SIGKILL)
	if group > 1 {
		if k, err := conn.ssh.NewSession(); err == nil {
			_ = k.Run("kill -s KILL -- -" + strconv.Itoa(group))
			_ = k.Close()
		}
	}
	_ = s.Close()
}

// pidStdout is a command's standard output, less its first line: the
// shell's process id, which commandLine prints before the command starts.
type pidStdout struct {
	mu   sync.Mutex
	head []byte // the first line so far
	pid  int
	seen bool // the first line is complete
	out  bytes.Buffer
}

func (w *pidStdout) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if !w.seen {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.head = append(w.head, p...)
			return n, nil
		}
		w.head = append(w.head, p[:i]...)
		w.pid, _ = strconv.Atoi(string(w.head))
		w.seen = true
		p = p[i+1:]
	}
	w.out.Write(p)
	return n, nil
}

func (w *pidStdout) group() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pid
}

func (w *pidStdout) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.out.Bytes())
}

// checkEnvSecrets refuses a command with one of its Secrets in its
// environment: the shell's command line shows it (see Run).
func checkEnvSecrets(c handler.Command) error {
	return handler.Command{Args: append([]string{c.String()}, c.Env...), Secrets: c.Secrets}.CheckSecrets()
}

// commandLine is c as one line for the host's shell, which first prints
// its process id (the command's, after exec) on a line of its own.
func commandLine(c handler.Command) string {
	var b strings.Builder
	b.WriteString("echo $$ && ")
	if c.Dir != "" {
		b.WriteString("cd " + quote(c.Dir) + " && ")
	}
	if len(c.Env) > 0 {
		b.WriteString("export")
		for _, e := range c.Env {
			b.WriteString(" " + quote(e))
		}
		b.WriteString(" && ")
	}
	b.WriteString("exec")
	for _, a := range c.Args {
		b.WriteString(" " + quote(a))
	}
	return b.String()
}

// quote makes s one word for a POSIX shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
