package store

import (
	"bytes"
	"context"
	"fmt"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// SigningKeys implements Store.
func (s *SQL) SigningKeys(ctx context.Context) (record.SigningKeys, error) {
	ks, err := readSigningKeys(ctx, s.db, "")
	return ks, wrap("signing keys", err)
}

// UpdateSigningKeys implements Store. The current key's row is locked
// first, so that two changes (from two replicas) run one after the other.
func (s *SQL) UpdateSigningKeys(ctx context.Context, fn func(*record.SigningKeys) error) (record.SigningKeys, error) {
	var out record.SigningKeys
	err := s.db.Tx(ctx, func(tx Tx) error {
		was, err := readSigningKeys(ctx, tx, s.d.ForUpdate)
		if err != nil {
			return err
		}
		ks := was
		if was.Rollover != nil {
			r := *was.Rollover
			ks.Rollover = &r
		}
		if err := fn(&ks); err != nil {
			return err
		}
		if len(ks.Current) == 0 {
			return fmt.Errorf("%w: the current signing key cannot be removed", model.ErrInvalid)
		}
		if !bytes.Equal(ks.Current, was.Current) {
			if _, err := tx.Exec(ctx, `UPDATE secrets SET value = $2 WHERE name = $1`, record.SigningKeySecret, ks.Current); err != nil {
				return err
			}
		}
		switch r := ks.Rollover; {
		case r == nil && was.Rollover != nil:
			_, err = tx.Exec(ctx, `DELETE FROM signing_key_rollover WHERE id = 1`)
		case r != nil && (len(r.PublicKey) == 0 || len(r.PrivateKey) == 0 || r.MadeAt.IsZero()):
			err = fmt.Errorf("%w: a signing key rollover needs its public key, its sealed private key and when it was made", model.ErrInvalid)
		case r != nil && was.Rollover == nil:
			_, err = tx.Exec(ctx, `INSERT INTO signing_key_rollover (id, public_key, private_key, made_at, switch_at) VALUES (1, $1, $2, $3, $4)`,
				r.PublicKey, r.PrivateKey, r.MadeAt, r.SwitchAt)
		case r != nil:
			_, err = tx.Exec(ctx, `UPDATE signing_key_rollover SET public_key = $1, private_key = $2, made_at = $3, switch_at = $4 WHERE id = 1`,
				r.PublicKey, r.PrivateKey, r.MadeAt, r.SwitchAt)
		}
		if err != nil {
			return err
		}
		out = ks
		return nil
	})
	return out, wrap("update signing keys", err)
}

// readSigningKeys reads the signing keys, locking their rows when lock is
// the dialect's ForUpdate.
func readSigningKeys(ctx context.Context, c Conn, lock string) (record.SigningKeys, error) {
	var ks record.SigningKeys
	if err := c.QueryRow(ctx, `SELECT value FROM secrets WHERE name = $1`+lock, record.SigningKeySecret).Scan(&ks.Current); err != nil {
		return ks, fmt.Errorf("the server's signing key (a server makes it when it first starts): %w", err)
	}
	rows, err := queryAll(ctx, c, func(r Row) (record.SigningKeyRollover, error) {
		var v record.SigningKeyRollover
		err := r.Scan(&v.PublicKey, &v.PrivateKey, timeCol{&v.MadeAt}, nullTimeCol{&v.SwitchAt})
		return v, err
	}, `SELECT public_key, private_key, made_at, switch_at FROM signing_key_rollover WHERE id = 1`+lock)
	if err != nil {
		return ks, err
	}
	if len(rows) > 0 {
		ks.Rollover = &rows[0]
	}
	return ks, nil
}
