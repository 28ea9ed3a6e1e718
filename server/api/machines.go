package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Machines made from blueprints: platforms (where machines are made),
// distributions (what is installed on them), hosts (the blueprint of one
// machine, with where its provisioning stands) and instances (the
// machines themselves). The server's machines room answers them.

// Platforms keeps the environments' platforms.
type Platforms interface {
	PutPlatform(ctx context.Context, p record.Platform) (record.Platform, error)
	GetPlatform(ctx context.Context, env, name string) (record.Platform, error)
	ListPlatforms(ctx context.Context, env string) ([]record.Platform, error)
	DeletePlatform(ctx context.Context, env, name string) error
	// Inventory asks the agent serving a platform what it holds; its
	// answer updates the instances.
	Inventory(ctx context.Context, env, platform string) error
}

// Distributions keeps the environments' distributions, their secrets
// shown hidden.
type Distributions interface {
	PutDistribution(ctx context.Context, d record.Distribution) (record.Distribution, error)
	GetDistribution(ctx context.Context, env, name string) (record.Distribution, error)
	ListDistributions(ctx context.Context, env string) ([]record.Distribution, error)
	DeleteDistribution(ctx context.Context, env, name string) error
}

// Hosts keeps the environments' hosts: blueprints checked against their
// platform and distribution.
type Hosts interface {
	AddHost(ctx context.Context, h record.Host) (record.Host, error)
	// UpdateHost replaces an existing host's blueprint; a host with a
	// machine keeps its platform and distribution.
	UpdateHost(ctx context.Context, h record.Host) (record.Host, error)
	ShowHost(ctx context.Context, env, name string) (record.HostView, error)
	ListHosts(ctx context.Context, env string) ([]record.Host, error)
	DeleteHost(ctx context.Context, env, name string) error
}

// HostControls makes, destroys and controls hosts' machines through the
// agents serving their platforms: each answers once the agent was told,
// with the host as it is then. by is who asked, for the audit log.
type HostControls interface {
	Provision(ctx context.Context, env, name, by string) (record.Host, error)
	Destroy(ctx context.Context, env, name, by string) (record.Host, error)
	Control(ctx context.Context, env, name string, op model.MachineOp, by string) (record.Host, error)
	// Adopt makes a defined host of an accepted agent's name
	// provisioned with that agent's machine (a discovered instance).
	Adopt(ctx context.Context, env, agent, host, by string) (record.Host, error)
}

// Instances reads the machines the platforms' agents reported, and those
// of accepted agents no host claims (discovered instances, agent:NAME).
type Instances interface {
	ListInstances(ctx context.Context, env string) ([]record.Instance, error)
	GetInstance(ctx context.Context, env, id string) (record.Instance, error)
}

// Machines is the server's side of machines made from blueprints.
type Machines interface {
	Platforms
	Distributions
	Hosts
	HostControls
	Instances
}

// PlatformRequest creates or replaces a platform.
type PlatformRequest struct {
	// Driver makes the platform's machines: libvirt or pxe.
	Driver string `json:"driver"`
	// Agent is the agent that serves the platform (on the hypervisor's
	// host): the server sends it the platform's machine commands.
	Agent string `json:"agent"`
	// Settings are the driver's settings; those left out take their
	// defaults.
	Settings map[string]any `json:"settings,omitempty"`
	// Templates replace the driver's own, by name (libvirt: domain).
	Templates map[string]string `json:"templates,omitempty"`
}

// DistributionRequest creates or replaces a distribution.
type DistributionRequest struct {
	Kind          string            `json:"kind"`
	Kernel        string            `json:"kernel,omitempty"`
	Initrd        string            `json:"initrd,omitempty"`
	Cmdline       string            `json:"cmdline,omitempty"`
	InstallFormat string            `json:"install_format,omitempty"`
	Install       string            `json:"install,omitempty"`
	Images        map[string]string `json:"images,omitempty"`
	Params        []record.Param    `json:"params,omitempty"`
	Settings      map[string]any    `json:"settings,omitempty"`
}

// HostRequest adds a host.
type HostRequest struct {
	Name         string            `json:"name"`
	Platform     string            `json:"platform"`
	Distribution string            `json:"distribution"`
	Applications []string          `json:"applications,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Settings     map[string]any    `json:"settings,omitempty"`
}

// HostUpdate replaces an existing host's blueprint, whole: what it
// leaves out is gone (no applications, no labels, no settings of its
// own).
type HostUpdate struct {
	// Platform and Distribution stay what they are for a host with a
	// machine: a change of either is refused until it is destroyed.
	Platform     string            `json:"platform"`
	Distribution string            `json:"distribution"`
	Applications []string          `json:"applications,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	// Settings sent as "(secret)" (as the host is shown) keep the
	// secret value they had.
	Settings map[string]any `json:"settings,omitempty"`
}

// Path parameters of the machines' routes.
var (
	pPlatform     = param{name: "name", typ: of[string](), desc: "the platform's name"}
	pDistribution = param{name: "name", typ: of[string](), desc: "the distribution's name"}
	pHost         = param{name: "name", typ: of[string](), desc: "the host's name (its machine's agent's)"}
	pInstance     = param{name: "id", typ: of[string](), desc: "the instance's ID: its driver's (a libvirt domain's UUID), or agent:NAME"}
)

// machineRoutes are the routes of machines made from blueprints: reads
// for viewers, changes and controls for operators.
func (a *API) machineRoutes() []route {
	platform, dist, host := []param{pPlatform}, []param{pDistribution}, []param{pHost}
	control := func(op model.MachineOp, summary string) route {
		return route{method: "POST", path: "/envs/:env/hosts/:name/" + string(op), role: record.RoleOperator, action: "host." + string(op), summary: summary,
			pathParams: host, out: of[record.Host](), ok: []int{http.StatusAccepted}, serve: a.hostControl(op)}
	}
	return []route{
		{method: "GET", path: "/envs/:env/platforms", role: record.RoleViewer, summary: "List the environment's platforms: where machines are made (a driver, its settings, the agent that serves it)", out: of[[]record.Platform](), serve: a.listPlatforms},
		{method: "GET", path: "/envs/:env/platforms/:name", role: record.RoleViewer, summary: "Show a platform", pathParams: platform, out: of[record.Platform](), serve: a.getPlatform},
		{method: "PUT", path: "/envs/:env/platforms/:name", role: record.RoleOperator, action: "platform.put", summary: "Create or replace a platform: its driver known, its settings of their types (defaults filled in), its templates using only the driver's variables", pathParams: platform, in: of[PlatformRequest](), out: of[record.Platform](), serve: a.putPlatform},
		{method: "DELETE", path: "/envs/:env/platforms/:name", role: record.RoleOperator, action: "platform.delete", summary: "Delete a platform no host uses", pathParams: platform, serve: a.deletePlatform},
		{method: "POST", path: "/envs/:env/platforms/:name/inventory", role: record.RoleOperator, action: "platform.inventory", summary: "Ask the agent serving a platform what machines it holds; the instances are updated when it answers (202, the platform)", pathParams: platform, out: of[record.Platform](), ok: []int{http.StatusAccepted}, serve: a.platformInventory},

		{method: "GET", path: "/envs/:env/distributions", role: record.RoleViewer, summary: "List the environment's distributions: what is installed on machines (secret settings hidden)", out: of[[]record.Distribution](), serve: a.listDistributions},
		{method: "GET", path: "/envs/:env/distributions/:name", role: record.RoleViewer, summary: "Show a distribution (secret settings hidden)", pathParams: dist, out: of[record.Distribution](), serve: a.getDistribution},
		{method: "PUT", path: "/envs/:env/distributions/:name", role: record.RoleOperator, action: "distribution.put", summary: "Create or replace a distribution: netboot (kernel, initrd, an install template) or image (one per platform), with typed parameters; a secret sent as \"(secret)\" keeps its value", pathParams: dist, in: of[DistributionRequest](), out: of[record.Distribution](), serve: a.putDistribution},
		{method: "DELETE", path: "/envs/:env/distributions/:name", role: record.RoleOperator, action: "distribution.delete", summary: "Delete a distribution no host uses", pathParams: dist, serve: a.deleteDistribution},

		{method: "GET", path: "/envs/:env/hosts", role: record.RoleViewer, summary: "List the environment's hosts with where their provisioning stands (defined, provisioning, provisioned, failed, deprovisioning)", out: of[[]record.Host](), serve: a.listHosts},
		{method: "POST", path: "/envs/:env/hosts", role: record.RoleOperator, action: "host.create", summary: "Add a host, defined: its platform and distribution exist and fit, its settings are theirs or a host's, of their types", in: of[HostRequest](), out: of[record.Host](), ok: []int{http.StatusCreated}, serve: a.addHost},
		{method: "GET", path: "/envs/:env/hosts/:name", role: record.RoleViewer, summary: "Show a host with its context (each setting's value and where it came from, secrets hidden) and its instance", pathParams: host, out: of[record.HostView](), serve: a.showHost},
		{method: "PUT", path: "/envs/:env/hosts/:name", role: record.RoleOperator, action: "host.update", summary: "Replace an existing host's blueprint, checked as a new host's is; a host with a machine (provisioning, provisioned, deprovisioning) keeps its platform and distribution until its machine is destroyed, and its next machine is made with its new applications, labels and settings; a secret sent as \"(secret)\" keeps its value. Refused for a host the environment's model declares", pathParams: host, in: of[HostUpdate](), out: of[record.Host](), serve: a.updateHost},
		{method: "DELETE", path: "/envs/:env/hosts/:name", role: record.RoleOperator, action: "host.delete", summary: "Delete a host that has no machine (defined, or failed)", pathParams: host, serve: a.deleteHost},
		{method: "POST", path: "/envs/:env/hosts/:name/provision", role: record.RoleOperator, action: "host.provision", summary: "Make a defined or failed host's machine: the agent serving its platform is sent the machine to make, with a one-time enrollment token bound to the host; the host is provisioned when the machine's agent enrolls (202, the host provisioning). Refused while the environment is halted", pathParams: host, out: of[record.Host](), ok: []int{http.StatusAccepted}, serve: a.hostControl(model.MachineProvision)},
		{method: "POST", path: "/envs/:env/hosts/:name/destroy", role: record.RoleOperator, action: "host.destroy", summary: "Destroy a host's machine and its disk; the host is defined again once the platform's agent says it is gone (202, the host deprovisioning). Refused while the environment is halted", pathParams: host, out: of[record.Host](), ok: []int{http.StatusAccepted}, serve: a.hostControl(model.MachineDestroy)},
		control(model.MachineStart, "Start a host's machine (202; its instance's power changes when the platform's agent reports). Refused while the environment is halted"),
		control(model.MachineStop, "Stop a host's machine: the guest is asked to power off, then forced off after the server's grace period (202). Refused while the environment is halted"),
		control(model.MachineReboot, "Reboot a host's machine (202). Refused while the environment is halted"),
		{method: "POST", path: "/envs/:env/hosts/:name/adopt", role: record.RoleOperator, action: "host.adopt", summary: "Adopt the machine of the accepted agent of the host's name, which no host claims (a discovered instance), into the defined host: it is provisioned with that machine as its instance. Refused while the environment is halted", pathParams: host, out: of[record.Host](), serve: a.adoptHost},

		{method: "GET", path: "/envs/:env/instances", role: record.RoleViewer, summary: "List the environment's instances: the machines the platforms' agents reported, with their power state, addresses and host", out: of[[]record.Instance](), serve: a.listInstances},
		{method: "GET", path: "/envs/:env/instances/:id", role: record.RoleViewer, summary: "Show an instance", pathParams: []param{pInstance}, out: of[record.Instance](), serve: a.getInstance},
	}
}

func (a *API) machines() (Machines, error) {
	return present(a.svc.Machines, newError("conflict", "", "this server makes no machines"))
}

// machineOf reads the :env and :name parameters of a machine route, and
// the server's machines.
func (in *input) machineOf() (env, name string, m Machines) {
	env = in.env()
	name = in.r.Param("name")
	return env, name, take(in, in.r.api.machines)
}

func (a *API) listPlatforms(r *request) (int, any, error) {
	return envListing(r, a.svc.Machines, Machines.ListPlatforms)
}

func (a *API) getPlatform(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	return answer(in, func() (record.Platform, error) { return m.GetPlatform(r.ctx(), env, name) })
}

func (a *API) putPlatform(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	var req PlatformRequest
	in.body(&req)
	if in.err != nil {
		return 0, nil, in.err
	}
	p, err := m.PutPlatform(r.ctx(), record.Platform{Env: env, Name: name, Driver: req.Driver, Agent: req.Agent,
		Settings: plainSettings(req.Settings), Templates: req.Templates})
	if err != nil {
		return 0, nil, err
	}
	r.detail = fmt.Sprintf("driver %s, served by agent %s", p.Driver, p.Agent)
	return http.StatusOK, p, nil
}

func (a *API) deletePlatform(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	return removed(in, func() error { return m.DeletePlatform(r.ctx(), env, name) })
}

func (a *API) platformInventory(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	if in.err != nil {
		return 0, nil, in.err
	}
	p, err := m.GetPlatform(r.ctx(), env, name)
	if err != nil {
		return 0, nil, err
	}
	if err := m.Inventory(r.ctx(), env, name); err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, p, nil
}

func (a *API) listDistributions(r *request) (int, any, error) {
	return envListing(r, a.svc.Machines, Machines.ListDistributions)
}

func (a *API) getDistribution(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	return answer(in, func() (record.Distribution, error) { return m.GetDistribution(r.ctx(), env, name) })
}

func (a *API) putDistribution(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	var req DistributionRequest
	in.body(&req)
	if in.err != nil {
		return 0, nil, in.err
	}
	for i := range req.Params {
		req.Params[i].Default = plain(req.Params[i].Default)
	}
	d, err := m.PutDistribution(r.ctx(), record.Distribution{Env: env, Name: name, Kind: req.Kind, Kernel: req.Kernel, Initrd: req.Initrd,
		Cmdline: req.Cmdline, InstallFormat: req.InstallFormat, Install: req.Install, Images: req.Images, Params: req.Params,
		Settings: plainSettings(req.Settings)})
	if err != nil {
		return 0, nil, err
	}
	r.detail = "kind " + d.Kind
	return http.StatusOK, d, nil
}

func (a *API) deleteDistribution(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	return removed(in, func() error { return m.DeleteDistribution(r.ctx(), env, name) })
}

func (a *API) listHosts(r *request) (int, any, error) {
	return envListing(r, a.svc.Machines, Machines.ListHosts)
}

func (a *API) addHost(r *request) (int, any, error) {
	in := r.input()
	env := in.existingEnv()
	m := take(in, a.machines)
	var req HostRequest
	in.body(&req)
	if in.err != nil {
		return 0, nil, in.err
	}
	if req.Name == "" {
		return 0, nil, newError("invalid", "", "name is required: the host's name, which its machine's agent takes")
	}
	// The host names the target of the change, and of a refusal.
	r.naming("env", env, "name", req.Name)
	h, err := m.AddHost(r.ctx(), record.Host{Env: env, Name: req.Name, Platform: req.Platform, Distribution: req.Distribution,
		Applications: req.Applications, Labels: req.Labels, Settings: plainSettings(req.Settings)})
	if err != nil {
		return 0, nil, err
	}
	r.detail = hostDetail(h)
	return http.StatusCreated, h, nil
}

func (a *API) updateHost(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	var req HostUpdate
	in.body(&req)
	if in.err != nil {
		return 0, nil, in.err
	}
	h, err := m.UpdateHost(r.ctx(), record.Host{Env: env, Name: name, Platform: req.Platform, Distribution: req.Distribution,
		Applications: req.Applications, Labels: req.Labels, Settings: plainSettings(req.Settings)})
	if err != nil {
		return 0, nil, err
	}
	r.detail = hostDetail(h)
	return http.StatusOK, h, nil
}

// hostDetail says what a host is made of, for the audit log.
func hostDetail(h record.Host) string {
	s := fmt.Sprintf("platform %s, distribution %s", h.Platform, h.Distribution)
	if len(h.Applications) > 0 {
		s += ", applications " + strings.Join(h.Applications, ",")
	}
	return s
}

func (a *API) showHost(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	return answer(in, func() (record.HostView, error) { return m.ShowHost(r.ctx(), env, name) })
}

func (a *API) deleteHost(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	return removed(in, func() error { return m.DeleteHost(r.ctx(), env, name) })
}

// hostControl serves the route of op on a host: provision, destroy, or a
// control of its machine.
func (a *API) hostControl(op model.MachineOp) func(r *request) (int, any, error) {
	return func(r *request) (int, any, error) {
		in := r.input()
		env, name, m := in.machineOf()
		if in.err != nil {
			return 0, nil, in.err
		}
		by := r.who.Actor()
		var h record.Host
		var err error
		switch op {
		case model.MachineProvision:
			h, err = m.Provision(r.ctx(), env, name, by)
		case model.MachineDestroy:
			h, err = m.Destroy(r.ctx(), env, name, by)
		default:
			h, err = m.Control(r.ctx(), env, name, op, by)
		}
		if err != nil {
			return 0, nil, err
		}
		r.detail = "now " + string(h.State)
		return http.StatusAccepted, h, nil
	}
}

func (a *API) adoptHost(r *request) (int, any, error) {
	in := r.input()
	env, name, m := in.machineOf()
	if in.err != nil {
		return 0, nil, in.err
	}
	h, err := m.Adopt(r.ctx(), env, name, name, r.who.Actor())
	if err != nil {
		return 0, nil, err
	}
	r.detail = "now " + string(h.State)
	return http.StatusOK, h, nil
}

func (a *API) listInstances(r *request) (int, any, error) {
	return envListing(r, a.svc.Machines, Machines.ListInstances)
}

func (a *API) getInstance(r *request) (int, any, error) {
	in := r.input()
	env := in.existingEnv()
	m := take(in, a.machines)
	id := r.Param("id")
	return answer(in, func() (record.Instance, error) { return m.GetInstance(r.ctx(), env, id) })
}

// plainSettings makes the numbers of settings decoded from a request
// (json.Number) Go's: an int64 when whole, else a float64, so that the
// machines' checks see a number where one was sent.
func plainSettings(settings map[string]any) map[string]any {
	for k, v := range settings {
		settings[k] = plain(v)
	}
	return settings
}

// plain is plainSettings for one value, lists and objects included.
func plain(v any) any {
	switch v := v.(type) {
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		f, _ := v.Float64()
		return f
	case []any:
		for i := range v {
			v[i] = plain(v[i])
		}
	case map[string]any:
		return plainSettings(v)
	}
	return v
}
