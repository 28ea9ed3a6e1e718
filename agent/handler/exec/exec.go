// Package exec is the handler for `exec` resources: a command run by
// /bin/sh -c when its guard says it is needed: `creates` (a path that does
// not exist yet), `unless` (a command that fails), `onlyif` (a command that
// succeeds), or, with `refreshonly`, only when a subscribed resource
// changed. The command "exists" when its guard says nothing is to do, so a
// dry run reports it would run, and a second deploy after a run that
// satisfied the guard is a no-op. Guard commands run in dry runs too: they
// must only look.
//
// The shell reads each command from a file of mode 0600, removed before
// the shell starts and passed to it open (/dev/fd/3), not from its
// arguments (sh -c LINE), where every local user could read it: a command
// may hold a secret.
package exec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// Kind is the resource type this package handles.
const Kind = "exec"

// DefaultTimeout bounds a command (and each guard) without a timeout.
const DefaultTimeout = 300 * time.Second

// Handler enforces exec resources.
type Handler struct {
	handler.Declared
	rt handler.Runtime
}

var (
	_ handler.Handler   = (*Handler)(nil)
	_ handler.Refresher = (*Handler)(nil)
)

// New returns the exec handler for rt.
func New(rt handler.Runtime) *Handler {
	return &Handler{Declared: handler.Declare(Kind), rt: rt.WithFS()}
}

// Read implements handler.Handler: the command exists (needs no run) when
// its guard says so.
func (h *Handler) Read(ctx context.Context, res *model.Resource) (model.Attributes, bool, error) {
	if res.Purged {
		return nil, false, nil // there is nothing to remove of a command
	}
	needed, err := h.needed(ctx, res, false)
	if err != nil || needed {
		return nil, false, err
	}
	return maps.Clone(res.Attributes), true, nil
}

// needed evaluates the guards. refresh is set when a subscribed resource
// changed: refreshonly commands then run too.
func (h *Handler) needed(ctx context.Context, res *model.Resource, refresh bool) (bool, error) {
	a := res.Attributes
	if only, _ := a.Bool("refreshonly"); only && !refresh {
		return false, nil
	}
	if p, ok := a.String("creates"); ok {
		host, err := h.rt.HostPath(p)
		if err != nil {
			return false, err
		}
		if _, err := h.rt.FS.Lstat(host); err == nil {
			return false, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("creates: %w", err)
		}
	}
	if _, ok := a.String("onlyif"); ok {
		_, out, err := h.shell(ctx, res, "onlyif")
		if err != nil {
			return false, fmt.Errorf("onlyif: %w", err)
		}
		if out.ExitCode != 0 {
			return false, nil
		}
	}
	if _, ok := a.String("unless"); ok {
		_, out, err := h.shell(ctx, res, "unless")
		if err != nil {
			return false, fmt.Errorf("unless: %w", err)
		}
		if out.ExitCode == 0 {
			return false, nil
		}
	}
	return true, nil
}

// Apply implements handler.Handler: it runs the command.
func (h *Handler) Apply(ctx context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	if changes.Removed() || !changes.Created() {
		return nil
	}
	return h.run(ctx, res)
}

// Refresh implements handler.Refresher: a subscribed resource changed, so
// the command runs again if its guards (but refreshonly) allow, unless this
// deploy just ran it.
func (h *Handler) Refresh(ctx context.Context, res *model.Resource, applied handler.Changes) (string, error) {
	if applied.Created() {
		return "", nil
	}
	needed, err := h.needed(ctx, res, true)
	if err != nil || !needed {
		return "", err
	}
	if err := h.run(ctx, res); err != nil {
		return "", err
	}
	return "ran the command", nil
}

func (h *Handler) run(ctx context.Context, res *model.Resource) error {
	cmd, out, err := h.shell(ctx, res, "command")
	if err != nil {
		return err
	}
	if out.ExitCode != 0 {
		return handler.CommandError(cmd, out)
	}
	return nil
}

// shell runs the command line in attribute attr (command, unless, onlyif)
// with /bin/sh as the resource says: user, cwd, env, timeout. Errors show
// it as "sh -c LINE", what the resource asked for, with its sensitive
// values hidden.
func (h *Handler) shell(ctx context.Context, res *model.Resource, attr string) (handler.Command, handler.Output, error) {
	a := res.Attributes
	line, _ := a.String(attr)
	secrets := handler.SensitiveValues(res)
	cmd := handler.Command{Timeout: DefaultTimeout, Secrets: secrets, Label: handler.Hide("sh -c "+line, secrets)}
	if res.IsSensitive(attr) {
		cmd.Label = "sh -c " + model.RedactedValue
	}
	if t, ok := a.Number("timeout"); ok && t > 0 {
		cmd.Timeout = time.Duration(t * float64(time.Second))
	}
	if d, ok := a.String("cwd"); ok {
		cmd.Dir = h.rt.Root
		if d != "/" {
			host, err := h.rt.HostPath(d)
			if err != nil {
				return cmd, handler.Output{}, err
			}
			cmd.Dir = host
		}
		if cmd.Dir == "" {
			cmd.Dir = "/"
		}
	}
	env, _ := a.StringMap("env")
	if u, ok := a.String("user"); ok {
		cred, home, name, err := credential(u)
		if err != nil {
			return cmd, handler.Output{}, err
		}
		cmd.Credential = cred
		cmd.Env = append(cmd.Env, "HOME="+home, "USER="+name, "LOGNAME="+name)
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	f, err := script(line, cmd.Credential)
	if err != nil {
		return cmd, handler.Output{}, fmt.Errorf("write the %s script: %w", attr, err)
	}
	defer f.Close()
	cmd.Args, cmd.Files = []string{"/bin/sh", "/dev/fd/3"}, []*os.File{f}
	out, err := h.rt.Runner().Run(ctx, cmd)
	return cmd, out, err
}

// script returns a file holding line, of mode 0600, owned by the user the
// command runs as (cred), who must open it again as /dev/fd/3; open for
// reading and already removed, so no other process can find it, and
// nothing is left behind if the agent dies.
func script(line string, cred *syscall.Credential) (*os.File, error) {
	w, err := os.CreateTemp("", "tether-exec-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(w.Name())
	defer w.Close()
	if _, err := w.WriteString(line + "\n"); err != nil {
		return nil, err
	}
	if cred != nil && int(cred.Uid) != os.Geteuid() {
		if err := w.Chown(int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	return os.Open(w.Name())
}

// credential resolves a user name or uid to the process credential of that
// user: uid, primary gid and supplementary groups.
func credential(s string) (*syscall.Credential, string, string, error) {
	var u *user.User
	var err error
	if _, nerr := strconv.ParseUint(s, 10, 32); nerr == nil {
		u, err = user.LookupId(s)
	} else {
		u, err = user.Lookup(s)
	}
	if err != nil {
		return nil, "", "", fmt.Errorf("%w: user %q: %w", handler.ErrUnknownPrincipal, s, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(n))
			}
		}
	}
	return cred, u.HomeDir, u.Username, nil
}
