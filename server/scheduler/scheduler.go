// Package scheduler decides what each agent is told and when: on a release it
// sends every affected agent the diff from the generation it holds to the new
// one, and a deploy when the environment deploys automatically; an agent that
// comes online gets what it missed; operators ask for deploys and dry runs;
// agents waiting on another agent's resource learn its outcome.
//
// It depends only on the small interfaces below, so it runs against the real
// store and bus, or test doubles, alike. Everything it needs is read back
// from the store; what it keeps in memory (what it already sent) only saves
// re-sending, which agents tolerate.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Environments reads environments.
type Environments interface {
	GetEnv(ctx context.Context, name string) (record.Environment, error)
}

// Versions reads released versions and agents' slices of them.
type Versions interface {
	ReleasedVersion(ctx context.Context, env string) (model.Version, error)
	GetVersion(ctx context.Context, env string, n int64, withResources bool) (model.Version, error)
	AgentSlice(ctx context.Context, env string, n int64, agent string) (model.Slice, error)
	AgentSlices(ctx context.Context, env string, n int64, agents []string) ([]model.Slice, error)
	VersionAgents(ctx context.Context, env string, n int64, after string, limit int) ([]string, error)
	SliceHashes(ctx context.Context, env string, n int64, agents []string) ([][]record.ResourceHash, error)
	ResourcesByID(ctx context.Context, env string, n int64, ids []model.ID) ([]model.Resource, error)
	VersionWaits(ctx context.Context, env string, n int64) (map[model.ID][]string, bool, error)
}

// Agents reads what the server knows of agents.
type Agents interface {
	GetAgent(ctx context.Context, env, name string) (record.Agent, error)
	ListAgents(ctx context.Context, env string) ([]record.Agent, error)
	ListAgentsAfter(ctx context.Context, env, after string, limit int) ([]record.Agent, error)
	CountAgents(ctx context.Context, env string, state record.AgentState) (int, error)
}

// Statuses reads where resources stand.
type Statuses interface {
	Statuses(ctx context.Context, env string, f record.StatusFilter) ([]record.ResourceStatus, error)
}

// Deploys records the deploys the scheduler sends, and the agents they did
// not reach.
type Deploys interface {
	RecordDeploy(ctx context.Context, d record.Deploy, agents []string) error
	EndDeployAgents(ctx context.Context, env, id string, agents []string, why string) error
}

// Pins reads the versions agents keep while a staged rollout has not
// reached them.
type Pins interface {
	AgentPin(ctx context.Context, env, agent string) (int64, bool, error)
	AgentPins(ctx context.Context, env string) (map[string]int64, error)
}

// Store is everything the scheduler reads, and the deploys it records.
type Store interface {
	Environments
	Versions
	Agents
	Statuses
	Deploys
	Pins
}

// Sealer seals the sensitive values of resources to the one agent they
// are sent to. Resources without sealed values come back as they are; the
// slice given is never changed. An agent that cannot be sent them (no
// key-agreement key) is refused with record.ErrNoKeyAgreement.
type Sealer interface {
	SealFor(ctx context.Context, env, agent string, resources []model.Resource) ([]model.Resource, error)
}

// Sender delivers commands to agents' inboxes: one at a time, or many
// with their confirms outstanding together (a release's fan-out).
type Sender interface {
	Send(ctx context.Context, e *bus.Envelope, opts bus.SendOptions) error
	SendBatch(ctx context.Context, msgs []bus.Outgoing) []error
}

// Scheduler schedules the environments of one server.
type Scheduler struct {
	store  Store
	send   Sender
	signer *bus.Signer
	seal   Sealer
	log    zerolog.Logger
	cfg    FanoutConfig

	// indexMu is held while an index is built: one build per version,
	// not one per agent saying hello at once. Taken before mu.
	indexMu sync.Mutex
	mu      sync.Mutex
	// sent is the generation last sent to each agent, to skip re-sending,
	// and sentAt when it was sent (Retry).
	sent   map[agentKey]int64
	sentAt map[agentKey]time.Time
	// now is the clock of sentAt (time.Now; tests move it).
	now func() time.Time
	// released holds, per environment, who waits for what in the
	// released version (read page by page: slices are read from the
	// store when sent, never all held at once).
	released map[string]*releasedVersion
}

// releasedVersion is the index of an environment's released version.
type releasedVersion struct {
	number int64
	// waiting maps a resource to the agents whose resources require it.
	waiting map[model.ID][]string
}

type agentKey struct{ env, agent string }

// New returns a scheduler that signs with signer, seals sensitive values
// with seal and sends through send.
func New(store Store, send Sender, signer *bus.Signer, seal Sealer, log zerolog.Logger) *Scheduler {
	return NewWith(DefaultFanout(), store, send, signer, seal, log)
}

// NewWith is New with a fan-out configuration (zero fields: defaults).
func NewWith(cfg FanoutConfig, store Store, send Sender, signer *bus.Signer, seal Sealer, log zerolog.Logger) *Scheduler {
	return &Scheduler{
		cfg:      cfg.withDefaults(),
		store:    store,
		send:     send,
		signer:   signer,
		seal:     seal,
		log:      log.With().Str("component", "scheduler").Logger(),
		sent:     map[agentKey]int64{},
		sentAt:   map[agentKey]time.Time{},
		now:      time.Now,
		released: map[string]*releasedVersion{},
	}
}

// Online handles an accepted agent that said hello: it holds generation
// a.Generation. It is sent what it misses, and deployed if the environment
// deploys automatically.
func (s *Scheduler) Online(ctx context.Context, a record.Agent) error {
	s.mu.Lock()
	s.sent[agentKey{a.Env, a.Name}] = a.Generation
	s.mu.Unlock()
	env, err := s.store.GetEnv(ctx, a.Env)
	if err != nil {
		return err
	}
	v, err := s.store.ReleasedVersion(ctx, a.Env)
	if errors.Is(err, model.ErrNotFound) {
		return nil // nothing released yet
	}
	if err != nil {
		return err
	}
	if err := s.ensureIndex(ctx, a.Env, v.Number); err != nil {
		return err
	}
	to, err := s.versionFor(ctx, a.Env, a.Name, v.Number)
	if err != nil || to == 0 {
		return err // to 0: a staged rollout has not reached it, and it had no version before
	}
	behind, err := s.sync(ctx, a.Env, a.Name, a.Generation, to)
	if errors.Is(err, record.ErrNoKeyAgreement) {
		// Said again at each hello until the agent is upgraded: no
		// retry of the hello would change it.
		s.log.Error().Err(err).Str("env", a.Env).Msg("desired state not sent")
		return nil
	}
	if err != nil {
		return err
	}
	if behind && env.Settings.AutoDeploy && !env.Settings.Halted && !a.Paused {
		id := uuid.NewString()
		err = s.record(ctx, record.Deploy{ID: id, Env: a.Env, Kind: record.OpDeploy, Trigger: record.DeployByHello, Who: record.WhoServer, Version: to}, a.Name)
		if err == nil {
			_, err = s.sendDeploy(ctx, a.Env, a.Name, to, id, bus.DeployIncremental, false, env.Settings.DriftPolicy)
		}
	}
	return err
}

// versionFor returns the version agent is to hold when released is the
// environment's released version: the version a staged rollout that has
// not reached it pins it to (0: none), else released.
func (s *Scheduler) versionFor(ctx context.Context, env, agent string, released int64) (int64, error) {
	pin, ok, err := s.store.AgentPin(ctx, env, agent)
	if err != nil || !ok {
		return released, err
	}
	return pin, nil
}

// laterText says what brings an agent a release it missed although
// connected: its next hello, and the deploy-interval retry if there is one.
func laterText(s record.EnvSettings) string {
	if s.AutoDeploy && !s.Halted && s.DeployInterval > 0 {
		return fmt.Sprintf("with the next deploy-interval retry (every %s) or when it next says hello", s.DeployInterval)
	}
	return "when it next says hello, or with the next deploy"
}

// DeployRequest is an operator's deploy, repair or dry run.
type DeployRequest = record.DeployRequest

// Deployment is a deploy, repair or dry run that was sent.
type Deployment = record.Deployment

// Deploy sends a deploy, repair or dry run of the released version to
// agents, after the desired state each one misses. Dry runs are allowed on a
// halted environment; deploys and repairs are not. Paused agents are left
// out unless named.
func (s *Scheduler) Deploy(ctx context.Context, envName string, req DeployRequest) (Deployment, error) {
	if req.Operation == "" {
		req.Operation = record.OpDeploy
	}
	if !req.Operation.Valid() {
		return Deployment{}, fmt.Errorf("%w: operation %q: want deploy, repair or dryrun", model.ErrInvalid, req.Operation)
	}
	env, err := s.store.GetEnv(ctx, envName)
	if err != nil {
		return Deployment{}, err
	}
	if env.Settings.Halted && req.Operation != record.OpDryRun {
		return Deployment{}, fmt.Errorf("%s %s: %w: resume it first (tether env resume %s)", req.Operation, envName, record.ErrHalted, envName)
	}
	v, err := s.store.ReleasedVersion(ctx, envName)
	if err != nil {
		return Deployment{}, fmt.Errorf("%s %s: %w: %w", req.Operation, envName, record.ErrNoRelease, err)
	}
	if err := s.ensureIndex(ctx, envName, v.Number); err != nil {
		return Deployment{}, err
	}
	targets, err := s.targets(ctx, envName, req.Agents)
	if err != nil {
		return Deployment{}, err
	}
	var opts bus.SendOptions
	if req.Operation == record.OpRepair {
		// A repair nobody took within an interval is stale: the next
		// one is on its way.
		opts.Expiration = time.Duration(env.Settings.RepairInterval)
	}
	d, err := s.dispatch(ctx, envName, env.Settings.DriftPolicy, v.Number, targets, req, opts)
	if len(d.Agents) == 0 && err == nil && len(d.Refused) > 0 {
		why := make([]string, 0, len(d.Refused))
		for _, a := range slices.Sorted(maps.Keys(d.Refused)) {
			why = append(why, d.Refused[a])
		}
		return d, fmt.Errorf("%s %s: %w: %s", req.Operation, envName, record.ErrNoAgents, model.Clip(strings.Join(why, "; "), 1024))
	}
	if len(d.Agents) == 0 && err == nil {
		return d, fmt.Errorf("%s %s: %w: %s cannot be reached now (never connected, or inbox full while offline): start them (tether agent run)", req.Operation, envName, record.ErrNoAgents, model.Clip(strings.Join(d.Unreached, ", "), 1024))
	}
	return d, err
}

// dispatch sends each target the desired state it misses of generation gen,
// then the operation's command.
func (s *Scheduler) dispatch(ctx context.Context, envName string, policy model.DriftPolicy, gen int64, targets []record.Agent, req DeployRequest, opts bus.SendOptions) (Deployment, error) {
	d := Deployment{ID: uuid.NewString(), Operation: req.Operation, Generation: gen}
	if req.Trigger == "" {
		req.Trigger = record.DeployByOperator
	}
	if req.Who == "" {
		req.Who = record.WhoOf(ctx)
	}
	names := make([]string, len(targets))
	for i, a := range targets {
		names[i] = a.Name
	}
	// Agents a staged rollout has not reached keep their version.
	pins, err := s.store.AgentPins(ctx, envName)
	if err != nil {
		return d, err
	}
	var errs []error
	notSent := map[string][]string{}
	for _, a := range targets {
		to := gen
		if pin, ok := pins[a.Name]; ok {
			if to = pin; to == 0 {
				if d.Refused == nil {
					d.Refused = map[string]string{}
				}
				d.Refused[a.Name] = fmt.Sprintf("%s: the staged rollout of version %d has not reached it, and it held no version before (tether release status)", a.Name, gen)
				why := "not sent: the staged rollout has not reached it, and it held no version before"
				notSent[why] = append(notSent[why], a.Name)
				continue
			}
		}
		_, err := s.sync(ctx, envName, a.Name, a.Generation, to)
		if err == nil {
			err = s.sendOperation(ctx, envName, a.Name, to, d.ID, req, policy, opts)
		}
		switch {
		case errors.Is(err, bus.ErrNoInbox), errors.Is(err, bus.ErrInboxFull):
			d.Unreached = append(d.Unreached, a.Name)
			why := "not reached: never connected, or its inbox is full while offline; it gets the released version when it next says hello"
			notSent[why] = append(notSent[why], a.Name)
		case errors.Is(err, record.ErrNoKeyAgreement):
			if d.Refused == nil {
				d.Refused = map[string]string{}
			}
			d.Refused[a.Name] = err.Error()
			notSent["not sent: "+err.Error()] = append(notSent["not sent: "+err.Error()], a.Name)
			s.log.Error().Err(err).Str("env", envName).Str("deploy", d.ID).Msg("operation not sent")
		case err != nil:
			errs = append(errs, err)
			notSent["not sent: "+err.Error()] = append(notSent["not sent: "+err.Error()], a.Name)
		default:
			d.Agents = append(d.Agents, a.Name)
		}
	}
	// Recorded once sent, not before: a resumed agent's catch-up must not
	// wait for the store. An answer recorded before it is kept.
	if err := s.store.RecordDeploy(ctx, record.Deploy{ID: d.ID, Env: envName, Kind: req.Operation, Trigger: req.Trigger, Who: req.Who, Version: gen}, names); err != nil {
		errs = append(errs, err)
	}
	for why, agents := range notSent {
		if err := s.store.EndDeployAgents(ctx, envName, d.ID, agents, why); err != nil {
			errs = append(errs, err)
		}
	}
	return d, errors.Join(errs...)
}

// unfinished are the states a retry deploys again.
var unfinished = []model.ResourceState{model.StateAvailable, model.StateDeploying, model.StateFailed,
	model.StateSkipped, model.StateCancelled}

// Retry is the deploy-interval trigger: it deploys the released version
// again to the active agents (accepted, not paused) that hold failed or
// unfinished resources, after their desired state when they last reported
// an older generation. It does nothing when the environment is halted or
// does not deploy automatically. A retry nobody took within the interval
// expires: the next one is on its way.
func (s *Scheduler) Retry(ctx context.Context, envName string) (Deployment, error) {
	env, v, ok, err := s.periodic(ctx, envName)
	if err != nil || !ok || !env.Settings.AutoDeploy || env.Settings.DeployInterval <= 0 {
		return Deployment{}, err
	}
	behind := map[string]bool{}
	for _, st := range unfinished {
		rows, err := s.store.Statuses(ctx, envName, record.StatusFilter{State: st})
		if err != nil {
			return Deployment{}, err
		}
		for _, r := range rows {
			behind[r.ID.Agent] = true
		}
	}
	// An agent a staged rollout has not reached is behind by design: the
	// rollout, not a retry, brings it the version.
	pins, err := s.store.AgentPins(ctx, envName)
	if err != nil {
		return Deployment{}, err
	}
	targets, err := s.active(ctx, envName, func(a record.Agent) bool { _, pinned := pins[a.Name]; return behind[a.Name] && !pinned })
	if err != nil || len(targets) == 0 {
		return Deployment{}, err
	}
	// What was sent to an agent may never have reached it: an agent may
	// consume or purge its own inbox (the broker cannot refuse a purge to
	// its consumer), or a client with rights on the broker may. A retry
	// goes by the generation the agent last reported, not by what this
	// server sent a whole interval ago or more: an agent still behind is
	// sent its desired state again (the agent takes a copy it holds
	// already as a no-op). What was sent within the interval (a release
	// under way) may still be on its way: not sent twice.
	s.mu.Lock()
	now := s.now()
	for _, a := range targets {
		k := agentKey{a.Env, a.Name}
		if at, ok := s.sentAt[k]; !ok || now.Sub(at) >= time.Duration(env.Settings.DeployInterval) {
			s.sent[k] = a.Generation
		}
	}
	s.mu.Unlock()
	return s.dispatch(ctx, envName, env.Settings.DriftPolicy, v.Number, targets,
		DeployRequest{Operation: record.OpDeploy, Trigger: record.DeployByDeployInterval, Who: record.WhoServer},
		bus.SendOptions{Expiration: time.Duration(env.Settings.DeployInterval)})
}

// Verify is the repair-interval trigger: every active agent verifies all
// it holds. By drift policy it is a repair (heal: drift is re-applied) or a
// dry run (alert: drift is reported, nothing is changed); either way the
// results set each resource's compliance. It does nothing when the
// environment is halted; it expires like Retry.
func (s *Scheduler) Verify(ctx context.Context, envName string) (Deployment, error) {
	env, v, ok, err := s.periodic(ctx, envName)
	if err != nil || !ok || env.Settings.RepairInterval <= 0 {
		return Deployment{}, err
	}
	targets, err := s.active(ctx, envName, func(record.Agent) bool { return true })
	if err != nil || len(targets) == 0 {
		return Deployment{}, err
	}
	op := record.OpDryRun
	if env.Settings.DriftPolicy == model.DriftHeal && env.Settings.AutoDeploy {
		op = record.OpRepair
	}
	return s.dispatch(ctx, envName, env.Settings.DriftPolicy, v.Number, targets,
		DeployRequest{Operation: op, Trigger: record.DeployByRepairInterval, Who: record.WhoServer},
		bus.SendOptions{Expiration: time.Duration(env.Settings.RepairInterval)})
}

// periodic reads what a periodic trigger needs; ok is false when there is
// nothing to do (halted, nothing released).
func (s *Scheduler) periodic(ctx context.Context, envName string) (record.Environment, model.Version, bool, error) {
	env, err := s.store.GetEnv(ctx, envName)
	if err != nil || env.Settings.Halted {
		return env, model.Version{}, false, err
	}
	v, err := s.store.ReleasedVersion(ctx, envName)
	if errors.Is(err, model.ErrNotFound) {
		return env, v, false, nil
	}
	if err != nil {
		return env, v, false, err
	}
	return env, v, true, s.ensureIndex(ctx, envName, v.Number)
}

// active returns the accepted, unpaused agents of env that keep says to.
func (s *Scheduler) active(ctx context.Context, env string, keep func(record.Agent) bool) ([]record.Agent, error) {
	all, err := s.store.ListAgents(ctx, env)
	if err != nil {
		return nil, err
	}
	var out []record.Agent
	for _, a := range all {
		if a.State == record.AgentAccepted && !a.Paused && keep(a) {
			out = append(out, a)
		}
	}
	return out, nil
}

func (s *Scheduler) targets(ctx context.Context, env string, names []string) ([]record.Agent, error) {
	var out []record.Agent
	if len(names) == 0 {
		var err error
		if out, err = s.active(ctx, env, func(record.Agent) bool { return true }); err != nil {
			return nil, err
		}
	} else {
		for _, n := range names {
			a, err := s.store.GetAgent(ctx, env, n)
			if err != nil {
				return nil, fmt.Errorf("agent %s: %w", n, err)
			}
			if a.State != record.AgentAccepted {
				return nil, fmt.Errorf("agent %s is %s, not accepted: %w", n, a.State, record.ErrNoAgents)
			}
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("deploy %s: %w: start an agent (tether agent run) and accept it, or resume a paused one", env, record.ErrNoAgents)
	}
	return out, nil
}

// StateRequest answers an agent that found a gap with its full desired state.
func (s *Scheduler) StateRequest(ctx context.Context, env, agent string) error {
	v, err := s.store.ReleasedVersion(ctx, env)
	if err != nil {
		return err
	}
	to, err := s.versionFor(ctx, env, agent, v.Number)
	if err != nil || to == 0 {
		return err
	}
	s.mu.Lock()
	s.sent[agentKey{env, agent}] = 0
	s.mu.Unlock()
	_, err = s.sync(ctx, env, agent, 0, to)
	return err
}

// sync sends agent the desired state of generation to when it holds (or was
// last sent) another one, and reports whether it was behind.
func (s *Scheduler) sync(ctx context.Context, env, agent string, held, to int64) (bool, error) {
	key := agentKey{env, agent}
	s.mu.Lock()
	from, known := s.sent[key]
	s.mu.Unlock()
	if !known {
		from = held
	}
	if from == to {
		return false, nil
	}
	next, err := s.store.AgentSlice(ctx, env, to, agent)
	if err != nil {
		return true, err
	}
	var holds *model.Slice
	if prev, err := s.previousSlice(ctx, env, agent, from); err == nil {
		holds = &prev
	}
	e, err := s.desired(ctx, env, agent, to, next, holds)
	if err != nil {
		return true, err
	}
	if err := s.send.Send(ctx, e, bus.SendOptions{}); err != nil {
		return true, fmt.Errorf("send %s to %s: %w", e.Kind, agent, err)
	}
	s.log.Debug().Str("env", env).Str("agent", agent).Str("kind", string(e.Kind)).Msg("sent")
	s.mu.Lock()
	s.sent[key], s.sentAt[key] = to, s.now()
	s.mu.Unlock()
	return true, nil
}

var errNoPrevious = errors.New("no previous slice")

// previousSlice returns agent's slice of generation gen, when a diff from it
// can be computed (the agent holds it and the version still exists).
func (s *Scheduler) previousSlice(ctx context.Context, env, agent string, gen int64) (model.Slice, error) {
	if gen <= 0 {
		return model.Slice{}, errNoPrevious
	}
	if _, err := s.store.GetVersion(ctx, env, gen, false); err != nil {
		return model.Slice{}, errNoPrevious
	}
	return s.store.AgentSlice(ctx, env, gen, agent)
}

func (s *Scheduler) sendDeploy(ctx context.Context, env, agent string, gen int64, id string, mode bus.DeployMode, dryRun bool, policy model.DriftPolicy) (string, error) {
	op := record.OpDeploy
	if dryRun {
		op = record.OpDryRun
	}
	return id, s.sendOperation(ctx, env, agent, gen, id, DeployRequest{Operation: op, Full: mode == bus.DeployFull}, policy, bus.SendOptions{})
}

// record records deploy d, sent to agent.
func (s *Scheduler) record(ctx context.Context, d record.Deploy, agent string) error {
	return s.store.RecordDeploy(ctx, d, []string{agent})
}

// sendOperation sends one agent the command of an operation, with the
// environment's drift policy: what the agent does about drift it sees
// between deploys.
func (s *Scheduler) sendOperation(ctx context.Context, env, agent string, gen int64, id string, req DeployRequest, policy model.DriftPolicy, opts bus.SendOptions) error {
	switch req.Operation {
	case record.OpDryRun:
		return s.sendTo(ctx, bus.KindDryRun, env, agent, bus.DryRun{DeployID: id, Generation: gen}, opts)
	case record.OpRepair:
		return s.sendTo(ctx, bus.KindRepair, env, agent, bus.Deploy{DeployID: id, Mode: bus.DeployFull, Generation: gen, DriftPolicy: policy}, opts)
	}
	mode := bus.DeployIncremental
	if req.Full {
		mode = bus.DeployFull
	}
	return s.sendTo(ctx, bus.KindDeploy, env, agent, bus.Deploy{DeployID: id, Mode: mode, Generation: gen, DriftPolicy: policy}, opts)
}

// Pause tells an agent to stop (paused) or go on deploying. The agent's
// record is the caller's to update.
func (s *Scheduler) Pause(ctx context.Context, env, agent string, paused bool) error {
	kind := bus.KindResume
	if paused {
		kind = bus.KindPause
	}
	err := s.sendTo(ctx, kind, env, agent, bus.Empty{}, bus.SendOptions{})
	if errors.Is(err, bus.ErrNoInbox) {
		return nil // never connected: its hello is answered per its record
	}
	return err
}

// RefreshFacts asks an agent to report its facts again (it answers with a
// facts event). An agent that never connected has no inbox: its hello
// carries its facts.
func (s *Scheduler) RefreshFacts(ctx context.Context, env, agent string) error {
	err := s.sendTo(ctx, bus.KindFactsRefresh, env, agent, bus.Empty{}, bus.SendOptions{})
	if errors.Is(err, bus.ErrNoInbox) {
		return nil
	}
	return err
}

// Catchup is the resume trigger: it deploys the released version at once
// to the named agents (every agent of env when none), if active (accepted,
// not paused), so what they missed while paused or halted is deployed now,
// not at the next deploy-interval retry. A deploy is incremental: an agent
// that missed nothing changes nothing. It does nothing when the environment
// is halted or does not deploy automatically.
func (s *Scheduler) Catchup(ctx context.Context, envName string, names ...string) (Deployment, error) {
	env, v, ok, err := s.periodic(ctx, envName)
	if err != nil || !ok || !env.Settings.AutoDeploy {
		return Deployment{}, err
	}
	targets, err := s.active(ctx, envName, func(a record.Agent) bool { return len(names) == 0 || slices.Contains(names, a.Name) })
	if err != nil || len(targets) == 0 {
		return Deployment{}, err
	}
	return s.dispatch(ctx, envName, env.Settings.DriftPolicy, v.Number, targets, DeployRequest{Operation: record.OpDeploy, Trigger: record.DeployByResume}, bus.SendOptions{})
}

// Settings tells every accepted agent of env the settings it holds between
// deploys (the drift policy), so a change takes effect at once. An agent
// that never connected learns them with its first deploy.
func (s *Scheduler) Settings(ctx context.Context, env string, st record.EnvSettings) error {
	agents, err := s.store.ListAgents(ctx, env)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range agents {
		if a.State != record.AgentAccepted {
			continue
		}
		err := s.sendTo(ctx, bus.KindSettings, env, a.Name, bus.Settings{DriftPolicy: st.DriftPolicy}, bus.SendOptions{})
		if !errors.Is(err, bus.ErrNoInbox) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Halt pauses (or resumes) every accepted agent of env that is not paused
// on its own.
func (s *Scheduler) Halt(ctx context.Context, env string, halted bool) error {
	agents, err := s.store.ListAgents(ctx, env)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range agents {
		if a.State == record.AgentAccepted && !a.Paused {
			errs = append(errs, s.Pause(ctx, env, a.Name, halted))
		}
	}
	return errors.Join(errs...)
}

func (s *Scheduler) sendTo(ctx context.Context, kind bus.Kind, env, agent string, body any, opts bus.SendOptions) error {
	e, err := s.signer.Seal(kind, env, agent, body)
	if err != nil {
		return err
	}
	if err := s.send.Send(ctx, e, opts); err != nil {
		return fmt.Errorf("send %s to %s: %w", kind, agent, err)
	}
	s.log.Debug().Str("env", env).Str("agent", agent).Str("kind", string(kind)).Msg("sent")
	return nil
}

// ensureIndex reads version n as the released one unless it is held already.
func (s *Scheduler) ensureIndex(ctx context.Context, env string, n int64) error {
	if s.indexed(env, n) {
		return nil
	}
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	if s.indexed(env, n) {
		return nil // built while this waited
	}
	return s.buildIndex(ctx, env, n)
}

func (s *Scheduler) indexed(env string, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	rv := s.released[env]
	return rv != nil && rv.number == n
}

// buildIndex reads which agents wait for which resources of other agents
// in version n: as the store keeps them with the version or, for a version
// stored before it did, from its resources, a page of the version's agents
// at a time (agents that have not said hello yet included: they may by the
// time others report). The caller holds indexMu.
func (s *Scheduler) buildIndex(ctx context.Context, env string, n int64) error {
	waits, known, err := s.store.VersionWaits(ctx, env, n)
	if err != nil {
		return fmt.Errorf("index version %d of %s: %w", n, env, err)
	}
	if known { // stored with the version: no resource to read
		s.mu.Lock()
		s.released[env] = &releasedVersion{number: n, waiting: waits}
		s.mu.Unlock()
		return nil
	}
	rv := &releasedVersion{number: n, waiting: map[model.ID][]string{}}
	after := ""
	for {
		names, err := s.store.VersionAgents(ctx, env, n, after, s.cfg.PageSize)
		if err != nil {
			return fmt.Errorf("index version %d of %s: %w", n, env, err)
		}
		if len(names) == 0 {
			break
		}
		after = names[len(names)-1]
		slices, err := s.store.AgentSlices(ctx, env, n, names)
		if err != nil {
			return fmt.Errorf("index version %d of %s: %w", n, env, err)
		}
		for _, sl := range slices {
			rv.addWaiting(sl.Resources)
		}
	}
	s.mu.Lock()
	s.released[env] = rv
	s.mu.Unlock()
	return nil
}

// addWaiting notes who waits for what among resources.
func (rv *releasedVersion) addWaiting(resources []model.Resource) {
	for _, r := range resources {
		for _, req := range r.Requires {
			if req.Agent != r.ID.Agent && !slices.Contains(rv.waiting[req], r.ID.Agent) {
				rv.waiting[req] = append(rv.waiting[req], r.ID.Agent)
			}
		}
	}
}

// pages calls fn with env's accepted agents, a page at a time, by name.
func (s *Scheduler) pages(ctx context.Context, env string, fn func([]record.Agent) error) error {
	after := ""
	for {
		page, err := s.store.ListAgentsAfter(ctx, env, after, s.cfg.PageSize)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		after = page[len(page)-1].Name
		accepted := page[:0:0]
		for _, a := range page {
			if a.State == record.AgentAccepted {
				accepted = append(accepted, a)
			}
		}
		if len(accepted) > 0 {
			if err := fn(accepted); err != nil {
				return err
			}
		}
	}
}

// ResultsRecorded tells agents waiting on any of these resources (of another
// agent) how they ended. Dry-run results are not outcomes and are ignored.
func (s *Scheduler) ResultsRecorded(ctx context.Context, env string, results []model.Result) error {
	s.mu.Lock()
	rv := s.released[env]
	s.mu.Unlock()
	if rv == nil || len(rv.waiting) == 0 {
		return nil
	}
	idx := rv.waiting
	var errs []error
	for _, r := range results {
		if r.DryRun || !r.State.Done() {
			continue
		}
		for _, agent := range idx[r.ID] {
			body := bus.DependencyStatus{ID: r.ID, State: r.State}
			if err := s.sendTo(ctx, bus.KindDependencyStatus, env, agent, body, bus.SendOptions{}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
