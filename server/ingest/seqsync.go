package ingest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
)

// Sequence numbers an agent's key signed ahead of the agent. An event
// numbered at or below the highest number accepted from an agent is older
// news: it moves neither the agent's last-seen time nor the generation it
// holds (a captured message replayed must not keep a silent host looking
// alive). So one message signed with the agent's key elsewhere — its key
// in other hands — numbered far ahead (up to bus.MaxSeqJump) made the real
// agent's events older news until it next said hello (its restart): the
// agent looked offline, its generation frozen.
//
// A heartbeat is sent as it is made (not from the outbox, whose events may
// be old), so one numbered well below the highest number accepted — more
// than store.ReorderWindow, beyond what consumers handling events out of
// order explain — says the agent's counter is behind what its key signed.
// The server then tells the agent, with the `enrolled` an operator's
// acceptance sends, the highest number it accepted: the agent numbers past
// it, and its next event counts again. It raises a security alert: the
// key signed a message the agent did not, or an old heartbeat was replayed.
// Once a resyncEvery per agent at most.

const resyncEvery = time.Minute

// resyncs remembers when each agent was last told to number past.
type resyncs struct {
	mu   sync.Mutex
	last map[agentKey]time.Time
}

// due reports whether env/name may be told again now.
func (r *resyncs) due(env, name string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := agentKey{env, name}
	if t, ok := r.last[k]; ok && now.Sub(t) < resyncEvery {
		return false
	}
	if r.last == nil || len(r.last) > maxSenders {
		r.last = map[agentKey]time.Time{}
	}
	r.last[k] = now
	return true
}

// numberedBehind reports whether e, a heartbeat of the accepted agent a
// signed by its key, is numbered so far below the highest number accepted
// from a that the agent's counter must be behind.
func numberedBehind(a record.Agent, e *bus.Envelope) bool {
	return e.Kind == bus.KindHeartbeat && a.State == record.AgentAccepted && int64(e.Seq)+store.ReorderWindow < a.LastSeq
}

// resync tells the agent a, whose heartbeat e is numbered behind, to
// number past the highest number accepted from it.
func (in *Ingester) resync(ctx context.Context, a record.Agent, e *bus.Envelope) {
	if !in.resynced.due(a.Env, a.Name, time.Now()) {
		return
	}
	in.security(ctx, e, fmt.Sprintf("agent %s's heartbeat is numbered %d, far below the %d accepted from its key: a message numbered %d was signed with its key "+
		"elsewhere (its key in other hands? rotate it: tether agent rotate-key %s --env %s), or an old heartbeat was replayed; the agent is told to number past it",
		a.Name, e.Seq, a.LastSeq, a.LastSeq, a.Name, a.Env))
	body, err := in.enrolled(ctx, a, "")
	if err == nil {
		err = in.keys.AnswerHello(ctx, a, body)
	}
	if err != nil {
		in.log.Warn().Err(err).Str("env", a.Env).Str("agent", a.Name).
			Msg("agent not told to number its events past the highest accepted; it is at its next hello")
	}
}
