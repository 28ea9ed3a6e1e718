package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/store"
)

// Upload is a version of an environment being uploaded, its resources
// added one at a time as they are decoded: each is checked, marked,
// sealed, hashed and encoded as Export does, a batch at a time, and kept
// only as the store keeps it (store.Set). What an upload holds is then
// about its encoded size, never the decoded resource set and its encoded
// copies at once.
type Upload struct {
	s     *Server
	env   string
	set   *store.Set
	batch []model.Resource
}

// uploadBatch is how many decoded resources an upload holds before it
// hashes and encodes them (on every CPU) into its set.
const uploadBatch = 1024

// Upload begins a version upload of env.
func (s *Server) Upload(env string) *Upload {
	return &Upload{s: s, env: env, set: store.NewSet(), batch: make([]model.Resource, 0, uploadBatch)}
}

// Add adds a resource to the upload. A resource refused (see Export) is
// an error naming it; the upload is then to be dropped.
func (u *Upload) Add(ctx context.Context, r *model.Resource) error {
	if err := model.CheckKind(r); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	model.MarkSensitive(r)
	u.batch = append(u.batch, *r)
	if len(u.batch) == cap(u.batch) {
		return u.flush(ctx)
	}
	return nil
}

// Size is the memory the resources added so far hold, in bytes.
func (u *Upload) Size() int64 {
	return u.set.Size() + int64(len(u.batch))*int64(resourceSize)
}

// resourceSize is about what a small decoded resource takes (the struct,
// its attributes' map, its strings); the batch is counted so.
const resourceSize = 512

func (u *Upload) flush(ctx context.Context) error {
	if len(u.batch) == 0 {
		return nil
	}
	if err := u.s.keys.SealAtRest(ctx, u.batch); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := u.set.Add(u.batch); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	clear(u.batch) // let the decoded resources go
	u.batch = u.batch[:0]
	return nil
}

// Store stores the resources added as a new version of env, with meta,
// unless the newest version holds exactly this resource set: then that
// version is returned and reused is true (as Export).
func (u *Upload) Store(ctx context.Context, meta model.VersionMeta) (v model.Version, reused bool, err error) {
	if err := u.flush(ctx); err != nil {
		return v, false, err
	}
	if err := u.set.Check(); err != nil {
		return v, false, fmt.Errorf("export: %w", err)
	}
	latest, err := u.s.store.LatestVersion(ctx, u.env)
	switch {
	case err == nil && latest.SetHash == u.set.Hash() && latest.State != model.VersionRetired:
		return latest, true, nil
	case err != nil && !errors.Is(err, model.ErrNotFound):
		return v, false, err
	}
	v, err = u.s.store.PutSet(ctx, u.env, meta, u.set)
	return v, false, err
}
