package store

import (
	"context"
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// CreateOrg implements Store.
func (s *SQL) CreateOrg(ctx context.Context, o record.Org) error {
	if err := record.ValidateOrgName(o.Name); err != nil {
		return fmt.Errorf("create organization: %w: %w", model.ErrInvalid, err)
	}
	if o.CreatedAt.IsZero() {
		o.CreatedAt = time.Now()
	}
	_, err := s.db.Exec(ctx, `INSERT INTO orgs (name, created_at) VALUES ($1, $2)`, o.Name, o.CreatedAt)
	return wrap(fmt.Sprintf("create organization %q", o.Name), err)
}

// ListOrgs implements Store.
func (s *SQL) ListOrgs(ctx context.Context) ([]record.Org, error) {
	out, err := queryAll(ctx, s.db, func(r Row) (record.Org, error) {
		var o record.Org
		err := r.Scan(&o.Name, timeCol{&o.CreatedAt})
		return o, err
	}, `SELECT name, created_at FROM orgs ORDER BY name`)
	return out, wrap("list organizations", err)
}

// DeleteOrg implements Store: an organization with environments is a
// conflict (delete them first); its users, their sessions and its tokens
// go with it. The default organization stays.
func (s *SQL) DeleteOrg(ctx context.Context, name string) error {
	if name == record.DefaultOrg {
		return fmt.Errorf("delete organization %q: %w: the default organization cannot be deleted", name, model.ErrConflict)
	}
	return wrap(fmt.Sprintf("delete organization %q", name), s.db.Tx(ctx, func(tx Tx) error {
		var envs int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM environments WHERE org = $1`, name).Scan(&envs); err != nil {
			return err
		}
		if envs > 0 {
			return fmt.Errorf("%w: it has %d environments; delete them first", model.ErrConflict, envs)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tokens WHERE org = $1`, name); err != nil {
			return err
		}
		n, err := tx.Exec(ctx, `DELETE FROM orgs WHERE name = $1`, name)
		if err == nil && n == 0 {
			err = fmt.Errorf("organization %q: %w", name, model.ErrNotFound)
		}
		return err
	}))
}

// CreateUser implements Store. A role in an environment that does not
// exist fails: model.ErrNotFound.
func (s *SQL) CreateUser(ctx context.Context, u record.User) error {
	u.Org = record.OrgOr(u.Org)
	if err := u.Validate(); err != nil {
		return fmt.Errorf("create user: %w: %w", model.ErrInvalid, err)
	}
	if u.CreatedAt.IsZero() {
		u.CreatedAt = time.Now()
	}
	if u.PasswordChangedAt.IsZero() {
		u.PasswordChangedAt = u.CreatedAt
	}
	return wrap(fmt.Sprintf("create user %q", u.Name), s.db.Tx(ctx, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO users (id, org, name, password, role, created_by, created_at, password_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, u.ID, u.Org, u.Name, u.Password, string(u.Role), u.CreatedBy, u.CreatedAt, u.PasswordChangedAt); err != nil {
			return err
		}
		return s.setRoles(ctx, tx, u)
	}))
}

// setRoles replaces the user's roles in single environments, which must
// be of the user's organization.
func (s *SQL) setRoles(ctx context.Context, tx Tx, u record.User) error {
	if _, err := tx.Exec(ctx, `DELETE FROM user_roles WHERE user_id = $1`, u.ID); err != nil {
		return err
	}
	for env, role := range u.Roles {
		n, err := tx.Exec(ctx, `INSERT INTO user_roles (user_id, env, role)
			SELECT $1, name, $3 FROM environments WHERE name = $2 AND org = $4`, u.ID, env, string(role), u.Org)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("environment %q: %w", env, model.ErrNotFound)
		}
	}
	return nil
}

const userColumns = `id, org, name, password, role, created_by, created_at, password_at`

func scanUser(r Row) (record.User, error) {
	var u record.User
	var role string
	err := r.Scan(&u.ID, &u.Org, &u.Name, &u.Password, &role, &u.CreatedBy, timeCol{&u.CreatedAt}, timeCol{&u.PasswordChangedAt})
	u.Role = record.Role(role)
	return u, err
}

// withRoles reads the users' roles in single environments.
func (s *SQL) withRoles(ctx context.Context, c Conn, users []record.User) ([]record.User, error) {
	if len(users) == 0 {
		return users, nil
	}
	at := map[string]int{}
	var a args
	q := `SELECT user_id, env, role FROM user_roles WHERE user_id IN (`
	for i, u := range users {
		at[u.ID] = i
		if i > 0 {
			q += ", "
		}
		q += a.add(u.ID)
	}
	type grant struct{ user, env, role string }
	rows, err := queryAll(ctx, c, func(r Row) (grant, error) {
		var g grant
		err := r.Scan(&g.user, &g.env, &g.role)
		return g, err
	}, q+`) ORDER BY user_id, env`, a...)
	if err != nil {
		return nil, err
	}
	for _, g := range rows {
		u := &users[at[g.user]]
		if u.Roles == nil {
			u.Roles = map[string]record.Role{}
		}
		u.Roles[g.env] = record.Role(g.role)
	}
	return users, nil
}

func (s *SQL) oneUser(ctx context.Context, c Conn, where string, args ...any) (record.User, error) {
	u, err := scanUser(c.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE `+where, args...))
	if err != nil {
		return u, err
	}
	us, err := s.withRoles(ctx, c, []record.User{u})
	if err != nil {
		return u, err
	}
	return us[0], nil
}

// GetUser implements Store.
func (s *SQL) GetUser(ctx context.Context, org, name string) (record.User, error) {
	u, err := s.oneUser(ctx, s.db, `org = $1 AND name = $2`, record.OrgOr(org), name)
	return u, wrap(fmt.Sprintf("user %q", name), err)
}

// UserByID implements Store.
func (s *SQL) UserByID(ctx context.Context, id string) (record.User, error) {
	u, err := s.oneUser(ctx, s.db, `id = $1`, id)
	return u, wrap("user "+id, err)
}

// ListUsers implements Store.
func (s *SQL) ListUsers(ctx context.Context, org string) ([]record.User, error) {
	out, err := queryAll(ctx, s.db, scanUser, `SELECT `+userColumns+` FROM users WHERE org = $1 ORDER BY name`, record.OrgOr(org))
	if err == nil {
		out, err = s.withRoles(ctx, s.db, out)
	}
	return out, wrap("list users", err)
}

// UpdateUser implements Store. A new password ends the user's sessions.
func (s *SQL) UpdateUser(ctx context.Context, org, name string, fn func(*record.User) error) (record.User, error) {
	var u record.User
	err := s.db.Tx(ctx, func(tx Tx) error {
		var err error
		if u, err = s.oneUser(ctx, tx, `org = $1 AND name = $2`+s.d.ForUpdate, record.OrgOr(org), name); err != nil {
			return err
		}
		before := u
		if err := fn(&u); err != nil {
			return fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
		u.ID, u.Org, u.Name = before.ID, before.Org, before.Name
		if err := u.Validate(); err != nil {
			return fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
		if u.Password != before.Password {
			if u.PasswordChangedAt.Equal(before.PasswordChangedAt) {
				u.PasswordChangedAt = time.Now().UTC()
			}
			if _, err := tx.Exec(ctx, `DELETE FROM sessions WHERE user_id = $1`, u.ID); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE users SET password = $1, role = $2, password_at = $3 WHERE id = $4`,
			u.Password, string(u.Role), u.PasswordChangedAt, u.ID); err != nil {
			return err
		}
		return s.setRoles(ctx, tx, u)
	})
	return u, wrap(fmt.Sprintf("update user %q", name), err)
}

// DeleteUser implements Store: the user's sessions and tokens go with it.
func (s *SQL) DeleteUser(ctx context.Context, org, name string) error {
	n, err := s.db.Exec(ctx, `DELETE FROM users WHERE org = $1 AND name = $2`, record.OrgOr(org), name)
	if err == nil && n == 0 {
		err = fmt.Errorf("user %q: %w", name, model.ErrNotFound)
	}
	return wrap(fmt.Sprintf("delete user %q", name), err)
}

// CreateSession implements Store.
func (s *SQL) CreateSession(ctx context.Context, se record.Session) error {
	if len(se.Hash) == 0 || se.UserID == "" {
		return fmt.Errorf("create session: %w: hash and user are required", model.ErrInvalid)
	}
	_, err := s.db.Exec(ctx, `INSERT INTO sessions (hash, user_id, created_at, last_seen, expires_at) VALUES ($1, $2, $3, $4, $5)`,
		se.Hash, se.UserID, se.CreatedAt, se.LastSeen, se.ExpiresAt)
	return wrap("create session", err)
}

// SessionByHash implements Store.
func (s *SQL) SessionByHash(ctx context.Context, hash []byte) (record.Session, error) {
	var se record.Session
	err := s.db.QueryRow(ctx, `SELECT hash, user_id, created_at, last_seen, expires_at FROM sessions WHERE hash = $1`, hash).
		Scan(&se.Hash, &se.UserID, timeCol{&se.CreatedAt}, timeCol{&se.LastSeen}, timeCol{&se.ExpiresAt})
	return se, wrap("session", err)
}

// TouchSession implements Store.
func (s *SQL) TouchSession(ctx context.Context, hash []byte, at time.Time) error {
	_, err := s.db.Exec(ctx, `UPDATE sessions SET last_seen = $1 WHERE hash = $2`, at, hash)
	return wrap("session", err)
}

// DeleteSession implements Store; deleting one that is gone is no error.
func (s *SQL) DeleteSession(ctx context.Context, hash []byte) error {
	_, err := s.db.Exec(ctx, `DELETE FROM sessions WHERE hash = $1`, hash)
	return wrap("delete session", err)
}

// DeleteExpiredSessions implements Store.
func (s *SQL) DeleteExpiredSessions(ctx context.Context, idleSince, now time.Time) (int64, error) {
	if idleSince.IsZero() {
		n, err := s.db.Exec(ctx, `DELETE FROM sessions WHERE expires_at <= $1`, now)
		return n, wrap("delete expired sessions", err)
	}
	n, err := s.db.Exec(ctx, `DELETE FROM sessions WHERE expires_at <= $1 OR last_seen <= $2`, now, idleSince)
	return n, wrap("delete expired sessions", err)
}

// People keeps organizations, users and their sessions.
type People interface {
	// CreateOrg stores an organization; ErrExists if the name is taken.
	CreateOrg(ctx context.Context, o record.Org) error
	// ListOrgs returns every organization, by name.
	ListOrgs(ctx context.Context) ([]record.Org, error)
	// DeleteOrg deletes an organization with its users and tokens:
	// ErrConflict while it has environments, or for the default one.
	DeleteOrg(ctx context.Context, name string) error

	// CreateUser stores a user with its roles; ErrExists if the name is
	// taken in the organization, ErrNotFound for a role in an environment
	// that is not the organization's.
	CreateUser(ctx context.Context, u record.User) error
	// GetUser returns the user called name in org, with its roles.
	GetUser(ctx context.Context, org, name string) (record.User, error)
	// UserByID returns a user by ID, with its roles.
	UserByID(ctx context.Context, id string) (record.User, error)
	// ListUsers returns the users of org, by name.
	ListUsers(ctx context.Context, org string) ([]record.User, error)
	// UpdateUser changes a user's password and roles with fn, in one
	// transaction; a new password deletes the user's sessions.
	UpdateUser(ctx context.Context, org, name string, fn func(*record.User) error) (record.User, error)
	// DeleteUser deletes a user with its sessions and the tokens it owns.
	DeleteUser(ctx context.Context, org, name string) error

	// CreateSession stores a session.
	CreateSession(ctx context.Context, s record.Session) error
	// SessionByHash returns the session whose secret hashes to hash.
	SessionByHash(ctx context.Context, hash []byte) (record.Session, error)
	// TouchSession records that the session was used at at.
	TouchSession(ctx context.Context, hash []byte, at time.Time) error
	// DeleteSession ends a session.
	DeleteSession(ctx context.Context, hash []byte) error
	// DeleteExpiredSessions deletes the sessions expired at now or last
	// used at or before idleSince (zero: whenever), and says how many.
	DeleteExpiredSessions(ctx context.Context, idleSince, now time.Time) (int64, error)
}
