package machines

import (
	"context"
	"fmt"
	"maps"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/secret"
	"github.com/tetherhq/tether/server/record"
)

// Secret settings (a distribution's root password) are sealed at rest
// under the server's master key as soon as they are received, and opened
// only to render a machine's templates: the store, backups and the API
// never hold them in clear.

// sealSettings returns settings with the values of secret parameters
// sealed (those sealed already are kept).
func (r *Room) sealSettings(ctx context.Context, params []record.Param, settings map[string]any) (map[string]any, error) {
	out := maps.Clone(settings)
	for _, p := range params {
		if p.Type != record.ParamSecret {
			continue
		}
		v, ok := out[p.Name].(string)
		if !ok || secret.IsSealedValue(v) {
			continue
		}
		if r.svc.Seal == nil {
			return nil, fmt.Errorf("%w: %s is a secret and this server cannot seal it", model.ErrUnavailable, p.Name)
		}
		sealed, err := r.svc.Seal(ctx, p.Name, v)
		if err != nil {
			return nil, fmt.Errorf("seal %s: %w", p.Name, err)
		}
		out[p.Name] = sealed
	}
	return out, nil
}

// sealHostSettings returns a host's settings with those its context
// (cv) says are secrets sealed.
func (r *Room) sealHostSettings(ctx context.Context, cv []record.ContextValue, settings map[string]any) (map[string]any, error) {
	var secrets []record.Param
	for _, c := range cv {
		if c.Secret {
			secrets = append(secrets, record.Param{Name: c.Name, Type: record.ParamSecret})
		}
	}
	return r.sealSettings(ctx, secrets, settings)
}

// sealDistribution seals a distribution's secret settings and defaults.
func (r *Room) sealDistribution(ctx context.Context, d *record.Distribution) error {
	settings, err := r.sealSettings(ctx, d.Params, d.Settings)
	if err != nil {
		return err
	}
	d.Settings = settings
	for i, p := range d.Params {
		if p.Type != record.ParamSecret || p.Default == nil {
			continue
		}
		s, err := r.sealSettings(ctx, []record.Param{p}, map[string]any{p.Name: p.Default})
		if err != nil {
			return err
		}
		d.Params[i].Default = s[p.Name]
	}
	return nil
}

// openSettings returns a host's resolved settings with its secrets in
// clear, to render its templates with.
func (r *Room) openSettings(ctx context.Context, cv []record.ContextValue, settings map[string]any) (map[string]any, error) {
	out := maps.Clone(settings)
	for _, c := range cv {
		v, ok := out[c.Name].(string)
		if !c.Secret || !ok || !secret.IsSealedValue(v) {
			continue
		}
		if r.svc.Open == nil {
			return nil, fmt.Errorf("%w: %s is sealed and this server cannot open it", model.ErrUnavailable, c.Name)
		}
		plain, err := r.svc.Open(ctx, c.Name, v)
		if err != nil {
			return nil, fmt.Errorf("%s (from %s): %w", c.Name, c.From, err)
		}
		out[c.Name] = plain
	}
	return out, nil
}
