package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tetherhq/tether/model"
)

// Set is the resource set of a version being built, held as it is
// stored: each resource's intent hash, body key, ID and body (its JSON),
// packed into large byte blocks, with a small index entry each. A version
// upload adds the resources as it decodes them and lets each decoded
// resource go: what it holds is about its encoded size, never the decoded
// resources and their encoded copies at once (a decoded resource takes
// several times its JSON: maps, strings, interface values). The blocks
// hold no pointers, so the collector does not scan them either.
//
// A Set is used by one goroutine; Add hashes and encodes on every CPU.
type Set struct {
	blocks [][]byte
	rows   []setRow
	// refs are the references (requires, subscribes) to resolve once the
	// set is whole: the referring row and where the referred ID's text is
	// in refBlocks.
	refs      []setRef
	refBlocks [][]byte
	// waits are the cross-agent requirements (the required ID and the
	// agent that waits), each once.
	waits  map[setWait]struct{}
	waitsN int64
	// checked is set when Check found the set whole: no ID twice, every
	// reference in it; hash is the set hash once computed.
	checked bool
	hash    *model.Hash
}

// setRow locates one resource in the blocks: at off of blocks[block], its
// hash (32 bytes), its body key (32), its ID (id bytes, of which the
// agent's name starts after the type and "["), then its body.
type setRow struct {
	block, off uint32
	body       uint32
	id         uint16
	typ, agent uint8
}

type setRef struct {
	row        uint32
	block, off uint32
	n          uint16
}

type setWait struct{ required, agent string }

// setBlock is the size of a block; an entry larger than a quarter of it
// gets a block of its own.
const setBlock = 1 << 20

// NewSet returns an empty set.
func NewSet() *Set { return &Set{waits: map[setWait]struct{}{}} }

// Len is the number of resources added.
func (s *Set) Len() int { return len(s.rows) }

// Size is the memory the set holds, in bytes: its blocks, its index, and
// what it keeps to check references and cross-agent requirements.
func (s *Set) Size() int64 {
	var n int64
	for _, b := range s.blocks {
		n += int64(cap(b))
	}
	for _, b := range s.refBlocks {
		n += int64(cap(b))
	}
	return n + int64(cap(s.rows))*16 + int64(cap(s.refs))*16 + s.waitsN
}

// Add checks each resource (model.Resource.Validate), hashes and encodes
// it, and adds it to the set; rs may be reused once Add returns. Errors
// wrap model.ErrInvalid; the resources before the one refused are in the
// set.
func (s *Set) Add(rs []model.Resource) error {
	type encoded struct {
		hash, key [32]byte
		body      []byte
	}
	enc := make([]encoded, len(rs))
	err := model.Chunks(len(rs), func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			r := &rs[i]
			if err := r.Validate(); err != nil {
				return fmt.Errorf("%w: %w", model.ErrInvalid, err)
			}
			h, err := r.Hash()
			if err != nil {
				return fmt.Errorf("%w: %w", model.ErrInvalid, err)
			}
			body, err := json.Marshal(r)
			if err != nil {
				return fmt.Errorf("encode %s: %w", r.ID, err)
			}
			enc[i] = encoded{hash: h, key: sha256.Sum256(body), body: body}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range rs {
		r, e := &rs[i], &enc[i]
		id := r.ID.String()
		if len(id) > 0xffff || len(r.ID.Type) > 0xff || len(r.ID.Agent) > 0xff || len(e.body) > 0xffffffff {
			return fmt.Errorf("%w: %w: %s is too long", model.ErrInvalid, model.ErrInvalidResource, model.Clip(id, 128))
		}
		block, off := s.alloc(&s.blocks, 64+len(id)+len(e.body))
		b := s.blocks[block]
		b = append(b, e.hash[:]...)
		b = append(b, e.key[:]...)
		b = append(b, id...)
		s.blocks[block] = append(b, e.body...)
		row := uint32(len(s.rows))
		s.rows = append(s.rows, setRow{block: block, off: off, body: uint32(len(e.body)), id: uint16(len(id)), typ: uint8(len(r.ID.Type)), agent: uint8(len(r.ID.Agent))})
		for _, list := range [][]model.ID{r.Requires, r.Subscribes} {
			for _, ref := range list {
				text := ref.String()
				rb, roff := s.alloc(&s.refBlocks, len(text))
				s.refBlocks[rb] = append(s.refBlocks[rb], text...)
				s.refs = append(s.refs, setRef{row: row, block: rb, off: roff, n: uint16(len(text))})
			}
		}
		for _, req := range r.Requires {
			if req.Agent == r.ID.Agent {
				continue
			}
			w := setWait{req.String(), r.ID.Agent}
			if _, ok := s.waits[w]; !ok {
				s.waits[w] = struct{}{}
				s.waitsN += int64(len(w.required)+len(w.agent)) + 64
			}
		}
	}
	s.checked, s.hash = false, nil
	return nil
}

// alloc returns the block of blocks, and the offset in it, where n bytes
// are to be appended.
func (s *Set) alloc(blocks *[][]byte, n int) (block, off uint32) {
	bs := *blocks
	if k := len(bs) - 1; k >= 0 && cap(bs[k])-len(bs[k]) >= n {
		return uint32(k), uint32(len(bs[k]))
	}
	size := setBlock
	if n > setBlock/4 {
		size = n
	}
	*blocks = append(bs, make([]byte, 0, size))
	return uint32(len(bs)), 0
}

// entry returns row i's bytes: hash, key, ID, body.
func (s *Set) entry(i int) []byte {
	r := s.rows[i]
	return s.blocks[r.block][r.off : int(r.off)+64+int(r.id)+int(r.body)]
}

func (s *Set) id(i int) []byte {
	e := s.entry(i)
	return e[64 : 64+int(s.rows[i].id)]
}

// Row returns resource i as it is stored. Hash, Key and Body share the
// set's memory: they must not be changed.
func (s *Set) Row(i int) ResourceRow {
	r := s.rows[i]
	e := s.entry(i)
	id := string(e[64 : 64+int(r.id)])
	start := int(r.typ) + 1
	return ResourceRow{ID: id, Agent: id[start : start+int(r.agent)], Hash: e[:32:32], Key: e[32:64:64], Body: e[64+int(r.id):]}
}

// Check reports, wrapping model.ErrInvalid, an ID that appears twice, or
// a reference (requires, subscribes) to a resource not in the set.
func (s *Set) Check() error {
	if s.checked {
		return nil
	}
	order := make([]uint32, len(s.rows))
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(a, b uint32) int { return bytes.Compare(s.id(int(a)), s.id(int(b))) })
	for k := 1; k < len(order); k++ {
		if id := s.id(int(order[k])); bytes.Equal(id, s.id(int(order[k-1]))) {
			return fmt.Errorf("%w: %w: %s appears twice", model.ErrInvalid, model.ErrInvalidResource, id)
		}
	}
	for _, ref := range s.refs {
		text := s.refBlocks[ref.block][ref.off : ref.off+uint32(ref.n)]
		if _, found := slices.BinarySearchFunc(order, text, func(row uint32, t []byte) int { return bytes.Compare(s.id(int(row)), t) }); !found {
			return fmt.Errorf("%w: %w: %s refers to %s, which is not in the set", model.ErrInvalid, model.ErrInvalidResource, s.id(int(ref.row)), text)
		}
	}
	s.checked = true
	return nil
}

// Hash returns the set hash of the resources added (model.SetHash).
func (s *Set) Hash() model.Hash {
	if s.hash == nil {
		hashes := make([]model.Hash, len(s.rows))
		for i := range s.rows {
			copy(hashes[i][:], s.entry(i)[:32])
		}
		h := model.SetHashOf(hashes)
		s.hash = &h
	}
	return *s.hash
}

// waitList returns the cross-agent requirements, sorted: for each
// resource an agent requires of another agent, the required ID and the
// agent that waits.
func (s *Set) waitList() []setWait {
	out := make([]setWait, 0, len(s.waits))
	for w := range s.waits {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b setWait) int {
		if c := strings.Compare(a.required, b.required); c != 0 {
			return c
		}
		return strings.Compare(a.agent, b.agent)
	})
	return out
}
