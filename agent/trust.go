package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// ErrNoServerKey: the agent does not know which server to trust. It
// trusts nothing before it does, so it does not start.
var ErrNoServerKey = errors.New("no server key to trust")

// pinOf returns the fingerprint of the server key the agent is told to
// expect: the configured key, the configured fingerprint, the one its
// enrollment token carries; all that are given must agree.
func pinOf(cfg *Config) (string, error) {
	var pins []string
	if cfg.ServerKey != nil {
		pins = append(pins, bus.Fingerprint(cfg.ServerKey))
	}
	if cfg.ServerFingerprint != "" {
		_, fp, err := model.ParseServerKey(cfg.ServerFingerprint)
		if err != nil {
			return "", fmt.Errorf("%w: server fingerprint: %w", ErrConfig, err)
		}
		pins = append(pins, fp)
	}
	if cfg.Token != "" {
		fp, err := model.TokenFingerprint(cfg.Token)
		switch {
		case errors.Is(err, model.ErrNoFingerprint) && len(pins) == 0:
			return "", fmt.Errorf("%w: %w: create a new token with `tether agent token create`, or pin the server key with --server-key (`tether server key` prints it)",
				ErrNoServerKey, err)
		case errors.Is(err, model.ErrNoFingerprint):
		case err != nil:
			return "", fmt.Errorf("%w: %w", ErrConfig, err)
		default:
			pins = append(pins, fp)
		}
	}
	for _, p := range pins[min(1, len(pins)):] {
		if p != pins[0] {
			return "", fmt.Errorf("%w: the enrollment token and --server-key name different servers (%s and %s)", ErrConfig, pins[0], p)
		}
	}
	if len(pins) == 0 {
		return "", nil
	}
	return pins[0], nil
}

// clock is the server's clock as the agent measured it: the offset from
// the local clock, taken from the answer to a hello (which the server
// stamps between the hello leaving and its answer arriving). Commands are
// judged fresh or stale by it, so a host whose clock is off still works.
type clock struct {
	mu sync.Mutex
	// hellos are the ids of the last hellos sent, with when.
	hellos map[string]time.Time
	order  []string
	offset time.Duration
}

func newClock() *clock { return &clock{hellos: map[string]time.Time{}} }

// sent records a hello.
func (c *clock) sent(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hellos[id] = time.Now()
	c.order = append(c.order, id)
	if len(c.order) > 8 {
		delete(c.hellos, c.order[0])
		c.order = c.order[1:]
	}
}

// answered takes the server's stamp ts on the answer to hello id; it
// reports whether id is a hello of this process.
func (c *clock) answered(id string, ts time.Time, log zerolog.Logger) bool {
	now := time.Now()
	c.mu.Lock()
	at, ok := c.hellos[id]
	if !ok {
		c.mu.Unlock()
		return false
	}
	delete(c.hellos, id)
	mid := at.Add(now.Sub(at) / 2)
	offset := ts.Sub(mid)
	was := c.offset
	c.offset = offset
	c.mu.Unlock()
	if off := offset.Abs(); off > time.Minute && (was-offset).Abs() > time.Minute {
		log.Warn().Dur("offset", offset.Round(time.Second)).
			Msg("this host's clock is off the server's: commands are judged by the server's clock meanwhile; set the host's time right (NTP)")
	}
	return true
}

// now is the server's time as measured.
func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// refusals counts refused commands between reports to the server, and
// keeps what the first few were.
type refusals struct {
	mu    sync.Mutex
	last  time.Time
	count int
	what  []string
}

// securityEvery bounds reports of refused commands: a flood of forgeries
// costs the server one alert a minute.
const securityEvery = time.Minute

// refuse logs a command refused as forged or replayed and reports it to
// the server (at most one report a minute, counting the others). Before
// enrollment the report waits for the server's answer, or the next hello:
// the server must know the agent, from a hello it has handled, to take its
// report.
func (a *Agent) refuse(ctx context.Context, e *bus.Envelope, why error) {
	a.log.Warn().Err(why).Str("message", e.String()).Msg("security: refused a command")
	a.refused.mu.Lock()
	a.refused.count++
	if len(a.refused.what) < bus.MaxRefusalsTold {
		a.refused.what = append(a.refused.what, fmt.Sprintf("%s (%s): %v", e.Kind, e.ID, why))
	}
	a.refused.mu.Unlock()
	if a.isEnrolled() {
		a.reportRefusals(ctx)
	}
}

// reportRefusals sends the refusals counted, if a minute passed since the
// last report.
func (a *Agent) reportRefusals(ctx context.Context) {
	a.refused.mu.Lock()
	if a.refused.count == 0 || time.Since(a.refused.last) < securityEvery {
		a.refused.mu.Unlock()
		return
	}
	body := bus.Security{Refused: a.refused.what, Count: a.refused.count}
	a.refused.count, a.refused.what, a.refused.last = 0, nil, time.Now()
	a.refused.mu.Unlock()
	if err := a.publishNow(ctx, bus.KindSecurity, body); err != nil {
		a.log.Info().Err(err).Msg("could not report refused commands to the server")
	}
}
