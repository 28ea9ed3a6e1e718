package ingest

import (
	"context"
	"time"

	"github.com/tetherhq/tether/bus"
)

// Revocation: a rejected agent is taken off the broker. Its inbox, with the
// desired state it holds, is deleted at once; its connections are closed
// through the broker's management API (its channels would keep the rights
// they were given). The management API lists a connection only once the
// broker has reported its statistics (every few seconds, later just after
// the broker started), and a connection opened before the broker's
// authentication cache expired is let in: so connections are closed again
// a few times over the following minute.
//
// A key an agent's name no longer holds is cut off the same way, without
// the rest of the agent: the key a pending name held before an enrollment
// token put another on it (whoever held it may still be reading the
// inbox), and the key an agent rolled over from, once the agent is heard
// from with its new one.

// reclose is when, after a cut-off, the connections are closed again.
var reclose = []time.Duration{5 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute}

// adminTimeout bounds one round of closing through the management API: a
// broker administration away does not hold up the hello or event that
// asked for it.
const adminTimeout = 10 * time.Second

// revocation is one agent, or one key of it, whose connections are closed
// again.
type revocation struct {
	env, name string
	key       []byte // nil: any key of the agent
	why       string
	at        time.Time // of the cut-off
	next      int       // index in reclose
}

// revoke takes a rejected agent off the broker now, and hands it to
// closeRevoked (when Run runs) to close what connects again meanwhile.
// What fails is logged: the agent is rejected in the store whatever the
// broker says, and where the broker asks the server about each agent it
// cannot log in again.
func (in *Ingester) revoke(ctx context.Context, env, name string) {
	in.cutOff(ctx, revocation{env: env, name: name, why: "the agent was rejected"})
	if err := in.deleteInbox(ctx, env, name); err != nil {
		in.log.Warn().Err(err).Str("env", env).Str("agent", name).Msg("cannot delete the rejected agent's inbox")
	}
}

// cutOff closes r's connections now (when the server has the broker's
// management API) and hands r to closeRevoked to close again what
// connects meanwhile.
func (in *Ingester) cutOff(ctx context.Context, r revocation) {
	if in.cfg.Broker == nil {
		return
	}
	in.closeConnections(ctx, r)
	r.at = time.Now()
	select {
	case in.revoked <- r:
	default: // Run is not running, or a storm of cut-offs: once is done
	}
}

func (in *Ingester) closeConnections(ctx context.Context, r revocation) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	n, err := in.cfg.Broker.CloseAgentConnections(ctx, r.env, r.name, r.key)
	in.metrics.BrokerClosed("revoked", n)
	log := in.log.With().Str("env", r.env).Str("agent", r.name).Str("why", r.why).Logger()
	if r.key != nil {
		log = log.With().Str("key", bus.Fingerprint(r.key)).Logger()
	}
	switch {
	case err != nil:
		log.Warn().Err(err).Msg("cannot close the agent's broker connections")
	case n > 0:
		log.Info().Int("connections", n).Msg("closed the agent's broker connections")
	}
}

// closeRevoked closes again the connections cut off lately, on the
// reclose schedule, until ctx ends.
func (in *Ingester) closeRevoked(ctx context.Context) {
	var pending []revocation
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-in.revoked:
			pending = append(pending, r)
		case now := <-tick.C:
			kept := pending[:0]
			for _, r := range pending {
				if now.Sub(r.at) >= reclose[r.next] {
					in.closeConnections(ctx, r)
					r.next++
				}
				if r.next < len(reclose) {
					kept = append(kept, r)
				}
			}
			pending = kept
		}
	}
}
