package model

import (
	"errors"
	"fmt"
	"slices"
)

// Slice is one agent's part of a version: the resources it must enforce, as of
// a generation (the number of the released version they were taken from).
type Slice struct {
	Agent      string     `json:"agent"`
	Generation int64      `json:"generation"`
	Resources  []Resource `json:"resources"`
}

// SliceOf takes agent's resources out of a version's resource set, sorted by ID.
func SliceOf(agent string, generation int64, resources []Resource) Slice {
	s := Slice{Agent: agent, Generation: generation}
	for i := range resources {
		if resources[i].ID.Agent == agent {
			s.Resources = append(s.Resources, resources[i])
		}
	}
	SortResources(s.Resources)
	return s
}

// Slices splits a resource set into one slice per agent.
func Slices(generation int64, resources []Resource) map[string]Slice {
	out := map[string]Slice{}
	for i := range resources {
		a := resources[i].ID.Agent
		s := out[a]
		s.Agent, s.Generation = a, generation
		s.Resources = append(s.Resources, resources[i])
		out[a] = s
	}
	for _, s := range out {
		SortResources(s.Resources)
	}
	return out
}

// SortResources sorts resources by ID (ID.Compare), the order of slices.
func SortResources(rs []Resource) {
	slices.SortFunc(rs, func(a, b Resource) int { return a.ID.Compare(b.ID) })
}

// Hash returns the set hash of the slice's resources; agent and server compare
// it to know they hold the same intent.
func (s Slice) Hash() (Hash, error) { return SetHash(s.Resources) }

// Diff is what turns an agent's slice at generation From into the slice at
// generation To: resources to add or replace, and IDs to drop.
type Diff struct {
	From    int64      `json:"from_gen"`
	To      int64      `json:"to_gen"`
	Upserts []Resource `json:"upserts,omitempty"`
	Deletes []ID       `json:"deletes,omitempty"`
}

// Empty reports whether the diff changes nothing.
func (d Diff) Empty() bool { return len(d.Upserts) == 0 && len(d.Deletes) == 0 }

// DiffSlices computes the diff from one slice to another of the same agent.
// A resource is upserted when it is new or its hash changed.
func DiffSlices(from, to Slice) (Diff, error) {
	d := Diff{From: from.Generation, To: to.Generation}
	old := make(map[ID]Hash, len(from.Resources))
	for i := range from.Resources {
		h, err := from.Resources[i].Hash()
		if err != nil {
			return Diff{}, err
		}
		old[from.Resources[i].ID] = h
	}
	for i := range to.Resources {
		r := &to.Resources[i]
		h, err := r.Hash()
		if err != nil {
			return Diff{}, err
		}
		if prev, ok := old[r.ID]; !ok || prev != h {
			d.Upserts = append(d.Upserts, *r)
		}
		delete(old, r.ID)
	}
	for id := range old {
		d.Deletes = append(d.Deletes, id)
	}
	slices.SortFunc(d.Deletes, ID.Compare)
	return d, nil
}

// ErrGenerationMismatch is returned by Apply when a diff does not start at the
// slice's generation; the holder must ask for the full state instead.
var ErrGenerationMismatch = errors.New("diff does not start at the generation held")

// Apply returns the slice that results from applying d to s. s is not changed.
func (s Slice) Apply(d Diff) (Slice, error) {
	if d.From != s.Generation {
		return Slice{}, fmt.Errorf("%w: diff is from generation %d, slice is at %d", ErrGenerationMismatch, d.From, s.Generation)
	}
	byID := make(map[ID]Resource, len(s.Resources)+len(d.Upserts))
	for _, r := range s.Resources {
		byID[r.ID] = r
	}
	for _, id := range d.Deletes {
		delete(byID, id)
	}
	for _, r := range d.Upserts {
		if r.ID.Agent != s.Agent {
			return Slice{}, fmt.Errorf("diff upserts %s, which belongs to agent %q, not %q", r.ID, r.ID.Agent, s.Agent)
		}
		byID[r.ID] = r
	}
	out := Slice{Agent: s.Agent, Generation: d.To, Resources: make([]Resource, 0, len(byID))}
	for _, r := range byID {
		out.Resources = append(out.Resources, r)
	}
	SortResources(out.Resources)
	return out, nil
}
