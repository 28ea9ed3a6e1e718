// Package compile is the server-side compiler: the server compiles an
// environment's model itself when something asks (an operator, a webhook,
// a poll, an agent accepted or rejected, an agent's facts or labels that
// changed), from the source Config.Sources gives it (a git repository or
// an uploaded archive, kept in the store: StoredSources), with the
// environment's live inventory. The compile queue (package queue) folds
// the triggers (one compile running per environment, one waiting); a lease
// in the store ("compile/ENV") makes the replicas of a server take turns,
// so two never compile one environment at once, and no trigger a replica
// received is dropped for another's compile. Each compile is recorded as a
// report; a compile that would read what the last one read is skipped; the
// environment's settings say whether what it stores is released.
//
// The compiler does not store versions nor fan releases out itself: it
// hands its resources to the Exporter and the version it released to the
// Releaser it is given, which do so as for any export and release, and it
// publishes through the event.Feed it is given. It never imports the
// server, the scheduler or the bus.
package compile

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server/compile/queue"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// Config configures a compiler.
type Config struct {
	// Sources gives the models of the environments compiled (nil: none
	// is; versions come from exports).
	Sources Sources
	// Settle is how long a compile waits after the first trigger that
	// asked for it, for more to fold in (0: the queue's default).
	Settle time.Duration
	// Timeout bounds each compile, its fetch included (0: the
	// compiler's default).
	Timeout time.Duration
}

// Default returns the configuration zero fields take.
func Default() Config {
	return Config{Settle: queue.Default().Settle, Timeout: lang.DefaultTimeout}
}

// Validate checks the configuration; zero fields take their defaults.
func (c Config) Validate() error {
	if c.Settle != 0 {
		return queue.Config{Settle: c.Settle}.Validate()
	}
	return nil
}

// Envs reads environments and their live inventory.
type Envs interface {
	GetEnv(ctx context.Context, name string) (record.Environment, error)
	ListEnvs(ctx context.Context) ([]record.Environment, error)
	ListAgents(ctx context.Context, env string) ([]record.Agent, error)
}

// Reports records compiles.
type Reports interface {
	StartCompile(ctx context.Context, c record.Compile) (record.Compile, error)
	FinishCompile(ctx context.Context, c record.Compile) (record.Compile, error)
	PruneCompiles(ctx context.Context, env string, keep int) (int, error)
}

// ReportReader reads compile reports.
type ReportReader interface {
	GetCompile(ctx context.Context, env, id string) (record.Compile, error)
	ListCompiles(ctx context.Context, env string, limit int) ([]record.Compile, error)
}

// Versions reads an environment's released version and releases one.
type Versions interface {
	ReleasedVersion(ctx context.Context, env string) (model.Version, error)
	Release(ctx context.Context, env string, n int64) (model.Version, error)
}

// Alerts reads and records compile alerts.
type Alerts interface {
	Alerts(ctx context.Context, f record.AlertFilter) ([]record.Alert, error)
	RecordAlerts(ctx context.Context, alerts []record.Alert, events ...record.LoggedEvent) error
}

// SourceStore keeps the environments' sources.
type SourceStore interface {
	SourceReader
	PutSource(ctx context.Context, src record.Source) (record.Source, error)
	DeleteSource(ctx context.Context, env string) error
}

// SourceReader reads an environment's source.
type SourceReader interface {
	GetSource(ctx context.Context, env string, withArchive bool) (record.Source, error)
}

// Leases takes the compile lease of an environment.
type Leases interface {
	Lead(ctx context.Context, name string) (lease store.Lease, ok bool, err error)
}

// Store is what the compiler reads and keeps in the server's store.
type Store interface {
	Envs
	Reports
	ReportReader
	Versions
	Alerts
	SourceStore
	Leases
}

// Exporter stores a compile's resources as a version of its environment,
// as every export is stored (checked, marked, sealed), in two steps: the
// set hash first, so that a set the released version holds already is
// told before anything is stored.
type Exporter interface {
	// PrepareExport checks, marks and seals resources, and returns their
	// set hash.
	PrepareExport(ctx context.Context, resources []model.Resource) (model.Hash, error)
	// ExportPrepared stores resources PrepareExport accepted, unless the
	// newest version holds them (reused).
	ExportPrepared(ctx context.Context, env string, resources []model.Resource, meta model.VersionMeta, setHash model.Hash) (v model.Version, reused bool, err error)
}

// Releaser starts the fan-out of a version just released, in the
// background, as for any release.
type Releaser interface {
	StartRelease(ctx context.Context, env string, n int64) (record.Release, error)
}

// Machines makes the machines a model declares (the server's room of
// machines).
type Machines interface {
	// Declare makes env's platforms, distributions and hosts what the
	// model declares (d; empty when it declares none), on behalf of by,
	// and returns diagnostics for the compile's report: an error
	// diagnostic for a declaration it refused fails the compile. Its
	// error is what kept it from trying.
	Declare(ctx context.Context, env string, d model.DeclaredMachines, by string) ([]record.CompileDiagnostic, error)
}

// Services are what the server hands its compiler.
type Services struct {
	Store    Store
	Exporter Exporter
	Releaser Releaser
	// Machines takes the machines each successful compile's model
	// declares, before its version is stored (nil: none are made).
	Machines Machines
	// Feed takes the compiles' events.
	Feed *event.Feed
	// Counted hears the outcome of every compile that ran (the server's
	// metrics); nil: nothing does.
	Counted func(record.CompileOutcome)
}

// Compiler compiles environments' models as triggers ask, while Start's
// queue runs.
type Compiler struct {
	cfg      Config
	store    Store
	export   Exporter
	release  Releaser
	machines Machines
	feed     *event.Feed
	counted  func(record.CompileOutcome)
	log      zerolog.Logger
	// compiles is the compile queue while Start's runs and the compiler
	// has sources; nil otherwise.
	compiles atomic.Pointer[queue.Queue]
}

// New returns a compiler; it compiles nothing until Start. Zero fields of
// cfg take their defaults.
func New(cfg Config, svc Services, log zerolog.Logger) *Compiler {
	if cfg.Settle == 0 {
		cfg.Settle = Default().Settle
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = Default().Timeout
	}
	counted := svc.Counted
	if counted == nil {
		counted = func(record.CompileOutcome) {}
	}
	return &Compiler{cfg: cfg, store: svc.Store, export: svc.Exporter, release: svc.Releaser, machines: svc.Machines, feed: svc.Feed, counted: counted, log: log}
}

// ErrNoSource: the environment has no source to compile, or the server
// compiles none (no Sources).
var ErrNoSource = errors.New("no source to compile")

// compileReportsKept is how many compile reports an environment keeps:
// older ones are deleted after each compile.
const compileReportsKept = 1000

// compileBy is who a server-side compile's versions say exported them.
const compileBy = "server compile"

// Start creates the compile queue when the compiler has sources, after
// marking failed the compiles a stopped server left running. The queue
// lives until stop is called; its compiles run under ctx.
func (cc *Compiler) Start(ctx context.Context) (stop func(), err error) {
	if cc.cfg.Sources == nil {
		return func() {}, nil
	}
	q, err := queue.New(ctx, queue.Config{Settle: cc.cfg.Settle}, cc.compile, cc.log)
	if err != nil {
		return nil, err
	}
	cc.failAbandoned(ctx)
	cc.compiles.Store(q)
	return func() {
		cc.compiles.Store(nil)
		q.Close()
	}, nil
}

// Request asks for a compile of env on behalf of by (an operator's
// token). It returns at once: the compile's report is in List when it
// ends. An environment without a source is refused (model.ErrConflict,
// wrapping ErrNoSource), as is any when the server compiles nothing.
func (cc *Compiler) Request(ctx context.Context, env, by string) (record.CompileRequest, error) {
	if _, err := cc.store.GetEnv(ctx, env); err != nil {
		return record.CompileRequest{}, err
	}
	q := cc.compiles.Load()
	if cc.cfg.Sources == nil {
		return record.CompileRequest{}, fmt.Errorf("%w: %w: this server compiles no models (it was started without sources)", model.ErrConflict, ErrNoSource)
	}
	if q == nil {
		return record.CompileRequest{}, fmt.Errorf("%w: compile %s: the server is not running", model.ErrUnavailable, env)
	}
	has, err := cc.cfg.Sources.Has(ctx, env)
	if err != nil {
		return record.CompileRequest{}, fmt.Errorf("compile %s: %w", env, err)
	}
	if !has {
		return record.CompileRequest{}, fmt.Errorf("%w: %w: environment %s has none: give it a source first", model.ErrConflict, ErrNoSource, env)
	}
	if err := q.Trigger(env, record.Trigger{Kind: record.TriggerOperator, By: by}); err != nil {
		return record.CompileRequest{}, fmt.Errorf("%w: compile %s: %w", model.ErrUnavailable, env, err)
	}
	running, queued := q.Pending(env)
	return record.CompileRequest{Env: env, Running: running, Queued: queued}, nil
}

// Trigger asks for a compile of env when the server compiles; what
// cannot be asked is logged, not returned: it is a consequence of
// something that happened already. Whether env has a source is asked once
// per folded batch, by compile, not here: this runs on the ingest path,
// once per agent whose facts changed.
func (cc *Compiler) Trigger(_ context.Context, env string, t record.Trigger) {
	q := cc.compiles.Load()
	if q == nil {
		return
	}
	if err := q.Trigger(env, t); err != nil && !errors.Is(err, queue.ErrClosed) {
		cc.log.Warn().Err(err).Str("env", env).Msg("compile not asked for")
	}
}

// List returns env's newest compile reports, newest first.
func (cc *Compiler) List(ctx context.Context, env string, limit int) ([]record.Compile, error) {
	if _, err := cc.store.GetEnv(ctx, env); err != nil {
		return nil, err
	}
	return cc.store.ListCompiles(ctx, env, limit)
}

// Get returns one compile report of env.
func (cc *Compiler) Get(ctx context.Context, env, id string) (record.Compile, error) {
	return cc.store.GetCompile(ctx, env, id)
}
