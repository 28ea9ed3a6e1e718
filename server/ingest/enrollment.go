package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/secret"
	"github.com/tetherhq/tether/server/enroll"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/trust"
)

// Enrollment: a hello, checked, is carried through the state machine of
// package enroll, which decides; the steps below do what it decided, in
// order: read the record and classify the keys (readHello), take what
// the hello tells (take), admit the agent or not (admit), write the
// record (writeHello), answer (answer).

// greeting is one hello on its way through enrollment.
type greeting struct {
	e    *bus.Envelope
	body bus.Hello
	env  record.Environment
	now  time.Time
	// protocolRefused: the agent speaks a protocol this server does not.
	protocolRefused error
	// since marks the agent cache's state before the record was read
	// (agentCache.since), so that a change meanwhile is not overwritten.
	since cacheMark
	// a is the record as it is becoming; was as read (the zero Agent when
	// there was none): written back only while its state and pause are
	// still so (an operator's rejection through another replica stays).
	a, was     record.Agent
	heldKey    []byte // the signing key the record held
	heldBefore int64  // the generation the record held
	step       enroll.Step
	// switched: the hello is the first of the agent's current key since
	// its rollover. stale: the hello was said before events already
	// recorded. wentBack says why the agent holds an older generation
	// than it reported before ("" when it does not).
	switched, stale bool
	wentBack        string
	// latest: the hello is the agent's newest news; factsChanged: it
	// brings other labels or facts than the record's.
	latest, factsChanged, wasAccepted bool
	// pending: the hello discovered an agent that waits for an operator,
	// recorded only within the environment's max_pending.
	pending bool
	// refusal says why the agent is not enrolled ("" when it is, or
	// waits for an operator).
	refusal string
	// hostToken is the token bound to a host the agent enrolled with:
	// once the record is written, the host's machine called home.
	hostToken *record.EnrollmentToken
}

// hello records a discovered agent and, when the environment's enrollment
// policy accepts it, enrolls it and hands it to the scheduler. It handles
// a hello, decoded and its signature verified by the key it presents.
func (in *Ingester) hello(ctx context.Context, e *bus.Envelope, body bus.Hello) error {
	if err := checkHello(body); err != nil {
		return fmt.Errorf("%w: %s: %w", bus.ErrReject, e, err)
	}
	// An agent of a protocol this server does not speak is recorded, with
	// its version and why, and told so; it is not enrolled, whatever its
	// state or token (which stays unused).
	g := &greeting{e: e, body: body, protocolRefused: bus.CheckProtocol(body.Protocol)}
	env, err := in.store.GetEnv(ctx, e.Env)
	if errors.Is(err, model.ErrNotFound) {
		in.log.Warn().Str("env", e.Env).Str("agent", e.Agent).Msg("hello for an environment that does not exist")
		return fmt.Errorf("%w: %s: no environment %q", bus.ErrReject, e, e.Env)
	}
	if err != nil {
		return err
	}
	if e.Seq > bus.MaxSeq {
		return fmt.Errorf("%w: %s: sequence number past the protocol's limit", bus.ErrReject, e)
	}
	g.env, g.now = env, time.Now().UTC()
	unlock := in.agentLocks.lock(e.Env, e.Agent)
	defer unlock()
	if err := in.readHello(ctx, g); err != nil {
		return err
	}
	if g.protocolRefused != nil && int64(e.Seq) <= g.a.LastSeq {
		// An older hello in a protocol this server does not speak (one
		// captured before an upgrade, replayed): it neither disconnects
		// the agent nor has it refused.
		return nil
	}
	g.take()
	if err := in.admit(ctx, g); err != nil {
		return err
	}
	if err := in.writeHello(ctx, g); err != nil {
		return err
	}
	if err := in.answer(ctx, g); err != nil {
		return err
	}
	if g.hostToken != nil && in.machines != nil {
		if err := in.machines.Enrolled(ctx, g.a.Env, g.a.Name, *g.hostToken); err != nil {
			in.log.Warn().Err(err).Str("env", g.a.Env).Str("agent", g.a.Name).Msg("the agent enrolled with its host's token, but its host did not move: see tether host show")
		}
	}
	return nil
}

// checkHello refuses a hello no honest agent says.
func checkHello(body bus.Hello) error {
	if err := checkFacts(body.Labels, body.Facts); err != nil {
		return err
	}
	if err := trust.CheckServerKeys(body.ServerKeys); err != nil {
		return err
	}
	if len(body.KeyAgreementKey) > 0 {
		if err := secret.CheckPublicKey(body.KeyAgreementKey); err != nil {
			return err
		}
	}
	_, _, err := bus.ParseProtocol(body.Protocol)
	return err
}

// readHello reads the agent's record and asks the hello table what the
// hello does to it: a refusal raises a security alert and dead-letters the
// hello.
func (in *Ingester) readHello(ctx context.Context, g *greeting) error {
	e, body := g.e, g.body
	g.since = in.agents.since(e.Env, e.Agent)
	a, err := in.store.GetAgent(ctx, e.Env, e.Agent)
	found := err == nil
	switch {
	case errors.Is(err, model.ErrNotFound):
	case err != nil:
		return err
	}
	g.was, g.heldKey, g.heldBefore = a, a.PublicKey, a.Generation
	key := enroll.Presented(a, found, body.PublicKey, body.KeyAgreementKey, g.now)
	d := enroll.Hello(a.State, key, g.env.Settings.Enrollment, body.Token != "")
	g.step = d.Step
	switch d.Step {
	case enroll.Discover:
		a = record.Agent{Env: e.Env, Name: e.Agent, State: record.AgentPending, PublicKey: body.PublicKey, FirstSeen: g.now}
	case enroll.Refuse:
		in.security(ctx, e, refusalMessage(d.Why, a, body))
		return fmt.Errorf("%w: %s %s", bus.ErrReject, e, refusalError(d.Why, a))
	case enroll.Rekey:
		// A new key starts a new sequence (once it is accepted): nothing
		// the old key said holds the new one back. A key it rolled over
		// from is no more its.
		a.LastSeq, a.FactsSeq, a.ServerKeysSeq = 0, 0, 0
		a.PreviousKey, a.PreviousUntil = nil, nil
	case enroll.NotSwitched, enroll.Continue:
		// NotSwitched: the agent has not switched to the key it rolled
		// over to (the acknowledgement has not reached it): its previous
		// key holds until it does, the record keeps the new one, and its
		// rollover, which follows this hello, is acknowledged again.
		if err := checkSeq(a, e.Seq); err != nil {
			in.security(ctx, e, err.Error())
			return fmt.Errorf("%w: %s: %w", bus.ErrReject, e, err)
		}
	}
	if d.Step == enroll.Continue {
		g.continued(a)
	}
	if !found {
		g.was = record.Agent{}
	}
	g.a = a
	return nil
}

// continued notes, of a hello under the record's own key, whether it is
// the first since the agent's rollover, whether it is older news than
// what was recorded, and whether the agent went back to an older
// generation.
func (g *greeting) continued(a record.Agent) {
	g.switched = !a.Switched()
	// A hello said before events already recorded (several consumers
	// take events at once; a hello repeated before enrollment may arrive
	// late) tells an older generation than the agent holds: it moves
	// nothing back.
	g.stale = a.LastSeq > 0 && g.e.Seq < uint64(a.LastSeq) && g.body.Generation < a.Generation
	if a.State == record.AgentAccepted && g.body.Generation < a.Generation && g.body.Generation > 0 && !g.stale {
		g.wentBack = fmt.Sprintf("agent %s holds generation %d, behind the %d it reported before: its journal was reset, "+
			"or restored from an older copy (a replay cannot do it: agents refuse older desired state); it is sent its whole desired state",
			a.Name, g.body.Generation, a.Generation)
	}
}

// refusalMessage is the security alert of a hello the table refused.
func refusalMessage(why enroll.Refusal, a record.Agent, body bus.Hello) string {
	switch why {
	case enroll.AcceptedKey:
		return "hello from an accepted agent's name with another key"
	case enroll.AgreementKey:
		// Sensitive values are sealed to this key: whoever could swap it
		// would read them. The accepted key stands; an agent that really
		// lost its key is deleted and enrolled again as a new one.
		return fmt.Sprintf("hello from accepted agent %s with key-agreement key %s, not the accepted %s: refused "+
			"(if its state directory was made anew, remove the agent and enroll it again)",
			a.Name, keyName(body.KeyAgreementKey), keyName(a.KeyAgreementKey))
	case enroll.OtherKey:
		return fmt.Sprintf("hello from %s agent %s's name with another key (%s, not %s)",
			a.State, a.Name, bus.Fingerprint(body.PublicKey), bus.Fingerprint(a.PublicKey))
	}
	return fmt.Sprintf("hello for agent %s in state %q, which enrollment does not know: refused", a.Name, a.State)
}

// refusalError is what the dead-lettered hello's error says.
func refusalError(why enroll.Refusal, a record.Agent) string {
	switch why {
	case enroll.AcceptedKey:
		return "presents a key other than the accepted one"
	case enroll.AgreementKey:
		return "presents a key-agreement key other than the accepted one"
	case enroll.OtherKey:
		return fmt.Sprintf("presents a key other than the %s agent's", a.State)
	}
	return fmt.Sprintf("names an agent in state %q", a.State)
}

// take puts what the hello tells in the record. A hello numbered at or
// below an event recorded since (a late repeat; an agent restored from an
// older copy of its journal, which the answer moves past; a captured hello
// replayed) is answered, but what it says is older news: the labels and
// facts a later report gave, whether the agent is connected, its version
// and when it was last seen stay. A new key starts the sequence over
// (Rekey).
func (g *greeting) take() {
	a, body, seq := &g.a, g.body, int64(g.e.Seq)
	factsNewer := seq > a.FactsSeq
	g.latest = seq > a.LastSeq
	g.wasAccepted = a.State == record.AgentAccepted
	g.factsChanged = factsNewer && !sameFacts(a.Labels, a.Facts, body.Labels, body.Facts)
	a.KeyAgreementKey = body.KeyAgreementKey
	if factsNewer {
		a.Labels, a.Facts, a.Kinds, a.FactsSeq = body.Labels, body.Facts, body.Kinds, seq
	}
	if seq > a.ServerKeysSeq {
		a.ServerKeys, a.ServerKeysSeq = body.ServerKeys, seq
	}
	if g.step != enroll.NotSwitched {
		a.PublicKey = body.PublicKey
	}
	if !g.stale {
		a.Generation = body.Generation
	}
	if g.latest {
		a.AgentVersion, a.Protocol = model.Clip(body.Version, maxVersionLen), body.Protocol
		a.LastSeen, a.Connected, a.LastSeq = g.now, true, seq
	}
}

// admit asks the admission table whether the agent is enrolled, spends
// its token when the table says so, and bounds the agents the server does
// not know: beyond the discovery rate or max_pending, one is not
// recorded.
func (in *Ingester) admit(ctx context.Context, g *greeting) error {
	a, e := &g.a, g.e
	if len(g.was.KeyAgreementKey) == 0 && len(g.body.KeyAgreementKey) > 0 && g.wasAccepted && g.step != enroll.Discover {
		in.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("key_agreement_key", keyName(g.body.KeyAgreementKey)).
			Msg("agent presents a key-agreement key (upgraded): sensitive values are sealed to it from now on")
	}
	policy, hasToken := g.env.Settings.Enrollment, g.body.Token != ""
	if g.protocolRefused != nil {
		g.refusal = g.protocolRefused.Error()
	} else if err := in.admission(ctx, g, enroll.Admit(a.State, policy, hasToken)); err != nil {
		return err
	}
	a.Note = enroll.Note(a.State, policy, hasToken, g.refusal)
	if g.protocolRefused != nil {
		a.Note, a.Connected = "protocol not supported: "+g.refusal, false
	}
	discovered := g.step == enroll.Discover && a.State != record.AgentAccepted
	if discovered && !in.flood.discover(e.Env, g.now) {
		// Invented names must not fill the agent list: beyond the
		// discovery rate, an agent the server does not know is not
		// recorded (it says hello again later); one with a valid
		// enrollment token, or in an open environment, is.
		in.refuseDiscovery(ctx, e.Env, "rate", fmt.Sprintf("agents the server does not know say hello faster than %d a minute (after the first %d) in %s: %s not recorded (it says hello again later)",
			discoveriesPerMinute, discoveryBurst, e.Env, e.Agent))
		return fmt.Errorf("%w: %s: too many agents discovered at once", bus.ErrReject, e)
	}
	// Nor may they, however slowly they come: at most max_pending wait
	// for an operator at once (writeHello).
	g.pending = discovered
	if g.step == enroll.Rekey && a.State != record.AgentAccepted {
		in.security(ctx, e, fmt.Sprintf("hello from pending agent %s's name with another key (%s), and an enrollment token that does not hold: %s",
			a.Name, bus.Fingerprint(g.body.PublicKey), g.refusal))
		return fmt.Errorf("%w: %s presents another key and no valid token", bus.ErrReject, e)
	}
	return nil
}

// admission carries out what the admission table decided.
func (in *Ingester) admission(ctx context.Context, g *greeting, then enroll.Admission) error {
	a := &g.a
	switch then {
	case enroll.Accept:
		a.State = record.AgentAccepted
	case enroll.Rejected:
		g.refusal = "rejected by an operator"
	case enroll.UseOwnToken:
		// Only the server's own agent's token accepts an agent here; any
		// other leaves it waiting for an operator, unspent.
		tok, err := in.store.EnrollToken(ctx, g.e.Env, record.HashSecret(g.body.Token))
		switch {
		case errors.Is(err, model.ErrNotFound):
			return nil
		case err != nil:
			return err
		case tok.OwnAgent == "":
			return nil
		}
		return in.useToken(ctx, g)
	case enroll.UseToken:
		return in.useToken(ctx, g)
	}
	return nil
}

// useToken spends the hello's enrollment token: the agent is accepted if
// it holds, and told why not else.
func (in *Ingester) useToken(ctx context.Context, g *greeting) error {
	a := &g.a
	tok, err := in.store.UseEnrollToken(ctx, g.e.Env, record.HashSecret(g.body.Token), g.a.Name, g.now)
	switch {
	case err == nil:
		a.State = record.AgentAccepted
		in.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("token", tok.Name).Msg("agent enrolled by token")
		if tok.Host != "" {
			g.hostToken = &tok
		}
	case errors.Is(err, model.ErrNotFound):
		g.refusal = "unknown or revoked enrollment token"
	case errors.Is(err, model.ErrConflict):
		g.refusal = tok.Unusable(g.now)
		if bound := tok.BoundTo(); g.refusal == "" && bound != "" && bound != a.Name {
			whose := "host " + bound
			if tok.OwnAgent != "" {
				whose = "the server's own agent " + bound
			}
			g.refusal = fmt.Sprintf("enrollment token %s is bound to %s: only the agent named %s enrolls with it", tok.Name, whose, bound)
			in.security(ctx, g.e, fmt.Sprintf("agent %s said hello with the enrollment token of %s (%s)", a.Name, whose, bus.Fingerprint(g.body.PublicKey)))
		}
	default:
		return err
	}
	return nil
}

// writeHello writes the record the hello made, if it is still the one
// read, and what goes with it: a new key's sequence started over, its
// rollover's switch, the old key cut off, the inbox of an accepted agent.
func (in *Ingester) writeHello(ctx context.Context, g *greeting) error {
	a, rekeyed := &g.a, g.step == enroll.Rekey
	if rekeyed {
		if err := in.store.ResetSequence(ctx, a.Env, a.Name); err != nil {
			return err
		}
		// A mark of the old key not written yet would put its number
		// back, and the new key's events would be older news.
		in.seen.forget(a.Env, a.Name)
	}
	if g.pending {
		if err := in.addPending(ctx, g); err != nil {
			return err
		}
	} else if wrote, err := in.store.UpsertAgentIf(ctx, *a, g.was); err != nil {
		return err
	} else if !wrote {
		// Handled again, from the record as it is now.
		return fmt.Errorf("hello of %s/%s: its record changed meanwhile (an operator's action?); trying again", a.Env, a.Name)
	}
	if rekeyed {
		if ok, err := in.store.SetAgentKey(ctx, *a, g.heldKey); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("hello of %s/%s: its key changed meanwhile; trying again", a.Env, a.Name)
		}
	}
	in.agents.putRead(*a, g.since)
	if g.switched {
		if err := in.markSwitched(ctx, a, g.now); err != nil {
			return err
		}
	}
	if rekeyed {
		in.startOver(ctx, *a, g.heldKey)
	}
	// The server alone declares inboxes, with their arguments, and binds
	// them (an agent may only read its own): the answer to this hello, and
	// every command after it, needs one. Only for an accepted agent: a
	// pending one is sent nothing but a refusal (told through its claim
	// queue), and must cost the broker nothing durable (pending.go); it
	// gets its inbox when it is accepted. A rejected one has no business
	// on the broker.
	if a.State == record.AgentAccepted {
		if err := in.bus.DeclareInbox(ctx, a.Env, a.Name); err != nil {
			return fmt.Errorf("declare the inbox of %s/%s: %w", a.Env, a.Name, err)
		}
	}
	return nil
}

// answer tells the agent what became of its hello: refused, waiting for
// an operator, or enrolled (its compile triggered when it was just
// accepted, or its facts changed).
func (in *Ingester) answer(ctx context.Context, g *greeting) error {
	a := g.a
	rekeyed := g.step == enroll.Rekey
	if rekeyed {
		in.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("key", bus.Fingerprint(a.PublicKey)).Msg("agent presents a new key; its sequence starts over")
	}
	if g.wentBack != "" {
		in.security(ctx, g.e, g.wentBack)
	} else if g.body.Generation == 0 && g.heldBefore > 0 && !rekeyed && !g.stale {
		// An empty journal: a standby that took over, or a journal
		// started over. Not a step back anyone could force.
		in.log.Info().Str("env", a.Env).Str("agent", a.Name).Int64("held_before", g.heldBefore).
			Msg("agent starts from an empty journal; it is sent its whole desired state")
	}
	if g.refusal != "" {
		in.log.Warn().Str("env", a.Env).Str("agent", a.Name).Str("key", bus.Fingerprint(a.PublicKey)).Str("reason", g.refusal).
			Msg("agent not enrolled")
		in.feed.Publish(event.Event{Kind: event.AgentDiscovered, Env: a.Env, Agent: a.Name, Error: g.refusal})
		told := bus.Rejected{Reason: g.refusal}
		if g.protocolRefused != nil {
			told.Protocol = bus.Protocol
		}
		return in.refuse(ctx, a, told, a.State == record.AgentAccepted)
	}
	if a.State != record.AgentAccepted {
		in.log.Info().Str("env", a.Env).Str("agent", a.Name).Str("key", bus.Fingerprint(a.PublicKey)).
			Msg("agent discovered; waiting for an operator to accept it")
		in.feed.Publish(event.Event{Kind: event.AgentDiscovered, Env: a.Env, Agent: a.Name})
		return nil
	}
	switch {
	case !g.wasAccepted:
		in.trigger(ctx, a.Env, record.Trigger{Kind: record.TriggerAgent, By: a.Name})
	case g.factsChanged:
		in.trigger(ctx, a.Env, record.Trigger{Kind: record.TriggerFacts, By: a.Name})
	}
	return in.enroll(ctx, a, g.e.ID)
}
