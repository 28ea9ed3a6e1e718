package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Machines keeps each environment's machines from blueprints: platforms,
// distributions, hosts with where their provisioning stands, and the
// instances they became. Settings are stored as given: sealing a secret
// one is the server's, before they reach the store.
type Machines interface {
	// PutPlatform creates or replaces a platform, checked and its
	// driver's defaults filled in (record.Platform.Validate: ErrInvalid
	// naming the field), and returns it as stored. ErrNotFound if the
	// environment does not exist.
	PutPlatform(ctx context.Context, p record.Platform) (record.Platform, error)
	// GetPlatform returns a platform; ErrNotFound if env has none so named.
	GetPlatform(ctx context.Context, env, name string) (record.Platform, error)
	// ListPlatforms returns env's platforms, by name.
	ListPlatforms(ctx context.Context, env string) ([]record.Platform, error)
	// DeletePlatform deletes a platform: ErrNotFound if there is none,
	// ErrConflict (naming one) while a host uses it.
	DeletePlatform(ctx context.Context, env, name string) error

	// PutDistribution, GetDistribution, ListDistributions and
	// DeleteDistribution are the same for distributions.
	PutDistribution(ctx context.Context, d record.Distribution) (record.Distribution, error)
	GetDistribution(ctx context.Context, env, name string) (record.Distribution, error)
	ListDistributions(ctx context.Context, env string) ([]record.Distribution, error)
	DeleteDistribution(ctx context.Context, env, name string) error

	// CreateHost stores a new host (record.Host.Validate: ErrInvalid
	// naming the field; defined unless it says otherwise, in its state
	// since now unless it says when) and returns it as stored. ErrExists
	// if env has a host so named; ErrNotFound if the environment, the
	// platform or the distribution does not exist.
	CreateHost(ctx context.Context, h record.Host) (record.Host, error)
	// UpdateHost changes an existing host's blueprint: its platform and
	// distribution (only while it has no machine: defined or failed;
	// otherwise they stay as they are), its applications, labels,
	// settings, and where a model declares it; never its state. It
	// returns the host as stored. ErrInvalid naming the field, ErrNotFound
	// if env has no host so named, or no such platform or distribution.
	UpdateHost(ctx context.Context, h record.Host) (record.Host, error)
	// GetHost returns a host; ErrNotFound if env has none so named.
	GetHost(ctx context.Context, env, name string) (record.Host, error)
	// ListHosts returns env's hosts, by name.
	ListHosts(ctx context.Context, env string) ([]record.Host, error)
	// DeleteHost deletes a host; ErrNotFound if there is none. Its
	// instance, if any, stays (the machine is still there).
	DeleteHost(ctx context.Context, env, name string) error
	// MoveHost moves a host by event (record.HostState.Move) from the
	// state from (empty: whatever state it is in), with the host's row
	// locked: of two moves of one host at once, each from the state both
	// read, one is applied and the other is ErrConflict. A move the state
	// machine refuses is ErrConflict too, and changes nothing. The host
	// is in its new state since now; reason replaces its reason; a
	// non-empty instance replaces its instance, and destroyed clears it.
	MoveHost(ctx context.Context, env, name string, from record.HostState, event record.HostEvent, reason, instance string) (record.Host, error)
	// LinkHostInstance sets the instance of a host that has none (its
	// machine's agent enrolled before the platform reported the
	// machine); it reports whether it did.
	LinkHostInstance(ctx context.Context, env, name, instance string) (bool, error)

	// PutInstance creates or replaces an instance (power unknown unless
	// given, seen now unless it says when) and returns it as stored.
	// ErrInvalid for a bad field (named), ErrConflict if another instance
	// is the host's, ErrNotFound if the environment does not exist.
	PutInstance(ctx context.Context, i record.Instance) (record.Instance, error)
	// GetInstance returns an instance; ErrNotFound if env has none with
	// that ID.
	GetInstance(ctx context.Context, env, id string) (record.Instance, error)
	// ListInstances returns env's instances, by ID.
	ListInstances(ctx context.Context, env string) ([]record.Instance, error)
	// DeleteInstance deletes an instance; ErrNotFound if there is none.
	DeleteInstance(ctx context.Context, env, id string) error

	// SetApplications replaces env's applications (what its model says
	// of them for machines) with apps, at once: each checked
	// (record.Application.Validate: ErrInvalid naming the field), none
	// named twice; their settings are stored as given. It returns them
	// as stored, by name. ErrNotFound if the environment does not exist.
	SetApplications(ctx context.Context, env string, apps []record.Application) ([]record.Application, error)
	// ListApplications returns env's applications, by name.
	ListApplications(ctx context.Context, env string) ([]record.Application, error)
}

const platformColumns = `env, name, driver, agent, settings, templates, discovered, declared_in, created_at, updated_at`

func scanPlatform(r Row) (record.Platform, error) {
	var p record.Platform
	var settings, templates []byte
	if err := r.Scan(&p.Env, &p.Name, &p.Driver, &p.Agent, &settings, &templates, &p.Discovered, &p.DeclaredIn, timeCol{&p.CreatedAt}, timeCol{&p.UpdatedAt}); err != nil {
		return p, err
	}
	what := "platform " + p.Name
	if err := decodeJSON(what+": settings", settings, &p.Settings); err != nil {
		return p, err
	}
	return p, decodeJSON(what+": templates", templates, &p.Templates)
}

// PutPlatform implements Store.
func (s *SQL) PutPlatform(ctx context.Context, p record.Platform) (record.Platform, error) {
	op := fmt.Sprintf("put platform %q of %q", model.Clip(p.Name, 64), p.Env)
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
	}
	cols, err := encodeJSON(p.Settings, p.Templates)
	if err != nil {
		return p, fmt.Errorf("%s: %w", op, err)
	}
	var out record.Platform
	err = s.db.Tx(ctx, func(tx Tx) error {
		if err := s.lockEnv(ctx, tx, p.Env); err != nil {
			return err
		}
		out, err = scanPlatform(tx.QueryRow(ctx, `INSERT INTO platforms (`+platformColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), now())
			ON CONFLICT (env, name) DO UPDATE SET driver = excluded.driver, agent = excluded.agent, settings = excluded.settings,
				templates = excluded.templates, discovered = excluded.discovered, declared_in = excluded.declared_in, updated_at = excluded.updated_at
			RETURNING `+platformColumns, p.Env, p.Name, p.Driver, p.Agent, cols[0], cols[1], p.Discovered, p.DeclaredIn))
		return err
	})
	return out, wrap(op, err)
}

// GetPlatform implements Store.
func (s *SQL) GetPlatform(ctx context.Context, env, name string) (record.Platform, error) {
	p, err := scanPlatform(s.db.QueryRow(ctx, `SELECT `+platformColumns+` FROM platforms WHERE env = $1 AND name = $2`, env, name))
	return p, wrap(fmt.Sprintf("platform %q of %q", name, env), err)
}

// ListPlatforms implements Store.
func (s *SQL) ListPlatforms(ctx context.Context, env string) ([]record.Platform, error) {
	out, err := queryAll(ctx, s.db, scanPlatform, `SELECT `+platformColumns+` FROM platforms WHERE env = $1 ORDER BY name`, env)
	return out, wrap(fmt.Sprintf("list platforms of %q", env), err)
}

// DeletePlatform implements Store.
func (s *SQL) DeletePlatform(ctx context.Context, env, name string) error {
	return wrap(fmt.Sprintf("delete platform %q of %q", name, env), s.deleteUsed(ctx, "platform", "platforms", env, name))
}

// deleteUsed deletes the platform or distribution name (of table, a
// host's column what) unless a host uses it. Its row is locked first: a
// host being created with it either committed before (and is seen) or
// waits and then finds it gone.
func (s *SQL) deleteUsed(ctx context.Context, what, table, env, name string) error {
	return s.db.Tx(ctx, func(tx Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM `+table+` WHERE env = $1 AND name = $2`+s.d.ForUpdate, env, name).Scan(&one); err != nil {
			return err
		}
		var host string
		err := tx.QueryRow(ctx, `SELECT name FROM hosts WHERE env = $1 AND `+what+` = $2 ORDER BY name LIMIT 1`, env, name).Scan(&host)
		switch {
		case err == nil:
			return fmt.Errorf("%w: host %s uses it (delete or change the hosts that use it first)", model.ErrConflict, host)
		case !errors.Is(err, model.ErrNotFound):
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM `+table+` WHERE env = $1 AND name = $2`, env, name)
		return err
	})
}

const distributionColumns = `env, name, kind, kernel, initrd, cmdline, install_format, install, images, params, settings, declared_in, created_at, updated_at`

func scanDistribution(r Row) (record.Distribution, error) {
	var d record.Distribution
	var images, params, settings []byte
	if err := r.Scan(&d.Env, &d.Name, &d.Kind, &d.Kernel, &d.Initrd, &d.Cmdline, &d.InstallFormat, &d.Install,
		&images, &params, &settings, &d.DeclaredIn, timeCol{&d.CreatedAt}, timeCol{&d.UpdatedAt}); err != nil {
		return d, err
	}
	what := "distribution " + d.Name
	for _, c := range []struct {
		field string
		b     []byte
		v     any
	}{{"images", images, &d.Images}, {"params", params, &d.Params}, {"settings", settings, &d.Settings}} {
		if err := decodeJSON(what+": "+c.field, c.b, c.v); err != nil {
			return d, err
		}
	}
	for i := range d.Params {
		d.Params[i].Default = wholeNumbers(d.Params[i].Default)
	}
	return d, nil
}

// PutDistribution implements Store.
func (s *SQL) PutDistribution(ctx context.Context, d record.Distribution) (record.Distribution, error) {
	op := fmt.Sprintf("put distribution %q of %q", model.Clip(d.Name, 64), d.Env)
	if err := d.Validate(); err != nil {
		return d, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
	}
	cols, err := encodeJSON(d.Images, d.Params, d.Settings)
	if err != nil {
		return d, fmt.Errorf("%s: %w", op, err)
	}
	var out record.Distribution
	err = s.db.Tx(ctx, func(tx Tx) error {
		if err := s.lockEnv(ctx, tx, d.Env); err != nil {
			return err
		}
		out, err = scanDistribution(tx.QueryRow(ctx, `INSERT INTO distributions (`+distributionColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now(), now())
			ON CONFLICT (env, name) DO UPDATE SET kind = excluded.kind, kernel = excluded.kernel, initrd = excluded.initrd,
				cmdline = excluded.cmdline, install_format = excluded.install_format, install = excluded.install, images = excluded.images,
				params = excluded.params, settings = excluded.settings, declared_in = excluded.declared_in, updated_at = excluded.updated_at
			RETURNING `+distributionColumns, d.Env, d.Name, d.Kind, d.Kernel, d.Initrd, d.Cmdline, d.InstallFormat, d.Install,
			cols[0], cols[1], cols[2], d.DeclaredIn))
		return err
	})
	return out, wrap(op, err)
}

// GetDistribution implements Store.
func (s *SQL) GetDistribution(ctx context.Context, env, name string) (record.Distribution, error) {
	d, err := scanDistribution(s.db.QueryRow(ctx, `SELECT `+distributionColumns+` FROM distributions WHERE env = $1 AND name = $2`, env, name))
	return d, wrap(fmt.Sprintf("distribution %q of %q", name, env), err)
}

// ListDistributions implements Store.
func (s *SQL) ListDistributions(ctx context.Context, env string) ([]record.Distribution, error) {
	out, err := queryAll(ctx, s.db, scanDistribution, `SELECT `+distributionColumns+` FROM distributions WHERE env = $1 ORDER BY name`, env)
	return out, wrap(fmt.Sprintf("list distributions of %q", env), err)
}

// DeleteDistribution implements Store.
func (s *SQL) DeleteDistribution(ctx context.Context, env, name string) error {
	return wrap(fmt.Sprintf("delete distribution %q of %q", name, env), s.deleteUsed(ctx, "distribution", "distributions", env, name))
}

const hostColumns = `env, name, platform, distribution, applications, labels, settings, state, reason, instance, declared_in, state_since, created_at, updated_at`

func scanHost(r Row) (record.Host, error) {
	var h record.Host
	var apps, labels, settings []byte
	if err := r.Scan(&h.Env, &h.Name, &h.Platform, &h.Distribution, &apps, &labels, &settings, &h.State, &h.Reason, &h.Instance, &h.DeclaredIn,
		timeCol{&h.StateSince}, timeCol{&h.CreatedAt}, timeCol{&h.UpdatedAt}); err != nil {
		return h, err
	}
	what := "host " + h.Name
	if err := decodeJSON(what+": applications", apps, &h.Applications); err != nil {
		return h, err
	}
	if err := decodeJSON(what+": labels", labels, &h.Labels); err != nil {
		return h, err
	}
	return h, decodeJSON(what+": settings", settings, &h.Settings)
}

// CreateHost implements Store.
func (s *SQL) CreateHost(ctx context.Context, h record.Host) (record.Host, error) {
	op := fmt.Sprintf("create host %q of %q", model.Clip(h.Name, 64), h.Env)
	if err := h.Validate(); err != nil {
		return h, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
	}
	h.Reason = model.Clip(h.Reason, model.MaxTextLen)
	if err := model.ValidateText("host "+h.Name+": instance", h.Instance, 256, false); err != nil {
		return h, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
	}
	cols, err := encodeJSON(h.Applications, h.Labels, h.Settings)
	if err != nil {
		return h, fmt.Errorf("%s: %w", op, err)
	}
	var since any = h.StateSince.UTC()
	if h.StateSince.IsZero() {
		since = nil
	}
	var out record.Host
	err = s.db.Tx(ctx, func(tx Tx) error {
		if err := s.lockEnv(ctx, tx, h.Env); err != nil {
			return err
		}
		if err := blueprintExists(ctx, tx, h); err != nil {
			return err
		}
		out, err = scanHost(tx.QueryRow(ctx, `INSERT INTO hosts (`+hostColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, COALESCE($12, now()), now(), now())
			RETURNING `+hostColumns, h.Env, h.Name, h.Platform, h.Distribution, cols[0], cols[1], cols[2], h.State, h.Reason, h.Instance, h.DeclaredIn, since))
		return err
	})
	return out, wrap(op, err)
}

// blueprintExists checks a host's platform and distribution exist, saying
// which is missing (the keys would refuse it without saying).
func blueprintExists(ctx context.Context, tx Tx, h record.Host) error {
	for _, ref := range []struct{ what, table, name string }{{"platform", "platforms", h.Platform}, {"distribution", "distributions", h.Distribution}} {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM `+ref.table+` WHERE env = $1 AND name = $2`, h.Env, ref.name).Scan(&one)
		if errors.Is(err, model.ErrNotFound) {
			return fmt.Errorf("%w: %s %q: %s has none so named", model.ErrNotFound, ref.what, ref.name, h.Env)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// UpdateHost implements Store.
func (s *SQL) UpdateHost(ctx context.Context, h record.Host) (record.Host, error) {
	op := fmt.Sprintf("update host %q of %q", model.Clip(h.Name, 64), h.Env)
	if err := h.Validate(); err != nil {
		return h, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
	}
	cols, err := encodeJSON(h.Applications, h.Labels, h.Settings)
	if err != nil {
		return h, fmt.Errorf("%s: %w", op, err)
	}
	var out record.Host
	err = s.db.Tx(ctx, func(tx Tx) error {
		was, err := scanHost(tx.QueryRow(ctx, `SELECT `+hostColumns+` FROM hosts WHERE env = $1 AND name = $2`+s.d.ForUpdate, h.Env, h.Name))
		if err != nil {
			return err
		}
		// A host with a machine keeps what the machine was made of.
		if was.State != record.HostDefined && was.State != record.HostFailed {
			h.Platform, h.Distribution = was.Platform, was.Distribution
		}
		if err := blueprintExists(ctx, tx, h); err != nil {
			return err
		}
		out, err = scanHost(tx.QueryRow(ctx, `UPDATE hosts SET platform = $1, distribution = $2, applications = $3, labels = $4, settings = $5,
				declared_in = $6, updated_at = now()
			WHERE env = $7 AND name = $8 RETURNING `+hostColumns, h.Platform, h.Distribution, cols[0], cols[1], cols[2], h.DeclaredIn, h.Env, h.Name))
		return err
	})
	return out, wrap(op, err)
}

// GetHost implements Store.
func (s *SQL) GetHost(ctx context.Context, env, name string) (record.Host, error) {
	h, err := scanHost(s.db.QueryRow(ctx, `SELECT `+hostColumns+` FROM hosts WHERE env = $1 AND name = $2`, env, name))
	return h, wrap(fmt.Sprintf("host %q of %q", name, env), err)
}

// ListHosts implements Store.
func (s *SQL) ListHosts(ctx context.Context, env string) ([]record.Host, error) {
	out, err := queryAll(ctx, s.db, scanHost, `SELECT `+hostColumns+` FROM hosts WHERE env = $1 ORDER BY name`, env)
	return out, wrap(fmt.Sprintf("list hosts of %q", env), err)
}

// DeleteHost implements Store.
func (s *SQL) DeleteHost(ctx context.Context, env, name string) error {
	n, err := s.db.Exec(ctx, `DELETE FROM hosts WHERE env = $1 AND name = $2`, env, name)
	if err == nil && n == 0 {
		err = model.ErrNotFound
	}
	return wrap(fmt.Sprintf("delete host %q of %q", name, env), err)
}

// MoveHost implements Store.
func (s *SQL) MoveHost(ctx context.Context, env, name string, from record.HostState, event record.HostEvent, reason, instance string) (record.Host, error) {
	op := fmt.Sprintf("move host %q of %q (%s)", name, env, model.Clip(string(event), 32))
	reason = model.Clip(reason, model.MaxTextLen)
	if err := model.ValidateText("instance", instance, 256, false); err != nil {
		return record.Host{}, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
	}
	var out record.Host
	err := s.db.Tx(ctx, func(tx Tx) error {
		h, err := scanHost(tx.QueryRow(ctx, `SELECT `+hostColumns+` FROM hosts WHERE env = $1 AND name = $2`+s.d.ForUpdate, env, name))
		if err != nil {
			return err
		}
		if from != "" && h.State != from {
			return fmt.Errorf("%w: the host is %s, no longer %s", model.ErrConflict, h.State, from)
		}
		next, err := h.State.Move(event)
		if err != nil {
			return err
		}
		switch {
		case event == record.HostDestroyed:
			instance = ""
		case instance == "":
			instance = h.Instance
		}
		out, err = scanHost(tx.QueryRow(ctx, `UPDATE hosts SET state = $1, reason = $2, instance = $3, state_since = now(), updated_at = now()
			WHERE env = $4 AND name = $5 RETURNING `+hostColumns, next, reason, instance, env, name))
		return err
	})
	return out, wrap(op, err)
}

// LinkHostInstance implements Store.
func (s *SQL) LinkHostInstance(ctx context.Context, env, name, instance string) (bool, error) {
	if err := model.ValidateText("instance", instance, 256, true); err != nil {
		return false, fmt.Errorf("link host %q: %w: %w", name, model.ErrInvalid, err)
	}
	n, err := s.db.Exec(ctx, `UPDATE hosts SET instance = $1, updated_at = now() WHERE env = $2 AND name = $3 AND instance = ''`, instance, env, name)
	return n == 1, wrap(fmt.Sprintf("link host %q of %q", name, env), err)
}

const instanceColumns = `env, id, platform, host, agent, power, booted_at, addresses, hardware, labels, seen_at`

func scanInstance(r Row) (record.Instance, error) {
	var i record.Instance
	var addrs, hardware, labels []byte
	if err := r.Scan(&i.Env, &i.ID, &i.Platform, &i.Host, &i.Agent, &i.Power, nullTimeCol{&i.BootedAt},
		&addrs, &hardware, &labels, timeCol{&i.SeenAt}); err != nil {
		return i, err
	}
	what := "instance " + i.ID
	if err := decodeJSON(what+": addresses", addrs, &i.Addresses); err != nil {
		return i, err
	}
	if err := decodeJSON(what+": hardware", hardware, &i.Hardware); err != nil {
		return i, err
	}
	return i, decodeJSON(what+": labels", labels, &i.Labels)
}

// powerStates are the power states an instance may be in.
var powerStates = []record.PowerState{record.PowerRunning, record.PowerStopped, record.PowerPaused, record.PowerCrashed, record.PowerUnknown, record.PowerStarting}

// checkInstance checks an instance's fields, naming the one that is
// wrong, and fills in its power (unknown) and when it was seen (now).
func checkInstance(i *record.Instance) error {
	if err := model.ValidateText("instance: id", i.ID, 256, false); err != nil {
		return err
	}
	if i.ID == "" {
		return fmt.Errorf("instance: id: required (the driver's ID of the machine, or agent:NAME)")
	}
	for _, n := range []struct{ field, name string }{{"platform", i.Platform}, {"host", i.Host}, {"agent", i.Agent}} {
		if n.name == "" {
			continue
		}
		if err := model.ValidateAgentName(n.name); err != nil {
			return fmt.Errorf("instance %s: %s: %w", i.ID, n.field, err)
		}
	}
	if i.Power == "" {
		i.Power = record.PowerUnknown
	}
	known := false
	for _, p := range powerStates {
		known = known || i.Power == p
	}
	if !known {
		return fmt.Errorf("instance %s: power: unknown power state %q", i.ID, model.Clip(string(i.Power), 32))
	}
	for n, a := range i.Addresses {
		if err := model.ValidateText(fmt.Sprintf("instance %s: addresses[%d]", i.ID, n), a, 256, false); err != nil {
			return err
		}
	}
	if err := model.ValidateLabels(i.Labels); err != nil {
		return fmt.Errorf("instance %s: labels: %w", i.ID, err)
	}
	if i.SeenAt.IsZero() {
		i.SeenAt = time.Now()
	}
	i.SeenAt = i.SeenAt.UTC()
	if i.BootedAt != nil {
		b := i.BootedAt.UTC()
		i.BootedAt = &b
	}
	return nil
}

// PutInstance implements Store.
func (s *SQL) PutInstance(ctx context.Context, i record.Instance) (record.Instance, error) {
	op := fmt.Sprintf("put instance %q of %q", model.Clip(i.ID, 64), i.Env)
	if err := checkInstance(&i); err != nil {
		return i, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
	}
	cols, err := encodeJSON(i.Addresses, i.Hardware, i.Labels)
	if err != nil {
		return i, fmt.Errorf("%s: %w", op, err)
	}
	var booted any
	if i.BootedAt != nil {
		booted = *i.BootedAt
	}
	var out record.Instance
	err = s.db.Tx(ctx, func(tx Tx) error {
		if err := s.lockEnv(ctx, tx, i.Env); err != nil {
			return err
		}
		if i.Host != "" {
			var other string
			err := tx.QueryRow(ctx, `SELECT id FROM instances WHERE env = $1 AND host = $2 AND id <> $3`, i.Env, i.Host, i.ID).Scan(&other)
			if err == nil {
				return fmt.Errorf("%w: host %s is instance %s's already (one instance per host)", model.ErrConflict, i.Host, other)
			}
			if !errors.Is(err, model.ErrNotFound) {
				return err
			}
		}
		out, err = scanInstance(tx.QueryRow(ctx, `INSERT INTO instances (`+instanceColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			ON CONFLICT (env, id) DO UPDATE SET platform = excluded.platform, host = excluded.host, agent = excluded.agent,
				power = excluded.power, booted_at = excluded.booted_at, addresses = excluded.addresses, hardware = excluded.hardware,
				labels = excluded.labels, seen_at = excluded.seen_at
			RETURNING `+instanceColumns, i.Env, i.ID, i.Platform, i.Host, i.Agent, i.Power, booted, cols[0], cols[1], cols[2], i.SeenAt))
		if errors.Is(err, model.ErrExists) { // the host's index: another transaction's instance
			return fmt.Errorf("%w: host %s has an instance already (one instance per host)", model.ErrConflict, i.Host)
		}
		return err
	})
	return out, wrap(op, err)
}

// GetInstance implements Store.
func (s *SQL) GetInstance(ctx context.Context, env, id string) (record.Instance, error) {
	i, err := scanInstance(s.db.QueryRow(ctx, `SELECT `+instanceColumns+` FROM instances WHERE env = $1 AND id = $2`, env, id))
	return i, wrap(fmt.Sprintf("instance %q of %q", model.Clip(id, 64), env), err)
}

// ListInstances implements Store.
func (s *SQL) ListInstances(ctx context.Context, env string) ([]record.Instance, error) {
	out, err := queryAll(ctx, s.db, scanInstance, `SELECT `+instanceColumns+` FROM instances WHERE env = $1 ORDER BY id`, env)
	return out, wrap(fmt.Sprintf("list instances of %q", env), err)
}

// DeleteInstance implements Store.
func (s *SQL) DeleteInstance(ctx context.Context, env, id string) error {
	n, err := s.db.Exec(ctx, `DELETE FROM instances WHERE env = $1 AND id = $2`, env, id)
	if err == nil && n == 0 {
		err = model.ErrNotFound
	}
	return wrap(fmt.Sprintf("delete instance %q of %q", model.Clip(id, 64), env), err)
}

const applicationColumns = `env, name, machine_settings, declared_in, updated_at`

func scanApplication(r Row) (record.Application, error) {
	var a record.Application
	var settings []byte
	if err := r.Scan(&a.Env, &a.Name, &settings, &a.DeclaredIn, timeCol{&a.UpdatedAt}); err != nil {
		return a, err
	}
	return a, decodeJSON("application "+a.Name+": machine_settings", settings, &a.MachineSettings)
}

// SetApplications implements Store.
func (s *SQL) SetApplications(ctx context.Context, env string, apps []record.Application) ([]record.Application, error) {
	op := fmt.Sprintf("set applications of %q", env)
	seen := map[string]bool{}
	cols := make([][]string, len(apps))
	for i := range apps {
		a := &apps[i]
		if err := a.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", op, model.ErrInvalid, err)
		}
		if seen[a.Name] {
			return nil, fmt.Errorf("%s: %w: application %s: named twice", op, model.ErrInvalid, a.Name)
		}
		seen[a.Name] = true
		c, err := encodeJSON(a.MachineSettings)
		if err != nil {
			return nil, fmt.Errorf("%s: application %s: %w", op, a.Name, err)
		}
		cols[i] = c
	}
	var out []record.Application
	err := s.db.Tx(ctx, func(tx Tx) error {
		if err := s.lockEnv(ctx, tx, env); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM machine_applications WHERE env = $1`, env); err != nil {
			return err
		}
		for i, a := range apps {
			if _, err := tx.Exec(ctx, `INSERT INTO machine_applications (`+applicationColumns+`) VALUES ($1, $2, $3, $4, now())`,
				env, a.Name, cols[i][0], a.DeclaredIn); err != nil {
				return err
			}
		}
		var err error
		out, err = queryAll(ctx, tx, scanApplication, `SELECT `+applicationColumns+` FROM machine_applications WHERE env = $1 ORDER BY name`, env)
		return err
	})
	return out, wrap(op, err)
}

// ListApplications implements Store.
func (s *SQL) ListApplications(ctx context.Context, env string) ([]record.Application, error) {
	out, err := queryAll(ctx, s.db, scanApplication, `SELECT `+applicationColumns+` FROM machine_applications WHERE env = $1 ORDER BY name`, env)
	return out, wrap(fmt.Sprintf("list applications of %q", env), err)
}

// encodeJSON returns each value as JSON for a JSON column (an empty map
// or list as {} or [], never null).
func encodeJSON(vs ...any) ([]string, error) {
	out := make([]string, len(vs))
	for i, v := range vs {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		out[i] = string(b)
		if out[i] == "null" {
			out[i] = "{}"
			if reflect.ValueOf(v).Kind() == reflect.Slice {
				out[i] = "[]"
			}
		}
	}
	return out, nil
}

// decodeJSON reads a JSON column into v, left as it is (nil) when the
// column holds an empty map or list; a whole number in a map of any comes
// back an int64, as the records' checks give it.
func decodeJSON(what string, b []byte, v any) error {
	switch string(bytes.TrimSpace(b)) {
	case "", "null", "{}", "[]":
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, what, err)
	}
	if m, ok := v.(*map[string]any); ok {
		for k, x := range *m {
			(*m)[k] = wholeNumbers(x)
		}
	}
	return nil
}

// wholeNumbers is v with JSON numbers made int64 (whole) or float64, in
// lists and objects too.
func wholeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = wholeNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = wholeNumbers(x[k])
		}
	}
	return v
}
