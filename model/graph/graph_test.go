package graph

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
)

func id(name string) model.ID {
	return model.ID{Type: "file", Agent: "a", Key: "path", Value: "/" + name}
}

func res(name string, requires ...string) model.Resource {
	r := model.Resource{ID: id(name), Attributes: model.Attributes{"path": "/" + name}}
	for _, req := range requires {
		r.Requires = append(r.Requires, id(req))
	}
	return r
}

func names(ids []model.ID) string {
	var parts []string
	for _, i := range ids {
		parts = append(parts, strings.TrimPrefix(i.Value, "/"))
	}
	return strings.Join(parts, " ")
}

func TestSort(t *testing.T) {
	tests := []struct {
		name string
		in   []model.Resource
		want string
	}{
		{"empty", nil, ""},
		{"chain", []model.Resource{res("c", "b"), res("b", "a"), res("a")}, "a b c"},
		{"diamond", []model.Resource{res("d", "b", "c"), res("b", "a"), res("c", "a"), res("a")}, "a b c d"},
		{"independent sorted by id", []model.Resource{res("z"), res("m"), res("a")}, "a m z"},
		{"lowest ready first", []model.Resource{res("a", "z"), res("b"), res("z")}, "b z a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromResources(tt.in).Sort()
			if err != nil {
				t.Fatal(err)
			}
			if names(got) != tt.want {
				t.Fatalf("got %q, want %q", names(got), tt.want)
			}
		})
	}
}

func TestCycle(t *testing.T) {
	tests := []struct {
		name string
		in   []model.Resource
		want string
	}{
		{"three", []model.Resource{res("a", "b"), res("b", "c"), res("c", "a")}, "a -> b -> c -> a"},
		{"two", []model.Resource{res("x", "y"), res("y", "x"), res("free")}, "x -> y -> x"},
		{"tail into cycle", []model.Resource{res("a", "b"), res("b", "c"), res("c", "b")}, "b -> c -> b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromResources(tt.in).Sort()
			var ce *CycleError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCycle) {
				t.Fatalf("got %v, want a *CycleError", err)
			}
			if got := names(ce.Cycle); strings.ReplaceAll(got, " ", " -> ") != tt.want {
				t.Fatalf("cycle %q, want %q", got, tt.want)
			}
			if !strings.Contains(err.Error(), "file[a,path=/"+strings.Fields(tt.want)[0]+"] -> ") {
				t.Fatalf("error %q does not name the cycle", err)
			}
		})
	}
}

func TestExternal(t *testing.T) {
	other := model.ID{Type: "file", Agent: "b", Key: "path", Value: "/x"}
	r := res("a")
	r.Requires = []model.ID{other, other}
	g := FromResources([]model.Resource{r})
	i, _ := g.Index(r.ID)
	if got := g.External(i); len(got) != 1 || got[0] != other {
		t.Fatalf("External = %v, want [%v]", got, other)
	}
	if len(g.Requirements(i)) != 0 {
		t.Fatal("an external requirement became an edge")
	}
}

// TestSortRespectsEdges checks the order on random DAGs.
func TestSortRespectsEdges(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for round := 0; round < 50; round++ {
		n := 1 + rng.IntN(60)
		var rs []model.Resource
		for i := 0; i < n; i++ {
			var reqs []string
			for j := 0; j < i; j++ { // edges only to earlier nodes: acyclic
				if rng.IntN(5) == 0 {
					reqs = append(reqs, fmt.Sprint(j))
				}
			}
			rs = append(rs, res(fmt.Sprint(i), reqs...))
		}
		rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		order, err := FromResources(rs).Sort()
		if err != nil {
			t.Fatal(err)
		}
		pos := map[model.ID]int{}
		for i, x := range order {
			pos[x] = i
		}
		if len(order) != n {
			t.Fatalf("order has %d nodes, want %d", len(order), n)
		}
		for _, r := range rs {
			for _, req := range r.Requires {
				if pos[req] >= pos[r.ID] {
					t.Fatalf("%v comes before its requirement %v", r.ID, req)
				}
			}
		}
	}
}
