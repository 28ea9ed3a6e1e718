// Package graph is the dependency graph of resources: nodes are resource IDs,
// an edge from A to B means "A requires B". It gives a deterministic
// topological order (requirements first) and names the cycle when there is one.
package graph

import (
	"errors"
	"slices"
	"strings"

	"github.com/tetherhq/tether/model"
)

// Graph is a directed graph of resources. Nodes are addressed by a dense index
// so the engine can keep per-node state in slices.
type Graph struct {
	ids   []model.ID
	index map[model.ID]int
	reqs  [][]int // reqs[i]: nodes i requires
	deps  [][]int // deps[i]: nodes that require i
	// external[i]: requirements of i that are not nodes of the graph (for
	// example resources of another agent).
	external [][]model.ID
}

// New returns an empty graph sized for n nodes.
func New(n int) *Graph {
	return &Graph{index: make(map[model.ID]int, n)}
}

// FromResources builds the graph of a resource set from each resource's
// Requires and Subscribes: a subscriber runs after what it subscribes to,
// so it knows whether that changed. Requirements that are not in the set
// are recorded as external.
func FromResources(resources []model.Resource) *Graph {
	g := New(len(resources))
	for i := range resources {
		g.AddNode(resources[i].ID)
	}
	for i := range resources {
		for _, req := range resources[i].Requires {
			g.AddEdge(resources[i].ID, req)
		}
		for _, req := range resources[i].Subscribes {
			g.AddEdge(resources[i].ID, req)
		}
	}
	return g
}

// AddNode adds id if it is not there yet and returns its index.
func (g *Graph) AddNode(id model.ID) int {
	if i, ok := g.index[id]; ok {
		return i
	}
	i := len(g.ids)
	g.ids = append(g.ids, id)
	g.index[id] = i
	g.reqs = append(g.reqs, nil)
	g.deps = append(g.deps, nil)
	g.external = append(g.external, nil)
	return i
}

// AddEdge records that dependant requires requirement. The dependant is added
// if missing; a requirement that is not a node is recorded as external.
// Duplicate edges are ignored.
func (g *Graph) AddEdge(dependant, requirement model.ID) {
	d := g.AddNode(dependant)
	r, ok := g.index[requirement]
	if !ok {
		if !slices.Contains(g.external[d], requirement) {
			g.external[d] = append(g.external[d], requirement)
		}
		return
	}
	if slices.Contains(g.reqs[d], r) {
		return
	}
	g.reqs[d] = append(g.reqs[d], r)
	g.deps[r] = append(g.deps[r], d)
}

// Len returns the number of nodes.
func (g *Graph) Len() int { return len(g.ids) }

// ID returns the ID of node i.
func (g *Graph) ID(i int) model.ID { return g.ids[i] }

// Index returns the node index of id.
func (g *Graph) Index(id model.ID) (int, bool) {
	i, ok := g.index[id]
	return i, ok
}

// Requirements returns the nodes that node i requires. Do not modify.
func (g *Graph) Requirements(i int) []int { return g.reqs[i] }

// Dependants returns the nodes that require node i. Do not modify.
func (g *Graph) Dependants(i int) []int { return g.deps[i] }

// External returns the requirements of node i that are not nodes of the graph.
func (g *Graph) External(i int) []model.ID { return g.external[i] }

// CycleError reports a dependency cycle. Cycle starts and ends with the same
// resource: a requires b requires c requires a.
type CycleError struct {
	Cycle []model.ID
}

// ErrCycle is matched by every *CycleError with errors.Is.
var ErrCycle = errors.New("dependency cycle")

func (e *CycleError) Error() string {
	parts := make([]string, len(e.Cycle))
	for i, id := range e.Cycle {
		parts[i] = id.String()
	}
	return "dependency cycle: " + strings.Join(parts, " -> ")
}

// Is makes errors.Is(err, ErrCycle) true.
func (e *CycleError) Is(target error) bool { return target == ErrCycle }

// Sort returns the nodes in an order where every node comes after all its
// requirements. Among nodes free to go, the lower ID (by model.ID.Compare)
// comes first, so the order does not depend on insertion order. If the graph
// has a cycle, Sort returns a *CycleError naming one.
func (g *Graph) Sort() ([]model.ID, error) {
	n := len(g.ids)
	indeg := make([]int, n)
	for i := range g.reqs {
		indeg[i] = len(g.reqs[i])
	}
	less := func(a, b int) bool { return g.ids[a].Compare(g.ids[b]) < 0 }
	ready := &minHeap{less: less}
	for i := 0; i < n; i++ {
		if indeg[i] == 0 {
			ready.push(i)
		}
	}
	order := make([]model.ID, 0, n)
	for ready.len() > 0 {
		i := ready.pop()
		order = append(order, g.ids[i])
		for _, d := range g.deps[i] {
			indeg[d]--
			if indeg[d] == 0 {
				ready.push(d)
			}
		}
	}
	if len(order) < n {
		return nil, g.findCycle(indeg)
	}
	return order, nil
}

// findCycle walks requirement edges from a node left with unresolved
// requirements; every such node has one that is also unresolved, so the walk
// must revisit a node, and the path from that node back to itself is a cycle.
func (g *Graph) findCycle(indeg []int) *CycleError {
	start := -1
	for i, d := range indeg {
		if d > 0 && (start < 0 || less(g, i, start)) {
			start = i
		}
	}
	pos := map[int]int{}
	var path []int
	for cur := start; ; {
		if p, seen := pos[cur]; seen {
			cyc := make([]model.ID, 0, len(path)-p+1)
			for _, i := range path[p:] {
				cyc = append(cyc, g.ids[i])
			}
			cyc = append(cyc, g.ids[cur])
			return &CycleError{Cycle: cyc}
		}
		pos[cur] = len(path)
		path = append(path, cur)
		next := -1
		for _, r := range g.reqs[cur] {
			if indeg[r] > 0 && (next < 0 || less(g, r, next)) {
				next = r
			}
		}
		cur = next
	}
}

func less(g *Graph, a, b int) bool { return g.ids[a].Compare(g.ids[b]) < 0 }

// minHeap is a binary heap of node indexes.
type minHeap struct {
	items []int
	less  func(a, b int) bool
}

func (h *minHeap) len() int { return len(h.items) }

func (h *minHeap) push(x int) {
	h.items = append(h.items, x)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *minHeap) pop() int {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && h.less(h.items[l], h.items[m]) {
			m = l
		}
		if r < last && h.less(h.items[r], h.items[m]) {
			m = r
		}
		if m == i {
			return top
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
}
