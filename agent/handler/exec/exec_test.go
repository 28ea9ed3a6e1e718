package exec

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/model"
)

func res(name string, attrs model.Attributes) model.Resource {
	return handlertest.NamedResource(Kind, name, attrs)
}

func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Commands run with cwd "/" of the resource, which is the test's root.
func TestConformance(t *testing.T) {
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { return New(rt) },
		Cases: []handlertest.Case{
			{
				Name:     "creates",
				Resource: res("init", model.Attributes{"command": "echo one > made", "cwd": "/", "creates": "/made"}),
				Update:   new(res("init", model.Attributes{"command": "echo two > made2", "cwd": "/", "creates": "/made2"})),
				Check: func(t *testing.T, root string, r *model.Resource) {
					if _, err := os.Stat(filepath.Join(root, r.Attributes["creates"].(string))); err != nil {
						t.Fatal(err)
					}
				},
				NoPurge: true,
			},
			{
				Name:     "unless",
				Resource: res("flag", model.Attributes{"command": "touch flag", "unless": "test -e flag", "cwd": "/"}),
				NoPurge:  true,
			},
			{
				Name: "env and timeout",
				Resource: res("greet", model.Attributes{"command": `printf %s "$GREETING" > out`, "cwd": "/", "creates": "/out",
					"env": map[string]any{"GREETING": "hello there"}, "timeout": 10}),
				Check: func(t *testing.T, root string, _ *model.Resource) {
					if got := content(t, filepath.Join(root, "out")); got != "hello there" {
						t.Fatalf("the command saw GREETING=%q", got)
					}
				},
				NoPurge: true,
			},
		},
		Invalid: []handlertest.Invalid{
			{Name: "no guard", Resource: res("x", model.Attributes{"command": "true"})},
			{Name: "no command", Resource: res("x", model.Attributes{"creates": "/x"})},
			{Name: "relative creates", Resource: res("x", model.Attributes{"command": "true", "creates": "x"})},
			{Name: "bad env name", Resource: res("x", model.Attributes{"command": "true", "onlyif": "true", "env": map[string]any{"A=B": "c"}})},
			{Name: "zero timeout", Resource: res("x", model.Attributes{"command": "true", "onlyif": "true", "timeout": 0})},
		},
	})
}

func deploy(t *testing.T, h *Handler, r model.Resource) (handler.Changes, error) {
	t.Helper()
	ctx := context.Background()
	if err := h.Validate(&r); err != nil {
		t.Fatal(err)
	}
	cur, exists, err := h.Read(ctx, &r)
	if err != nil {
		return nil, err
	}
	changes := handler.ComputeChanges(&r, cur, exists)
	if len(changes) == 0 {
		return nil, nil
	}
	return changes, h.Apply(ctx, &r, cur, changes)
}

func TestGuards(t *testing.T) {
	root := t.TempDir()
	h := New(handler.Runtime{Root: root})
	// onlyif failing: nothing runs.
	if ch, err := deploy(t, h, res("a", model.Attributes{"command": "touch a", "cwd": "/", "onlyif": "false"})); err != nil || ch != nil {
		t.Fatalf("onlyif false: %v %v", ch, err)
	}
	if _, err := os.Stat(filepath.Join(root, "a")); err == nil {
		t.Fatal("the command ran although onlyif failed")
	}
	// A failing command is an error carrying its output.
	_, err := deploy(t, h, res("b", model.Attributes{"command": "echo boom >&2; exit 3", "onlyif": "true"}))
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("failing command: %v", err)
	}
	// A command over its timeout is killed, with everything it started.
	_, err = deploy(t, h, res("c", model.Attributes{"command": "sleep 30 & sleep 30", "onlyif": "true", "timeout": 0.2}))
	if err == nil || !strings.Contains(err.Error(), "timed out") || !strings.Contains(err.Error(), "sh -c sleep 30 & sleep 30") {
		t.Fatalf("slow command: %v", err)
	}
}

// refreshonly commands run on a refresh only, and a refresh right after
// the command ran in the same deploy does not run it twice.
func TestRefresh(t *testing.T) {
	root := t.TempDir()
	h := New(handler.Runtime{Root: root})
	ctx := context.Background()
	r := res("reload", model.Attributes{"command": "echo x >> count", "cwd": "/", "refreshonly": true})
	if ch, err := deploy(t, h, r); err != nil || ch != nil {
		t.Fatalf("refreshonly on a deploy: %v %v", ch, err)
	}
	did, err := h.Refresh(ctx, &r, nil)
	if err != nil || did == "" {
		t.Fatalf("Refresh: %q %v", did, err)
	}
	if got := content(t, filepath.Join(root, "count")); got != "x\n" {
		t.Fatalf("count %q after one refresh", got)
	}
	g := res("g", model.Attributes{"command": "echo y >> count2", "cwd": "/", "creates": "/count2"})
	if did, err := h.Refresh(ctx, &g, handler.Changes{model.AttrPresent: {Current: false, Desired: true}}); err != nil || did != "" {
		t.Fatalf("Refresh after the command ran: %q %v", did, err)
	}
}

func TestRunsAsUser(t *testing.T) {
	handlertest.NeedRoot(t)
	// t.TempDir's parent is private to root: nobody could not enter it.
	root, err := os.MkdirTemp("", "tether-exec-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	h := New(handler.Runtime{Root: root})
	if _, err := deploy(t, h, res("who", model.Attributes{"command": "id -un > who", "cwd": "/", "creates": "/who", "user": "nobody"})); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(content(t, filepath.Join(root, "who"))); got != "nobody" {
		t.Fatalf("ran as %q", got)
	}
}

// The shell reads each command line from a file of mode 0600, already
// removed, that it inherits open; its arguments are the same for every
// command. The recorded runner looks at the file while the command "runs".
func TestCommandNotOnCommandLine(t *testing.T) {
	const token = "s3cr3t-t0ken"
	type seen struct {
		args    []string
		mode    os.FileMode
		links   uint64
		content string
	}
	var runs []seen
	var rec *handlertest.Recorder
	rec = &handlertest.Recorder{Respond: func(args []string) (string, int) {
		cmds := rec.Commands()
		s := seen{args: args}
		if files := cmds[len(cmds)-1].Files; len(files) == 1 {
			info, err := files[0].Stat()
			if err != nil {
				t.Error(err)
				return "", 2
			}
			s.mode, s.links = info.Mode(), uint64(info.Sys().(*syscall.Stat_t).Nlink)
			b := make([]byte, 4096)
			n, _ := files[0].ReadAt(b, 0)
			s.content = string(b[:n])
		}
		runs = append(runs, s)
		return "", 1 // unless fails: the command runs
	}}
	h := New(handler.Runtime{Root: t.TempDir(), Run: rec})
	r := res("login", model.Attributes{"command": "login --token " + token, "unless": "check --token " + token})
	r.Sensitive = []string{"command", "unless"}
	if _, err := deploy(t, h, r); err == nil || strings.Contains(err.Error(), token) {
		t.Fatalf("got %v, want the command's failure without the token", err)
	}
	if len(runs) != 2 {
		t.Fatalf("got %d commands, want unless then command", len(runs))
	}
	for i, want := range []string{"check --token " + token + "\n", "login --token " + token + "\n"} {
		s := runs[i]
		if !slices.Equal(s.args, []string{"/bin/sh", "/dev/fd/3"}) {
			t.Fatalf("got arguments %q, want /bin/sh /dev/fd/3", s.args)
		}
		if s.content != want || s.mode != 0o600 || s.links != 0 {
			t.Fatalf("got a %v file with %d links holding %q, want a removed file of mode 0600 holding %q", s.mode, s.links, s.content, want)
		}
	}
}

// The real shell runs a sensitive command from its file, and a failing
// command's error hides sensitive values: the command line as the error
// names it, the lines of a sensitive script, an environment value.
func TestSensitiveCommandRuns(t *testing.T) {
	const token = "s3cr3t-t0ken"
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	root := t.TempDir()
	rec := &handlertest.Recorder{} // runs on this host
	h := New(handler.Runtime{Root: root, Run: rec})

	r := res("write", model.Attributes{"command": "printf %s " + token + " > out", "cwd": "/", "creates": "/out"})
	r.Sensitive = []string{"command"}
	if _, err := deploy(t, h, r); err != nil {
		t.Fatal(err)
	}
	if got := content(t, filepath.Join(root, "out")); got != token {
		t.Fatalf("the command wrote %q, want %q", got, token)
	}
	for _, c := range rec.Commands() {
		if strings.Contains(strings.Join(c.Args, " "), token) {
			t.Fatalf("the token is on the command line: %q", c.Args)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("scripts left behind in %s: %v", tmp, left)
	}

	tests := []struct {
		name      string
		attrs     model.Attributes
		sensitive []string
		want      string
	}{
		{"script printing itself", model.Attributes{"command": "cat \"$0\" >&2 # " + token + "\nexit 3", "onlyif": "true"},
			[]string{"command"}, "sh -c (sensitive): exit status 3: (sensitive)"},
		{"script printing a line of itself", model.Attributes{"command": "head -n 1 \"$0\" >&2 # " + token + "\necho done >&2; exit 3", "onlyif": "true"},
			[]string{"command"}, "sh -c (sensitive): exit status 3: (sensitive)\ndone"},
		{"environment", model.Attributes{"command": `echo "token $TOKEN" >&2; exit 4`, "onlyif": "true", "env": map[string]any{"TOKEN": token}},
			[]string{"env"}, `sh -c echo "token $TOKEN" >&2; exit 4: exit status 4: token (sensitive)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := res("fail", tt.attrs)
			r.Sensitive = tt.sensitive
			_, err := deploy(t, h, r)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("got error %q, want %q", err, tt.want)
			}
		})
	}
}
