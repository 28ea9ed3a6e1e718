package machines

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
)

// Report takes a machine report of agent a: what became of a command, or
// its platform's inventory. An agent speaks only for the platforms it
// serves and of their hosts: anything else is refused (model.ErrInvalid:
// the ingest drops the event and says so).
func (r *Room) Report(ctx context.Context, a record.Agent, rep bus.MachineReport) error {
	by := "agent " + a.Name
	if op, ok := r.answered(rep.OpID); ok && op.by != "" {
		by = op.by + " (reported by agent " + a.Name + ")"
	}
	p, err := r.platformOf(ctx, a, rep)
	if err != nil {
		return err
	}
	if rep.Op == model.MachineInventory || rep.Full {
		return r.inventory(ctx, a, p, rep)
	}
	if rep.Host == "" {
		return fmt.Errorf("%w: machine report of %s without a host", model.ErrInvalid, rep.Op)
	}
	h, err := r.svc.Store.GetHost(ctx, a.Env, rep.Host)
	if err != nil {
		return fmt.Errorf("machine report for host %s: %w", rep.Host, err)
	}
	if h.Platform != p.Name {
		return fmt.Errorf("%w: agent %s reported on host %s, which is on platform %s, not %s", model.ErrInvalid, a.Name, h.Name, h.Platform, p.Name)
	}
	switch rep.Op {
	case model.MachineProvision:
		return r.provisioned(ctx, a, p, h, rep, by)
	case model.MachineDestroy:
		return r.destroyed(ctx, h, rep, by)
	default:
		return r.controlled(ctx, a, p, h, rep)
	}
}

// platformOf finds the platform a report speaks for: the one it names,
// which a must serve, or (an inventory of its own) one a serves with the
// report's driver, registered as discovered when there is none.
func (r *Room) platformOf(ctx context.Context, a record.Agent, rep bus.MachineReport) (record.Platform, error) {
	if rep.Platform != "" {
		p, err := r.svc.Store.GetPlatform(ctx, a.Env, rep.Platform)
		if err != nil {
			return p, fmt.Errorf("machine report: platform %s: %w", rep.Platform, err)
		}
		if p.Agent != a.Name {
			return p, fmt.Errorf("%w: agent %s reported for platform %s, which agent %s serves", model.ErrInvalid, a.Name, p.Name, p.Agent)
		}
		return p, nil
	}
	if rep.State == nil {
		return record.Platform{}, fmt.Errorf("%w: machine report names no platform and carries no inventory", model.ErrInvalid)
	}
	all, err := r.svc.Store.ListPlatforms(ctx, a.Env)
	if err != nil {
		return record.Platform{}, err
	}
	for _, p := range all {
		if p.Agent == a.Name && p.Driver == rep.State.Driver {
			return p, nil
		}
	}
	// Hypervisor discovery: the agent's platform, registered on its word.
	p := record.Platform{Env: a.Env, Name: a.Name + "-" + rep.State.Driver, Driver: rep.State.Driver, Agent: a.Name, Discovered: true,
		Settings: map[string]any{}}
	if rep.State.URI != "" && rep.State.Driver == record.DriverLibvirt {
		p.Settings["uri"] = model.Clip(rep.State.URI, 1024)
	}
	p, err = r.svc.Store.PutPlatform(ctx, p)
	if err != nil {
		return p, fmt.Errorf("register the platform agent %s reported: %w", a.Name, err)
	}
	r.audit(ctx, "agent "+a.Name, "platform.discovered", a.Env, p.Name, fmt.Sprintf("%s at %s", rep.State.Driver, rep.State.URI))
	r.svc.Log.Info().Str("env", a.Env).Str("platform", p.Name).Str("agent", a.Name).Msg("platform discovered")
	return p, nil
}

// provisioned takes the driver's answer to a provision: the host fails
// with the driver's reason, or its machine is recorded and the host waits
// for the machine's agent.
func (r *Room) provisioned(ctx context.Context, a record.Agent, p record.Platform, h record.Host, rep bus.MachineReport, by string) error {
	if rep.Error != "" {
		r.dropTokens(ctx, h.Env, h.Name)
		_, err := r.move(ctx, h.Env, h.Name, record.HostProvisioning, record.HostFail, "platform "+p.Name+": "+model.Clip(rep.Error, 2000), "", by)
		return ignoreMoved(err)
	}
	for _, is := range rep.Instances {
		if _, err := r.putInstance(ctx, a, p, is, h.Name); err != nil {
			return err
		}
		if h.State == record.HostProvisioned && h.Instance == "" {
			// Its agent enrolled before this report came.
			if _, err := r.svc.Store.LinkHostInstance(ctx, h.Env, h.Name, is.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// destroyed takes the driver's answer to a destroy: the host goes back to
// defined (or stays failed, for a machine destroyed after a failure), its
// instance and its machine's agent are forgotten.
func (r *Room) destroyed(ctx context.Context, h record.Host, rep bus.MachineReport, by string) error {
	if rep.Error != "" {
		if h.State != record.HostDeprovisioning {
			r.svc.Log.Warn().Str("env", h.Env).Str("host", h.Name).Str("error", rep.Error).Msg("the machine of a failed host could not be destroyed; destroy it: tether host destroy")
			return nil
		}
		_, err := r.move(ctx, h.Env, h.Name, record.HostDeprovisioning, record.HostFail, "destroy: "+model.Clip(rep.Error, 2000), "", by)
		return ignoreMoved(err)
	}
	if inst, ok, err := r.instanceOf(ctx, h.Env, h.Name); err != nil {
		return err
	} else if ok {
		if err := r.svc.Store.DeleteInstance(ctx, h.Env, inst.ID); err != nil && !errors.Is(err, model.ErrNotFound) {
			return err
		}
	}
	if r.svc.ForgetAgent != nil {
		if err := r.svc.ForgetAgent(ctx, h.Env, h.Name); err != nil && !errors.Is(err, model.ErrNotFound) {
			r.svc.Log.Warn().Err(err).Str("env", h.Env).Str("agent", h.Name).Msg("cannot forget the destroyed machine's agent: delete it (tether agent delete)")
		}
	}
	if h.State == record.HostDeprovisioning {
		_, err := r.move(ctx, h.Env, h.Name, record.HostDeprovisioning, record.HostDestroyed, "", "", by)
		return ignoreMoved(err)
	}
	return nil
}

// controlled takes the driver's answer to a start, stop or reboot.
func (r *Room) controlled(ctx context.Context, a record.Agent, p record.Platform, h record.Host, rep bus.MachineReport) error {
	for _, is := range rep.Instances {
		inst, err := r.putInstance(ctx, a, p, is, h.Name)
		if err != nil {
			return err
		}
		r.svc.Feed.Publish(event.Event{Kind: event.InstanceChanged, Env: h.Env, Agent: h.Name, Instance: &inst, Error: rep.Error})
	}
	if rep.Error != "" {
		r.svc.Feed.Publish(event.Event{Kind: event.InstanceChanged, Env: h.Env, Agent: h.Name, Error: fmt.Sprintf("%s: %s", rep.Op, model.Clip(rep.Error, 2000))})
		r.svc.Log.Warn().Str("env", h.Env).Str("host", h.Name).Str("op", string(rep.Op)).Str("error", rep.Error).Msg("machine control failed")
	}
	r.audit(ctx, "agent "+a.Name, "instance."+string(rep.Op), h.Env, h.Name, errOr(rep.Error, "done"))
	return nil
}

// inventory records what a platform holds: every machine on it, each
// bound to the host its driver recorded when that host is on a platform
// the agent serves with this driver (one hypervisor may be several
// platforms: the one discovered, those operators made); machines gone
// from it are forgotten (or, a host's, marked unknown).
func (r *Room) inventory(ctx context.Context, a record.Agent, p record.Platform, rep bus.MachineReport) error {
	all, err := r.svc.Store.ListPlatforms(ctx, a.Env)
	if err != nil {
		return err
	}
	// The agent's platforms of this driver, and of its others (one
	// hypervisor serving libvirt and pxe platforms reports its machines
	// in both inventories: each is recorded under one).
	served, others := map[string]record.Platform{}, map[string]bool{}
	for _, q := range all {
		switch {
		case q.Agent == a.Name && q.Driver == p.Driver:
			served[q.Name] = q
		case q.Agent == a.Name:
			others[q.Name] = true
		}
	}
	seen := map[string]bool{}
	for _, is := range rep.Instances {
		on, host := p, ""
		if is.Host != "" {
			if h, err := r.svc.Store.GetHost(ctx, a.Env, is.Host); err == nil && is.Name == machineName(a.Env, h.Name) {
				if q, ok := served[h.Platform]; ok {
					on, host = q, h.Name
				} else if others[h.Platform] {
					continue
				}
			}
		}
		if was, err := r.svc.Store.GetInstance(ctx, a.Env, is.ID); host == "" && err == nil && others[was.Platform] {
			continue
		}
		if _, err := r.putInstance(ctx, a, on, is, host); err != nil {
			r.svc.Log.Warn().Err(err).Str("env", a.Env).Str("platform", on.Name).Str("machine", is.Name).Msg("machine of an inventory not recorded")
			continue
		}
		seen[is.ID] = true
	}
	if !rep.Full {
		return nil
	}
	instances, err := r.svc.Store.ListInstances(ctx, a.Env)
	if err != nil {
		return err
	}
	for _, i := range instances {
		if _, ok := served[i.Platform]; !ok || seen[i.ID] {
			continue
		}
		if i.Host == "" {
			if err := r.svc.Store.DeleteInstance(ctx, a.Env, i.ID); err != nil && !errors.Is(err, model.ErrNotFound) {
				return err
			}
			continue
		}
		if i.Power != record.PowerUnknown {
			i.Power = record.PowerUnknown
			if _, err := r.svc.Store.PutInstance(ctx, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// putInstance records a machine as the driver sees it.
func (r *Room) putInstance(ctx context.Context, a record.Agent, p record.Platform, is model.InstanceState, host string) (record.Instance, error) {
	inst := record.Instance{Env: a.Env, ID: is.ID, Platform: p.Name, Host: host, Power: record.PowerState(is.Power), BootedAt: is.BootedAt,
		Addresses: is.Addresses, Hardware: is.Hardware}
	if was, err := r.svc.Store.GetInstance(ctx, a.Env, is.ID); err == nil {
		inst.Agent, inst.Labels = was.Agent, was.Labels
	}
	if host != "" {
		if h, err := r.svc.Store.GetHost(ctx, a.Env, host); err == nil && h.State == record.HostProvisioned {
			inst.Agent = host
		}
	}
	return r.svc.Store.PutInstance(ctx, inst)
}

// Enrolled is told that agent enrolled with tok, a token bound to a host:
// the host's machine called home. The host becomes provisioned and its
// instance is linked to the agent; the host's applications reach the
// agent as any accepted agent's do.
func (r *Room) Enrolled(ctx context.Context, env, agent string, tok record.EnrollmentToken) error {
	h, err := r.svc.Store.GetHost(ctx, env, tok.Host)
	if err != nil {
		return err
	}
	if h.State != record.HostProvisioning {
		r.audit(ctx, "agent "+agent, "host.enrolled", env, h.Name, fmt.Sprintf("enrolled with the host's token while the host is %s: nothing moved", h.State))
		return nil
	}
	inst, ok, err := r.instanceOf(ctx, env, h.Name)
	if err != nil {
		return err
	}
	h, err = r.move(ctx, env, h.Name, record.HostProvisioning, record.HostEnrolled, "", inst.ID, "agent "+agent)
	if err != nil {
		return ignoreMoved(err)
	}
	r.dropTokens(ctx, env, h.Name)
	if ok {
		inst.Agent = agent
		if inst, err = r.svc.Store.PutInstance(ctx, inst); err != nil {
			return err
		}
		r.svc.Feed.Publish(event.Event{Kind: event.InstanceChanged, Env: env, Agent: h.Name, Instance: &inst})
	}
	return nil
}

// ignoreMoved drops the conflict of a host that moved meanwhile (another
// report, an operator): the move no longer applies.
func ignoreMoved(err error) error {
	if errors.Is(err, model.ErrConflict) {
		return nil
	}
	return err
}

func errOr(s, or string) string {
	if s != "" {
		return s
	}
	return or
}
