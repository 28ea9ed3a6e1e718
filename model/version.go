package model

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"time"
)

// VersionState is the life-cycle stage of a version.
type VersionState string

// Version states: candidate → released (the active one) → retired.
const (
	VersionCandidate VersionState = "candidate"
	VersionReleased  VersionState = "released"
	VersionRetired   VersionState = "retired"
)

// VersionMeta describes where a version came from.
type VersionMeta struct {
	// Compiler is the version of the compiler that produced the resource set.
	Compiler string `json:"compiler,omitempty"`
	// Source is the model's source revision (a git commit, or a directory).
	Source string `json:"source,omitempty"`
	// ExportedBy names who uploaded it.
	ExportedBy string `json:"exported_by,omitempty"`
	// RollbackOf is the version this one is a copy of, made when that
	// version was released again after a later one: agents only take
	// desired state newer than what they hold, so a rollback releases the
	// old resource set under a new number. Set by the server only.
	RollbackOf int64 `json:"rollback_of,omitempty"`
}

// Version is an environment's numbered, immutable resource set.
type Version struct {
	Env        string       `json:"env"`
	Number     int64        `json:"number"`
	State      VersionState `json:"state"`
	Meta       VersionMeta  `json:"meta"`
	SetHash    Hash         `json:"set_hash"`
	Resources  []Resource   `json:"resources,omitempty"`
	Count      int          `json:"resource_count"`
	CreatedAt  time.Time    `json:"created_at"`
	ReleasedAt *time.Time   `json:"released_at,omitempty"`
}

// SetHash is the hash of a resource set: the SHA-256 over the sorted hashes of
// its resources. Two exports of the same intent have the same set hash, in any
// order.
func SetHash(resources []Resource) (Hash, error) {
	hashes := make([]Hash, len(resources))
	err := Chunks(len(resources), func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			h, err := resources[i].Hash()
			if err != nil {
				return err
			}
			hashes[i] = h
		}
		return nil
	})
	if err != nil {
		return Hash{}, err
	}
	return SetHashOf(hashes), nil
}

// SetHashOf is SetHash over precomputed resource hashes; it sorts hashes in place.
func SetHashOf(hashes []Hash) Hash {
	slices.SortFunc(hashes, func(a, b Hash) int { return compareHash(a, b) })
	d := sha256.New()
	for _, h := range hashes {
		d.Write(h[:])
	}
	var out Hash
	d.Sum(out[:0])
	return out
}

func compareHash(a, b Hash) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// ValidateSet checks every resource, that no ID appears twice, and that
// every resource a requires or subscribes names is in the set.
func ValidateSet(resources []Resource) error {
	seen := make(map[ID]struct{}, len(resources))
	for i := range resources {
		r := &resources[i]
		if err := r.Validate(); err != nil {
			return err
		}
		if _, dup := seen[r.ID]; dup {
			return fmt.Errorf("%w: %s appears twice", ErrInvalidResource, r.ID)
		}
		seen[r.ID] = struct{}{}
	}
	for i := range resources {
		r := &resources[i]
		for _, refs := range [][]ID{r.Requires, r.Subscribes} {
			for _, ref := range refs {
				if _, ok := seen[ref]; !ok {
					return fmt.Errorf("%w: %s refers to %s, which is not in the set", ErrInvalidResource, r.ID, ref)
				}
			}
		}
	}
	return nil
}

// Agents lists the agents that own at least one resource of the set, sorted.
func Agents(resources []Resource) []string {
	var out []string
	seen := map[string]bool{}
	for i := range resources {
		a := resources[i].ID.Agent
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}
