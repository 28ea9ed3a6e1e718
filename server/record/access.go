package record

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
)

// Role is what an API token may do.
type Role string

// Roles, from most to least powerful.
const (
	// RoleAdmin may do everything, including managing tokens and environments.
	RoleAdmin Role = "admin"
	// RoleOperator may export, release, deploy and manage agents.
	RoleOperator Role = "operator"
	// RoleViewer may only read.
	RoleViewer Role = "viewer"
)

// Allows reports whether role r includes everything role need may do.
func (r Role) Allows(need Role) bool { return r.rank() >= need.rank() && need.rank() > 0 }

func (r Role) rank() int {
	switch r {
	case RoleAdmin:
		return 3
	case RoleOperator:
		return 2
	case RoleViewer:
		return 1
	}
	return 0
}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r.rank() > 0 }

// Token is an API bearer token as the server keeps it: never the secret, only
// its hash.
type Token struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Role Role   `json:"role"`
	// Env scopes the token to one environment; empty: every environment.
	Env string `json:"env,omitempty"`
	// Org is the organization the token belongs to ("" read as the
	// default one); Owner the user who owns it ("": the organization),
	// whose rights bound the token's.
	Org       string     `json:"org,omitempty"`
	Owner     string     `json:"owner,omitempty"`
	Hash      []byte     `json:"-"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Validate checks a token's fields.
func (t Token) Validate() error {
	if t.ID == "" || t.Name == "" || len(t.Hash) == 0 {
		return fmt.Errorf("token: id, name and hash are required")
	}
	if err := model.ValidateText("token name", t.Name, model.MaxNameLen, true); err != nil {
		return err
	}
	if !t.Role.Valid() {
		return fmt.Errorf("token %s: role %q: want admin, operator or viewer", t.Name, model.Clip(string(t.Role), 32))
	}
	if t.Env != "" {
		// Clipped: the error repeats the name, which may be huge.
		if err := model.ValidateEnvName(model.Clip(t.Env, 64)); err != nil {
			return fmt.Errorf("token %s: %w", t.Name, err)
		}
	}
	return nil
}

// Expired reports whether the token has expired at now.
func (t Token) Expired(now time.Time) bool { return t.ExpiresAt != nil && !now.Before(*t.ExpiresAt) }

// Covers reports whether the token may act on environment env ("" for
// installation-wide things such as listing environments or tokens).
func (t Token) Covers(env string) bool { return t.Env == "" || t.Env == env }

// AuditEntry records one change made through the API: who, what, when.
type AuditEntry struct {
	Seq int64     `json:"seq"`
	At  time.Time `json:"at"`
	// Org is the organization the change was made in ("": the
	// environment's, or the default one).
	Org    string `json:"org,omitempty"`
	Actor  string `json:"actor"`
	Action string `json:"action"`
	Env    string `json:"env,omitempty"`
	Target string `json:"target,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// AlertKind says what an alert is about.
type AlertKind string

// Alert kinds.
const (
	// AlertDrift: a resource was seen away from its intent, or restored.
	AlertDrift AlertKind = "drift"
	// AlertSecurity: a message was dropped for who signed it.
	AlertSecurity AlertKind = "security"
	// AlertCompileFailed: a server-side compile of the environment's model
	// failed (Compliance non_compliant), once per streak of failures.
	AlertCompileFailed AlertKind = "compile.failed"
	// AlertCompileRecovered: a compile succeeded after a streak of
	// failures (Compliance compliant): good news, which ends the streak.
	AlertCompileRecovered AlertKind = "compile.recovered"
)

// AlertKinds are the alert kinds, in the order they are listed.
var AlertKinds = []AlertKind{AlertDrift, AlertSecurity, AlertCompileFailed, AlertCompileRecovered}

// Valid reports whether k is a known alert kind.
func (k AlertKind) Valid() bool { return slices.Contains(AlertKinds, k) }

// Good says whether an alert of kind k is good news: something back as it
// should be (a recovered compile; a drift alert says so by its
// compliance).
func (k AlertKind) Good() bool { return k == AlertCompileRecovered }

// ParseAlertKinds reads a filter of alert kinds: a kind ("drift",
// "compile.failed"), or a family, the part before the dot, meaning every
// kind of it ("compile": compile.failed and compile.recovered). ""
// matches every kind (nil).
func ParseAlertKinds(s string) ([]AlertKind, error) {
	if s == "" {
		return nil, nil
	}
	var out []AlertKind
	for _, k := range AlertKinds {
		if family, _, _ := strings.Cut(string(k), "."); string(k) == s || family == s {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: alert kind %q: want %s", model.ErrInvalid, model.Clip(s, 32), AlertKindsHelp)
	}
	return out, nil
}

// AlertKindFilters lists what ParseAlertKinds reads: every kind, then
// every family of more than one kind.
func AlertKindFilters() []string {
	var out, families []string
	n := map[string]int{}
	for _, k := range AlertKinds {
		out = append(out, string(k))
		family, _, _ := strings.Cut(string(k), ".")
		if n[family]++; n[family] == 2 {
			families = append(families, family)
		}
	}
	return append(out, families...)
}

// AlertKindsHelp says what an alert kind filter may be.
const AlertKindsHelp = "drift, security, compile.failed, compile.recovered, or compile (both compile kinds)"

// Alert is a compliance or security alert as the server keeps it.
type Alert struct {
	Seq     int64     `json:"seq"`
	At      time.Time `json:"at"`
	Env     string    `json:"env"`
	Agent   string    `json:"agent,omitempty"`
	Kind    AlertKind `json:"kind"`
	ID      *model.ID `json:"id,omitempty"`
	Message string    `json:"message"`
	// Changes are the drifted attributes, {current, desired} (sensitive
	// ones redacted by the agent).
	Changes model.Changes `json:"changes,omitempty"`
	// Compliance is what a drift alert says of its resource: non_compliant
	// (drifted) or compliant (restored); Version is the generation the
	// agent compared against. A drift alert with both sets the resource's
	// compliance when its status is of that version.
	Compliance model.Compliance `json:"compliance,omitempty"`
	Version    int64            `json:"version,omitempty"`
	// Healed: a drift alert of a resource its agent re-applied by drift
	// policy. Recording it also logs a heal in the resource's action log.
	Healed bool `json:"healed,omitempty"`
	// HealFailed: a drift alert of a resource its agent tried to re-apply
	// by drift policy and could not. Recording it also logs the failed
	// heal in the resource's action log.
	HealFailed bool `json:"heal_failed,omitempty"`
	// Hash is the desired state's hash the agent compared against (zero
	// when it did not say): a drift alert of an older version sets the
	// compliance of a newer one whose resource has that hash (the same
	// intent). Not kept.
	Hash model.Hash `json:"-"`
}

// NewSecret returns a fresh API token secret: "tether_" and 32 random bytes
// in URL-safe base64. Only its hash is stored.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token secret: %w", err)
	}
	return "tether_" + base64.RawURLEncoding.EncodeToString(b), nil
}

// HashSecret is how a token secret is stored and looked up. Secrets are 256
// random bits, so a plain SHA-256 cannot be reversed by guessing.
func HashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// EnrollmentToken lets agents enroll in one environment on their own: an agent
// that says hello with a valid one is accepted (enrollment policy
// `token`). The server keeps only its secret's hash.
type EnrollmentToken struct {
	ID   string `json:"id"`
	Env  string `json:"env"`
	Name string `json:"name"`
	Hash []byte `json:"-"`
	// MaxUses bounds how many agents it enrolls; 0: no bound.
	MaxUses   int        `json:"max_uses"`
	Uses      int        `json:"uses"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Host binds the token to a host of a blueprint: only the agent of
	// that name enrolls with it, and its enrollment provisions the host.
	Host string `json:"host,omitempty"`
	// OwnAgent names the agent the server runs itself (tether server
	// --own-agent) that the token was made for: only that agent enrolls
	// with it, and it is accepted whatever the environment's enrollment
	// policy (manual too), since the server vouches for an agent it runs.
	// Only the server makes such tokens.
	OwnAgent string `json:"own_agent,omitempty"`
}

// Validate checks an enrollment token's fields.
func (t EnrollmentToken) Validate() error {
	if t.ID == "" || t.Name == "" || len(t.Hash) == 0 {
		return fmt.Errorf("enrollment token: id, name and hash are required")
	}
	if err := model.ValidateText("enrollment token name", t.Name, model.MaxNameLen, true); err != nil {
		return err
	}
	if err := model.ValidateEnvName(t.Env); err != nil {
		return fmt.Errorf("enrollment token %s: %w", t.Name, err)
	}
	if t.MaxUses < 0 {
		return fmt.Errorf("enrollment token %s: max uses %d: want 0 (no bound) or more", t.Name, t.MaxUses)
	}
	if t.OwnAgent != "" {
		if err := model.ValidateAgentName(t.OwnAgent); err != nil {
			return fmt.Errorf("enrollment token %s: %w", t.Name, err)
		}
		if t.Host != "" {
			return fmt.Errorf("enrollment token %s: bound to host %s and to the server's own agent %s: one or the other", t.Name, t.Host, t.OwnAgent)
		}
	}
	return nil
}

// BoundTo is the agent name the token is bound to: its host's, or the
// server's own agent's ("" when any agent may enroll with it).
func (t EnrollmentToken) BoundTo() string {
	if t.Host != "" {
		return t.Host
	}
	return t.OwnAgent
}

// Unusable says why the token cannot enroll an agent at now ("" when it can).
func (t EnrollmentToken) Unusable(now time.Time) string {
	switch {
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		return "enrollment token " + t.Name + " expired"
	case t.MaxUses > 0 && t.Uses >= t.MaxUses:
		return "enrollment token " + t.Name + " is used up"
	}
	return ""
}
