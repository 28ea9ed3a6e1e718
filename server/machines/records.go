package machines

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
		return p, record.Refuse(model.ErrInvalid, "%v", err)
	}
	for _, name := range sortedKeys(p.Templates) {
		if !slices.Contains(templateNames[p.Driver], name) {
			return p, record.Refuse(model.ErrInvalid, "platform %s: templates.%s: the %s driver has no template so named: want %s", p.Name, name, p.Driver, strings.Join(templateNames[p.Driver], ", "))
		}
		if err := checkDriverTemplate(p, name, p.Templates[name]); err != nil {
			return p, record.Refuse(model.ErrInvalid, "%v", err)
		}
	}
	if was, err := r.svc.Store.GetPlatform(ctx, p.Env, p.Name); err == nil && was.Driver != p.Driver {
		hosts, err := r.hostsOn(ctx, p.Env, func(h record.Host) bool { return h.Platform == p.Name })
		if err != nil {
			return p, err
		}
		if len(hosts) > 0 {
			return p, record.Refuse(model.ErrConflict, "platform %s: driver: host %s is made by its %s driver: delete its hosts before changing the driver", p.Name, hosts[0].Name, was.Driver)
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
		return d, record.Refuse(model.ErrInvalid, "%v", err)
	}
	if was, err := r.svc.Store.GetDistribution(ctx, d.Env, d.Name); err == nil {
		keepSecrets(&d, was)
	}
	if err := checkInstallTemplates(d); err != nil {
		return d, record.Refuse(model.ErrInvalid, "%v", err)
	}
	if err := r.sealDistribution(ctx, &d); err != nil {
		return d, err
	}
	d, err := r.svc.Store.PutDistribution(ctx, d)
	return hideDistribution(d), err
}

// keepSecrets gives the secrets of d that are shown as hidden
// (record.SecretShown, as GetDistribution showed them) the values they
// had in was: a distribution read, changed and saved again keeps them.
func keepSecrets(d *record.Distribution, was record.Distribution) {
	old := map[string]record.Param{}
	for _, p := range was.Params {
		old[p.Name] = p
	}
	for i, p := range d.Params {
		o, ok := old[p.Name]
		if p.Type != record.ParamSecret || !ok || o.Type != record.ParamSecret {
			continue
		}
		if p.Default == record.SecretShown {
			d.Params[i].Default = o.Default
		}
		if v, ok := was.Settings[p.Name]; ok && d.Settings[p.Name] == record.SecretShown {
			d.Settings[p.Name] = v
		}
	}
}

// secretNames are the names of a distribution's secret parameters.
func secretNames(d record.Distribution) map[string]bool {
	out := map[string]bool{}
	for _, p := range d.Params {
		if p.Type == record.ParamSecret {
			out[p.Name] = true
		}
	}
	return out
}

// hideDistribution shows d's secret settings and defaults as
// record.SecretShown.
func hideDistribution(d record.Distribution) record.Distribution {
	secret := secretNames(d)
	if len(secret) == 0 {
		return d
	}
	d.Params = slices.Clone(d.Params)
	for i, p := range d.Params {
		if secret[p.Name] && p.Default != nil {
			d.Params[i].Default = record.SecretShown
		}
	}
	d.Settings = hideSettings(d.Settings, secret)
	return d
}

// hideSettings returns settings with those secret names shown as
// record.SecretShown.
func hideSettings(settings map[string]any, secret map[string]bool) map[string]any {
	if len(secret) == 0 || len(settings) == 0 {
		return settings
	}
	out := maps.Clone(settings)
	for k := range out {
		if secret[k] {
			out[k] = record.SecretShown
		}
	}
	return out
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
		return h, record.Refuse(model.ErrInvalid, "%v", err)
	}
	_, _, cv, err := r.blueprint(ctx, h)
	if err != nil {
		return h, err
	}
	if h.Settings, err = r.sealHostSettings(ctx, cv, h.Settings); err != nil {
		return h, err
	}
	h, err = r.svc.Store.CreateHost(ctx, h)
	if err != nil {
		return h, err
	}
	secret := map[string]bool{}
	for _, c := range cv {
		secret[c.Name] = c.Secret
	}
	h.Settings = hideSettings(h.Settings, secret)
	return h, nil
}

// UpdateHost replaces an operator's host's blueprint with h's, checked
// as a new host's is (AddHost). A host with a machine (provisioning,
// provisioned, deprovisioning) keeps the platform and distribution it
// was made of: changing them is refused until its machine is destroyed;
// its applications, labels and settings change, and its next machine is
// made with them. A secret setting sent as record.SecretShown (as
// ShowHost shows it) keeps the value it had. One the environment's model
// declares is refused (it changes with the model).
func (r *Room) UpdateHost(ctx context.Context, h record.Host) (record.Host, error) {
	h.DeclaredIn = ""
	if err := r.operatorMay(ctx, "host", h.Env, h.Name); err != nil {
		return h, err
	}
	was, err := r.svc.Store.GetHost(ctx, h.Env, h.Name)
	if errors.Is(err, model.ErrNotFound) {
		return h, record.Refuse(model.ErrNotFound, "host %s: environment %s has no host so named (tether host add %s adds it)", h.Name, h.Env, h.Name)
	}
	if err != nil {
		return h, err
	}
	if hasMachine(was) {
		var changed []string
		if h.Platform != was.Platform {
			changed = append(changed, fmt.Sprintf("platform %s to %s", was.Platform, h.Platform))
		}
		if h.Distribution != was.Distribution {
			changed = append(changed, fmt.Sprintf("distribution %s to %s", was.Distribution, h.Distribution))
		}
		if len(changed) > 0 {
			return h, record.Refuse(model.ErrConflict, "host %s is %s: its machine was made on platform %s with distribution %s: destroy it first (tether host destroy %s), then change its %s",
				h.Name, was.State, was.Platform, was.Distribution, h.Name, strings.Join(changed, " and its "))
		}
	}
	secrets, err := r.keepHostSecrets(ctx, &h, was)
	if err != nil {
		return h, err
	}
	got, err := r.updateHost(ctx, was, h)
	if err != nil {
		return got, err
	}
	got.Settings = hideSettings(got.Settings, secrets)
	return got, nil
}

// hasMachine reports whether a host has a machine (or one is being made
// or destroyed): it keeps the platform and distribution it was made of.
func hasMachine(h record.Host) bool {
	return h.State != record.HostDefined && h.State != record.HostFailed
}

// keepHostSecrets gives the settings of h sent as record.SecretShown the
// values they had in was: those of secret parameters of both was's
// distribution and h's. One that has no value to keep is refused, naming
// it, rather than stored as the word itself. It returns the names of the
// secret settings of h's distribution (none when it does not exist: the
// blueprint's check says so).
func (r *Room) keepHostSecrets(ctx context.Context, h *record.Host, was record.Host) (map[string]bool, error) {
	distSecrets := func(name string) (map[string]bool, bool, error) {
		d, err := r.svc.Store.GetDistribution(ctx, h.Env, name)
		if errors.Is(err, model.ErrNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("host %s: distribution: %w", h.Name, err)
		}
		return secretNames(d), true, nil
	}
	secrets, found, err := distSecrets(h.Distribution)
	if err != nil || !found {
		return nil, err
	}
	wasSecret := secrets
	if was.Distribution != h.Distribution {
		if wasSecret, _, err = distSecrets(was.Distribution); err != nil {
			return nil, err
		}
	}
	h.Settings = maps.Clone(h.Settings)
	for _, name := range sortedKeys(h.Settings) {
		if h.Settings[name] != record.SecretShown {
			continue
		}
		old, ok := was.Settings[name]
		if !ok || !secrets[name] || !wasSecret[name] {
			return secrets, record.Refuse(model.ErrInvalid, "host %s: settings.%s: %q stands for the secret value it had, and it had none to keep: give its value, or leave it out",
				h.Name, name, record.SecretShown)
		}
		h.Settings[name] = old
	}
	return secrets, nil
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
		return record.Refuse(model.ErrConflict, "host %s is %s: destroy its machine first (tether host destroy %s), then delete it", name, h.State, name)
	}
	if err := r.svc.Store.DeleteHost(ctx, env, name); err != nil {
		return err
	}
	r.dropTokens(ctx, env, name)
	return nil
}

// ShowHost returns a host with its context and instance.
func (r *Room) ShowHost(ctx context.Context, env, name string) (record.HostView, error) {
	h, err := r.svc.Store.GetHost(ctx, env, name)
	if err != nil {
		return record.HostView{}, err
	}
	v := record.HostView{Host: h, Machine: machineName(env, name)}
	if _, d, cv, err := r.blueprint(ctx, h); err == nil {
		v.Settings = hideSettings(v.Settings, secretNames(d))
		for i := range cv {
			if cv[i].Secret {
				cv[i].Value = record.SecretShown
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
	if err == nil {
		factAddresses(i, a)
	}
}

// factAddresses fills in an instance's addresses from its agent's facts.
func factAddresses(i *record.Instance, a record.Agent) {
	if len(i.Addresses) > 0 {
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
	if errors.Is(err, model.ErrNotFound) {
		return p, record.Distribution{}, nil, record.Refuse(model.ErrNotFound, "host %s: platform %s: environment %s has no platform so named (tether platform list shows them)", h.Name, h.Platform, h.Env)
	}
	if err != nil {
		return p, record.Distribution{}, nil, fmt.Errorf("host %s: platform: %w", h.Name, err)
	}
	d, err := r.svc.Store.GetDistribution(ctx, h.Env, h.Distribution)
	if errors.Is(err, model.ErrNotFound) {
		return p, d, nil, record.Refuse(model.ErrNotFound, "host %s: distribution %s: environment %s has no distribution so named (tether distribution list shows them)", h.Name, h.Distribution, h.Env)
	}
	if err != nil {
		return p, d, nil, fmt.Errorf("host %s: distribution: %w", h.Name, err)
	}
	if err := d.Fits(p); err != nil {
		return p, d, nil, record.Refuse(model.ErrInvalid, "host %s: %v", h.Name, err)
	}
	e, err := r.svc.Store.GetEnv(ctx, h.Env)
	if err != nil {
		return p, d, nil, err
	}
	apps, err := r.svc.Store.ListApplications(ctx, h.Env)
	if err != nil {
		return p, d, nil, err
	}
	cv, _, err := record.HostContext(e.Settings.MachineSettings, p, d, apps, h)
	if err != nil {
		return p, d, nil, record.Refuse(model.ErrInvalid, "%v", err)
	}
	return p, d, cv, nil
}

// settingsOf is a host's context as a map, name to value.
func settingsOf(cv []record.ContextValue) map[string]any {
	out := make(map[string]any, len(cv))
	for _, c := range cv {
		out[c.Name] = c.Value
	}
	return out
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
	if err := r.unused(ctx, env, "platform", name, func(h record.Host) bool { return h.Platform == name }); err != nil {
		return err
	}
	return r.svc.Store.DeletePlatform(ctx, env, name)
}

// unused refuses to delete a platform or distribution (what) a host uses,
// naming the host; the store refuses it too, should a host come
// meanwhile.
func (r *Room) unused(ctx context.Context, env, what, name string, uses func(record.Host) bool) error {
	hosts, err := r.hostsOn(ctx, env, uses)
	if err != nil {
		return err
	}
	switch len(hosts) {
	case 0:
		return nil
	case 1:
		return record.Refuse(model.ErrConflict, "%s %s: host %s uses it: delete the host first (tether host delete %s)", what, name, hosts[0].Name, hosts[0].Name)
	}
	return record.Refuse(model.ErrConflict, "%s %s: hosts %s and %d more use it: delete them first (tether host list shows them)", what, name, hosts[0].Name, len(hosts)-1)
}

// GetDistribution returns a distribution, its secrets hidden.
func (r *Room) GetDistribution(ctx context.Context, env, name string) (record.Distribution, error) {
	d, err := r.svc.Store.GetDistribution(ctx, env, name)
	return hideDistribution(d), err
}

// ListDistributions returns env's distributions, by name, their secrets
// hidden.
func (r *Room) ListDistributions(ctx context.Context, env string) ([]record.Distribution, error) {
	ds, err := r.svc.Store.ListDistributions(ctx, env)
	for i := range ds {
		ds[i] = hideDistribution(ds[i])
	}
	return ds, err
}

// DeleteDistribution deletes a distribution no host uses. One the
// environment's model declares is refused.
func (r *Room) DeleteDistribution(ctx context.Context, env, name string) error {
	if err := r.operatorMay(ctx, "distribution", env, name); err != nil {
		return err
	}
	if err := r.unused(ctx, env, "distribution", name, func(h record.Host) bool { return h.Distribution == name }); err != nil {
		return err
	}
	return r.svc.Store.DeleteDistribution(ctx, env, name)
}

// ListHosts returns env's hosts, by name, the settings their
// distribution says are secret hidden.
func (r *Room) ListHosts(ctx context.Context, env string) ([]record.Host, error) {
	hosts, err := r.svc.Store.ListHosts(ctx, env)
	if err != nil {
		return nil, err
	}
	ds, err := r.svc.Store.ListDistributions(ctx, env)
	if err != nil {
		return nil, err
	}
	secret := map[string]map[string]bool{}
	for _, d := range ds {
		secret[d.Name] = secretNames(d)
	}
	for i, h := range hosts {
		hosts[i].Settings = hideSettings(h.Settings, secret[h.Distribution])
	}
	return hosts, nil
}

// ListInstances returns env's instances, by ID, discovered ones too
// (Instances).
func (r *Room) ListInstances(ctx context.Context, env string) ([]record.Instance, error) {
	return r.Instances(ctx, env)
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
	byAgent := make(map[string]record.Agent, len(agents))
	for _, a := range agents {
		byAgent[a.Name] = a
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
		if a, ok := byAgent[out[i].Agent]; ok {
			factAddresses(&out[i], a)
		}
	}
	slices.SortFunc(out, func(a, b record.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
