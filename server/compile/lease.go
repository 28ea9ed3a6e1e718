package compile

import (
	"context"
	"slices"
	"time"

	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server/record"
)

// The replicas of a server take turns compiling an environment under its
// compile lease; a compile left running by one that stopped is marked
// failed, at its next start or by the environment's scheduler leader.

func compileLease(env string) string { return "compile/" + env }

// failAbandoned marks failed the compiles left running by a server that
// stopped before they ended. Replicas take turns compiling an environment
// under its compile lease: holding it, none of them runs.
func (cc *Compiler) failAbandoned(ctx context.Context) {
	envs, err := cc.store.ListEnvs(ctx)
	if err != nil {
		cc.log.Warn().Err(err).Msg("cannot list environments to mark abandoned compiles failed")
		return
	}
	for _, env := range envs {
		lease, ok, err := cc.store.Lead(ctx, compileLease(env.Name))
		if err != nil || !ok {
			continue // another replica compiles it now: its compile runs
		}
		cs, err := cc.store.ListCompiles(ctx, env.Name, 20)
		for _, c := range cs {
			if c.Outcome != record.CompileRunning {
				continue
			}
			c.Outcome = record.CompileFailed
			c.Diagnostics = []record.CompileDiagnostic{{Severity: string(lang.SeverityError), Message: "the server stopped before the compile ended"}}
			if _, err := cc.store.FinishCompile(ctx, c); err != nil {
				cc.log.Warn().Err(err).Str("env", env.Name).Str("compile", c.ID).Msg("cannot mark an abandoned compile failed")
			}
		}
		lease.Release()
		if err != nil {
			cc.log.Warn().Err(err).Str("env", env.Name).Msg("cannot list compiles to mark abandoned ones failed")
		}
	}
}

// ResumeAbandoned, run by env's scheduler leader, finds compiles of env
// left running by a replica that died (none holds the compile lease): it
// marks them failed and asks for a compile with their triggers, so that
// what asked for them is not lost with the replica.
func (cc *Compiler) ResumeAbandoned(ctx context.Context, env string) {
	q := cc.compiles.Load()
	if q == nil {
		return
	}
	cs, err := cc.store.ListCompiles(ctx, env, 5)
	if err != nil || !slices.ContainsFunc(cs, func(c record.Compile) bool { return c.Outcome == record.CompileRunning }) {
		return
	}
	lease, ok, err := cc.store.Lead(ctx, compileLease(env))
	if err != nil || !ok {
		return // a replica compiles it now
	}
	defer lease.Release()
	// Read again under the lease: a compile that ended meanwhile is not
	// abandoned.
	if cs, err = cc.store.ListCompiles(ctx, env, 5); err != nil {
		return
	}
	for _, c := range cs {
		if c.Outcome != record.CompileRunning {
			continue
		}
		c.Outcome = record.CompileFailed
		c.Diagnostics = []record.CompileDiagnostic{{Severity: string(lang.SeverityError),
			Message: "the server running this compile stopped before it ended; compiled again by another"}}
		if _, err := cc.store.FinishCompile(ctx, c); err != nil {
			cc.log.Warn().Err(err).Str("env", env).Str("compile", c.ID).Msg("cannot mark an abandoned compile failed")
			continue
		}
		cc.log.Warn().Str("env", env).Str("compile", c.ID).Msg("a compile was abandoned by a stopped server; compiling again")
		for _, t := range c.Triggers {
			if err := q.Trigger(env, t); err != nil {
				cc.log.Warn().Err(err).Str("env", env).Msg("cannot ask for a compile again")
			}
		}
	}
}

// takeCompileLease waits until this server holds env's compile lease.
func (cc *Compiler) takeCompileLease(ctx context.Context, env string) (release func(), err error) {
	for {
		lease, ok, err := cc.store.Lead(ctx, compileLease(env))
		if err != nil {
			return nil, err
		}
		if ok {
			return lease.Release, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
