// Package ownagent runs the agents a server runs itself (tether server
// --own-agent ENV/NAME): each one in a goroutine of the server's process,
// which reaches the broker, enrolls and is told what to do exactly as an
// agent started with `tether agent run` on another host is. Such an
// agent manages the server's own host, or serves a platform (a
// hypervisor) the server's host can reach, without a second daemon to
// install.
//
// It knows the server only through the functions of Config (whether an
// environment exists, a token for an agent not enrolled yet): package
// server and package agent never import each other, and the command line
// wires the two here, as it does for the embedded mode.
package ownagent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/facts"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/cli/agentcli"
	"github.com/tetherhq/tether/model"
)

// The label every agent the server runs itself announces, so that
// operators tell it from the others (tether agent list) and a model can
// select it (host.labels["tether-served-by"] == "server").
const (
	LabelKey   = "tether-served-by"
	LabelValue = "server"
)

// Spec is one agent the server runs: its environment and name, and the
// platforms it serves (DRIVER[=URI], as tether agent run --platform).
type Spec struct {
	Env, Name string
	Platforms []string
}

// String is the agent as the flag names it: ENV/NAME.
func (s Spec) String() string { return s.Env + "/" + s.Name }

// ParseSpecs reads the agents (ENV/NAME, each once) and the platforms
// they serve (ENV/NAME=DRIVER[=URI]) as the server's flags give them.
func ParseSpecs(agents, platforms []string) ([]Spec, error) {
	var out []Spec
	at := map[string]int{}
	for _, s := range agents {
		env, name, ok := strings.Cut(strings.TrimSpace(s), "/")
		if !ok {
			return nil, fmt.Errorf("--own-agent %q: want ENV/NAME, e.g. prod/hv1 (the environment, a slash, the agent's name)", s)
		}
		if err := model.ValidateEnvName(env); err != nil {
			return nil, fmt.Errorf("--own-agent %q: %w", s, err)
		}
		if err := model.ValidateAgentName(name); err != nil {
			return nil, fmt.Errorf("--own-agent %q: %w", s, err)
		}
		spec := Spec{Env: env, Name: name}
		if _, dup := at[spec.String()]; dup {
			return nil, fmt.Errorf("--own-agent %s given twice", spec)
		}
		at[spec.String()] = len(out)
		out = append(out, spec)
	}
	for _, p := range platforms {
		who, driver, ok := strings.Cut(strings.TrimSpace(p), "=")
		i, known := at[who]
		switch {
		case !ok || driver == "":
			return nil, fmt.Errorf("--own-agent-platform %q: want ENV/NAME=DRIVER[=URI], e.g. prod/hv1=libvirt or prod/hv1=libvirt=qemu:///system", p)
		case !known:
			return nil, fmt.Errorf("--own-agent-platform %q: %s is not one of the server's own agents: add --own-agent %s", p, who, who)
		}
		if d, _, _ := strings.Cut(driver, "="); d != "libvirt" && d != "pxe" {
			return nil, fmt.Errorf("--own-agent-platform %q: unknown driver %q: want libvirt or pxe", p, d)
		}
		out[i].Platforms = append(out[i].Platforms, driver)
	}
	return out, nil
}

// Config says which agents the server runs and how.
type Config struct {
	Agents []Spec
	// StateDir holds each agent's journal, in StateDir/ENV/NAME.
	StateDir string
	// Broker is the broker as the agents reach it. A URL without a user:
	// each logs in as itself (its key signs its login), as agents do on a
	// broker that asks the server about each.
	Broker amqp.Config
	// ServerKey is the server's public key, which the agents pin.
	ServerKey ed25519.PublicKey
	// Env says whether an environment exists: nil, model.ErrNotFound, or
	// why it cannot tell.
	Env func(ctx context.Context, env string) error
	// Token makes an enrollment token for an agent whose journal holds no
	// server key yet (not enrolled): the server's own, which accepts it
	// whatever the environment's enrollment policy.
	Token func(ctx context.Context, env, name string) (string, error)
	// FactsDir holds custom facts (*.json), as tether agent run's
	// --facts-dir.
	FactsDir string
	// Retry is the pause before an agent that stopped starts again; it
	// doubles up to RetryMax while it keeps stopping. EnvRetry is how
	// often an agent whose environment does not exist looks again.
	Retry, RetryMax, EnvRetry time.Duration
	// Heartbeat is the agents' heartbeat (0: the agent's default).
	Heartbeat time.Duration
}

// Default returns the settings that have a default.
func Default() Config {
	return Config{FactsDir: "/etc/tether/facts.d", Retry: time.Second, RetryMax: time.Minute, EnvRetry: 10 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.StateDir == "":
		return errors.New("the server's own agents need a state directory for their journals")
	case len(c.ServerKey) != ed25519.PublicKeySize:
		return errors.New("the server's own agents need the server's public key")
	case c.Env == nil || c.Token == nil:
		return errors.New("the server's own agents need the server's environments and tokens")
	case c.Retry <= 0 || c.RetryMax < c.Retry || c.EnvRetry <= 0:
		return fmt.Errorf("retry %v, at most %v, environments every %v: want positive pauses, the most at least the first", c.Retry, c.RetryMax, c.EnvRetry)
	}
	return nil
}

// Run runs every agent of cfg until ctx ends, each restarted whenever it
// stops before then, and returns once every one stopped (having said
// goodbye to the server).
func Run(ctx context.Context, cfg Config, log zerolog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	host := agentcli.Hosting{Broker: cfg.Broker, Root: "/", Sync: handler.NewSyncGroup(),
		Facts: facts.Cached(10*time.Second, facts.Host{Dir: cfg.FactsDir}.Gather)}
	host.Broker.Agent = true
	var wg sync.WaitGroup
	for _, spec := range cfg.Agents {
		o := &own{spec: spec, cfg: cfg, host: host, agentLog: log,
			log: log.With().Str("component", "own-agent").Str("env", spec.Env).Str("agent", spec.Name).Logger()}
		wg.Add(1)
		go func() {
			defer wg.Done()
			supervise(ctx, cfg, spec, o.log, o.envExists, o.start)
		}()
	}
	wg.Wait()
	return nil
}

// own is one agent the server runs. log is the supervisor's, agentLog
// the one the agent narrows itself.
type own struct {
	spec          Spec
	cfg           Config
	host          agentcli.Hosting
	log, agentLog zerolog.Logger
}

// errNoEnv: the agent's environment does not exist (yet).
var errNoEnv = errors.New("no such environment")

// envExists says whether the agent's environment exists: errNoEnv when
// it does not.
func (o *own) envExists(ctx context.Context) error {
	if err := o.cfg.Env(ctx, o.spec.Env); errors.Is(err, model.ErrNotFound) {
		return fmt.Errorf("%w: %s", errNoEnv, o.spec.Env)
	} else if err != nil {
		return fmt.Errorf("read environment %s: %w", o.spec.Env, err)
	}
	return nil
}

// start runs the agent once, until ctx ends or it stops on its own.
func (o *own) start(ctx context.Context) error {
	env, name := o.spec.Env, o.spec.Name
	dir := filepath.Join(o.cfg.StateDir, env, name)
	cfg := agent.Config{Env: env, Name: name, StateDir: dir, Labels: map[string]string{LabelKey: LabelValue},
		ServerKey: o.cfg.ServerKey, Heartbeat: o.cfg.Heartbeat}
	// An agent enrolled already (its journal holds the server's key) needs
	// no token: a restart spends none.
	enrolled, err := holdsServerKey(dir, name)
	if err != nil {
		return err
	}
	if !enrolled {
		if cfg.Token, err = o.cfg.Token(ctx, env, name); errors.Is(err, model.ErrNotFound) {
			return fmt.Errorf("%w: %s", errNoEnv, env)
		} else if err != nil {
			return fmt.Errorf("make the agent's enrollment token: %w", err)
		}
	}
	if cfg.Platforms, err = agentcli.OpenPlatforms(o.spec.Platforms, 1); err != nil {
		return err
	}
	a, release, err := o.host.NewAgent(ctx, cfg, o.agentLog)
	if err != nil {
		for _, p := range cfg.Platforms {
			_ = p.Close()
		}
		return err
	}
	defer release()
	o.log.Info().Str("key", bus.Fingerprint(a.PublicKey())).Str("state_dir", dir).Bool("enrolled", enrolled).
		Strs("platforms", o.spec.Platforms).Msg("the server's own agent starting")
	return a.Run(ctx)
}

// holdsServerKey says whether the journal in dir holds the server's key:
// the agent enrolled.
func holdsServerKey(dir, name string) (bool, error) {
	j, err := journal.Open(dir, name, journal.Default())
	if err != nil {
		return false, err
	}
	held := j.ServerKey() != nil
	return held, j.Close()
}

// supervise runs start, once envExists says the agent's environment
// exists, until ctx ends. Each time start returns before then (an error,
// or a panic, recovered), that is logged once and it is started again
// after a pause that doubles from Retry up to RetryMax, and starts over
// from Retry after a run that lasted longer than RetryMax. An environment
// that does not exist (errNoEnv) is said once, then looked for every
// EnvRetry.
func supervise(ctx context.Context, cfg Config, spec Spec, log zerolog.Logger, envExists, start func(context.Context) error) {
	pause, missing := cfg.Retry, false
	for ctx.Err() == nil {
		began := time.Now()
		err := recovered(ctx, envExists)
		if err == nil {
			if missing {
				log.Info().Msg("the environment exists now: the server's own agent starts")
				missing = false
			}
			err = recovered(ctx, start)
		}
		if ctx.Err() != nil {
			log.Info().Msg("the server's own agent stopped with the server")
			return
		}
		if errors.Is(err, errNoEnv) {
			if !missing {
				log.Warn().Msgf("environment %s does not exist: the server's own agent %s starts once it does; create it with: tether env create %s",
					spec.Env, spec.Name, spec.Env)
			}
			missing = true
			sleep(ctx, cfg.EnvRetry)
			continue
		}
		if time.Since(began) > cfg.RetryMax {
			pause = cfg.Retry
		}
		if err == nil {
			err = errors.New("it stopped without saying why")
		}
		ev := log.Warn().Err(err).Dur("again_in", pause)
		var p *panicked
		if errors.As(err, &p) {
			ev = ev.Str("stack", p.stack)
		}
		ev.Msg("the server's own agent stopped; starting it again")
		sleep(ctx, pause)
		pause = min(2*pause, cfg.RetryMax)
	}
}

// panicked is a panic of start, recovered.
type panicked struct {
	value any
	stack string
}

func (p *panicked) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// recovered runs start, turning a panic into an error.
func recovered(ctx context.Context, start func(context.Context) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicked{value: v, stack: string(debug.Stack())}
		}
	}()
	return start(ctx)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
