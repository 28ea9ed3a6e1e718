package handler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tetherhq/tether/model"
)

// Command is one program a handler runs: a package manager, a service tool,
// shadow-utils, or an exec resource's shell.
type Command struct {
	// Args is the program and its arguments; Args[0] is looked up in PATH.
	Args []string
	// Env is added to the agent's environment ("NAME=value").
	Env []string
	// Dir is the working directory ("" for the agent's).
	Dir string
	// Timeout kills the command (and its process group) when it runs longer;
	// 0 means only the context bounds it.
	Timeout time.Duration
	// UID and GID, when Credential is set, are the user the command runs as.
	Credential *syscall.Credential
	// Stdin is the command's standard input (none: /dev/null). A secret
	// reaches a command here, or in a file of mode 0600 (Files), never in
	// Args: every local user can read a process's arguments (ps,
	// /proc/PID/cmdline).
	Stdin []byte
	// Files are open files the command inherits as descriptors 3, 4, …,
	// which it opens again as /dev/fd/3, …: a file already removed, which
	// no other process can find by its path.
	Files []*os.File
	// Secrets are the sensitive values the command handles. They must not
	// show in Args or Label (the runner refuses the command with
	// ErrSecretInArgs), and CommandError hides them in the command's output.
	Secrets []string
	// Label, when set, names the command in errors instead of its
	// arguments: what the resource asked for rather than how it is run.
	Label string
}

func (c Command) String() string {
	if c.Label != "" {
		return c.Label
	}
	return strings.Join(c.Args, " ")
}

// minSecret is the length below which a secret is not looked for: a value
// that short ("!" locks an account) cannot be told apart from ordinary text,
// and hiding it would garble every message it occurs in.
const minSecret = 4

// ErrSecretInArgs is returned for a command whose arguments or label hold
// one of its Secrets: a handler passed a secret where every local user can
// read it.
var ErrSecretInArgs = errors.New("a secret in the command's arguments: pass it on standard input or in a file of mode 0600")

// CheckSecrets returns ErrSecretInArgs when one of c's Secrets shows in its
// arguments or label. The error names the program only: the rest holds the
// secret.
func (c Command) CheckSecrets() error {
	for _, s := range c.Secrets {
		if len(s) < minSecret {
			continue
		}
		leak := strings.Contains(c.Label, s)
		for _, a := range c.Args {
			leak = leak || strings.Contains(a, s)
		}
		if leak {
			program := "(empty)"
			if len(c.Args) > 0 {
				program = c.Args[0]
			}
			return fmt.Errorf("run %s: %w", program, ErrSecretInArgs)
		}
	}
	return nil
}

// SensitiveValues returns the values of res's sensitive attributes (those
// it lists, and those its kind declares always sensitive) as the Secrets of
// a command that handles them: each string, each element of a list and
// value of a map, and each line of a value of several lines (a shell quotes
// the line it fails on).
func SensitiveValues(res *model.Resource) []string {
	marked := *res
	marked.Sensitive = slices.Clone(res.Sensitive)
	model.MarkSensitive(&marked)
	var out []string
	add := func(s string) {
		out = append(out, s)
		if strings.Contains(s, "\n") {
			for _, l := range strings.Split(s, "\n") {
				out = append(out, strings.TrimSpace(l))
			}
		}
	}
	for _, name := range marked.Sensitive {
		if s, ok := res.Attributes.String(name); ok {
			add(s)
		} else if l, ok := res.Attributes.StringList(name); ok {
			for _, s := range l {
				add(s)
			}
		} else if m, ok := res.Attributes.StringMap(name); ok {
			for _, s := range m {
				add(s)
			}
		}
	}
	return out
}

// Hide returns text with every one of secrets replaced by
// model.RedactedValue, longest first so that a secret containing another
// is hidden whole.
func Hide(text string, secrets []string) string {
	sorted := slices.SortedFunc(slices.Values(secrets), func(a, b string) int { return len(b) - len(a) })
	for _, s := range sorted {
		if len(s) >= minSecret {
			text = strings.ReplaceAll(text, s, model.RedactedValue)
		}
	}
	return text
}

// Output is what a finished command left behind.
type Output struct {
	Stdout, Stderr []byte
	// ExitCode is the command's exit status; -1 when a signal ended it.
	ExitCode int
}

// Runner runs commands. Handlers never call os/exec themselves: the agent
// passes the host's runner, and tests of providers that cannot run on the
// test machine (dnf, apk, systemd without an init) pass a recording one.
type Runner interface {
	// Run runs cmd to completion. A command that ran and exited non-zero is
	// not an error (ExitCode says so); failing to start it, a timeout and a
	// cancelled context are.
	Run(ctx context.Context, cmd Command) (Output, error)
}

// ErrTimeout is returned when a command ran longer than its Timeout.
var ErrTimeout = errors.New("command timed out")

// HostRunner runs commands on this host with os/exec. A command runs in a
// process group of its own, so a timeout or cancellation kills everything it
// started, not just the shell.
type HostRunner struct{}

// Run implements Runner.
func (HostRunner) Run(ctx context.Context, c Command) (Output, error) {
	if len(c.Args) == 0 {
		return Output{}, errors.New("run: empty command")
	}
	if err := c.CheckSecrets(); err != nil {
		return Output{}, err
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.Timeout, fmt.Errorf("%w after %s: %s", ErrTimeout, c.Timeout, c))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, c.Args[0], c.Args[1:]...)
	cmd.Dir = c.Dir
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	cmd.ExtraFiles = c.Files
	if len(c.Env) > 0 {
		cmd.Env = append(cmd.Environ(), c.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.Credential}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := Output{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrTimeout) {
			return out, cause
		}
		return out, fmt.Errorf("%s: %w", c, ctx.Err())
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		out.ExitCode = exit.ExitCode()
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("%s: %w", c, err)
	}
	return out, nil
}

// Runner returns the runtime's command runner (the host's when unset).
func (rt Runtime) Runner() Runner {
	if rt.Run == nil {
		return HostRunner{}
	}
	return rt.Run
}

// Exec runs args and returns the exit code and output; only a failure to run
// at all is an error.
func (rt Runtime) Exec(ctx context.Context, args ...string) (Output, error) {
	return rt.Runner().Run(ctx, Command{Args: args})
}

// Output runs args and returns its standard output; a non-zero exit is an
// error quoting the command and the end of its error output.
func (rt Runtime) Output(ctx context.Context, env []string, args ...string) ([]byte, error) {
	return rt.OutputOf(ctx, Command{Args: args, Env: env})
}

// OutputOf is Output for a command with more than arguments and
// environment: standard input, secrets.
func (rt Runtime) OutputOf(ctx context.Context, c Command) ([]byte, error) {
	out, err := rt.Runner().Run(ctx, c)
	if err != nil {
		return out.Stdout, err
	}
	if out.ExitCode != 0 {
		return out.Stdout, CommandError(c, out)
	}
	return out.Stdout, nil
}

// CommandError describes a command that exited non-zero, with the last lines
// it printed (a package manager's reason is at the end), c's Secrets hidden
// in them.
func CommandError(c Command, out Output) error {
	msg := strings.TrimSpace(Hide(string(out.Stderr), c.Secrets))
	if msg == "" {
		msg = strings.TrimSpace(Hide(string(out.Stdout), c.Secrets))
	}
	if lines := strings.Split(msg, "\n"); len(lines) > 6 {
		msg = strings.Join(lines[len(lines)-6:], "\n")
	}
	if len(msg) > 2000 {
		msg = msg[len(msg)-2000:]
	}
	if msg == "" {
		return fmt.Errorf("%s: exit status %d", c, out.ExitCode)
	}
	return fmt.Errorf("%s: exit status %d: %s", c, out.ExitCode, msg)
}

// ErrNoProvider is returned when no provider for a resource can be found on
// this host.
var ErrNoProvider = errors.New("no provider on this host")

// PickProvider chooses the platform tool for a resource: its provider
// attribute (want, "" when unset), else the host's (from facts), else the
// first candidate whose program is installed. Candidates are provider
// names, each with the program that proves it is there, in order of
// preference; the chosen one must be a candidate.
func PickProvider(want, host string, candidates [][2]string) (string, error) {
	if want == "" {
		want = host
	}
	var names []string
	for _, c := range candidates {
		names = append(names, c[0])
		if want == c[0] {
			return want, nil
		}
	}
	if want != "" {
		return "", fmt.Errorf("%w: provider %q is not supported here (want one of %s)", ErrNoProvider, want, strings.Join(names, ", "))
	}
	for _, c := range candidates {
		if _, err := exec.LookPath(c[1]); err == nil {
			return c[0], nil
		}
	}
	return "", fmt.Errorf("%w: none of %s is installed; set the resource's provider attribute", ErrNoProvider, strings.Join(names, ", "))
}

// HostProvider returns the host's provider among candidates: configured
// (from the facts) when set, else the first whose program is installed,
// looked up once, on first use; "" when none is.
func HostProvider(configured string, candidates [][2]string) func() string {
	return sync.OnceValue(func() string {
		if configured != "" {
			return configured
		}
		p, _ := PickProvider("", "", candidates)
		return p
	})
}
