package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// Ingest: several consumers take agents' events off the server queues at
// once; each event is verified against its agent's key, and the results and
// drift reports of all events in hand are written in one transaction (group
// commit), deduplicated on (agent, seq). A delivery is acknowledged only
// after the transaction that holds it committed.

// Handle ingests one event. A nil return acknowledges it; ErrReject
// dead-letters it; any other error returns it to the queue for a retry.
func (in *Ingester) Handle(ctx context.Context, d bus.Delivery) error {
	e := d.Envelope
	if in.dedup.Has(e.ID) {
		in.count(e.Kind, "duplicate")
		in.handled.Add(1)
		return nil
	}
	// What is refused, and alerted, is the sender's (origin.go).
	ctx = withOrigin(ctx, &origin{d: d})
	err := in.ingest(ctx, e)
	refused := errors.Is(err, bus.ErrReject)
	var from publisher
	if refused {
		from = in.senderOf(ctx, e)
	}
	switch {
	case err == nil:
		in.count(e.Kind, "ok")
	case refused && !in.flood.deadLetter(from.env, from.agent, time.Now()):
		// A flood of refused events: the first of each window are
		// dead-lettered for inspection, the rest dropped.
		in.count(e.Kind, "dropped")
		err = nil
	case errors.Is(err, bus.ErrReject):
		in.count(e.Kind, "rejected")
	default:
		in.count(e.Kind, "retry")
	}
	if err == nil || errors.Is(err, bus.ErrReject) {
		in.dedup.Add(e.ID) // final: a redelivery changes nothing
		in.handled.Add(1)
	}
	return err
}

func (in *Ingester) count(k bus.Kind, outcome string) {
	in.metrics.Event(string(k), outcome)
}

func (in *Ingester) ingest(ctx context.Context, e *bus.Envelope) error {
	if o := originOf(ctx); o != nil {
		// Where the broker vouches for the publisher, an event from
		// another agent's login is refused whatever key signed it (a key
		// in other hands, a captured message replayed): nothing it says
		// — its sequence number least of all — is believed.
		if from, ok := in.published(o.d); ok && (from.env != e.Env || from.agent != e.Agent) {
			in.security(ctx, e, fmt.Sprintf("a %s claiming to be agent %s/%s came from another agent's broker login: refused", e.Kind, e.Env, e.Agent))
			return fmt.Errorf("%w: %s: published by agent %s/%s's broker login", bus.ErrReject, e, from.env, from.agent)
		}
	}
	if e.Kind == bus.KindHello {
		// Decoded and verified once, for the rate, the repeat and the
		// hello itself.
		var body bus.Hello
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		if err := bus.Verify(e, body.PublicKey); err != nil {
			return fmt.Errorf("%w: hello not signed by the key it presents: %w", bus.ErrReject, err)
		}
		if in.helloOverRate(ctx, e, body) || in.helloRepeated(ctx, e, body) {
			return nil
		}
		return in.hello(ctx, e, body)
	}
	a, cached, err := in.agents.get(ctx, e.Env, e.Agent)
	if errors.Is(err, model.ErrNotFound) {
		in.security(ctx, e, "event from an unknown agent")
		return fmt.Errorf("%w: %s: unknown agent", bus.ErrReject, e)
	}
	if err != nil {
		return err
	}
	byPrevious, err := in.verifyAgent(ctx, &a, cached, e)
	if errors.Is(err, bus.ErrBadSignature) {
		markClaimed(ctx, false)
		in.security(ctx, e, "event signed by another key than the agent's")
		return fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	if err != nil {
		return err
	}
	markClaimed(ctx, true)
	if err := checkSeq(a, e.Seq); err != nil {
		in.security(ctx, e, err.Error())
		return fmt.Errorf("%w: %s: %w", bus.ErrReject, e, err)
	}
	if e.Kind == bus.KindSecurity && a.State != record.AgentRejected {
		// A pending agent reports too: a forged enrollment is refused
		// before the agent is accepted.
		var body bus.Security
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		told := body.Refused[:min(len(body.Refused), bus.MaxRefusalsTold)]
		for i := range told {
			told[i] = model.Clip(told[i], 300)
		}
		in.security(ctx, e, fmt.Sprintf("agent %s refused %d command(s) not from this server or taking it back: %s",
			a.Name, body.Count, strings.Join(told, "; ")))
		if a.State == record.AgentAccepted {
			in.heard(a, e)
		}
		return nil
	}
	if a.State != record.AgentAccepted {
		return fmt.Errorf("%w: %s: agent %s is %s", bus.ErrReject, e, a.Name, a.State)
	}
	if !in.flood.allow(a.Env, a.Name, time.Now()) {
		in.count(e.Kind, "over_rate")
		in.security(ctx, e, fmt.Sprintf("agent %s sends more than %g events a second: the excess is dropped", a.Name, in.flood.rate))
		// Dropped, yet signed by the agent: it lives.
		in.heard(a, e)
		return nil
	}
	if numberedBehind(a, e) {
		in.resync(ctx, a, e)
	}
	if err := in.agentEvent(ctx, a, e, byPrevious); err != nil {
		return err
	}
	if e.Kind != bus.KindGoodbye {
		in.heard(a, e)
	}
	return nil
}

// heard marks an accepted agent as heard from by e, handled: every event
// of an agent says it lives, so an agent that reports skips its next
// heartbeat (bus.Enrolled.EventsAlive). Marks are written together, every
// second (seenWriter). Only an event numbered past every one recorded of
// the agent counts: a captured event replayed (it verifies: the agent
// signed it once) must not keep a host that went silent looking alive.
func (in *Ingester) heard(a record.Agent, e *bus.Envelope) {
	seq := int64(e.Seq)
	if seq <= a.LastSeq {
		return
	}
	now := time.Now().UTC()
	in.seen.mark(a.Env, a.Name, seq, now)
	in.agents.update(a.Env, a.Name, func(c *record.Agent) {
		if seq > c.LastSeq {
			c.LastSeen, c.LastSeq = now, seq
		}
	})
}

// agentEvent handles an event of an accepted agent, verified.
func (in *Ingester) agentEvent(ctx context.Context, a record.Agent, e *bus.Envelope, byPrevious bool) error {
	switch e.Kind {
	case bus.KindResourceStatus, bus.KindDryRunResult:
		var body bus.ResourceStatus
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return in.results(ctx, a, e, body)
	case bus.KindCompliance:
		var body bus.Compliance
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return in.compliance(ctx, a, e, body)
	case bus.KindStateRequest:
		return in.sched.StateRequest(ctx, a.Env, a.Name)
	case bus.KindKeyRollover:
		var body bus.KeyRollover
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return in.rollover(ctx, a, e, body, byPrevious)
	case bus.KindServerRolloverAck:
		var body bus.ServerRolloverAck
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		return in.keys.RolloverAck(ctx, a, e, body)
	case bus.KindMachineReport:
		var body bus.MachineReport
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		if in.machines == nil {
			return nil
		}
		if err := in.machines.Report(ctx, a, body); err != nil {
			if errors.Is(err, model.ErrNotFound) {
				// Of a host or platform deleted meanwhile: old news.
				in.log.Info().Err(err).Str("env", a.Env).Str("agent", a.Name).Msg("machine report of something no longer there; dropped")
				return nil
			}
			if errors.Is(err, model.ErrInvalid) {
				in.security(ctx, e, fmt.Sprintf("agent %s: machine report refused: %v", a.Name, err))
				return fmt.Errorf("%w: %s: %w", bus.ErrReject, e, err)
			}
			return err
		}
		return nil
	case bus.KindHeartbeat:
		var body bus.Heartbeat
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		version, protocol := model.Clip(body.Version, maxVersionLen), model.Clip(body.Protocol, maxVersionLen)
		if a.Connected && (body.Protocol == "" || version == a.AgentVersion && protocol == a.Protocol) {
			// Nothing new but that it is there: marked heard, written
			// with the others' within a second.
			return nil
		}
		_, err := in.Touch(ctx, a.Env, a.Name, e.Seq, func(a *record.Agent) bool {
			a.Connected = true
			if body.Protocol != "" {
				// Older agents say neither: what their hello said stands.
				a.AgentVersion, a.Protocol = model.Clip(body.Version, maxVersionLen), model.Clip(body.Protocol, maxVersionLen)
			}
			return true
		})
		return err
	case bus.KindGoodbye:
		latest, err := in.Touch(ctx, a.Env, a.Name, e.Seq, func(a *record.Agent) bool {
			a.Connected = false
			return true
		})
		if err != nil || !latest {
			// A goodbye older than an event recorded since (a restart
			// said hello meanwhile, or a captured goodbye replayed)
			// disconnects nothing.
			return err
		}
		in.feed.Publish(event.Event{Kind: event.AgentOffline, Env: a.Env, Agent: a.Name})
		return nil
	case bus.KindFacts:
		var body bus.Facts
		if err := e.DecodeBody(&body); err != nil {
			return fmt.Errorf("%w: %w", bus.ErrReject, err)
		}
		if err := checkFacts(body.Labels, body.Facts); err != nil {
			return fmt.Errorf("%w: %s: %w", bus.ErrReject, e, err)
		}
		newer, changed := false, false
		if _, err := in.Touch(ctx, a.Env, a.Name, e.Seq, func(a *record.Agent) bool {
			if int64(e.Seq) <= a.FactsSeq {
				// Older than the facts recorded (delivered late, or a
				// captured report replayed): they stay.
				return false
			}
			newer = true
			changed = a.State == record.AgentAccepted && !sameFacts(a.Labels, a.Facts, body.Labels, body.Facts)
			a.Facts, a.Labels, a.FactsSeq, a.Connected = body.Facts, body.Labels, int64(e.Seq), true
			return true
		}); err != nil || !newer {
			return err
		}
		in.feed.Publish(event.Event{Kind: event.AgentChanged, Env: a.Env, Agent: a.Name, Error: "facts"})
		if changed {
			in.trigger(ctx, a.Env, record.Trigger{Kind: record.TriggerFacts, By: a.Name})
		}
		return nil
	default:
		in.log.Info().Str("kind", string(e.Kind)).Str("agent", a.Name).Msg("event kind not handled by this server version; ignored")
		return nil
	}
}

// Touch updates what an agent says of itself (labels, facts, version,
// whether it is connected: SetAgentReport) in its record, read fresh from
// the store, with fn (when it returns true), with its last-seen time and
// the sequence number of the event that says so. Several replicas write
// agents: a cached copy is never written back, and nothing fn does not
// own is written (a rejection through another replica between the read
// and the write stays).
//
// An event numbered at or below one already recorded of the agent —
// delivered late (several consumers take events at once), or captured
// and replayed — is not news of now: whether the agent is connected, its
// version and when it was seen stay as they are. It reports whether the
// event was the latest (and fn wrote).
func (in *Ingester) Touch(ctx context.Context, env, name string, seq uint64, fn func(*record.Agent) bool) (bool, error) {
	defer in.agentLocks.lock(env, name)()
	since := in.agents.since(env, name)
	a, err := in.store.GetAgent(ctx, env, name)
	if err != nil {
		return false, err
	}
	read := a
	if !fn(&a) {
		return false, nil
	}
	latest := int64(seq) > read.LastSeq
	if latest {
		a.LastSeen, a.LastSeq = time.Now().UTC(), int64(seq)
	} else {
		a.Connected, a.AgentVersion, a.Protocol = read.Connected, read.AgentVersion, read.Protocol
	}
	if a.ServerKeysSeq < read.ServerKeysSeq {
		a.ServerKeys, a.ServerKeysSeq = read.ServerKeys, read.ServerKeysSeq
	}
	if known, err := in.store.SetAgentReport(ctx, a); err != nil || !known {
		return false, err // not known: deleted meanwhile, and not brought back
	}
	in.agents.putRead(a, since)
	return latest, nil
}

// recordGeneration records the generation an agent reports it holds once
// per change: one statement writes that field alone (under the agent's
// lock, so that no read-modify-write of this server puts the older one
// back), not a read and a write of the whole record, and the cached copy
// takes it, so the agent's next reports write nothing.
func (in *Ingester) recordGeneration(ctx context.Context, a record.Agent, generation int64) error {
	defer in.agentLocks.lock(a.Env, a.Name)()
	if _, err := in.store.SetAgentGeneration(ctx, a.Env, a.Name, generation); err != nil {
		return err
	}
	in.agents.update(a.Env, a.Name, func(c *record.Agent) { c.Generation = generation })
	return nil
}

// answerWaiter is a bus that tells whether messages wait in an agent's
// inbox (found by type assertion).
type answerWaiter interface {
	AnswerWaiting(ctx context.Context, env, agent string) (bool, error)
}

// helloRepeated reports whether a hello an agent said again while waiting
// for the answer to an earlier one (bus.Hello.Repeats) is already
// answered: the server handled a hello of the series since (its record
// holds a later sequence number), nothing the hello tells has changed,
// and messages still wait in the agent's inbox (the answer: the agent has
// not looked yet). Then the agent is nudged, marked as heard, and the
// hello is not handled again. A fleet installed at once says hello again
// while its first hellos wait in the server's queue; handling each repeat
// in full (the record written, the inbox declared and bound, another
// answer sent) multiplied the server's and the broker's work when both
// were busiest. An inbox emptied meanwhile (deleted and declared again,
// or read) gets the hello handled in full: a repeat is never what stands
// between an agent and its answer.
func (in *Ingester) helloRepeated(ctx context.Context, e *bus.Envelope, body bus.Hello) bool {
	w, ok := in.bus.(answerWaiter)
	if !ok || body.Repeats == 0 {
		return false
	}
	a, _, err := in.agents.get(ctx, e.Env, e.Agent)
	if err != nil || a.State != record.AgentAccepted || !a.Connected || a.LastSeq <= 0 || body.Repeats > uint64(a.LastSeq) ||
		!bytes.Equal(a.PublicKey, body.PublicKey) || !bytes.Equal(a.KeyAgreementKey, body.KeyAgreementKey) ||
		a.Generation != body.Generation || !sameFacts(a.Labels, a.Facts, body.Labels, body.Facts) ||
		checkSeq(a, e.Seq) != nil {
		return false
	}
	waiting, err := w.AnswerWaiting(ctx, e.Env, e.Agent)
	if err != nil || !waiting {
		return false
	}
	in.seen.mark(a.Env, a.Name, int64(e.Seq), time.Now().UTC())
	in.count(e.Kind, "repeated")
	return true
}

// maxVersionLen bounds the agent version a server records.
const maxVersionLen = 100

// startOver cuts the key a name held before a hello put another on it
// (held) off the broker, and deletes the name's inbox, which the caller
// declares again: whoever held that key (the squatter of a pending name,
// the host before it was installed again) may still be connected, reading
// the inbox, and nothing queued for them may be left for the new key. The
// record holds the new key by now, so the broker lets the old one in no
// more (once its cache expired: closeRevoked closes it again meanwhile).
// What fails is logged: the new key is the agent's whatever the broker
// says.
func (in *Ingester) startOver(ctx context.Context, a record.Agent, held []byte) {
	in.cutOff(ctx, revocation{env: a.Env, name: a.Name, key: held, why: "another key took the agent's name"})
	if err := in.deleteInbox(ctx, a.Env, a.Name); err != nil {
		in.log.Error().Err(err).Str("env", a.Env).Str("agent", a.Name).
			Msg("cannot delete the inbox of an agent whose name took another key: what was queued for the old key stays there")
	}
}

// keyName names a key-agreement key in a message: its fingerprint, or
// "none".
func keyName(pub []byte) string {
	if len(pub) == 0 {
		return "none"
	}
	return model.Fingerprint(pub)
}

// refuse tells an agent it is not enrolled, so it slows its hellos down:
// in its inbox when it has one (inbox: it was accepted), else through its
// claim queue (pending.go), which reaches it while it is connected.
func (in *Ingester) refuse(ctx context.Context, a record.Agent, body bus.Rejected, inbox bool) error {
	e, err := in.signer.Seal(bus.KindRejected, a.Env, a.Name, body)
	if err != nil {
		return err
	}
	if !inbox {
		if err := in.tell(ctx, e); err != nil {
			in.log.Info().Err(err).Str("env", a.Env).Str("agent", a.Name).Msg("refused agent not told; it is told at its next hello")
		}
		return nil
	}
	if err := in.bus.Send(ctx, e, bus.SendOptions{Expiration: time.Hour}); err != nil && !errors.Is(err, bus.ErrNoInbox) {
		return err
	}
	return nil
}

// enroll tells an accepted agent so, with the server's key (answering
// hello, when a hello brought it), then hands it to the scheduler, which
// sends what it misses.
func (in *Ingester) enroll(ctx context.Context, a record.Agent, hello string) error {
	body, err := in.enrolled(ctx, a, hello)
	if err != nil {
		return err
	}
	// The rollover of the server's key comes with it, when the agent
	// lacks it (AnswerHello).
	if err := in.keys.AnswerHello(ctx, a, body); err != nil {
		return err
	}
	paused := *body.Paused
	// Agents older than the pause in the answer learn it this way.
	if paused {
		if err := in.sched.Pause(ctx, a.Env, a.Name, true); err != nil {
			return err
		}
	}
	if err := in.sched.Online(ctx, a); err != nil {
		return err
	}
	in.feed.Publish(event.Event{Kind: event.AgentOnline, Env: a.Env, Agent: a.Name, Generation: a.Generation})
	return nil
}

// enrolled is what an accepted agent is told when it is enrolled (the
// answer to hello, when a hello brought it): the server's key, the last
// sequence number accepted from it, the environment's incarnation and the
// version it is to hold, whether it is paused, the drift policy.
func (in *Ingester) enrolled(ctx context.Context, a record.Agent, hello string) (bus.Enrolled, error) {
	env, err := in.store.GetEnv(ctx, a.Env)
	if err != nil {
		return bus.Enrolled{}, err
	}
	var released int64
	switch v, err := in.store.ReleasedVersion(ctx, a.Env); {
	case err == nil:
		released = v.Number
	case !errors.Is(err, model.ErrNotFound):
		return bus.Enrolled{}, err
	}
	// An agent a staged rollout has not reached holds the version it is
	// pinned to: told the released one, it would refuse its own as older.
	if pin, ok, err := in.store.AgentPin(ctx, a.Env, a.Name); err != nil {
		return bus.Enrolled{}, err
	} else if ok {
		released = pin
	}
	paused := a.Paused || env.Settings.Halted
	return bus.Enrolled{Hello: hello, LastSeq: uint64(max(a.LastSeq, 0)), Env: env.Incarnation(), Generation: released,
		Paused: &paused, DriftPolicy: env.Settings.DriftPolicy, EventsAlive: true}, nil
}

// results records a batch of results, tells agents waiting on them, and
// publishes them live.
func (in *Ingester) results(ctx context.Context, a record.Agent, e *bus.Envelope, body bus.ResourceStatus) error {
	for i := range body.Results {
		// A well-signed report about another agent's resource is a
		// compromised or misconfigured agent: nothing of it is recorded.
		if id := body.Results[i].ID; id.Agent != a.Name {
			in.security(ctx, e, "results for another agent's resource "+id.String())
			return fmt.Errorf("%w: %s: agent %s reported %s, which is not its resource", bus.ErrReject, e, a.Name, id)
		}
		body.Results[i].DryRun = e.Kind == bus.KindDryRunResult
	}
	// The events are logged with the results, in their transaction:
	// one row for the report's results, and the deploy's end.
	base := event.Event{At: time.Now().UTC(), Env: a.Env, Agent: a.Name, DeployID: body.DeployID, Generation: body.Generation}
	var logged []event.Event
	if len(body.Results) > 0 {
		folded := base
		folded.Kind, folded.Results = event.Results, body.Results
		logged = append(logged, folded)
	}
	done := base
	done.Kind, done.Error = event.DeployDone, body.Error
	if body.Done {
		logged = append(logged, done)
	}
	fresh, err := in.commit(ctx, store.ResultBatch{Env: a.Env, Agent: a.Name, Seq: e.Seq, Version: body.Generation,
		DeployID: body.DeployID, Results: body.Results, Done: body.Done, Error: body.Error}, logged)
	if err != nil || !fresh {
		return err
	}
	in.metrics.Results(len(body.Results))
	// The generation held is the latest batch's word: an older one,
	// handled late, or replayed once its number was forgotten (after
	// KeepIngested), says nothing of now.
	if body.Generation != a.Generation && e.Kind == bus.KindResourceStatus && int64(e.Seq) > a.LastSeq {
		if err := in.recordGeneration(ctx, a, body.Generation); err != nil {
			in.log.Warn().Err(err).Str("agent", a.Name).Msg("cannot record the generation the agent holds; its next hello will")
		}
	}
	if err := in.sched.ResultsRecorded(ctx, a.Env, body.Results); err != nil {
		in.log.Warn().Err(err).Msg("cannot tell waiting agents about results")
	}
	for i := range body.Results {
		r := base
		r.Kind, r.Result = event.Result, &body.Results[i]
		in.feed.Logged(r)
	}
	if body.Done {
		in.feed.Logged(done)
	}
	return nil
}

// compliance records an agent's drift reports as alerts, which set the
// resources' compliance, and publishes them live.
func (in *Ingester) compliance(ctx context.Context, a record.Agent, e *bus.Envelope, body bus.Compliance) error {
	alerts := make([]record.Alert, 0, len(body.Reports))
	for _, r := range body.Reports {
		if r.ID.Agent != a.Name {
			in.security(ctx, e, "drift report about another agent's resource "+r.ID.String())
			return fmt.Errorf("%w: %s: agent %s reported drift of %s, which is not its resource", bus.ErrReject, e, a.Name, r.ID)
		}
		if !r.Compliance.Valid() || r.Compliance == model.ComplianceUnknown {
			return fmt.Errorf("%w: %s: compliance %q of %s: want compliant or non_compliant", bus.ErrReject, e, r.Compliance, r.ID)
		}
		id := r.ID
		alerts = append(alerts, record.Alert{At: e.TS.UTC(), Env: a.Env, Agent: a.Name, Kind: record.AlertDrift, ID: &id,
			Message: driftMessage(r), Changes: r.Changes, Compliance: r.Compliance, Version: body.Generation,
			Healed: r.Healed && r.Compliance == model.Compliant, HealFailed: r.HealFailed && r.Compliance == model.NonCompliant, Hash: r.Hash})
	}
	// The alerts' events are logged with them, in their transaction: a
	// crash after it loses none (their webhooks are queued in it too).
	now := time.Now().UTC()
	drifts := make([]event.Event, len(alerts))
	for i := range alerts {
		drifts[i] = event.Event{Kind: event.Drift, At: now, Env: a.Env, Agent: a.Name, Generation: body.Generation, Alert: &alerts[i]}
	}
	fresh, err := in.commit(ctx, store.ResultBatch{Env: a.Env, Agent: a.Name, Seq: e.Seq, Version: body.Generation, Alerts: alerts}, drifts)
	if err != nil || !fresh {
		return err
	}
	for _, d := range drifts {
		in.feed.Logged(d)
	}
	return nil
}

// sameFacts reports whether two reports of an agent's labels and facts say
// the same, compared as the JSON they are stored as (map keys sorted).
func sameFacts(labels1 map[string]string, facts1 map[string]any, labels2 map[string]string, facts2 map[string]any) bool {
	if !maps.Equal(labels1, labels2) || len(facts1) != len(facts2) {
		return false
	}
	b1, err1 := json.Marshal(facts1)
	b2, err2 := json.Marshal(facts2)
	return err1 == nil && err2 == nil && bytes.Equal(b1, b2)
}

// checkFacts refuses labels or facts an agent could not honestly have:
// they are stored and read by every compile.
func checkFacts(labels map[string]string, facts map[string]any) error {
	if err := model.ValidateLabels(labels); err != nil {
		return err
	}
	b, err := json.Marshal(facts)
	if err != nil {
		return fmt.Errorf("facts: %w", err)
	}
	if len(b) > model.MaxFactsSize {
		return fmt.Errorf("facts of %d bytes: at most %d", len(b), model.MaxFactsSize)
	}
	return nil
}

// checkSeq refuses an event whose sequence number is past the protocol's
// limit, or jumps further past the last one accepted from the agent's key
// than any honest agent's can (bus.MaxSeqJump): one message must not put
// an agent's resources out of reach of its later reports.
func checkSeq(a record.Agent, seq uint64) error {
	if seq > bus.MaxSeq {
		return fmt.Errorf("sequence number %d is past the protocol's limit", seq)
	}
	if a.LastSeq > 0 && seq > uint64(a.LastSeq)+bus.MaxSeqJump {
		return fmt.Errorf("sequence number %d jumps %d past the last accepted from agent %s (%d); at most %d is allowed",
			seq, seq-uint64(a.LastSeq), a.Name, a.LastSeq, bus.MaxSeqJump)
	}
	return nil
}

func driftMessage(r bus.DriftReport) string {
	what := "drifted from its intent"
	switch {
	case r.Compliance == model.Compliant && r.Healed:
		what = "healed: re-applied by drift policy"
	case r.Compliance == model.Compliant:
		what = "back to its intent"
	}
	if r.Message != "" {
		what += ": " + r.Message
	}
	return what
}

// commit writes one batch with whatever other batches are waiting (group
// commit), and events to the event log in its transaction, and reports
// whether it was new (if not, the events were logged when it was).
func (in *Ingester) commit(ctx context.Context, b store.ResultBatch, events []event.Event) (bool, error) {
	if err := store.CheckBatch(&b); err != nil {
		return false, fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	for _, e := range events {
		le, err := event.ToLog(e)
		if err != nil {
			return false, fmt.Errorf("%w: event %s is not JSON: %w", bus.ErrReject, e.Kind, err)
		}
		b.Events = append(b.Events, le)
	}
	fresh, err := in.committer.commit(ctx, b)
	if errors.Is(err, model.ErrInvalid) {
		return false, fmt.Errorf("%w: %w", bus.ErrReject, err)
	}
	return fresh, err
}
