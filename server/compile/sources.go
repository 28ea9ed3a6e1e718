package compile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/compile/source"
	"github.com/tetherhq/tether/server/record"
)

// Sources is where the server reads environments' models: a git repository
// or an uploaded archive. The server does not know which: it asks for the
// model's files at the revision the source names now.
type Sources interface {
	// Has reports whether env has a source to compile.
	Has(ctx context.Context, env string) (bool, error)
	// Resolve says which revision env's source names now, cheaply (a
	// listing of a repository's refs), without fetching it: a compile
	// that would read what the last one read is skipped before anything
	// is fetched, and polls ask it.
	Resolve(ctx context.Context, env string) (Resolved, error)
	// Checkout makes env's model ready to compile.
	Checkout(ctx context.Context, env string) (Checkout, error)
}

// Resolved is the revision a source names now.
type Resolved struct {
	// Revision is a commit id, an archive's hash. It may name what
	// Checkout finds (an annotated tag the listing does not peel): the
	// compile then runs.
	Revision string
	// Source is as Checkout's.
	Source string
}

// Checkout is an environment's model, ready to compile.
type Checkout struct {
	// Dir holds the model's files. The compile reads them (and may write
	// its module cache there); nothing else changes them until Release.
	Dir string
	// Revision is what Dir holds: a commit id, an archive's hash.
	Revision string
	// Source says what, besides the revision, decides the files: the
	// kind of source, a repository's URL, ref and sub-directory, the
	// limits; never credentials. It is one of the compile's inputs.
	Source string
	// Warnings go to the compile's report: what went wrong without
	// failing the checkout (a cache that could not be used).
	Warnings []string
	// Release is called once the compile is done with Dir (nil: nothing
	// to do).
	Release func()
}

// SourceOptions bound the sources StoredSources fetches.
type SourceOptions struct {
	// Limits bound a checkout (zero: source.DefaultLimits).
	Limits source.Limits
	// AllowFile allows file:// repositories: they read the server's own
	// disk, so they are refused unless the server's operator allows them
	// (tests, a repository mirrored onto the server).
	AllowFile bool
	// CacheDir is where the sources are kept between compiles
	// (source.Cache): a clone of each git repository, fetched
	// incrementally, and the work tree of the revision compiled last.
	// Each replica has its own; it is a cache, rebuilt when removed or
	// damaged. Empty: none, every compile fetches its source afresh into
	// a temporary directory.
	CacheDir string
}

// StoredSources is Sources over the sources kept in st.
func StoredSources(st SourceReader, opts SourceOptions) Sources {
	if opts.Limits == (source.Limits{}) {
		opts.Limits = source.DefaultLimits()
	}
	ss := &storedSources{st: st, limits: opts.Limits, allowFile: opts.AllowFile}
	if opts.CacheDir != "" {
		ss.cache = source.NewCache(opts.CacheDir)
	}
	return ss
}

type storedSources struct {
	st        SourceReader
	limits    source.Limits
	allowFile bool
	cache     *source.Cache // nil: none
}

func (ss *storedSources) allowsLocal() bool { return ss.allowFile }

// checker is a Sources that refuses some sources before they are stored.
type checker interface {
	check(spec source.Spec) error
}

func (ss *storedSources) check(spec source.Spec) error {
	if spec.Git != nil && !ss.allowFile && strings.HasPrefix(strings.ToLower(spec.Git.URL), "file:") {
		return fmt.Errorf("%w: a file:// repository reads the server's own disk: this server allows none (tether server --allow-file-sources)", record.ErrInvalidSource)
	}
	return nil
}

func (ss *storedSources) Has(ctx context.Context, env string) (bool, error) {
	_, err := ss.st.GetSource(ctx, env, false)
	if errors.Is(err, model.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (ss *storedSources) Checkout(ctx context.Context, env string) (Checkout, error) {
	rec, err := ss.st.GetSource(ctx, env, true)
	if err != nil {
		return Checkout{}, err
	}
	spec, err := source.Decode(rec.Kind, rec.Spec, rec.Archive)
	if err != nil {
		return Checkout{}, err
	}
	if err := ss.check(spec); err != nil {
		return Checkout{}, err
	}
	co := Checkout{Source: sourceInputs(spec, ss.limits)}
	if ss.cache != nil {
		t, err := ss.cache.Checkout(ctx, env, spec, ss.limits)
		if err == nil {
			co.Dir, co.Revision, co.Release = t.Dir, string(t.Revision), t.Release
			return co, nil
		}
		if !errors.Is(err, source.ErrCache) {
			return Checkout{}, err
		}
		// The cache is a shortcut: without it the source is fetched
		// as it would be without one, and the report says why.
		co.Warnings = append(co.Warnings, fmt.Sprintf("the source cache in %s cannot be used (%v): the source was fetched afresh; "+
			"check the server's --state-dir", ss.cache.Dir(), err))
	}
	dir, err := os.MkdirTemp("", "tether-compile-*")
	if err != nil {
		return Checkout{}, fmt.Errorf("make a directory for the source: %w", err)
	}
	rev, err := source.Fetch(ctx, spec, dir, ss.limits)
	if err != nil {
		os.RemoveAll(dir)
		return Checkout{}, err
	}
	co.Dir, co.Revision, co.Release = dir, string(rev), func() { os.RemoveAll(dir) }
	return co, nil
}

// sourceInputs is what, besides its revision, decides the files a source
// gives: where it is and which part, within which limits. Never its
// credentials.
func sourceInputs(spec source.Spec, limits source.Limits) string {
	if g := spec.Git; g != nil {
		return fmt.Sprintf("git %s ref=%q subdir=%q limits=%d/%d", g.URL, g.Ref, g.Subdir, limits.MaxBytes, limits.MaxFiles)
	}
	return fmt.Sprintf("archive subdir=%q limits=%d/%d", spec.Archive.Subdir, limits.MaxBytes, limits.MaxFiles)
}

// forget drops what the cache keeps of env's source; a compile using it
// keeps it (the next source set for env replaces it).
func (ss *storedSources) forget(ctx context.Context, env string) {
	if ss.cache != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = ss.cache.Forget(ctx, env)
	}
}

// poller is a Sources whose sources are polled for their revision
// (Resolve) every poll interval.
type poller interface {
	// pollInterval is how often env's source is polled; 0: never.
	pollInterval(ctx context.Context, env string) (time.Duration, error)
}

func (ss *storedSources) pollInterval(ctx context.Context, env string) (time.Duration, error) {
	rec, err := ss.st.GetSource(ctx, env, false)
	if errors.Is(err, model.ErrNotFound) {
		return 0, nil
	}
	return rec.PollInterval, err
}

func (ss *storedSources) Resolve(ctx context.Context, env string) (Resolved, error) {
	rec, err := ss.st.GetSource(ctx, env, false)
	if err != nil {
		return Resolved{}, err
	}
	spec, err := source.Decode(rec.Kind, rec.Spec, nil)
	if err != nil {
		return Resolved{}, err
	}
	if rec.Kind == record.SourceArchive {
		return Resolved{Revision: rec.ArchiveSHA256, Source: sourceInputs(spec, ss.limits)}, nil
	}
	if err := ss.check(spec); err != nil {
		return Resolved{}, err
	}
	rev, err := source.Resolve(ctx, spec)
	return Resolved{Revision: string(rev), Source: sourceInputs(spec, ss.limits)}, err
}

// PollInterval is how often env's source is polled while the compiler
// runs: 0 when never (sources that are not polled, a compiler not
// started).
func (cc *Compiler) PollInterval(ctx context.Context, env string) (time.Duration, error) {
	p, polls := cc.cfg.Sources.(poller)
	if !polls || cc.compiles.Load() == nil {
		return 0, nil
	}
	return p.pollInterval(ctx, env)
}

// pollTimeout bounds one poll of a repository.
const pollTimeout = time.Minute

// Poll asks env's source which revision it is at, and for a compile when
// that is not the revision the newest compile read. It reports whether
// the poll failed, so that a failing repository is logged once, not at
// every poll.
func (cc *Compiler) Poll(ctx context.Context, env string, failing bool) bool {
	pctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	res, err := cc.cfg.Sources.Resolve(pctx, env)
	rev := res.Revision
	if err != nil {
		if !failing && ctx.Err() == nil {
			cc.log.Warn().Err(err).Str("env", env).Msg("cannot poll the source; trying again at the next interval")
		}
		return true
	}
	if failing {
		cc.log.Info().Str("env", env).Msg("the source answers polls again")
	}
	last, err := cc.store.ListCompiles(ctx, env, 1)
	if err != nil {
		cc.log.Warn().Err(err).Str("env", env).Msg("cannot read the newest compile to compare with the polled revision")
		return false
	}
	if len(last) > 0 && last[0].Revision == rev {
		return false
	}
	cc.log.Info().Str("env", env).Str("revision", rev).Msg("poll: the source has a new revision")
	cc.Trigger(ctx, env, record.Trigger{Kind: record.TriggerPoll, By: shortCommit(rev)})
	return false
}

var (
	_ Sources = (*storedSources)(nil)
	_ checker = (*storedSources)(nil)
	_ poller  = (*storedSources)(nil)
)
