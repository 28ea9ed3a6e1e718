// Package handlertest is the conformance harness every handler passes. For
// each case, in a fresh root directory, it checks that:
//
//   - Validate accepts the case and rejects every invalid resource;
//   - a dry run (Read and ComputeChanges) reports changes and changes nothing;
//   - Apply converges: a Read after it reports no change;
//   - a second deploy is a no-op: no change, and the tree is untouched;
//   - an update to other desired attributes converges too;
//   - purge removes the thing, and purging again changes nothing.
//
// Handlers run on a Target: its file system (handler.FS) and its commands
// (handler.Runner), below a temporary root that is a directory of this
// machine, which the harness inspects. Local, the agent's own host, is the
// target of every suite; a target that reaches a host otherwise (SSH to
// this machine) runs the same suites, and RunFS checks its file system
// against the contract every handler relies on.
package handlertest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// Target is a host a suite runs handlers on.
type Target struct {
	// Name names the target in subtests ("local").
	Name string
	// TimeResolution is how finely the target's FS reports modification
	// times (SFTP: whole seconds); 0 means exactly, as the local host.
	TimeResolution time.Duration
	// Runtime returns the runtime of one case on the target: its FS and
	// Runner, with Root set to root, a fresh directory of this machine
	// (the harness and the cases' Setup and Check look at it directly, so
	// a remote target reaches this machine, as this process's user).
	Runtime func(t testing.TB, root string) handler.Runtime
}

// Local is the agent's own host: handler.HostFS with a SyncGroup, and the
// host's runner.
func Local() Target {
	return Target{Name: "local", Runtime: func(_ testing.TB, root string) handler.Runtime {
		return handler.Runtime{Root: root, Sync: handler.NewSyncGroup()}.WithFS()
	}}
}

// Targets are the targets this machine offers the suites: Local.
func Targets() []Target { return []Target{Local()} }

// Suite describes a handler under test.
type Suite struct {
	// New builds the handler for a runtime (the target's) whose Root is a
	// fresh temporary directory.
	New func(rt handler.Runtime) handler.Handler
	// Cases are valid desired states, each run in its own root.
	Cases []Case
	// Invalid are resources Validate must reject with handler.ErrInvalid.
	Invalid []Invalid
	// Targets are the hosts the suite runs on; nil means Targets().
	Targets []Target
}

// Case is one desired state to converge to.
type Case struct {
	Name string
	// Setup prepares the root before the case, for example an existing file
	// with other content. Optional.
	Setup func(t *testing.T, root string)
	// Resource is the desired state; it must differ from the setup state.
	Resource model.Resource
	// Update, when set, is a later desired state of the same resource.
	Update *model.Resource
	// Check inspects the host after Resource (and again after Update)
	// converged. Optional.
	Check func(t *testing.T, root string, res *model.Resource)
	// NoPurge skips the purge step for kinds that cannot be purged.
	NoPurge bool
}

// Invalid is a resource Validate must reject.
type Invalid struct {
	Name     string
	Resource model.Resource
}

// Run runs the suite on each of its targets: directly when there is one,
// else in a subtest per target.
func Run(t *testing.T, s Suite) {
	t.Helper()
	targets := s.Targets
	if targets == nil {
		targets = Targets()
	}
	if len(targets) == 1 {
		RunOn(t, targets[0], s)
		return
	}
	for _, target := range targets {
		t.Run(target.Name, func(t *testing.T) { RunOn(t, target, s) })
	}
}

// RunOn runs the suite on target.
func RunOn(t *testing.T, target Target, s Suite) {
	t.Helper()
	for _, inv := range s.Invalid {
		t.Run("invalid/"+inv.Name, func(t *testing.T) {
			h := s.New(target.Runtime(t, t.TempDir()))
			err := h.Validate(&inv.Resource)
			if err == nil {
				t.Fatalf("Validate accepted %s", inv.Resource.ID)
			}
			if !errors.Is(err, handler.ErrInvalid) {
				t.Fatalf("Validate error %q does not wrap handler.ErrInvalid", err)
			}
		})
	}
	for _, c := range s.Cases {
		t.Run(c.Name, func(t *testing.T) { runCase(t, target, s, c) })
	}
}

func runCase(t *testing.T, target Target, s Suite, c Case) {
	ctx := context.Background()
	root := t.TempDir()
	if c.Setup != nil {
		c.Setup(t, root)
	}
	h := s.New(target.Runtime(t, root))

	converge(ctx, t, h, root, &c.Resource, "apply")
	if c.Check != nil {
		c.Check(t, root, &c.Resource)
	}
	if c.Update != nil {
		converge(ctx, t, h, root, c.Update, "update")
		if c.Check != nil {
			c.Check(t, root, c.Update)
		}
	}
	if c.NoPurge {
		return
	}
	purged := model.Resource{
		ID:         c.Resource.ID,
		Attributes: model.Attributes{c.Resource.ID.Key: c.Resource.ID.Value},
		Purged:     true,
	}
	changes := converge(ctx, t, h, root, &purged, "purge")
	if !changes.Removed() {
		t.Fatalf("purge: changes %v do not remove the thing", changes)
	}
	if _, exists, err := h.Read(ctx, &purged); err != nil || exists {
		t.Fatalf("purge: after apply Read says exists=%v err=%v, want gone", exists, err)
	}
}

// converge runs one desired state through dry run, apply, re-read and a
// second deploy, and returns the changes the apply made.
func converge(ctx context.Context, t *testing.T, h handler.Handler, root string, res *model.Resource, step string) handler.Changes {
	t.Helper()
	if err := h.Validate(res); err != nil {
		t.Fatalf("%s: Validate rejected a valid resource: %v", step, err)
	}

	// Dry run: a read and a diff, and nothing on disk moves.
	before := snapshot(t, root)
	current, exists, err := h.Read(ctx, res)
	if err != nil {
		t.Fatalf("%s: Read: %v", step, err)
	}
	changes := handler.ComputeChanges(res, current, exists)
	if len(changes) == 0 {
		t.Fatalf("%s: the case must start from a state that differs from %s, but the dry run reports no change", step, res.ID)
	}
	assertSame(t, step+": dry run", before, snapshot(t, root))

	// Apply converges.
	if err := h.Apply(ctx, res, current, changes); err != nil {
		t.Fatalf("%s: Apply %v: %v", step, changes, err)
	}
	current, exists, err = h.Read(ctx, res)
	if err != nil {
		t.Fatalf("%s: Read after Apply: %v", step, err)
	}
	if again := handler.ComputeChanges(res, current, exists); len(again) != 0 {
		t.Fatalf("%s: Apply did not converge, still to change: %v", step, again)
	}

	// A second deploy is a no-op: nothing to change, and reading again
	// leaves the tree exactly as it was.
	after := snapshot(t, root)
	current, exists, err = h.Read(ctx, res)
	if err != nil {
		t.Fatalf("%s: second Read: %v", step, err)
	}
	if again := handler.ComputeChanges(res, current, exists); len(again) != 0 {
		t.Fatalf("%s: second deploy would change %v", step, again)
	}
	assertSame(t, step+": second deploy", after, snapshot(t, root))
	return changes
}

// entry is what the harness compares of each file-system entry.
type entry struct {
	Mode    fs.FileMode
	UID     uint32
	GID     uint32
	Size    int64
	ModTime int64
	Sum     [sha256.Size]byte
	Link    string
}

func snapshot(t *testing.T, root string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := entry{Mode: info.Mode(), Size: info.Size(), ModTime: info.ModTime().UnixNano()}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			e.UID, e.GID = st.Uid, st.Gid
		}
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Sum = sha256.Sum256(b)
		case info.Mode()&fs.ModeSymlink != 0:
			if e.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.IsDir():
			e.ModTime = 0 // reading a directory's entries is not a change
		}
		out[p] = e
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", root, err)
	}
	return out
}

func assertSame(t *testing.T, step string, before, after map[string]entry) {
	t.Helper()
	var diffs []string
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			diffs = append(diffs, "removed "+p)
		case a != b:
			diffs = append(diffs, fmt.Sprintf("changed %s: %+v -> %+v", p, b, a))
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			diffs = append(diffs, "created "+p)
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Fatalf("%s changed the file system:\n%v", step, diffs)
	}
}

// PathResource builds a resource of a path-based kind (file, directory, …)
// on agent "test", with attrs besides its path.
func PathResource(kind, path string, attrs model.Attributes) model.Resource {
	a := model.Attributes{"path": path}
	for k, v := range attrs {
		a[k] = v
	}
	return model.Resource{ID: model.ID{Type: kind, Agent: "test", Key: "path", Value: path}, Attributes: a}
}

// Recorder is a handler.Runner for providers whose tools this machine does
// not have (dnf, apk, systemd without an init): it records every command and
// answers from a fake host the test describes, so the test checks which
// commands a provider issues and how it reads their answers. It does not
// prove the real tool behaves as the fake says; tests using it say so.
// Without Respond it runs each command on this host (handler.HostRunner)
// after recording it, so a test of real tools sees what they were given.
// Like the host's runner, it refuses a command with a secret in its
// arguments (handler.ErrSecretInArgs), after recording it.
type Recorder struct {
	// Respond answers one command: its standard output and exit code.
	Respond func(args []string) (stdout string, exit int)

	mu   sync.Mutex
	cmds []handler.Command
}

// Run implements handler.Runner.
func (r *Recorder) Run(ctx context.Context, c handler.Command) (handler.Output, error) {
	if err := ctx.Err(); err != nil {
		return handler.Output{}, err
	}
	r.mu.Lock()
	r.cmds = append(r.cmds, c)
	r.mu.Unlock()
	if err := c.CheckSecrets(); err != nil {
		return handler.Output{}, err
	}
	if r.Respond == nil {
		return handler.HostRunner{}.Run(ctx, c)
	}
	out, code := r.Respond(c.Args)
	return handler.Output{Stdout: []byte(out), ExitCode: code}, nil
}

// Calls returns the arguments of the commands run so far, each command as
// one line.
func (r *Recorder) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.cmds))
	for i, c := range r.cmds {
		out[i] = strings.Join(c.Args, " ")
	}
	return out
}

// Commands returns the commands run so far, whole: with their standard
// input, environment, secrets and files (which the handler may have closed
// since: look at them in Respond).
func (r *Recorder) Commands() []handler.Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.cmds)
}

// Reset forgets the commands recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.cmds = nil
	r.mu.Unlock()
}

// NamedResource builds a resource of a name-identified kind (package,
// service, user, exec, …) on agent "test", with attrs besides its name.
func NamedResource(kind, name string, attrs model.Attributes) model.Resource {
	a := model.Attributes{"name": name}
	for k, v := range attrs {
		a[k] = v
	}
	return model.Resource{ID: model.ID{Type: kind, Agent: "test", Key: "name", Value: name}, Attributes: a}
}
