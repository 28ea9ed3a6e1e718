// Package api is the server's REST API: /api/v1, JSON in and out, bearer
// tokens and users' login sessions (a cookie, with a CSRF token on every
// change) with roles per environment, organizations that see nothing of
// each other, errors from one catalogue with stable codes, live events as
// server-sent events, and an OpenAPI document generated from the same
// route table that serves the requests.
//
// It depends only on the small interfaces below (the server and its store
// satisfy them), so tests run it against the real thing or a test double
// alike. echo stays inside this package: Handler returns a net/http handler.
package api

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/clientlimit"
	"github.com/tetherhq/tether/server/record"
)

// Config tunes the API and the HTTP server it runs in. Its settings are
// named here as in the server's configuration file (the flags of tether
// server).
type Config struct {
	// Version is the server's version, shown in the OpenAPI document.
	Version string
	// OfflineAfter: an agent not heard from for this long is offline.
	OfflineAfter time.Duration
	// KeepAlive is how often an idle event stream sends a comment, so
	// proxies keep it open.
	KeepAlive time.Duration

	// MaxBody (max-body) bounds the body of a request other than a
	// version upload.
	MaxBody int64
	// MaxUpload (max-upload) bounds the body of a version upload.
	MaxUpload int64
	// MinUploadRate (min-upload-rate) is the slowest a request body may
	// arrive on average, in bytes a second: by any moment, what arrived
	// at this rate plus ReadTimeout must cover the time since its
	// headers. An upload gets as long again as its size at this rate to
	// be stored.
	MinUploadRate int64
	// MaxUploads (max-uploads) bounds the version uploads handled at once,
	// since each holds its resource set in memory; another waits up to
	// UploadWait for its turn, then is answered busy.
	MaxUploads int
	UploadWait time.Duration
	// UploadMemory (upload-memory) bounds the memory the version uploads
	// in progress hold together: their resource sets as they are stored
	// (Upload.Size), counted as they are decoded. An upload that would
	// need more than UploadMemory on its own is refused too_large; one
	// that finds the rest held by other uploads, busy.
	UploadMemory int64

	// ReadHeaderTimeout (read-header-timeout) bounds the reading of a
	// request's headers. ReadTimeout (read-timeout) is the time a body
	// gets beyond its pace at MinUploadRate, so that its deadline grows
	// with the bytes it brings rather than one long timeout holding
	// every connection; a request without a body has none once its
	// headers are read (an event stream lasts as long as its client).
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// WriteTimeout (write-timeout) bounds the answer, from the end of the
	// request's headers; the event stream renews it at every write.
	WriteTimeout time.Duration
	// IdleTimeout (idle-timeout) closes a kept-alive connection left
	// idle this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes (max-header-bytes) bounds a request's headers.
	MaxHeaderBytes int
	// HandlerTimeout (handler-timeout) bounds the work behind a request
	// (the database, the broker), but for uploads and the event stream;
	// past it the answer is the error timeout.
	HandlerTimeout time.Duration

	// AnonymousRate and AnonymousBurst (anonymous-rate, anonymous-burst):
	// the token bucket of each client address for requests without a
	// token (health checks excepted), in requests a second.
	AnonymousRate  float64
	AnonymousBurst int
	// AuthFailureRate and AuthFailureBurst (auth-failure-rate,
	// auth-failure-burst): the bucket of each client address for failed
	// authentications (unknown, revoked or expired tokens, ended
	// sessions). While it is empty, a bad credential from that address
	// is answered 429 with Retry-After instead of 401; a valid one
	// always authenticates.
	AuthFailureRate  float64
	AuthFailureBurst int
	// TrustedProxies (trusted-proxy): requests from these networks are
	// attributed to the address their X-Forwarded-For names (the
	// right-most one that is not a trusted proxy itself).
	TrustedProxies []netip.Prefix
	// SeparateOps: health and metrics also have a listener of their own
	// (OpsHandler); /metrics then leaves Handler.
	SeparateOps bool

	// SessionIdle (session-idle) ends a session unused this long;
	// SessionMaxAge (session-max-age) ends any session this long after
	// its login.
	SessionIdle   time.Duration
	SessionMaxAge time.Duration
	// SecureCookies (secure-cookies): the session cookie is marked
	// Secure even on plain HTTP, for a server behind a proxy that ends
	// TLS. On TLS it always is.
	SecureCookies bool
	// LoginFreeFailures (login-free-failures) failed logins of a user
	// name from one address cost nothing; each further one doubles a
	// wait before that address's next try of that name, from a second up
	// to LoginMaxDelay (login-max-delay). An address gets four times as
	// many free failures across names (people share addresses behind
	// NAT), and so does a name across addresses: past those, the
	// addresses that failed the name take turns, one try at a time with
	// the same doubling wait, while an address that has not failed it is
	// not held back. LoginAlertAfter failures in a row from an address,
	// or a name failed from LoginAlertAfter addresses, raise a security
	// entry in the audit log and a warning in the server's log; the
	// second also a security alert on the event stream.
	LoginFreeFailures int
	LoginMaxDelay     time.Duration
	LoginAlertAfter   int
	// Password are argon2id's parameters for new password hashes.
	Password record.PasswordParams
}

// Default returns the configuration for a server facing untrusted
// clients.
func Default() Config {
	return Config{
		Version:           "dev",
		OfflineAfter:      90 * time.Second,
		KeepAlive:         15 * time.Second,
		MaxBody:           1 << 20,
		MaxUpload:         64 << 20,
		MinUploadRate:     256 << 10,
		MaxUploads:        2,
		UploadMemory:      512 << 20,
		UploadWait:        30 * time.Second,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		HandlerTimeout:    30 * time.Second,
		AnonymousRate:     5,
		AnonymousBurst:    20,
		AuthFailureRate:   0.2,
		AuthFailureBurst:  10,
		SessionIdle:       8 * time.Hour,
		SessionMaxAge:     24 * time.Hour,
		LoginFreeFailures: 5,
		LoginMaxDelay:     15 * time.Minute,
		LoginAlertAfter:   10,
		Password:          record.DefaultPasswordParams,
	}
}

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid API configuration")

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.OfflineAfter <= 0 || c.KeepAlive <= 0:
		return fmt.Errorf("%w: offline window %v and keep-alive %v: want both above 0", ErrConfig, c.OfflineAfter, c.KeepAlive)
	case c.MaxBody < 1<<10:
		return fmt.Errorf("%w: max-body %d: want at least 1024 bytes", ErrConfig, c.MaxBody)
	case c.MaxUpload < c.MaxBody:
		return fmt.Errorf("%w: max-upload %d: want at least max-body (%d)", ErrConfig, c.MaxUpload, c.MaxBody)
	case c.MinUploadRate < 1<<10:
		return fmt.Errorf("%w: min-upload-rate %d: want at least 1024 bytes a second", ErrConfig, c.MinUploadRate)
	case c.MaxUploads < 1 || c.UploadWait < 0:
		return fmt.Errorf("%w: max-uploads %d (want at least 1), upload wait %v (want 0 or more)", ErrConfig, c.MaxUploads, c.UploadWait)
	case c.UploadMemory < 1<<20:
		return fmt.Errorf("%w: upload-memory %d: want at least 1 MiB", ErrConfig, c.UploadMemory)
	case c.ReadHeaderTimeout <= 0 || c.ReadTimeout <= 0:
		return fmt.Errorf("%w: read-header-timeout %v, read-timeout %v: want both above 0", ErrConfig, c.ReadHeaderTimeout, c.ReadTimeout)
	case c.HandlerTimeout <= 0 || c.WriteTimeout <= c.HandlerTimeout:
		return fmt.Errorf("%w: handler-timeout %v, write-timeout %v: want 0 < handler-timeout < write-timeout, so that a timeout can still be answered", ErrConfig, c.HandlerTimeout, c.WriteTimeout)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("%w: idle-timeout %v: want above 0", ErrConfig, c.IdleTimeout)
	case c.MaxHeaderBytes < 4<<10:
		return fmt.Errorf("%w: max-header-bytes %d: want at least 4096", ErrConfig, c.MaxHeaderBytes)
	case c.AnonymousRate <= 0 || c.AnonymousBurst < 1:
		return fmt.Errorf("%w: anonymous-rate %g, anonymous-burst %d: want a rate above 0 and a burst of at least 1", ErrConfig, c.AnonymousRate, c.AnonymousBurst)
	case c.AuthFailureRate <= 0 || c.AuthFailureBurst < 1:
		return fmt.Errorf("%w: auth-failure-rate %g, auth-failure-burst %d: want a rate above 0 and a burst of at least 1", ErrConfig, c.AuthFailureRate, c.AuthFailureBurst)
	}
	switch {
	case c.SessionIdle <= 0 || c.SessionMaxAge < c.SessionIdle:
		return fmt.Errorf("%w: session-idle %v, session-max-age %v: want 0 < session-idle <= session-max-age", ErrConfig, c.SessionIdle, c.SessionMaxAge)
	case c.LoginFreeFailures < 1 || c.LoginMaxDelay < time.Second || c.LoginAlertAfter < 1:
		return fmt.Errorf("%w: login-free-failures %d, login-max-delay %v, login alert after %d: want at least 1, 1s and 1", ErrConfig, c.LoginFreeFailures, c.LoginMaxDelay, c.LoginAlertAfter)
	case c.Password.Time < 1 || c.Password.Memory < 8*uint32(c.Password.Threads) || c.Password.Threads < 1:
		return fmt.Errorf("%w: password hashing: time %d, memory %d KiB, threads %d: want time and threads of at least 1 and at least 8 KiB per thread", ErrConfig, c.Password.Time, c.Password.Memory, c.Password.Threads)
	}
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			return fmt.Errorf("%w: trusted-proxy %v: want a network such as 10.0.0.0/8", ErrConfig, p)
		}
	}
	return nil
}

// Environments reads and changes environments.
type Environments interface {
	ListEnvs(ctx context.Context) ([]record.Environment, error)
	GetEnv(ctx context.Context, name string) (record.Environment, error)
	CreateEnv(ctx context.Context, env record.Environment) error
	DeleteEnv(ctx context.Context, name string) error
}

// Settings changes an environment's settings and carries out what a change
// implies (a halt pauses agents).
type Settings interface {
	UpdateEnvSettings(ctx context.Context, name string, fn func(*record.EnvSettings) error) (record.Environment, error)
}

// Versions reads versions.
type Versions interface {
	ListVersions(ctx context.Context, env string) ([]model.Version, error)
	GetVersion(ctx context.Context, env string, n int64, withResources bool) (model.Version, error)
	ReleasedVersion(ctx context.Context, env string) (model.Version, error)
	ResourceHashes(ctx context.Context, env string, n int64) ([]record.ResourceHash, error)
}

// Exporter stores and releases versions. A release stands once stored
// and answers at once: its fan-out to agents runs in the background,
// followed through Releases.
type Exporter interface {
	// Upload begins a version upload of env.
	Upload(env string) Upload
	Release(ctx context.Context, env string, n int64) (record.Released, error)
}

// Upload is a version being uploaded: its resources are added one at a
// time as they are decoded, each checked and encoded at once and kept
// as it is stored, then stored as a version (or the newest version
// reused, when it holds exactly this set).
type Upload interface {
	// Add adds a resource; an error refuses the upload.
	Add(ctx context.Context, r *model.Resource) error
	// Size is the memory the resources added hold, in bytes.
	Size() int64
	Store(ctx context.Context, meta model.VersionMeta) (v model.Version, reused bool, err error)
}

// Releases reads releases and how far their fan-outs got.
type Releases interface {
	ListReleases(ctx context.Context, env string, limit int) ([]record.Release, error)
	GetRelease(ctx context.Context, env, id string) (record.Release, error)
	// ContinueRelease and AbortRelease act on a running staged rollout.
	ContinueRelease(ctx context.Context, env, id string) (record.Release, error)
	AbortRelease(ctx context.Context, env, id string) (record.Release, error)
}

// Resources reads resources, their state and their history.
type Resources interface {
	Statuses(ctx context.Context, env string, f record.StatusFilter) ([]record.ResourceStatus, error)
	CountStatuses(ctx context.Context, env string, f record.StatusFilter, version int64) (int, error)
	StatusCounts(ctx context.Context, env string) ([]record.StatusCount, error)
	Resource(ctx context.Context, env string, n int64, id model.ID) (model.Resource, error)
	Actions(ctx context.Context, env string, id model.ID, limit int) ([]record.Action, error)
	ResourceHistory(ctx context.Context, env string, id model.ID) ([]record.ResourceHash, error)
}

// Agents reads agents.
type Agents interface {
	ListAgents(ctx context.Context, env string) ([]record.Agent, error)
	// FindAgents finds, counts and pages agents in the store: a page of
	// 10,000 agents never reads them all.
	FindAgents(ctx context.Context, env string, f record.AgentFilter) ([]record.Agent, int, error)
	CountAgentsByState(ctx context.Context, env string, onlineSince time.Time) (record.AgentCounts, error)
	GetAgent(ctx context.Context, env, name string) (record.Agent, error)
}

// AgentControl accepts, rejects, pauses and resumes agents, and asks them
// to report their facts again.
type AgentControl interface {
	AgentAction(ctx context.Context, env, name string, action record.AgentAction) (record.Agent, error)
	RefreshFacts(ctx context.Context, env, name string) (record.Agent, error)
	RotateKey(ctx context.Context, env, name string) (record.Agent, error)
	// DeleteAgent forgets an agent and removes its inbox; it returns the
	// agent as it was.
	DeleteAgent(ctx context.Context, env, name string) (record.Agent, error)
}

// Compiles asks the server for compiles of environments' models and reads
// their reports.
type Compiles interface {
	RequestCompile(ctx context.Context, env, by string) (record.CompileRequest, error)
	ListCompiles(ctx context.Context, env string, limit int) ([]record.Compile, error)
	GetCompile(ctx context.Context, env, id string) (record.Compile, error)
}

// Sources keeps the environments' model sources: their credentials go in,
// never out.
type Sources interface {
	SetSource(ctx context.Context, env string, req record.SourceRequest, by string) (record.SourceView, error)
	UploadSource(ctx context.Context, env string, archive []byte, subdir, by string) (record.SourceView, error)
	GetSource(ctx context.Context, env string) (record.SourceView, error)
	DeleteSource(ctx context.Context, env string) error
	Webhook(ctx context.Context, env string, h http.Header, body []byte) (record.WebhookResult, error)
}

// Operations sends deploys, repairs and dry runs and reads what they did.
type Operations interface {
	Deploy(ctx context.Context, env string, req record.DeployRequest) (record.Deployment, error)
	DeployActions(ctx context.Context, env, deployID string, limit int) ([]record.Action, error)
	ListDeploys(ctx context.Context, env string, f record.DeployFilter) ([]record.Deploy, error)
	GetDeploy(ctx context.Context, env, id string) (record.Deploy, error)
}

// Plans dry-runs a version, released or not, on the live agents and
// waits for their answers (record.Plan), and says what a release of it
// would take away: nothing is released or changed.
type Plans interface {
	Plan(ctx context.Context, env string, n int64, req record.PlanRequest) (record.Plan, error)
	// ReleasePreview says what releasing version n would take away from
	// each agent; nothing is released.
	ReleasePreview(ctx context.Context, env string, n int64) (record.ReleasePreview, error)
}

// Records reads alerts and keeps the audit log.
type Records interface {
	Alerts(ctx context.Context, f record.AlertFilter) ([]record.Alert, error)
	Audit(ctx context.Context, f record.AuditFilter) ([]record.AuditEntry, error)
	RecordAudit(ctx context.Context, e record.AuditEntry) error
}

// Tokens keeps API tokens.
type Tokens interface {
	CreateToken(ctx context.Context, t record.Token) error
	TokenByHash(ctx context.Context, hash []byte) (record.Token, error)
	ListTokens(ctx context.Context) ([]record.Token, error)
	DeleteToken(ctx context.Context, id string) error
}

// EnrollmentTokens keeps the tokens agents enroll with.
type EnrollmentTokens interface {
	CreateEnrollToken(ctx context.Context, t record.EnrollmentToken) error
	ListEnrollTokens(ctx context.Context, env string) ([]record.EnrollmentToken, error)
	DeleteEnrollToken(ctx context.Context, env, id string) error
}

// Events follows the server's live events of env ("" for all) until ctx
// ends: it calls opened once subscribed (an event published after that is
// not missed), then send for each event with its ID, kind and JSON
// encoding. After is the ID of the last event the follower saw ("" for
// none): the events after it come first, if they are still kept; opened
// is told the ID the follower is at (the events that come are those after
// it) and whether the events after after were still kept (false: some
// may be missed).
type Events interface {
	Follow(ctx context.Context, env, after string, opened func(at string, resumed bool) error, send func(id, kind string, data []byte) error) error
}

// SecurityAlerts raises a security alert about an organization's users
// (a password guessed from many addresses): on the event stream, for
// the server's admins, and in the server's log.
type SecurityAlerts interface {
	SecurityNotice(ctx context.Context, org, what string)
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
	Releases   Releases
	Resources  Resources
	Agents     Agents
	Control    AgentControl
	Operations Operations
	// Plans answers plans (nil: answered as a conflict).
	Plans   Plans
	Records Records
	Tokens  Tokens
	// People keeps organizations, users and sessions (nil: the server
	// has no users; only tokens get in).
	People     People
	Enrollment EnrollmentTokens
	Events     Events
	// Webhooks keeps the environments' webhooks (nil: none).
	Webhooks Webhooks
	// Alerts raises security alerts that concern no environment (nil:
	// the audit log and the server's log only).
	Alerts SecurityAlerts
	// Compiles are the server's own compiles (nil: answered as none).
	Compiles Compiles
	// Sources are the models' sources (nil: the server compiles none).
	Sources Sources
	// Machines are machines made from blueprints (nil: the server makes
	// none).
	Machines Machines
	// Ready lists what /readyz checks (name → check).
	Ready map[string]func(context.Context) error
	// Metrics serves /metrics; nil: not served.
	Metrics http.Handler
	// Observer, if set, is told of every request.
	Observer Observer
	// ServerKey returns the key the server signs commands with now:
	// agents pin it, and enrollment tokens carry its fingerprint.
	ServerKey func() ed25519.PublicKey
	// SigningKey rolls the server's signing key over (nil: answered as
	// a conflict, the server has nothing to roll over).
	SigningKey SigningKeys
}

// SigningKeys rolls the server's signing key over: a next key made and
// announced to agents, switched to, the old one retired.
type SigningKeys interface {
	SigningKeyStatus(ctx context.Context) (record.SigningKeyStatus, error)
	NewSigningKey(ctx context.Context) (record.SigningKeyStatus, error)
	SwitchSigningKey(ctx context.Context, force bool) (record.SigningKeyStatus, error)
	RetireSigningKey(ctx context.Context, force bool) (record.SigningKeyStatus, error)
}

// API serves the REST API.
type API struct {
	cfg  Config
	svc  Services
	log  zerolog.Logger
	echo *echo.Echo
	ops  *echo.Echo
	now  func() time.Time

	// anonymous and authFailures are the per-client buckets of requests
	// without a token and of failed authentications.
	anonymous    *clientlimit.Rates
	authFailures *clientlimit.Rates
	// logins holds back logins after failures (per user name and
	// address, per address, per name); hashing bounds the password
	// hashes computed at once (each takes Password.Memory).
	logins  *loginGuard
	hashing chan struct{}
	// uploads holds a token per version upload in progress;
	// uploadMemory what they hold.
	uploads      chan struct{}
	uploadMemory *memoryBudget
	// ready remembers what each readiness check said last, so that a
	// failing check is logged when it starts failing, not at every probe.
	readyMu sync.Mutex
	ready   map[string]string
	// streams ends with EndStreams: event streams follow it.
	streams    context.Context
	endStreams context.CancelFunc
	// openStreams counts the event streams being served.
	openStreams atomic.Int64
}

// New returns the API over svc. Zero fields of cfg take their defaults;
// the caller validates cfg (Config.Validate).
func New(cfg Config, svc Services, log zerolog.Logger) *API {
	cfg = cfg.withDefaults()
	a := &API{
		cfg:          cfg,
		svc:          svc,
		log:          log.With().Str("component", "api").Logger(),
		now:          time.Now,
		anonymous:    clientlimit.NewRates(cfg.AnonymousRate, cfg.AnonymousBurst),
		authFailures: clientlimit.NewRates(cfg.AuthFailureRate, cfg.AuthFailureBurst),
		uploads:      make(chan struct{}, cfg.MaxUploads),
		logins:       newLoginGuard(cfg.LoginFreeFailures, cfg.LoginMaxDelay, cfg.LoginAlertAfter),
		uploadMemory: &memoryBudget{limit: cfg.UploadMemory},
		hashing:      make(chan struct{}, 4),
		ready:        map[string]string{},
	}
	// A process-lifetime context: it only tells event streams to end.
	a.streams, a.endStreams = context.WithCancel(context.Background())
	a.echo = a.build(false)
	a.ops = a.build(true)
	return a
}

// EndStreams ends the event streams in progress and any started later:
// a server shutting down calls it (http.Server.RegisterOnShutdown), since
// a stream never finishes by itself.
func (a *API) EndStreams() { a.endStreams() }

// OpenStreams returns how many event streams (/api/v1/events) are being
// served now: each holds one of its client's connections (an HTTP/1.1
// browser keeps six per host) until the client closes it.
func (a *API) OpenStreams() int { return int(a.openStreams.Load()) }

// withDefaults fills the zero fields of c from Default.
func (c Config) withDefaults() Config {
	def := Default()
	orDefault(&c.Version, def.Version)
	orDefault(&c.OfflineAfter, def.OfflineAfter)
	orDefault(&c.KeepAlive, def.KeepAlive)
	orDefault(&c.MaxBody, def.MaxBody)
	orDefault(&c.MaxUpload, def.MaxUpload)
	orDefault(&c.MinUploadRate, def.MinUploadRate)
	orDefault(&c.MaxUploads, def.MaxUploads)
	orDefault(&c.UploadWait, def.UploadWait)
	orDefault(&c.UploadMemory, def.UploadMemory)
	orDefault(&c.ReadHeaderTimeout, def.ReadHeaderTimeout)
	orDefault(&c.ReadTimeout, def.ReadTimeout)
	orDefault(&c.WriteTimeout, def.WriteTimeout)
	orDefault(&c.IdleTimeout, def.IdleTimeout)
	orDefault(&c.MaxHeaderBytes, def.MaxHeaderBytes)
	orDefault(&c.HandlerTimeout, def.HandlerTimeout)
	orDefault(&c.AnonymousRate, def.AnonymousRate)
	orDefault(&c.AnonymousBurst, def.AnonymousBurst)
	orDefault(&c.AuthFailureRate, def.AuthFailureRate)
	orDefault(&c.AuthFailureBurst, def.AuthFailureBurst)
	orDefault(&c.SessionIdle, def.SessionIdle)
	orDefault(&c.SessionMaxAge, def.SessionMaxAge)
	orDefault(&c.LoginFreeFailures, def.LoginFreeFailures)
	orDefault(&c.LoginMaxDelay, def.LoginMaxDelay)
	orDefault(&c.LoginAlertAfter, def.LoginAlertAfter)
	orDefault(&c.Password, def.Password)
	return c
}

func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Handler returns the API as a net/http handler: /api/v1, /healthz,
// /readyz, and /metrics unless health and metrics have a listener of their
// own.
func (a *API) Handler() http.Handler { return a.echo }

// Mount serves h at every path of Handler the API does not answer itself
// (the console, at /); paths under /api stay the API's, answered with its
// JSON errors. Call it before serving.
func (a *API) Mount(h http.Handler) {
	a.echo.Any("/api/*", func(echo.Context) error { return echo.ErrNotFound })
	a.echo.Any("/", echo.WrapHandler(h))
	a.echo.Any("/*", echo.WrapHandler(h))
}

// OpsHandler returns what a listener of its own serves for operations:
// /healthz, /readyz (saying why a check fails) and /metrics. It has no
// rate limit: that listener is meant for a private network.
func (a *API) OpsHandler() http.Handler { return a.ops }

// HTTPServer returns an http.Server for h with the configured timeouts and
// header limit; its own complaints (TLS handshakes, bad requests) go to
// the debug log, since hostile clients could otherwise fill the log.
// Headers must arrive within ReadHeaderTimeout; a body gets a deadline
// of its own (bodyDeadline) instead of one ReadTimeout for every request.
func (a *API) HTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           a.bodyDeadline(h),
		ReadHeaderTimeout: a.cfg.ReadHeaderTimeout,
		WriteTimeout:      a.cfg.WriteTimeout,
		IdleTimeout:       a.cfg.IdleTimeout,
		MaxHeaderBytes:    a.cfg.MaxHeaderBytes,
		ErrorLog:          log.New(debugWriter{a.log}, "", 0),
	}
}

// bodyDeadline paces a request's body: it must arrive at MinUploadRate
// on average, with ReadTimeout to spare, its read deadline moving on as
// its bytes come (ReadTimeout plus what arrived at that rate, from when
// its headers were read). A client dribbling a body so holds its
// connection a few seconds, not the minutes one timeout long enough for
// the largest upload would give it, and a body of any size that keeps
// the pace is read whole. A request without a body has no read deadline
// once its headers are read: nothing more is read but the next request,
// or the client going away (which ends an event stream). Neither has one
// once its body is read whole: net/http cancels a request's context when
// its connection's read deadline passes, even while the handler works,
// so a deadline left behind would cut short a plan that waits on its
// agents.
func (a *API) bodyDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rc := http.NewResponseController(w)
		if req.ContentLength == 0 || req.Body == nil || req.Body == http.NoBody {
			_ = rc.SetReadDeadline(time.Time{})
			h.ServeHTTP(w, req)
			return
		}
		start := time.Now()
		_ = rc.SetReadDeadline(start.Add(a.cfg.ReadTimeout))
		// A shallow copy: the server still sees the body it made, to
		// read what the handler leaves of it.
		paced := req.WithContext(req.Context())
		paced.Body = &pacedBody{ReadCloser: req.Body, rc: rc, start: start, grace: a.cfg.ReadTimeout, rate: float64(a.cfg.MinUploadRate), size: req.ContentLength}
		h.ServeHTTP(w, paced)
	})
}

// pacedBody moves its connection's read deadline on as its bytes come.
type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  float64 // bytes a second
	size  int64   // the body's length, -1 if unknown
	n     int64
	done  bool
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	// Writers that cannot (a test recorder) have no deadline to move.
	switch {
	case b.done:
	case err == io.EOF || (b.size >= 0 && b.n >= b.size):
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case n > 0:
		_ = b.rc.SetReadDeadline(b.start.Add(b.grace + time.Duration(float64(b.n)/b.rate*float64(time.Second))))
	}
	return n, err
}

// debugWriter writes net/http's log lines to the debug log.
type debugWriter struct{ log zerolog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.log.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
