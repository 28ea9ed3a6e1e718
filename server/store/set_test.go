package store_test

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

func setFile(agent, path, content string) model.Resource {
	return model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path}, Attributes: model.Attributes{"path": path, "content": content}}
}

// A set gives back each resource as it is stored (the large ones, in a
// block of their own, too), hashes as model.SetHash does, and refuses a
// duplicate ID and a reference to a resource it lacks.
func TestSet(t *testing.T) {
	rs := []model.Resource{setFile("web-1", "/a", "a"), setFile("web-22", "/big", strings.Repeat("x", 600<<10)), setFile("web-1", "/c", "c")}
	rs[2].Requires = []model.ID{rs[0].ID}
	s := store.NewSet()
	if err := s.Add(rs[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(rs[1:]); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 {
		t.Fatalf("got %d resources, want 3", s.Len())
	}
	for i, r := range rs {
		row := s.Row(i)
		h, _ := r.Hash()
		body, _ := json.Marshal(&r)
		key := sha256.Sum256(body)
		if row.ID != r.ID.String() || row.Agent != r.ID.Agent || string(row.Hash) != string(h[:]) || string(row.Body) != string(body) || string(row.Key) != string(key[:]) {
			t.Fatalf("row %d: got %s %s, want %s %s with its hash, key and body", i, row.ID, row.Agent, r.ID, r.ID.Agent)
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if want, _ := model.SetHash(rs); s.Hash() != want {
		t.Fatalf("set hash %s, want %s", s.Hash(), want)
	}
	if s.Size() < 600<<10 {
		t.Fatalf("size %d, want at least the large body", s.Size())
	}

	dangling := setFile("web-1", "/d", "d")
	dangling.Requires = []model.ID{{Type: "file", Agent: "web-9", Key: "path", Value: "/nowhere"}}
	for name, add := range map[string]model.Resource{"duplicate": setFile("web-1", "/a", "again"), "dangling": dangling} {
		s := store.NewSet()
		if err := s.Add(append([]model.Resource{}, rs[0], add)); err != nil {
			t.Fatal(err)
		}
		if err := s.Check(); !errors.Is(err, model.ErrInvalid) || !errors.Is(err, model.ErrInvalidResource) {
			t.Fatalf("%s: Check: %v, want invalid", name, err)
		}
	}
}
