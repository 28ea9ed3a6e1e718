package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// testOrgs: organizations hold environments, users and tokens; one with
// environments cannot be deleted, the default one never.
func testOrgs(t *testing.T, s store.Store) {
	orgs, err := s.ListOrgs(ctx)
	if err != nil || len(orgs) != 1 || orgs[0].Name != record.DefaultOrg {
		t.Fatalf("a new store's organizations: got %v, %v; want the default one", orgs, err)
	}
	if err := s.CreateOrg(ctx, record.Org{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateOrg(ctx, record.Org{Name: "acme"}); !errors.Is(err, model.ErrExists) {
		t.Fatalf("same organization twice: got %v, want ErrExists", err)
	}
	if err := s.CreateOrg(ctx, record.Org{Name: "bad name"}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("bad name: got %v, want ErrInvalid", err)
	}
	if err := s.CreateEnv(ctx, record.Environment{Name: "rocket", Org: "acme", Settings: record.DefaultEnvSettings()}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateEnv(ctx, record.Environment{Name: "ghost", Org: "nope", Settings: record.DefaultEnvSettings()}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("environment of an unknown organization: got %v, want ErrNotFound", err)
	}
	mustEnv(t, s, "prod")
	if env, err := s.GetEnv(ctx, "rocket"); err != nil || env.Org != "acme" {
		t.Fatalf("environment rocket: got %+v, %v; want organization acme", env, err)
	}
	if env, err := s.GetEnv(ctx, "prod"); err != nil || env.Org != record.DefaultOrg {
		t.Fatalf("environment prod: got org %q, %v; want the default one", env.Org, err)
	}
	if err := s.CreateToken(ctx, record.Token{ID: "t-acme", Name: "ci", Role: record.RoleAdmin, Org: "acme", Hash: []byte("h-acme")}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateToken(ctx, record.Token{ID: "t-nope", Name: "ci", Role: record.RoleAdmin, Org: "nope", Hash: []byte("h-nope")}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("token of an unknown organization: got %v, want ErrNotFound", err)
	}
	if tok, err := s.TokenByHash(ctx, []byte("h-acme")); err != nil || tok.Org != "acme" {
		t.Fatalf("token of acme: got %+v, %v", tok, err)
	}
	if err := s.DeleteOrg(ctx, "acme"); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("delete an organization with environments: got %v, want ErrConflict", err)
	}
	if err := s.DeleteOrg(ctx, record.DefaultOrg); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("delete the default organization: got %v, want ErrConflict", err)
	}
	if err := s.DeleteEnv(ctx, "rocket"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOrg(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TokenByHash(ctx, []byte("h-acme")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("token of a deleted organization: got %v, want ErrNotFound", err)
	}
	if err := s.DeleteOrg(ctx, "acme"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("delete twice: got %v, want ErrNotFound", err)
	}
	// The audit log is kept per organization: an entry of an environment
	// is of the environment's organization.
	if err := s.CreateOrg(ctx, record.Org{Name: "beta"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateEnv(ctx, record.Environment{Name: "b1", Org: "beta", Settings: record.DefaultEnvSettings()}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []record.AuditEntry{{Actor: "a", Action: "x", Env: "b1"}, {Actor: "a", Action: "y", Org: "beta"}, {Actor: "a", Action: "z", Env: "prod"}, {Actor: "a", Action: "w"}} {
		if err := s.RecordAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for org, want := range map[string]int{"beta": 2, record.DefaultOrg: 2} {
		got, err := s.Audit(ctx, record.AuditFilter{Org: org})
		if err != nil || len(got) != want {
			t.Fatalf("audit of %s: got %v, %v; want %d entries", org, got, err, want)
		}
		for _, e := range got {
			if e.Org != org {
				t.Fatalf("audit of %s: got an entry of %s", org, e.Org)
			}
		}
	}
}

// testUsers: users with roles, passwords and sessions.
func testUsers(t *testing.T, s store.Store) {
	mustEnv(t, s, "prod")
	mustEnv(t, s, "staging")
	now := time.Now().UTC().Truncate(time.Microsecond)
	alice := record.User{ID: "u-alice", Name: "alice", Role: record.RoleViewer, Roles: map[string]record.Role{"prod": record.RoleOperator},
		Password: "$argon2id$x", CreatedBy: "test", CreatedAt: now}
	if err := s.CreateUser(ctx, alice); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateUser(ctx, record.User{ID: "u-2", Name: "alice", Password: "p"}); !errors.Is(err, model.ErrExists) {
		t.Fatalf("same name twice: got %v, want ErrExists", err)
	}
	if err := s.CreateUser(ctx, record.User{ID: "u-3", Name: "bob", Password: "p", Roles: map[string]record.Role{"nope": record.RoleViewer}}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("role in an unknown environment: got %v, want ErrNotFound", err)
	}
	if _, err := s.GetUser(ctx, "", "bob"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a failed create left bob: %v", err)
	}
	if err := s.CreateUser(ctx, record.User{ID: "u-4", Name: "bad name", Password: "p"}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("bad name: got %v, want ErrInvalid", err)
	}
	got, err := s.GetUser(ctx, record.DefaultOrg, "alice")
	if err != nil || got.ID != "u-alice" || got.Role != record.RoleViewer || got.Roles["prod"] != record.RoleOperator || got.Password != alice.Password || !got.CreatedAt.Equal(now) {
		t.Fatalf("get alice: got %+v, %v", got, err)
	}
	if got, err := s.UserByID(ctx, "u-alice"); err != nil || got.Name != "alice" || got.Org != record.DefaultOrg {
		t.Fatalf("alice by id: got %+v, %v", got, err)
	}
	// Sessions: stored by hash, ended by a new password.
	se := record.Session{Hash: []byte("s1"), UserID: "u-alice", CreatedAt: now, LastSeen: now, ExpiresAt: now.Add(time.Hour)}
	if err := s.CreateSession(ctx, se); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SessionByHash(ctx, []byte("s1")); err != nil || got.UserID != "u-alice" || !got.ExpiresAt.Equal(se.ExpiresAt) {
		t.Fatalf("session: got %+v, %v", got, err)
	}
	later := now.Add(time.Minute)
	if err := s.TouchSession(ctx, []byte("s1"), later); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SessionByHash(ctx, []byte("s1")); err != nil || !got.LastSeen.Equal(later) {
		t.Fatalf("touched session: got %+v, %v; want last seen %v", got, err, later)
	}
	// A change of roles keeps the session.
	u, err := s.UpdateUser(ctx, "", "alice", func(u *record.User) error {
		u.Role = ""
		u.Roles = map[string]record.Role{"staging": record.RoleAdmin}
		return nil
	})
	if err != nil || u.Role != "" || len(u.Roles) != 1 || u.Roles["staging"] != record.RoleAdmin {
		t.Fatalf("update roles: got %+v, %v", u, err)
	}
	if _, err := s.SessionByHash(ctx, []byte("s1")); err != nil {
		t.Fatalf("a change of roles ended the session: %v", err)
	}
	if _, err := s.UpdateUser(ctx, "", "alice", func(u *record.User) error { u.Role = "root"; return nil }); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("bad role: got %v, want ErrInvalid", err)
	}
	if _, err := s.UpdateUser(ctx, "", "alice", func(u *record.User) error { u.Password = "$argon2id$y"; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SessionByHash(ctx, []byte("s1")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a new password left the session: got %v, want ErrNotFound", err)
	}
	if got, _ := s.GetUser(ctx, "", "alice"); got.Password != "$argon2id$y" || !got.PasswordChangedAt.After(now) {
		t.Fatalf("new password: got %+v", got)
	}
	// Expired sessions are swept.
	old := record.Session{Hash: []byte("s2"), UserID: "u-alice", CreatedAt: now, LastSeen: now, ExpiresAt: now.Add(time.Minute)}
	fresh := record.Session{Hash: []byte("s3"), UserID: "u-alice", CreatedAt: now, LastSeen: now.Add(time.Hour), ExpiresAt: now.Add(2 * time.Hour)}
	for _, se := range []record.Session{old, fresh} {
		if err := s.CreateSession(ctx, se); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.DeleteExpiredSessions(ctx, time.Time{}, now); err != nil || n != 0 {
		t.Fatalf("sweep before any expiry: got %d, %v; want 0", n, err)
	}
	if n, err := s.DeleteExpiredSessions(ctx, now.Add(30*time.Minute), now.Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("sweep: got %d, %v; want 1", n, err)
	}
	if _, err := s.SessionByHash(ctx, []byte("s3")); err != nil {
		t.Fatalf("the sweep took a live session: %v", err)
	}
	// A user's tokens and sessions go with it; so do roles with their
	// environment.
	if err := s.CreateToken(ctx, record.Token{ID: "t-alice", Name: "script", Role: record.RoleViewer, Owner: "u-alice", Hash: []byte("h-alice")}); err != nil {
		t.Fatal(err)
	}
	if tok, err := s.TokenByHash(ctx, []byte("h-alice")); err != nil || tok.Owner != "u-alice" {
		t.Fatalf("token of alice: got %+v, %v", tok, err)
	}
	if err := s.DeleteEnv(ctx, "staging"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetUser(ctx, "", "alice"); len(got.Roles) != 0 {
		t.Fatalf("roles after their environment was deleted: %v", got.Roles)
	}
	if err := s.CreateUser(ctx, record.User{ID: "u-bob", Name: "bob", Password: "p", Role: record.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	if list, err := s.ListUsers(ctx, ""); err != nil || len(list) != 2 || list[0].Name != "alice" || list[1].Name != "bob" {
		t.Fatalf("list: got %+v, %v", list, err)
	}
	if err := s.DeleteUser(ctx, "", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SessionByHash(ctx, []byte("s3")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a deleted user's session: got %v, want ErrNotFound", err)
	}
	if _, err := s.TokenByHash(ctx, []byte("h-alice")); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("a deleted user's token: got %v, want ErrNotFound", err)
	}
	if err := s.DeleteUser(ctx, "", "alice"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("delete twice: got %v, want ErrNotFound", err)
	}
	// Users of another organization are apart.
	if err := s.CreateOrg(ctx, record.Org{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateUser(ctx, record.User{ID: "u-bob2", Org: "acme", Name: "bob", Password: "p", Roles: map[string]record.Role{"prod": record.RoleViewer}}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("role in another organization's environment: got %v, want ErrNotFound", err)
	}
	if err := s.CreateUser(ctx, record.User{ID: "u-bob2", Org: "acme", Name: "bob", Password: "p"}); err != nil {
		t.Fatal(err)
	}
	if list, err := s.ListUsers(ctx, "acme"); err != nil || len(list) != 1 || list[0].ID != "u-bob2" {
		t.Fatalf("users of acme: got %+v, %v", list, err)
	}
}
