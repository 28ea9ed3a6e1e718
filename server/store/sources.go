package store

import (
	"context"
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

const sourceColumns = `env, kind, spec, archive_size, archive_sha256, webhook_secret, poll_seconds, updated_at, updated_by`

func scanSource(r Row, archive *[]byte) (record.Source, error) {
	var s record.Source
	var poll int64
	dest := []any{&s.Env, &s.Kind, &s.Spec, &s.ArchiveSize, &s.ArchiveSHA256, &s.WebhookSecret, &poll, timeCol{&s.UpdatedAt}, &s.UpdatedBy}
	if archive != nil {
		dest = append(dest, archive)
	}
	if err := r.Scan(dest...); err != nil {
		return s, err
	}
	s.PollInterval = time.Duration(poll) * time.Second
	return s, nil
}

// PutSource implements Store.
func (s *SQL) PutSource(ctx context.Context, src record.Source) (record.Source, error) {
	op := fmt.Sprintf("set the source of %q", src.Env)
	if err := src.Validate(); err != nil {
		return src, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
	}
	if src.UpdatedAt.IsZero() {
		src.UpdatedAt = time.Now()
	}
	src.UpdatedAt = src.UpdatedAt.UTC()
	src.UpdatedBy = model.Clip(src.UpdatedBy, model.MaxTextLen)
	var archive []byte
	if src.Kind == record.SourceArchive {
		archive = src.Archive
		src.ArchiveSize = int64(len(archive))
	} else {
		src.ArchiveSize, src.ArchiveSHA256 = 0, ""
	}
	err := s.db.Tx(ctx, func(tx Tx) error {
		if err := s.lockEnv(ctx, tx, src.Env); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO sources (env, kind, spec, archive, archive_size, archive_sha256, webhook_secret, poll_seconds, updated_at, updated_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (env) DO UPDATE SET kind = excluded.kind, spec = excluded.spec, archive = excluded.archive,
				archive_size = excluded.archive_size, archive_sha256 = excluded.archive_sha256, webhook_secret = excluded.webhook_secret,
				poll_seconds = excluded.poll_seconds, updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
			src.Env, src.Kind, src.Spec, archive, src.ArchiveSize, src.ArchiveSHA256, src.WebhookSecret,
			int64(src.PollInterval/time.Second), src.UpdatedAt, src.UpdatedBy)
		return err
	})
	return src, wrap(op, err)
}

// GetSource implements Store.
func (s *SQL) GetSource(ctx context.Context, env string, withArchive bool) (record.Source, error) {
	op := fmt.Sprintf("source of %q", env)
	if !withArchive {
		src, err := scanSource(s.db.QueryRow(ctx, `SELECT `+sourceColumns+` FROM sources WHERE env = $1`, env), nil)
		return src, wrap(op, err)
	}
	var archive []byte
	src, err := scanSource(s.db.QueryRow(ctx, `SELECT `+sourceColumns+`, archive FROM sources WHERE env = $1`, env), &archive)
	src.Archive = archive
	return src, wrap(op, err)
}

// ListSources implements Store.
func (s *SQL) ListSources(ctx context.Context) ([]record.Source, error) {
	out, err := queryAll(ctx, s.db, func(r Row) (record.Source, error) { return scanSource(r, nil) },
		`SELECT `+sourceColumns+` FROM sources ORDER BY env`)
	return out, wrap("list sources", err)
}

// DeleteSource implements Store.
func (s *SQL) DeleteSource(ctx context.Context, env string) error {
	n, err := s.db.Exec(ctx, `DELETE FROM sources WHERE env = $1`, env)
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: none is set", model.ErrNotFound)
	}
	return wrap(fmt.Sprintf("delete the source of %q", env), err)
}
