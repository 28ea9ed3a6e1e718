package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Notify keeps the event log every replica streams, the webhooks of
// environments and the outbox of their deliveries.
type Notify interface {
	// AppendEvents appends events to the log (their IDs are given here)
	// and, in the same transaction, queues a delivery of each to every
	// enabled webhook of its environment that asks for its kind. It
	// returns the newest ID it gave (0: none, for no event). IDs are
	// given in commit order: a follower reading after an ID misses none
	// committed later.
	AppendEvents(ctx context.Context, events []record.LoggedEvent) (int64, error)
	// EventsAfter returns at most limit (0: 100) events after the ID
	// after, oldest first: of env, or of every environment when env is "".
	EventsAfter(ctx context.Context, after int64, env string, limit int) ([]record.LoggedEvent, error)
	// EventLogBounds returns the oldest ID kept and the newest given.
	EventLogBounds(ctx context.Context) (record.EventLogBounds, error)
	// PruneEvents deletes the events older than before, and the
	// deliveries finished before it; it returns how many events went.
	PruneEvents(ctx context.Context, before time.Time) (int, error)

	// CreateWebhook stores a new webhook (its ID given here); ErrExists
	// when its environment has one of that name.
	CreateWebhook(ctx context.Context, w record.Webhook) (record.Webhook, error)
	// GetWebhook returns a webhook of env with its secret.
	GetWebhook(ctx context.Context, env string, id int64) (record.Webhook, error)
	// ListWebhooks returns the webhooks of env by ID, without secrets.
	ListWebhooks(ctx context.Context, env string) ([]record.Webhook, error)
	// UpdateWebhook changes a webhook with fn, in one transaction.
	UpdateWebhook(ctx context.Context, env string, id int64, fn func(*record.Webhook) error) (record.Webhook, error)
	// DeleteWebhook deletes a webhook with its deliveries.
	DeleteWebhook(ctx context.Context, env string, id int64) error
	// QueueDelivery queues one delivery to a webhook (a test).
	QueueDelivery(ctx context.Context, env string, id int64, kind string, payload []byte) (record.Delivery, error)
	// ClaimDeliveries claims at most limit pending deliveries due at now
	// until until, for one sender: the oldest due of each webhook that
	// has none claimed, so a slow receiver holds one sender at most. Rows
	// another sender is claiming are skipped, never waited for. Each
	// claim counts as an attempt.
	ClaimDeliveries(ctx context.Context, now, until time.Time, limit int) ([]record.DeliveryClaim, error)
	// FinishDelivery records an attempt's outcome and ends the claim.
	FinishDelivery(ctx context.Context, id int64, o record.DeliveryOutcome) error
	// Deliveries returns the newest deliveries of a webhook of env, at
	// most limit (0: 100), newest first.
	Deliveries(ctx context.Context, env string, id int64, limit int) ([]record.Delivery, error)
	// CountDeliveries counts the deliveries in state, of every webhook.
	CountDeliveries(ctx context.Context, state record.DeliveryState) (int, error)
	// FleetCounts counts resources by state and compliance, agents by
	// status, deliveries by state (for the gauges of /metrics).
	FleetCounts(ctx context.Context) (record.FleetCounts, error)
}

// appendChunk bounds the rows of one INSERT of AppendEvents.
const appendChunk = 200

// AppendEvents implements Store.
func (s *SQL) AppendEvents(ctx context.Context, events []record.LoggedEvent) (int64, error) {
	var last int64
	err := s.db.Tx(ctx, func(tx Tx) error {
		var err error
		last, err = s.appendEvents(ctx, tx, events)
		return err
	})
	return last, wrap("append events", err)
}

// appendEvents appends events to the log in tx, and queues their webhook
// deliveries: what AppendEvents does, and recording results does with
// the events of its batches. It returns the newest ID it gave.
//
// IDs come from a sequence, which gives them as the appends run, not as
// they commit: were two transactions to append at once, the one with the
// lower ID could commit after a follower read the other's and moved past
// it, and the follower would never see it. So an append takes the event
// log's lock (LockEvents) first and holds it until its transaction ends:
// IDs are given in commit order, and a follower reading after an ID
// misses none. A transaction that also locks other rows takes it last
// (after them), and never waits for them holding it; it holds it for as
// few statements as it can (the lock also queues the followers' wake,
// sent at commit; the IDs come back from the INSERT).
func (s *SQL) appendEvents(ctx context.Context, tx Tx, events []record.LoggedEvent) (int64, error) {
	for _, e := range events {
		if e.Kind == "" {
			return 0, fmt.Errorf("%w: an event without a kind", model.ErrInvalid)
		}
	}
	if len(events) == 0 {
		return 0, nil
	}
	if err := run(ctx, tx, s.d.LockEvents); err != nil {
		return 0, err
	}
	first, last := int64(0), int64(0)
	folded := false
	for len(events) > 0 {
		chunk := events[:min(len(events), appendChunk)]
		events = events[len(chunk):]
		var a args
		var rows []string
		for _, e := range chunk {
			at := e.At
			if at.IsZero() {
				at = time.Now()
			}
			folded = folded || e.Kind == record.EventResults
			env := a.add(e.Env)
			rows = append(rows, fmt.Sprintf(`(COALESCE((SELECT org FROM environments WHERE name = %s), ''), %s, %s, %s, %s)`,
				env, env, a.add(e.Kind), a.add(string(e.Data)), a.add(at.UTC())))
		}
		ids, err := queryAll(ctx, tx, func(r Row) (int64, error) {
			var id int64
			return id, r.Scan(&id)
		}, `INSERT INTO event_log (org, env, kind, data, at) VALUES `+strings.Join(rows, ", ")+` RETURNING id`, a...)
		if err != nil {
			return 0, err
		}
		for _, id := range ids {
			if first == 0 || id < first {
				first = id
			}
			last = max(last, id)
		}
	}
	// The outbox, in the transaction of the events.
	if folded {
		if err := queueUnfolded(ctx, tx, first-1); err != nil {
			return 0, err
		}
	} else if _, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_id, kind, payload, state, next_at, created_at)
		SELECT w.id, e.id, e.kind, e.data, 'pending', now(), now() FROM event_log e JOIN webhooks w ON w.env = e.env AND w.enabled
		WHERE e.id > $1 AND (w.kinds = ' * ' OR w.kinds LIKE '% ' || e.kind || ' %') ORDER BY e.id, w.id`, first-1); err != nil {
		return 0, err
	}
	return last, nil
}

// queueUnfolded queues the deliveries of the events after prev, some of
// them folded, in the order of the events: a delivery of each element of
// a folded row (record.Unfold) to every webhook that asks for its kind, a
// webhook gets the results one by one as if each had been logged alone;
// a delivery of each other event to every webhook that asks for it.
func queueUnfolded(ctx context.Context, tx Tx, prev int64) error {
	type target struct {
		webhook, event int64
		kind, data     string
	}
	targets, err := queryAll(ctx, tx, func(r Row) (target, error) {
		var t target
		return t, r.Scan(&t.webhook, &t.event, &t.kind, &t.data)
	}, `SELECT w.id, e.id, e.kind, e.data FROM event_log e JOIN webhooks w ON w.env = e.env AND w.enabled
		WHERE e.id > $1 AND (w.kinds = ' * ' OR e.kind <> $2 AND w.kinds LIKE '% ' || e.kind || ' %' OR e.kind = $2 AND w.kinds LIKE $3)
		ORDER BY e.id, w.id`, prev, record.EventResults, "% "+record.EventResult+" %")
	if err != nil || len(targets) == 0 {
		return err
	}
	var a args
	var rows []string
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_id, kind, payload, state, next_at, created_at) VALUES `+
			strings.Join(rows, ", "), a...)
		a, rows = nil, nil
		return err
	}
	for _, t := range targets {
		kinds, events, err := record.Unfold(t.kind, []byte(t.data))
		if err != nil {
			return fmt.Errorf("%w: event %d: %w", ErrCorrupt, t.event, err)
		}
		for i := range events {
			rows = append(rows, fmt.Sprintf(`(%s, %s, %s, %s, 'pending', now(), now())`,
				a.add(t.webhook), a.add(t.event), a.add(kinds[i]), a.add(string(events[i]))))
			if len(rows) == appendChunk {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

const eventColumns = `id, org, env, kind, data, at`

func scanEvent(r Row) (record.LoggedEvent, error) {
	var e record.LoggedEvent
	var data string
	err := r.Scan(&e.ID, &e.Org, &e.Env, &e.Kind, &data, timeCol{&e.At})
	e.Data = []byte(data)
	return e, err
}

// EventsAfter implements Store.
func (s *SQL) EventsAfter(ctx context.Context, after int64, env string, limit int) ([]record.LoggedEvent, error) {
	q := `SELECT ` + eventColumns + ` FROM event_log WHERE id > $1 ORDER BY id LIMIT $2`
	a := []any{after, limitOf(limit)}
	if env != "" {
		q = `SELECT ` + eventColumns + ` FROM event_log WHERE env = $3 AND id > $1 ORDER BY id LIMIT $2`
		a = append(a, env)
	}
	out, err := queryAll(ctx, s.db, scanEvent, q, a...)
	return out, wrap("read the event log", err)
}

// EventLogBounds implements Store. Last is the newest ID the log gave,
// whether it keeps it or not (pruned, or its environment's deleted): a
// follower that starts after it misses no event, and one that resumes
// after an ID up to it names an ID of this log. It is read with no append
// in flight (ShareEvents): every ID up to it is committed, or never will
// be.
func (s *SQL) EventLogBounds(ctx context.Context) (record.EventLogBounds, error) {
	var b record.EventLogBounds
	err := s.db.Tx(ctx, func(tx Tx) error {
		if err := run(ctx, tx, s.d.ShareEvents); err != nil {
			return err
		}
		var kept int64
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MIN(id), 0), COALESCE(MAX(id), 0), (`+s.d.EventsGiven+`) FROM event_log`).Scan(&b.First, &kept, &b.Last); err != nil {
			return err
		}
		b.Last = max(b.Last, kept)
		return nil
	})
	return b, wrap("read the event log", err)
}

// PruneEvents implements Store.
func (s *SQL) PruneEvents(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.db.Tx(ctx, func(tx Tx) error {
		var err error
		if n, err = tx.Exec(ctx, `DELETE FROM event_log WHERE at < $1`, before.UTC()); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM webhook_deliveries WHERE state <> 'pending' AND finished_at < $1`, before.UTC())
		return err
	})
	return int(n), wrap("prune the event log", err)
}

const webhookColumns = `id, env, name, url, secret, kinds, enabled, created_by, created_at, updated_at`

func scanWebhook(r Row) (record.Webhook, error) {
	var w record.Webhook
	var kinds string
	err := r.Scan(&w.ID, &w.Env, &w.Name, &w.URL, &w.Secret, &kinds, &w.Enabled, &w.CreatedBy, timeCol{&w.CreatedAt}, timeCol{&w.UpdatedAt})
	w.Kinds = strings.Fields(kinds)
	return w, err
}

// kindsColumn is how kinds are stored: a space either side of each, so
// that LIKE '% kind %' finds one.
func kindsColumn(kinds []string) string { return " " + strings.Join(kinds, " ") + " " }

// CreateWebhook implements Store.
func (s *SQL) CreateWebhook(ctx context.Context, w record.Webhook) (record.Webhook, error) {
	op := fmt.Sprintf("create webhook %q of %q", model.Clip(w.Name, 64), w.Env)
	if err := record.ValidateWebhook(w); err != nil {
		return w, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
	}
	now := time.Now().UTC()
	if w.CreatedAt.IsZero() {
		w.CreatedAt = now
	}
	w.UpdatedAt = w.CreatedAt
	err := s.db.QueryRow(ctx, `INSERT INTO webhooks (env, name, url, secret, kinds, enabled, created_by, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
		w.Env, w.Name, w.URL, w.Secret, kindsColumn(w.Kinds), w.Enabled, w.CreatedBy, w.CreatedAt, w.UpdatedAt).Scan(&w.ID)
	return w, wrap(op, err)
}

// GetWebhook implements Store.
func (s *SQL) GetWebhook(ctx context.Context, env string, id int64) (record.Webhook, error) {
	w, err := scanWebhook(s.db.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE env = $1 AND id = $2`, env, id))
	return w, wrap(fmt.Sprintf("webhook %d of %q", id, env), err)
}

// ListWebhooks implements Store.
func (s *SQL) ListWebhooks(ctx context.Context, env string) ([]record.Webhook, error) {
	out, err := queryAll(ctx, s.db, scanWebhook, `SELECT `+webhookColumns+` FROM webhooks WHERE env = $1 ORDER BY id`, env)
	for i := range out {
		out[i].Secret = ""
	}
	return out, wrap(fmt.Sprintf("list webhooks of %q", env), err)
}

// UpdateWebhook implements Store.
func (s *SQL) UpdateWebhook(ctx context.Context, env string, id int64, fn func(*record.Webhook) error) (record.Webhook, error) {
	var w record.Webhook
	err := s.db.Tx(ctx, func(tx Tx) error {
		var err error
		if w, err = scanWebhook(tx.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE env = $1 AND id = $2`+s.d.ForUpdate, env, id)); err != nil {
			return err
		}
		if err := fn(&w); err != nil {
			return fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
		w.ID, w.Env = id, env
		if err := record.ValidateWebhook(w); err != nil {
			return fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
		w.UpdatedAt = time.Now().UTC()
		_, err = tx.Exec(ctx, `UPDATE webhooks SET name = $1, url = $2, secret = $3, kinds = $4, enabled = $5, updated_at = $6 WHERE id = $7`,
			w.Name, w.URL, w.Secret, kindsColumn(w.Kinds), w.Enabled, w.UpdatedAt, id)
		return err
	})
	return w, wrap(fmt.Sprintf("update webhook %d of %q", id, env), err)
}

// DeleteWebhook implements Store.
func (s *SQL) DeleteWebhook(ctx context.Context, env string, id int64) error {
	return wrap(fmt.Sprintf("delete webhook %d of %q", id, env), s.db.Tx(ctx, func(tx Tx) error {
		// SQLite's store may not cascade: the deliveries go first.
		if _, err := tx.Exec(ctx, `DELETE FROM webhook_deliveries WHERE webhook_id IN (SELECT id FROM webhooks WHERE env = $1 AND id = $2)`, env, id); err != nil {
			return err
		}
		n, err := tx.Exec(ctx, `DELETE FROM webhooks WHERE env = $1 AND id = $2`, env, id)
		if err == nil && n == 0 {
			err = fmt.Errorf("%w: no webhook %d", model.ErrNotFound, id)
		}
		return err
	}))
}

const deliveryColumns = `d.id, d.webhook_id, d.event_id, d.kind, d.state, d.attempts, d.status_code, d.error, d.latency_ms, d.next_at, d.created_at, d.finished_at, d.payload`

func scanDelivery(r Row, more ...any) (record.Delivery, error) {
	var d record.Delivery
	var payload string
	err := r.Scan(append([]any{&d.ID, &d.WebhookID, &d.EventID, &d.Kind, &d.State, &d.Attempts, &d.StatusCode, &d.Error, &d.LatencyMS,
		timeCol{&d.NextAt}, timeCol{&d.CreatedAt}, nullTimeCol{&d.FinishedAt}, &payload}, more...)...)
	d.Payload = []byte(payload)
	return d, err
}

// QueueDelivery implements Store.
func (s *SQL) QueueDelivery(ctx context.Context, env string, id int64, kind string, payload []byte) (record.Delivery, error) {
	var d record.Delivery
	err := s.db.Tx(ctx, func(tx Tx) error {
		if _, err := scanWebhook(tx.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE env = $1 AND id = $2`, env, id)); err != nil {
			return err
		}
		var did int64
		if err := tx.QueryRow(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_id, kind, payload, state, next_at, created_at)
			VALUES ($1, 0, $2, $3, 'pending', now(), now()) RETURNING id`, id, kind, string(payload)).Scan(&did); err != nil {
			return err
		}
		var err error
		d, err = scanDelivery(tx.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries d WHERE d.id = $1`, did))
		return err
	})
	return d, wrap(fmt.Sprintf("queue a delivery to webhook %d of %q", id, env), err)
}

// ClaimDeliveries implements Store.
func (s *SQL) ClaimDeliveries(ctx context.Context, now, until time.Time, limit int) ([]record.DeliveryClaim, error) {
	var out []record.DeliveryClaim
	err := s.db.Tx(ctx, func(tx Tx) error {
		ids, err := queryAll(ctx, tx, func(r Row) (int64, error) {
			var id int64
			return id, r.Scan(&id)
		}, `SELECT d.id FROM webhook_deliveries d
			WHERE d.state = 'pending' AND d.next_at <= $1 AND (d.claimed_until IS NULL OR d.claimed_until < $1)
			AND d.id = (SELECT MIN(m.id) FROM webhook_deliveries m WHERE m.webhook_id = d.webhook_id AND m.state = 'pending' AND m.next_at <= $1)
			AND NOT EXISTS (SELECT 1 FROM webhook_deliveries o WHERE o.webhook_id = d.webhook_id AND o.state = 'pending' AND o.claimed_until >= $1)
			ORDER BY d.id LIMIT $2`+s.d.SkipLocked, now.UTC(), limitOf(limit))
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET claimed_until = $1, attempts = attempts + 1 WHERE id = $2`, until.UTC(), id); err != nil {
				return err
			}
			var c record.DeliveryClaim
			if c.Delivery, err = scanDelivery(tx.QueryRow(ctx, `SELECT `+deliveryColumns+`, w.url, w.secret
				FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id WHERE d.id = $1`, id), &c.URL, &c.Secret); err != nil {
				return err
			}
			out = append(out, c)
		}
		return nil
	})
	if err != nil {
		return nil, wrap("claim webhook deliveries", err) // rolled back: none is claimed
	}
	return out, nil
}

// FinishDelivery implements Store.
func (s *SQL) FinishDelivery(ctx context.Context, id int64, o record.DeliveryOutcome) error {
	var finished *time.Time
	next := o.NextAt
	if o.State != record.DeliveryPending {
		t := time.Now().UTC()
		finished, next = &t, t
	}
	_, err := s.db.Exec(ctx, `UPDATE webhook_deliveries SET state = $1, status_code = $2, error = $3, latency_ms = $4, next_at = $5,
		finished_at = $6, claimed_until = NULL WHERE id = $7`,
		o.State, o.StatusCode, model.Clip(o.Error, 1024), o.Latency.Milliseconds(), next.UTC(), finished, id)
	return wrap(fmt.Sprintf("record delivery %d", id), err)
}

// Deliveries implements Store.
func (s *SQL) Deliveries(ctx context.Context, env string, id int64, limit int) ([]record.Delivery, error) {
	out, err := queryAll(ctx, s.db, func(r Row) (record.Delivery, error) { return scanDelivery(r) },
		`SELECT `+deliveryColumns+` FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
		WHERE w.env = $1 AND w.id = $2 ORDER BY d.id DESC LIMIT $3`, env, id, limitOf(limit))
	return out, wrap(fmt.Sprintf("deliveries of webhook %d of %q", id, env), err)
}

// CountDeliveries implements Store.
func (s *SQL) CountDeliveries(ctx context.Context, state record.DeliveryState) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT COUNT(*) FROM webhook_deliveries WHERE state = $1`, state).Scan(&n)
	return n, wrap("count deliveries", err)
}

// FleetCounts implements Store: three grouped counts.
func (s *SQL) FleetCounts(ctx context.Context) (record.FleetCounts, error) {
	var c record.FleetCounts
	var err error
	c.Resources, err = queryAll(ctx, s.db, func(r Row) (record.ResourceCount, error) {
		var rc record.ResourceCount
		return rc, r.Scan(&rc.Env, &rc.State, &rc.Compliance, &rc.N)
	}, `SELECT env, state, compliance, COUNT(*) FROM resource_status GROUP BY env, state, compliance ORDER BY env, state, compliance`)
	if err != nil {
		return c, wrap("count resources", err)
	}
	c.Agents, err = queryAll(ctx, s.db, func(r Row) (record.AgentCount, error) {
		var ac record.AgentCount
		return ac, r.Scan(&ac.Env, &ac.Status, &ac.N)
	}, `SELECT env, CASE WHEN state <> 'accepted' THEN state WHEN online THEN 'online' ELSE 'offline' END AS status, COUNT(*)
		FROM agents GROUP BY env, status ORDER BY env, status`)
	if err != nil {
		return c, wrap("count agents", err)
	}
	type stateCount struct {
		state record.DeliveryState
		n     int
	}
	ds, err := queryAll(ctx, s.db, func(r Row) (stateCount, error) {
		var sc stateCount
		return sc, r.Scan(&sc.state, &sc.n)
	}, `SELECT state, COUNT(*) FROM webhook_deliveries GROUP BY state`)
	if err != nil {
		return c, wrap("count deliveries", err)
	}
	c.Deliveries = map[record.DeliveryState]int{}
	for _, d := range ds {
		c.Deliveries[d.state] = d.n
	}
	return c, nil
}
