// Package api is the server's REST API: /api/v1, JSON in and out, bearer
// tokens with roles scoped to environments, errors from one catalogue with
// stable codes, live events as server-sent events, and an OpenAPI document
// generated from the same route table that serves the requests.
//
// It depends only on the small interfaces below (the server and its store
// satisfy them), so tests run it against the real thing or a test double
// alike. echo stays inside this package: Handler returns a net/http handler.
package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/model"
)

// Config tunes the API.
type Config struct {
	// MaxBody bounds a request body (a version upload is the largest).
	MaxBody int64
	// OfflineAfter: an agent not heard from for this long is offline.
	OfflineAfter time.Duration
	// Version is the server's version, shown in the OpenAPI document.
	Version string
	// KeepAlive is how often an idle event stream sends a comment, so
	// proxies keep it open.
	KeepAlive time.Duration
}

// DefaultConfig returns the configuration for zero fields.
func DefaultConfig() Config {
	return Config{MaxBody: 256 << 20, OfflineAfter: 90 * time.Second, Version: "dev", KeepAlive: 15 * time.Second}
}

// Environments reads and changes environments.
type Environments interface {
	ListEnvs(ctx context.Context) ([]model.Environment, error)
	GetEnv(ctx context.Context, name string) (model.Environment, error)
	CreateEnv(ctx context.Context, env model.Environment) error
	DeleteEnv(ctx context.Context, name string) error
}

// Settings changes an environment's settings and carries out what a change
// implies (a halt pauses agents).
type Settings interface {
	UpdateEnvSettings(ctx context.Context, name string, fn func(*model.EnvSettings) error) (model.Environment, error)
}

// Versions reads versions.
type Versions interface {
	ListVersions(ctx context.Context, env string) ([]model.Version, error)
	GetVersion(ctx context.Context, env string, n int64, withResources bool) (model.Version, error)
	ReleasedVersion(ctx context.Context, env string) (model.Version, error)
	ResourceHashes(ctx context.Context, env string, n int64) ([]model.ResourceHash, error)
}

// Exporter stores and releases versions.
type Exporter interface {
	Export(ctx context.Context, env string, resources []model.Resource, meta model.VersionMeta) (v model.Version, reused bool, err error)
	Release(ctx context.Context, env string, n int64) (model.Version, error)
}

// Resources reads resources, their state and their history.
type Resources interface {
	Statuses(ctx context.Context, env string, f model.StatusFilter) ([]model.ResourceStatus, error)
	Resource(ctx context.Context, env string, n int64, id model.ID) (model.Resource, error)
	Actions(ctx context.Context, env string, id model.ID, limit int) ([]model.Action, error)
	ResourceHistory(ctx context.Context, env string, id model.ID) ([]model.ResourceHash, error)
}

// Agents reads agents.
type Agents interface {
	ListAgents(ctx context.Context, env string) ([]model.Agent, error)
	GetAgent(ctx context.Context, env, name string) (model.Agent, error)
}

// AgentControl accepts, rejects, pauses and resumes agents.
type AgentControl interface {
	AgentAction(ctx context.Context, env, name string, action model.AgentAction) (model.Agent, error)
}

// Operations sends deploys, repairs and dry runs and reads what they did.
type Operations interface {
	Deploy(ctx context.Context, env string, req model.DeployRequest) (model.Deployment, error)
	DeployActions(ctx context.Context, env, deployID string, limit int) ([]model.Action, error)
}

// Records reads alerts and keeps the audit log.
type Records interface {
	Alerts(ctx context.Context, f model.AlertFilter) ([]model.Alert, error)
	Audit(ctx context.Context, f model.AuditFilter) ([]model.AuditEntry, error)
	RecordAudit(ctx context.Context, e model.AuditEntry) error
}

// Tokens keeps API tokens.
type Tokens interface {
	CreateToken(ctx context.Context, t model.Token) error
	TokenByHash(ctx context.Context, hash []byte) (model.Token, error)
	ListTokens(ctx context.Context) ([]model.Token, error)
	DeleteToken(ctx context.Context, id string) error
}

// EnrollmentTokens keeps the tokens agents enroll with.
type EnrollmentTokens interface {
	CreateEnrollToken(ctx context.Context, t model.EnrollmentToken) error
	ListEnrollTokens(ctx context.Context, env string) ([]model.EnrollmentToken, error)
	DeleteEnrollToken(ctx context.Context, env, id string) error
}

// Events follows the server's live events of env ("" for all) until ctx
// ends, calling send for each with its kind and JSON encoding.
type Events interface {
	Follow(ctx context.Context, env string, send func(kind string, data []byte) error) error
}

// Observer is told of every request served (for metrics).
type Observer interface {
	ObserveRequest(route, method string, status int, d time.Duration)
}

// Services is everything the API serves from.
type Services struct {
	Envs       Environments
	Settings   Settings
	Versions   Versions
	Exporter   Exporter
	Resources  Resources
	Agents     Agents
	Control    AgentControl
	Operations Operations
	Records    Records
	Tokens     Tokens
	Enrollment EnrollmentTokens
	Events     Events
	// Ready lists what /readyz checks (name → check).
	Ready map[string]func(context.Context) error
	// Metrics serves /metrics; nil: not served.
	Metrics http.Handler
	// Observer, if set, is told of every request.
	Observer Observer
}

// API serves the REST API.
type API struct {
	cfg  Config
	svc  Services
	log  zerolog.Logger
	echo *echo.Echo
	now  func() time.Time
}

// New returns the API over svc.
func New(cfg Config, svc Services, log zerolog.Logger) *API {
	def := DefaultConfig()
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = def.MaxBody
	}
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = def.OfflineAfter
	}
	if cfg.Version == "" {
		cfg.Version = def.Version
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = def.KeepAlive
	}
	a := &API{cfg: cfg, svc: svc, log: log.With().Str("component", "api").Logger(), now: time.Now}
	a.echo = a.build()
	return a
}

// Handler returns the API as a net/http handler.
func (a *API) Handler() http.Handler { return a.echo }
