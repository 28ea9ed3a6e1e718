package embedded

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server"
)

// recorder is a Display that keeps what it was shown.
type recorder struct {
	progress []model.ID
	reports  []*Report
	policy   model.DriftPolicy
	warnings []error
}

func (r *recorder) Progress(res *model.Result) { r.progress = append(r.progress, res.ID) }
func (r *recorder) Deployed(rep *Report, policy model.DriftPolicy) error {
	r.reports, r.policy = append(r.reports, rep), policy
	return nil
}
func (r *recorder) Event(server.Event) error { return nil }
func (r *recorder) Warn(err error)           { r.warnings = append(r.warnings, err) }

var _ Display = (*recorder)(nil)

const twoFiles = `host "local" {
  file "a" {
    path    = "/a"
    content = "a\n"
  }
  file "b" {
    path    = "/b"
    content = "b\n"
  }
}
`

// setup writes the two-file model and returns options deploying it below a
// sandbox root.
func setup(t *testing.T) (Options, string) {
	t.Helper()
	dir, root := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(twoFiles), 0o644); err != nil {
		t.Fatal(err)
	}
	return Options{Dir: dir, StateDir: filepath.Join(t.TempDir(), "state"), Root: root, Compiler: "test", Salt: "test"}, root
}

// compiler compiles o's model, counting the compiles.
func compiler(o Options, calls *int) func(context.Context) (*lang.Result, error) {
	return func(ctx context.Context) (*lang.Result, error) {
		*calls++
		return lang.Compile(ctx, o.Dir, o.Compile)
	}
}

func TestRunDeploysThenReusesTheCachedVersion(t *testing.T) {
	o, root := setup(t)
	ctx := context.Background()
	compiles := 0
	compile := compiler(o, &compiles)

	if m := Cached(o, compile); m != nil {
		t.Fatal("a compile cache before any run")
	}
	res, err := compile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	rep, err := Run(ctx, o, Compiled(res), rec, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Created != 2 || !rep.NewVersion || !rep.Compiled || rep.Version != 1 || rep.Env != Env {
		t.Fatalf("first run: %+v, want 2 created in a new compiled version 1 of %s", rep, Env)
	}
	if len(rec.progress) != 2 || len(rec.reports) != 1 || rec.reports[0] != rep {
		t.Fatalf("first run showed %d results and %d reports, want 2 and the one returned", len(rec.progress), len(rec.reports))
	}
	if rec.policy != model.DriftAlert {
		t.Errorf("drift policy %q, want the default %q", rec.policy, model.DriftAlert)
	}
	if b, err := os.ReadFile(filepath.Join(root, "a")); err != nil || string(b) != "a\n" {
		t.Fatalf("deployed file: %q, %v", b, err)
	}

	// Nothing changed: the cache names version 1, which the store holds.
	m := Cached(o, compile)
	if m == nil {
		t.Fatal("no compile cache after a run")
	}
	if got := strings.Join(m.Hosts(), ","); got != "local" || m.Resources() != 2 {
		t.Fatalf("cached model: hosts %q, %d resources; want local, 2", got, m.Resources())
	}
	rep, err = Run(ctx, o, m, &recorder{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Compiled || rep.NewVersion || rep.Version != 1 || rep.Summary.Unchanged != 2 || compiles != 1 {
		t.Fatalf("cached run: %+v after %d compiles, want version 1 reused, 2 unchanged, no compile", rep, compiles)
	}

	// The store is gone but the cache is not: the run compiles again.
	if err := os.Remove(filepath.Join(o.StateDir, "tether.db")); err != nil {
		t.Fatal(err)
	}
	m = Cached(o, compile)
	if m == nil {
		t.Fatal("the compile cache went with the store")
	}
	o.DryRun = true
	rep, err = Run(ctx, o, m, &recorder{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Compiled || !rep.NewVersion || !rep.DryRun || compiles != 2 || rep.Summary.Unchanged != 2 {
		t.Fatalf("run on a new store: %+v after %d compiles, want a compiled new version, dry run, 2 unchanged, 2 compiles", rep, compiles)
	}
}

func TestRunRefuses(t *testing.T) {
	o, _ := setup(t)
	empty := Compiled(&lang.Result{})
	tests := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"no state directory", func(o *Options) { o.StateDir = "" }, "state directory"},
		{"watching a dry run", func(o *Options) { o.Watch, o.DryRun = true, true }, "nothing to watch"},
		{"unknown drift policy", func(o *Options) { o.Policy = "ignore" }, `"ignore"`},
		{"negative parallelism", func(o *Options) { o.Parallel = -1 }, "negative"},
		{"no host", func(*Options) {}, ErrNoHosts.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := o
			tt.edit(&o)
			_, err := Run(context.Background(), o, empty, &recorder{}, zerolog.Nop())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %s", err, tt.want)
			}
			if _, statErr := os.Stat(o.StateDir); o.StateDir != "" && !os.IsNotExist(statErr) {
				t.Errorf("a refused run created %s", o.StateDir)
			}
		})
	}
}
