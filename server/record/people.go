package record

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/argon2"

	"github.com/tetherhq/tether/model"
)

// DefaultOrg is the organization everything made before organizations
// existed belongs to, and the one whose admins administer the server.
const DefaultOrg = "default"

// Org is an organization: it groups environments, users and API tokens,
// and sees nothing of another organization.
type Org struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// ValidateOrgName checks an organization's name: as an environment's.
func ValidateOrgName(name string) error {
	if err := model.ValidateEnvName(model.Clip(name, 64)); err != nil {
		return fmt.Errorf("organization name: %w", err)
	}
	return nil
}

// OrgOr returns org, or DefaultOrg when it is empty (records made before
// organizations, or by test doubles, name none).
func OrgOr(org string) string {
	if org == "" {
		return DefaultOrg
	}
	return org
}

// User is a person who logs in with a name and a password. Role is the
// user's role in every environment of the organization ("" for none);
// Roles are roles in single environments, on top of it.
type User struct {
	ID    string          `json:"id"`
	Org   string          `json:"org"`
	Name  string          `json:"name"`
	Role  Role            `json:"role,omitempty"`
	Roles map[string]Role `json:"roles,omitempty"`
	// Password is the encoded argon2id hash (HashPassword), never shown.
	Password          string    `json:"-"`
	CreatedBy         string    `json:"created_by"`
	CreatedAt         time.Time `json:"created_at"`
	PasswordChangedAt time.Time `json:"password_changed_at"`
}

// Validate checks a user's fields.
func (u User) Validate() error {
	if u.ID == "" || u.Password == "" {
		return fmt.Errorf("user: id and password are required")
	}
	if err := ValidateUserName(u.Name); err != nil {
		return err
	}
	if err := ValidateOrgName(OrgOr(u.Org)); err != nil {
		return err
	}
	if u.Role != "" && !u.Role.Valid() {
		return fmt.Errorf("user %s: role %q: want admin, operator or viewer", u.Name, model.Clip(string(u.Role), 32))
	}
	for env, r := range u.Roles {
		if err := model.ValidateEnvName(model.Clip(env, 64)); err != nil {
			return fmt.Errorf("user %s: %w", u.Name, err)
		}
		if !r.Valid() {
			return fmt.Errorf("user %s: role %q in %s: want admin, operator or viewer", u.Name, model.Clip(string(r), 32), env)
		}
	}
	return nil
}

// ValidateUserName checks a user name: 1 to 64 letters, digits, and . _ @ -
// (an e-mail address fits).
func ValidateUserName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("user name %q: want 1 to 64 characters", model.Clip(name, 64))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._@-", c)) {
			return fmt.Errorf("user name %q: want letters, digits, '.', '_', '@' and '-' only", model.Clip(name, 64))
		}
	}
	return nil
}

// RoleIn is the user's role in env: the greater of the organization-wide
// role and the one given in env ("" for none).
func (u User) RoleIn(env string) Role { return maxRole(u.Role, u.Roles[env]) }

func maxRole(a, b Role) Role {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

func minRole(a, b Role) Role {
	if b.rank() < a.rank() {
		return b
	}
	return a
}

// Session is a user's login, kept by the hash of its secret (the cookie's
// value), never the secret itself.
type Session struct {
	Hash      []byte    `json:"-"`
	UserID    string    `json:"user_id"`
	CreatedAt time.Time `json:"created_at"`
	LastSeen  time.Time `json:"last_seen"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Expired reports whether the session is over at now: past its absolute
// expiry, or idle longer than idle.
func (s Session) Expired(now time.Time, idle time.Duration) bool {
	return !now.Before(s.ExpiresAt) || (idle > 0 && !now.Before(s.LastSeen.Add(idle)))
}

// NewSessionSecret returns a fresh session secret: 32 random bytes in
// URL-safe base64. Only its hash (HashSecret) is stored.
func NewSessionSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("session secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// CSRFToken is the CSRF token of the session with that secret: derived
// from the secret, so it needs no storage and only who holds the cookie
// (or was told it by GET /session) knows it.
func CSRFToken(sessionSecret string) string {
	h := sha256.Sum256([]byte("tether csrf\x00" + sessionSecret))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// PasswordParams are argon2id's parameters. They are stored with each
// hash, so changing them changes new hashes only; old ones still verify.
type PasswordParams struct {
	// Time is the number of passes over the memory.
	Time uint32
	// Memory is in KiB.
	Memory uint32
	// Threads is the parallelism.
	Threads uint8
}

// DefaultPasswordParams: 3 passes over 64 MiB with 2 lanes (the second
// recommendation of RFC 9106 with fewer lanes), a 16-byte salt and a
// 32-byte key.
var DefaultPasswordParams = PasswordParams{Time: 3, Memory: 64 << 10, Threads: 2}

// MinPasswordLen and MaxPasswordLen bound a password's length in bytes.
const (
	MinPasswordLen = 10
	MaxPasswordLen = 256
)

// ErrBadPasswordHash: a stored password hash cannot be read.
var ErrBadPasswordHash = errors.New("unreadable password hash")

// ValidatePassword checks a new password's length.
func ValidatePassword(pw string) error {
	if len(pw) < MinPasswordLen || len(pw) > MaxPasswordLen {
		return fmt.Errorf("password: want %d to %d characters, got %d", MinPasswordLen, MaxPasswordLen, len(pw))
	}
	return nil
}

// HashPassword hashes pw with argon2id and a fresh salt, encoded with its
// parameters: $argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<key>.
func HashPassword(pw string, p PasswordParams) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password salt: %w", err)
	}
	key := argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, 32)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// CheckPassword reports whether pw matches the encoded hash, comparing
// in constant time.
func CheckPassword(encoded, pw string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, ErrBadPasswordHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, ErrBadPasswordHash
	}
	var p PasswordParams
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &p.Threads); err != nil || p.Time == 0 || p.Threads == 0 || p.Memory > 4<<20 {
		return false, ErrBadPasswordHash
	}
	b64 := base64.RawStdEncoding
	salt, err1 := b64.DecodeString(parts[4])
	key, err2 := b64.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(key) == 0 {
		return false, ErrBadPasswordHash
	}
	got := argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, uint32(len(key)))
	return subtle.ConstantTimeCompare(got, key) == 1, nil
}

// Principal is who calls the API: a user (by a session) or an API token,
// with the organization they belong to and their roles in it.
type Principal struct {
	// Kind is "user" or "token".
	Kind string `json:"kind"`
	ID   string `json:"id"`
	Name string `json:"name"`
	Org  string `json:"org"`
	// Role is the role in every environment of the organization ("" for
	// none); Roles, in single environments.
	Role  Role            `json:"role,omitempty"`
	Roles map[string]Role `json:"roles,omitempty"`
	// UserID is the user acting: the logged-in user, or the owner of a
	// token a user owns ("" for a token the organization owns).
	UserID string `json:"user_id,omitempty"`
	// Token is the calling token, when a token calls.
	Token *Token `json:"-"`
}

// Principal kinds.
const (
	PrincipalUser  = "user"
	PrincipalToken = "token"
)

// UserPrincipal is the principal of a logged-in user.
func UserPrincipal(u User) Principal {
	return Principal{Kind: PrincipalUser, ID: u.ID, Name: u.Name, Org: OrgOr(u.Org), Role: u.Role, Roles: u.Roles, UserID: u.ID}
}

// TokenPrincipal is the principal of token t; owner is the user who owns
// it (nil: the organization does), whose rights bound the token's.
func TokenPrincipal(t Token, owner *User) Principal {
	p := Principal{Kind: PrincipalToken, ID: t.ID, Name: t.Name, Org: OrgOr(t.Org), Token: &t}
	if t.Env == "" {
		p.Role = t.Role
	} else {
		p.Roles = map[string]Role{t.Env: t.Role}
	}
	if owner == nil {
		return p
	}
	p.UserID = owner.ID
	if t.Env == "" {
		p.Role = minRole(t.Role, owner.Role)
		if len(owner.Roles) > 0 {
			p.Roles = map[string]Role{}
			for env, r := range owner.Roles {
				p.Roles[env] = minRole(t.Role, r)
			}
		}
	} else {
		p.Roles = map[string]Role{t.Env: minRole(t.Role, owner.RoleIn(t.Env))}
	}
	return p
}

// RoleIn is the principal's role in env ("" for none).
func (p Principal) RoleIn(env string) Role { return maxRole(p.Role, p.Roles[env]) }

// Scoped reports whether the principal is a token scoped to one
// environment.
func (p Principal) Scoped() bool { return p.Token != nil && p.Token.Env != "" }

// ServerAdmin reports whether the principal administers the server
// (manages organizations): an admin of every environment of the default
// organization, such as the bootstrap admin or the bootstrap token.
func (p Principal) ServerAdmin() bool {
	return p.Org == DefaultOrg && p.Role == RoleAdmin
}

// Actor is how the audit log names the principal: "name (id)" for a token,
// "user name (id)" for a user.
func (p Principal) Actor() string {
	if p.Kind == PrincipalUser {
		return "user " + p.Name + " (" + p.ID + ")"
	}
	return p.Name + " (" + p.ID + ")"
}
