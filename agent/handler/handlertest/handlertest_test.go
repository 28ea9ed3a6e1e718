package handlertest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// broken is a file-like handler with one deliberate defect, to prove the
// harness catches it.
type broken struct {
	rt     handler.Runtime
	defect string
}

func (b *broken) Kind() string { return "file" }

func (b *broken) Validate(res *model.Resource) error {
	if b.defect == "accepts anything" {
		return nil
	}
	if _, ok := res.Attributes["bad"]; ok {
		return handler.ErrInvalid
	}
	return nil
}

func (b *broken) Read(_ context.Context, res *model.Resource) (model.Attributes, bool, error) {
	p, _ := b.rt.HostPath(res.ID.Value)
	if b.defect == "writes on read" {
		_ = os.WriteFile(p+".touched", nil, 0o644)
	}
	c, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	return model.Attributes{"path": res.ID.Value, "content": string(c)}, true, err
}

func (b *broken) Apply(_ context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	p, _ := b.rt.HostPath(res.ID.Value)
	switch {
	case b.defect == "never converges":
		return os.WriteFile(p, []byte("something else"), 0o644)
	case changes.Removed():
		if b.defect == "purge keeps" {
			return nil
		}
		return os.Remove(p)
	}
	return os.WriteFile(p, []byte(res.Attributes["content"].(string)), 0o644)
}

func suiteFor(defect string) Suite {
	return Suite{
		New: func(rt handler.Runtime) handler.Handler { return &broken{rt: rt, defect: defect} },
		Cases: []Case{{
			Name:     "create",
			Resource: model.Resource{ID: model.MustParseID("file[a,path=/f]"), Attributes: model.Attributes{"path": "/f", "content": "x"}},
		}},
		Invalid: []Invalid{{
			Name:     "bad",
			Resource: model.Resource{ID: model.MustParseID("file[a,path=/f]"), Attributes: model.Attributes{"path": "/f", "bad": true}},
		}},
	}
}

// TestHarnessCatchesDefects runs the harness against handlers with one defect
// each, in a child process of this test binary (where the harness must fail),
// and checks the failure names the defect.
func TestHarnessCatchesDefects(t *testing.T) {
	if defect := os.Getenv("HANDLERTEST_DEFECT"); defect != "" {
		Run(t, suiteFor(defect)) // the child: expected to fail
		return
	}
	// The defect-free handler passes.
	Run(t, suiteFor("none"))

	tests := map[string]string{
		"accepts anything": "Validate accepted",
		"writes on read":   "dry run changed the file system",
		"never converges":  "did not converge",
		"purge keeps":      "purge",
	}
	for defect, want := range tests {
		t.Run(defect, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHarnessCatchesDefects$", "-test.v")
			cmd.Env = append(os.Environ(), "HANDLERTEST_DEFECT="+defect)
			cmd.Dir = filepath.Dir(os.Args[0])
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the harness passed a handler that %s:\n%s", defect, out)
			}
			if !strings.Contains(string(out), want) {
				t.Fatalf("the harness failed without saying %q:\n%s", want, out)
			}
		})
	}
}

// TestFS checks every target's file system against the contract.
func TestFS(t *testing.T) {
	for _, target := range Targets() {
		t.Run(target.Name, func(t *testing.T) { RunFS(t, target) })
	}
}
