package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// TestRestartAfterEveryKindOfChange lives an agent through the changes a
// model goes through — add, change, remove, purge, rename, versions
// skipped while it was stopped — and restarts it after each one: it starts
// again, says it holds the generation it deployed, finds nothing to change,
// and the host is as the last deploy left it. With and without snapshots
// between.
func TestRestartAfterEveryKindOfChange(t *testing.T) {
	for _, compactAt := range []int64{0, 1} {
		t.Run(fmt.Sprintf("compact_at=%d", compactAt), func(t *testing.T) {
			s := newFakeServer(t)
			dir, root := t.TempDir(), t.TempDir()
			tune := func(c *Config) { c.Journal = journal.Config{CompactAt: compactAt} }
			var seen int
			r := start(t, s, "web", dir, root, nil, tune)
			s.next(&seen, "web", bus.KindHello)
			s.enroll("web")

			purged := func(path string) model.Resource {
				res := file("web", path, "")
				res.Attributes = model.Attributes{"path": path}
				res.Purged = true
				return res
			}
			steps := []struct {
				name string
				rs   []model.Resource
				// want is every file under root after the deploy.
				want map[string]string
			}{
				{"add", []model.Resource{file("web", "/a", "1")}, map[string]string{"a": "1"}},
				{"add another", []model.Resource{file("web", "/a", "1"), file("web", "/b", "1")}, map[string]string{"a": "1", "b": "1"}},
				{"change", []model.Resource{file("web", "/a", "2"), file("web", "/b", "1")}, map[string]string{"a": "2", "b": "1"}},
				// Removed from the model, left on the host.
				{"remove", []model.Resource{file("web", "/a", "2")}, map[string]string{"a": "2", "b": "1"}},
				{"purge", []model.Resource{file("web", "/a", "2"), purged("/b")}, map[string]string{"a": "2"}},
				{"purged resource removed", []model.Resource{file("web", "/a", "2")}, map[string]string{"a": "2"}},
				{"rename", []model.Resource{file("web", "/c", "2"), purged("/a")}, map[string]string{"c": "2"}},
			}
			gen := int64(0)
			for _, st := range steps {
				gen++
				s.deploy(&seen, "web", gen, fmt.Sprint("d", gen), "", st.rs...)
				checkTree(t, st.name, root, st.want)
				r.stop()
				r = start(t, s, "web", dir, root, nil, tune)
				if h := helloOf(t, s, &seen, "web"); h.Generation != gen {
					t.Fatalf("%s: restarted agent says it holds generation %d, want %d", st.name, h.Generation, gen)
				}
				s.enroll("web")
				id := fmt.Sprint("again", gen)
				s.send("web", bus.KindDeploy, bus.Deploy{DeployID: id, Mode: bus.DeployIncremental, Generation: gen})
				if got, _ := s.results(&seen, "web", id); len(got) != 0 {
					t.Fatalf("%s: after a restart an incremental deploy redeployed %d resources", st.name, len(got))
				}
			}

			// Stopped, it misses two versions; the server queues a diff
			// from the one it skipped. Started again, the agent asks for
			// the whole state, gets the latest, and deploys it.
			r.stop()
			last := []model.Resource{file("web", "/c", "3"), file("web", "/d", "3")}
			s.send("web", bus.KindDesiredDiff, bus.DesiredDiff{Diff: model.Diff{From: gen + 1, To: gen + 2, Upserts: last}})
			// The agent may read its inbox before its hello goes out: look
			// for the request from where the hello is looked for.
			fromStart := seen
			r = start(t, s, "web", dir, root, nil, tune)
			helloOf(t, s, &seen, "web")
			s.enroll("web")
			if req := s.stateRequest(&fromStart, "web"); req.Generation != gen {
				t.Fatalf("state request %+v, want one from generation %d", req, gen)
			}
			gen += 2
			s.deploy(&seen, "web", gen, "latest", "", last...)
			checkTree(t, "versions skipped", root, map[string]string{"c": "3", "d": "3"})
			r.stop()
			start(t, s, "web", dir, root, nil, tune)
			if h := helloOf(t, s, &seen, "web"); h.Generation != gen {
				t.Fatalf("after skipped versions: hello says generation %d, want %d", h.Generation, gen)
			}
			if n := s.count("web", bus.KindSecurity); n != 0 {
				t.Fatalf("the agent refused %d of its server's commands in its life", n)
			}
		})
	}
}

func helloOf(t *testing.T, s *fakeServer, seen *int, agent string) bus.Hello {
	t.Helper()
	var h bus.Hello
	if err := s.next(seen, agent, bus.KindHello).DecodeBody(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// checkTree fails unless root holds exactly the files of want.
func checkTree(t *testing.T, step, root string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		got[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: the host holds %v, want %v", step, got, want)
	}
}
