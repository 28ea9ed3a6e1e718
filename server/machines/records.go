package machines

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// PutPlatform creates or replaces a platform: its driver known, its
// settings of their types (defaults filled in), its templates using only
// its driver's variables. A platform a host uses keeps its driver. One the
// environment's model declares is refused (it changes with the model).
func (r *Room) PutPlatform(ctx context.Context, p record.Platform) (record.Platform, error) {
	p.DeclaredIn = ""
	if err := r.operatorMay(ctx, "platform", p.Env, p.Name); err != nil {
		return p, err
	}
	return r.putPlatform(ctx, p)
}

// putPlatform is PutPlatform for an operator or for the model (p.DeclaredIn).
func (r *Room) putPlatform(ctx context.Context, p record.Platform) (record.Platform, error) {
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("%w: %w", model.ErrInvalid, err)
	}
	for _, name := range sortedKeys(p.Templates) {
		if !slices.Contains(templateNames[p.Driver], name) {
			return p, fmt.Errorf("%w: platform %s: templates.%s: the %s driver has no template so named: want %v", model.ErrInvalid, p.Name, name, p.Driver, templateNames[p.Driver])
		}
		if err := checkDriverTemplate(p, name, p.Templates[name]); err != nil {
			return p, fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
	}
	if was, err := r.svc.Store.GetPlatform(ctx, p.Env, p.Name); err == nil && was.Driver != p.Driver {
		hosts, err := r.hostsOn(ctx, p.Env, func(h record.Host) bool { return h.Platform == p.Name })
		if err != nil {
			return p, err
		}
		if len(hosts) > 0 {
			return p, fmt.Errorf("%w: platform %s: driver: host %s is made by its %s driver: delete its hosts before changing the driver", model.ErrConflict, p.Name, hosts[0].Name, was.Driver)
		}
	}
	return r.svc.Store.PutPlatform(ctx, p)
}

// templateNames are the templates each driver renders, which a platform
// may override.
var templateNames = map[string][]string{
	record.DriverLibvirt: {"domain"},
	record.DriverPXE:     {"domain", "ipxe"},
}

// PutDistribution creates or replaces a distribution: its parameters
// typed, its templates naming only what there is. One the environment's
// model declares is refused.
func (r *Room) PutDistribution(ctx context.Context, d record.Distribution) (record.Distribution, error) {
	d.DeclaredIn = ""
	if err := r.operatorMay(ctx, "distribution", d.Env, d.Name); err != nil {
		return d, err
	}
	return r.putDistribution(ctx, d)
}

// putDistribution is PutDistribution for an operator or for the model.
func (r *Room) putDistribution(ctx context.Context, d record.Distribution) (record.Distribution, error) {
	if err := d.Validate(); err != nil {
		return d, fmt.Errorf("%w: %w", model.ErrInvalid, err)
	}
	if err := checkInstallTemplates(d); err != nil {
		return d, fmt.Errorf("%w: %w", model.ErrInvalid, err)
	}
	if err := r.sealDistribution(ctx, &d); err != nil {
		return d, err
	}
	return r.svc.Store.PutDistribution(ctx, d)
}

// AddHost stores a new host, defined: its platform and distribution
// exist, the distribution fits the platform, and its settings are those
// of the platform's driver, the distribution or a host, of their types.
func (r *Room) AddHost(ctx context.Context, h record.Host) (record.Host, error) {
	h.DeclaredIn = ""
	return r.addHost(ctx, h)
}

// addHost is AddHost for an operator or for the model (h.DeclaredIn).
func (r *Room) addHost(ctx context.Context, h record.Host) (record.Host, error) {
	h.State, h.Reason, h.Instance = record.HostDefined, "", ""
	if err := h.Validate(); err != nil {
		return h, fmt.Errorf("%w: %w", model.ErrInvalid, err)
	}
	_, _, cv, err := r.blueprint(ctx, h)
	if err != nil {
		return h, err
	}
	if h.Settings, err = r.sealHostSettings(ctx, cv, h.Settings); err != nil {
		return h, err
	}
	return r.svc.Store.CreateHost(ctx, h)
}

// DeleteHost deletes a host that has no machine: defined, or failed with
// its machine destroyed. One the environment's model declares is refused.
func (r *Room) DeleteHost(ctx context.Context, env, name string) error {
	if err := r.operatorMay(ctx, "host", env, name); err != nil {
		return err
	}
	return r.deleteHost(ctx, env, name)
}

// deleteHost is DeleteHost for an operator or for the model.
func (r *Room) deleteHost(ctx context.Context, env, name string) error {
	h, err := r.svc.Store.GetHost(ctx, env, name)
	if err != nil {
		return err
	}
	if h.State != record.HostDefined && h.State != record.HostFailed {
		return fmt.Errorf("%w: host %s is %s: destroy its machine first (tether host destroy %s)", model.ErrConflict, name, h.State, name)
	}
	if err := r.svc.Store.DeleteHost(ctx, env, name); err != nil {
		return err
	}
	r.dropTokens(ctx, env, name)
	return nil
}

// HostView is a host with its context (where each setting came from,
// secrets hidden) and its instance.
type HostView struct {
	record.Host
	Context  []record.ContextValue `json:"context"`
	Machine  string                `json:"machine"`
	Instance *record.Instance      `json:"instance_state,omitempty"`
}

// ShowHost returns a host with its context and instance.
func (r *Room) ShowHost(ctx context.Context, env, name string) (HostView, error) {
	h, err := r.svc.Store.GetHost(ctx, env, name)
	if err != nil {
		return HostView{}, err
	}
	v := HostView{Host: h, Machine: machineName(env, name)}
	if _, _, cv, err := r.blueprint(ctx, h); err == nil {
		for i := range cv {
			if cv[i].Secret {
				cv[i].Value = "(secret)"
			}
		}
		v.Context = cv
	}
	if inst, ok, err := r.instanceOf(ctx, env, name); err != nil {
		return v, err
	} else if ok {
		r.addresses(ctx, &inst)
		v.Instance = &inst
	}
	return v, nil
}

// addresses fills in the addresses of an instance its driver does not
// know from what its agent says of its host (its ipv4 and ipv6 facts).
func (r *Room) addresses(ctx context.Context, i *record.Instance) {
	if len(i.Addresses) > 0 || i.Agent == "" {
		return
	}
	a, err := r.svc.Store.GetAgent(ctx, i.Env, i.Agent)
	if err != nil {
		return
	}
	for _, k := range []string{"ipv4", "ipv6"} {
		if ip, ok := a.Facts[k].(string); ok && ip != "" {
			i.Addresses = append(i.Addresses, ip)
		}
	}
}

// blueprint reads a host's platform and distribution, checks they fit
// and resolves its context.
func (r *Room) blueprint(ctx context.Context, h record.Host) (record.Platform, record.Distribution, []record.ContextValue, error) {
	p, err := r.svc.Store.GetPlatform(ctx, h.Env, h.Platform)
	if err != nil {
		return p, record.Distribution{}, nil, fmt.Errorf("host %s: platform: %w", h.Name, err)
	}
	d, err := r.svc.Store.GetDistribution(ctx, h.Env, h.Distribution)
	if err != nil {
		return p, d, nil, fmt.Errorf("host %s: distribution: %w", h.Name, err)
	}
	if err := d.Fits(p); err != nil {
		return p, d, nil, fmt.Errorf("%w: host %s: %w", model.ErrInvalid, h.Name, err)
	}
	cv, _, err := record.HostContext(p, d, h)
	if err != nil {
		return p, d, nil, fmt.Errorf("%w: %w", model.ErrInvalid, err)
	}
	return p, d, cv, nil
}

// hostsOn lists env's hosts that keep says to.
func (r *Room) hostsOn(ctx context.Context, env string, keep func(record.Host) bool) ([]record.Host, error) {
	hosts, err := r.svc.Store.ListHosts(ctx, env)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(hosts, func(h record.Host) bool { return !keep(h) }), nil
}

// instanceOf returns the instance made from (or adopted into) a host.
func (r *Room) instanceOf(ctx context.Context, env, host string) (record.Instance, bool, error) {
	all, err := r.svc.Store.ListInstances(ctx, env)
	if err != nil {
		return record.Instance{}, false, err
	}
	for _, i := range all {
		if i.Host == host {
			return i, true, nil
		}
	}
	return record.Instance{}, false, nil
}

// machineName is the name of a host's machine on its platform: the
// environment's name (which has no dot) and the host's, so that two
// environments share a hypervisor.
func machineName(env, host string) string { return env + "." + host }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// GetPlatform returns a platform.
func (r *Room) GetPlatform(ctx context.Context, env, name string) (record.Platform, error) {
	return r.svc.Store.GetPlatform(ctx, env, name)
}

// ListPlatforms returns env's platforms, by name.
func (r *Room) ListPlatforms(ctx context.Context, env string) ([]record.Platform, error) {
	return r.svc.Store.ListPlatforms(ctx, env)
}

// DeletePlatform deletes a platform no host uses. One the environment's
// model declares is refused.
func (r *Room) DeletePlatform(ctx context.Context, env, name string) error {
	if err := r.operatorMay(ctx, "platform", env, name); err != nil {
		return err
	}
	return r.svc.Store.DeletePlatform(ctx, env, name)
}

// GetDistribution returns a distribution.
func (r *Room) GetDistribution(ctx context.Context, env, name string) (record.Distribution, error) {
	return r.svc.Store.GetDistribution(ctx, env, name)
}

// ListDistributions returns env's distributions, by name.
func (r *Room) ListDistributions(ctx context.Context, env string) ([]record.Distribution, error) {
	return r.svc.Store.ListDistributions(ctx, env)
}

// DeleteDistribution deletes a distribution no host uses. One the
// environment's model declares is refused.
func (r *Room) DeleteDistribution(ctx context.Context, env, name string) error {
	if err := r.operatorMay(ctx, "distribution", env, name); err != nil {
		return err
	}
	return r.svc.Store.DeleteDistribution(ctx, env, name)
}

// ListHosts returns env's hosts, by name.
func (r *Room) ListHosts(ctx context.Context, env string) ([]record.Host, error) {
	return r.svc.Store.ListHosts(ctx, env)
}

// ListInstances returns env's instances, by ID.
func (r *Room) ListInstances(ctx context.Context, env string) ([]record.Instance, error) {
	return r.svc.Store.ListInstances(ctx, env)
}

// GetInstance returns an instance by its ID.
func (r *Room) GetInstance(ctx context.Context, env, id string) (record.Instance, error) {
	return r.svc.Store.GetInstance(ctx, env, id)
}

// Adopt adopts the machine of an accepted agent that has no host (a
// discovered instance) into a defined host of the same name's blueprint:
// the host becomes provisioned with the agent's machine as its instance
// ("agent:NAME": the platform's driver did not make it, so it cannot
// control it). Two hosts cannot claim one machine.
func (r *Room) Adopt(ctx context.Context, env, agent, host, by string) (record.Host, error) {
	if err := r.notHalted(ctx, env); err != nil {
		return record.Host{}, err
	}
	a, err := r.svc.Store.GetAgent(ctx, env, agent)
	if err != nil {
		return record.Host{}, fmt.Errorf("agent %s: %w", agent, err)
	}
	if a.State != record.AgentAccepted {
		return record.Host{}, fmt.Errorf("%w: agent %s is %s: accept it first (tether agent accept %s)", model.ErrConflict, agent, a.State, agent)
	}
	if agent != host {
		return record.Host{}, fmt.Errorf("%w: a host's name is its agent's: adopt agent %s into a host named %s", model.ErrInvalid, agent, agent)
	}
	instances, err := r.svc.Store.ListInstances(ctx, env)
	if err != nil {
		return record.Host{}, err
	}
	for _, i := range instances {
		if i.Agent == agent && i.Host != "" {
			return record.Host{}, fmt.Errorf("%w: agent %s's machine is host %s's already", model.ErrConflict, agent, i.Host)
		}
	}
	inst := record.Instance{Env: env, ID: "agent:" + agent, Host: host, Agent: agent, Power: record.PowerUnknown, Labels: a.Labels}
	if a.Connected {
		inst.Power = record.PowerRunning
	}
	h, err := r.move(ctx, env, host, record.HostDefined, record.HostAdopt, "", inst.ID, by)
	if err != nil {
		return h, err
	}
	if _, err := r.svc.Store.PutInstance(ctx, inst); err != nil {
		return h, err
	}
	return h, nil
}

// Instances lists env's instances: the machines platforms reported, and
// the machines of accepted agents no host claims (discovered instances,
// "agent:NAME", which an operator can adopt).
func (r *Room) Instances(ctx context.Context, env string) ([]record.Instance, error) {
	out, err := r.svc.Store.ListInstances(ctx, env)
	if err != nil {
		return nil, err
	}
	claimed := map[string]bool{}
	for _, i := range out {
		if i.Agent != "" {
			claimed[i.Agent] = true
		}
	}
	agents, err := r.svc.Store.ListAgents(ctx, env)
	if err != nil {
		return nil, err
	}
	for _, a := range agents {
		if a.State != record.AgentAccepted || claimed[a.Name] {
			continue
		}
		i := record.Instance{Env: env, ID: "agent:" + a.Name, Agent: a.Name, Power: record.PowerUnknown, Labels: a.Labels, SeenAt: a.LastSeen}
		if a.Connected {
			i.Power = record.PowerRunning
		}
		out = append(out, i)
	}
	for i := range out {
		r.addresses(ctx, &out[i])
	}
	slices.SortFunc(out, func(a, b record.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
