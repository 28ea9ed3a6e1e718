package machines

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// Provision makes a defined (or failed) host's machine: its templates
// rendered with its context and a fresh one-time enrollment token bound to
// it, the host moved to provisioning, and the machine command sent to the
// agent serving its platform. The host becomes provisioned when the
// machine's agent enrolls with the token (Enrolled), failed when the
// driver says it failed or the agent does not enroll in time. Anything
// wrong with the blueprint is refused before the host moves.
func (r *Room) Provision(ctx context.Context, env, name, by string) (record.Host, error) {
	if err := r.notHalted(ctx, env); err != nil {
		return record.Host{}, err
	}
	h, err := r.svc.Store.GetHost(ctx, env, name)
	if err != nil {
		return h, err
	}
	if _, err := h.State.Move(record.HostProvision); err != nil {
		return h, err
	}
	p, d, cv, err := r.blueprint(ctx, h)
	if err != nil {
		return h, err
	}
	settings, err := r.openSettings(ctx, cv, settingsOf(cv))
	if err != nil {
		return h, err
	}
	// Rendered once with a stand-in token: a template that does not
	// render refuses the provisioning before anything is made.
	if _, _, err := renderInstall(d, installData(env, "token", h, settings)); err != nil {
		return h, record.Refuse(model.ErrInvalid, "host %s: %v", name, err)
	}
	timeout := r.timeout(settings)
	token, err := r.newToken(ctx, h, by, timeout)
	if err != nil {
		return h, err
	}
	cmdline, install, err := renderInstall(d, installData(env, token, h, settings))
	if err != nil {
		r.dropTokens(ctx, env, name)
		return h, record.Refuse(model.ErrInvalid, "host %s: %v", name, err)
	}
	spec := model.MachineSpec{Host: name, Name: machineName(env, name), Template: p.Templates["domain"], Settings: settings}
	switch d.Kind {
	case record.DistImage:
		spec.Boot = model.MachineBoot{Image: d.Images[p.Name]}
	default:
		spec.Boot = model.MachineBoot{Kernel: d.Kernel, Initrd: d.Initrd, Cmdline: cmdline}
	}
	spec.Files = map[string]string{}
	switch {
	case install == "":
	case d.InstallFormat == record.InstallCloudInit && p.Driver == record.DriverLibvirt:
		// A libvirt machine gets its user-data as cloud-init looks for
		// it everywhere: a NoCloud seed, a cdrom labelled cidata, which
		// the driver makes with a meta-data naming the machine.
		spec.Seed = map[string]string{"user-data": install}
	default:
		spec.Files[installFile[d.InstallFormat]] = install
	}
	if p.Driver == record.DriverPXE {
		script, err := bootScript(p, spec, settings)
		if err != nil {
			return h, fmt.Errorf("%w: %w", model.ErrInvalid, err)
		}
		spec.Boot.Network, spec.Files["boot.ipxe"] = true, script
	}
	if err := spec.Validate(); err != nil {
		r.dropTokens(ctx, env, name)
		return h, record.Refuse(model.ErrInvalid, "host %s: %v", name, err)
	}
	h, err = r.move(ctx, env, name, h.State, record.HostProvision, "", "", by)
	if err != nil {
		r.dropTokens(ctx, env, name)
		return h, err
	}
	if err := r.send(ctx, p, name, by, bus.Machine{OpID: uuid.NewString(), Op: model.MachineProvision, Host: name, Spec: &spec}, timeout); err != nil {
		r.dropTokens(ctx, env, name)
		if failed, ferr := r.move(ctx, env, name, record.HostProvisioning, record.HostFail, err.Error(), "", "server"); ferr == nil {
			h = failed
		}
		return h, err
	}
	return h, nil
}

// bootScript renders a PXE platform's iPXE script for a machine.
func bootScript(p record.Platform, spec model.MachineSpec, settings map[string]any) (string, error) {
	text := p.Templates["ipxe"]
	if text == "" {
		text = defaultIPXE
	}
	data := map[string]any{"Cmdline": spec.Boot.Cmdline, "Host": spec.Host, "Name": spec.Name,
		"Kernel": path.Base(spec.Boot.Kernel), "Initrd": path.Base(spec.Boot.Initrd), "ServerAddress": settings["server_address"]}
	return render(fmt.Sprintf("platform %s: templates.ipxe", p.Name), text, data, templateFields["ipxe"])
}

// controlWait is how long a control waits in the inbox of a platform's
// agent that is away, past its grace period, before it expires.
const controlWait = 5 * time.Minute

// installFile is where a machine's install template is written in its
// boot files, by format (a libvirt machine's cloud-init user-data goes on
// its seed instead).
var installFile = map[string]string{
	record.InstallCloudInit: "user-data",
	record.InstallPreseed:   "preseed.cfg",
	record.InstallKickstart: "ks.cfg",
}

// timeout is a host's provisioning timeout.
func (r *Room) timeout(settings map[string]any) time.Duration {
	if s, ok := settings["provision_timeout"].(int64); ok && s > 0 {
		return time.Duration(s) * time.Second
	}
	return r.cfg.ProvisionTimeout
}

// newToken makes the host's one-time enrollment token, valid until its
// provisioning times out; the host's earlier ones are revoked.
func (r *Room) newToken(ctx context.Context, h record.Host, by string, valid time.Duration) (string, error) {
	r.dropTokens(ctx, h.Env, h.Name)
	var key []byte
	if r.svc.ServerKey != nil {
		key = r.svc.ServerKey()
	}
	secret, err := model.NewEnrollmentToken(key)
	if err != nil {
		return "", err
	}
	expires := r.svc.Now().Add(valid).UTC()
	t := record.EnrollmentToken{ID: uuid.NewString(), Env: h.Env, Name: "host " + h.Name, Hash: record.HashSecret(secret), MaxUses: 1,
		CreatedBy: by, CreatedAt: r.svc.Now().UTC(), ExpiresAt: &expires, Host: h.Name}
	if err := r.svc.Store.CreateEnrollToken(ctx, t); err != nil {
		return "", err
	}
	return secret, nil
}

// dropTokens revokes the tokens bound to a host; a failure is logged (they
// expire anyway).
func (r *Room) dropTokens(ctx context.Context, env, host string) {
	toks, err := r.svc.Store.ListEnrollTokens(ctx, env)
	if err == nil {
		for _, t := range toks {
			if t.Host == host {
				if derr := r.svc.Store.DeleteEnrollToken(ctx, env, t.ID); derr != nil && !errors.Is(derr, model.ErrNotFound) {
					err = derr
				}
			}
		}
	}
	if err != nil {
		r.svc.Log.Warn().Err(err).Str("env", env).Str("host", host).Msg("cannot revoke the host's enrollment tokens; they expire on their own")
	}
}

// Destroy destroys a host's machine (and its disk): the host moves to
// deprovisioning, then to defined once the platform's agent says the
// machine is gone; the machine's agent is forgotten, so the host's next
// machine enrolls afresh.
func (r *Room) Destroy(ctx context.Context, env, name, by string) (record.Host, error) {
	if err := r.notHalted(ctx, env); err != nil {
		return record.Host{}, err
	}
	h, err := r.svc.Store.GetHost(ctx, env, name)
	if err != nil {
		return h, err
	}
	if _, err := h.State.Move(record.HostDestroy); err != nil {
		return h, err
	}
	p, err := r.svc.Store.GetPlatform(ctx, env, h.Platform)
	if err != nil {
		return h, err
	}
	if strings.HasPrefix(h.Instance, "agent:") {
		// An adopted machine: its platform did not make it and does not
		// destroy it. The host lets it go; its agent stays.
		return r.disown(ctx, h, by)
	}
	h, err = r.move(ctx, env, name, h.State, record.HostDestroy, "", "", by)
	if err != nil {
		return h, err
	}
	r.dropTokens(ctx, env, name)
	if err := r.send(ctx, p, name, by, bus.Machine{OpID: uuid.NewString(), Op: model.MachineDestroy, Host: name, Machine: machineName(env, name)}, 0); err != nil {
		if failed, ferr := r.move(ctx, env, name, record.HostDeprovisioning, record.HostFail, err.Error(), "", "server"); ferr == nil {
			h = failed
		}
		return h, err
	}
	return h, nil
}

// disown lets an adopted machine go: the host is defined again, the
// machine and its agent are left as they are.
func (r *Room) disown(ctx context.Context, h record.Host, by string) (record.Host, error) {
	h, err := r.move(ctx, h.Env, h.Name, h.State, record.HostDestroy, "", "", by)
	if err != nil {
		return h, err
	}
	if err := r.svc.Store.DeleteInstance(ctx, h.Env, "agent:"+h.Name); err != nil && !errors.Is(err, model.ErrNotFound) {
		return h, err
	}
	return r.move(ctx, h.Env, h.Name, record.HostDeprovisioning, record.HostDestroyed, "an adopted machine: let go, not destroyed", "", by)
}

// Control starts, stops (gracefully, then forced after the grace period)
// or reboots a host's machine. It returns once the platform's agent was
// told; the instance's power state changes when it reports.
func (r *Room) Control(ctx context.Context, env, name string, op model.MachineOp, by string) (record.Host, error) {
	switch op {
	case model.MachineStart, model.MachineStop, model.MachineReboot:
	default:
		return record.Host{}, record.Refuse(model.ErrInvalid, "%q is not a control: want start, stop or reboot (destroy and provision are their own)", op)
	}
	if err := r.notHalted(ctx, env); err != nil {
		return record.Host{}, err
	}
	h, err := r.svc.Store.GetHost(ctx, env, name)
	if err != nil {
		return h, err
	}
	if h.State != record.HostProvisioned && h.State != record.HostProvisioning {
		return h, record.Refuse(model.ErrConflict, "host %s is %s: it has no machine to %s (provision it: tether host provision %s)", name, h.State, op, name)
	}
	p, err := r.svc.Store.GetPlatform(ctx, env, h.Platform)
	if err != nil {
		return h, err
	}
	if err := r.send(ctx, p, name, by, bus.Machine{OpID: uuid.NewString(), Op: op, Host: name, Machine: machineName(env, name), Grace: r.cfg.StopGrace}, r.cfg.StopGrace+controlWait); err != nil {
		return h, err
	}
	r.svc.Log.Info().Str("env", env).Str("host", name).Str("op", string(op)).Str("by", by).Msg("machine control sent")
	return h, nil
}

// Inventory asks the agent serving a platform for what it holds.
func (r *Room) Inventory(ctx context.Context, env, platform string) error {
	p, err := r.svc.Store.GetPlatform(ctx, env, platform)
	if err != nil {
		return err
	}
	return r.send(ctx, p, "", "", bus.Machine{OpID: uuid.NewString(), Op: model.MachineInventory}, controlWait)
}

// sweep fails the hosts whose machine did not enroll within their
// timeout, and destroys their machine; and fails those whose destroy the
// platform's agent did not answer in as long.
func (r *Room) sweep(ctx context.Context) error {
	envs, err := r.svc.Store.ListEnvs(ctx)
	if err != nil {
		return err
	}
	now := r.svc.Now()
	for _, e := range envs {
		hosts, err := r.hostsOn(ctx, e.Name, func(h record.Host) bool {
			return h.State == record.HostProvisioning || h.State == record.HostDeprovisioning
		})
		if err != nil {
			return err
		}
		for _, h := range hosts {
			p, _, cv, err := r.blueprint(ctx, h)
			timeout := r.cfg.ProvisionTimeout
			if err == nil {
				timeout = r.timeout(settingsOf(cv))
			}
			if now.Sub(h.StateSince) < timeout {
				continue
			}
			r.timedOut(ctx, h, p, timeout)
		}
	}
	return nil
}

// timedOut fails a host past its timeout; a machine left provisioning is
// destroyed (the host stays failed, saying why).
func (r *Room) timedOut(ctx context.Context, h record.Host, p record.Platform, timeout time.Duration) {
	why := fmt.Sprintf("the machine's agent did not enroll within %s: its machine is destroyed (see its serial console on the platform's host; tether host provision %s tries again)", timeout, h.Name)
	if h.State == record.HostDeprovisioning {
		why = fmt.Sprintf("the agent serving platform %s did not say the machine was destroyed within %s: check it (tether agent show %s) and destroy again", p.Name, timeout, p.Agent)
	}
	if _, err := r.move(ctx, h.Env, h.Name, h.State, record.HostFail, why, "", "server"); err != nil {
		if !errors.Is(err, model.ErrConflict) {
			r.svc.Log.Warn().Err(err).Str("env", h.Env).Str("host", h.Name).Msg("cannot fail a host past its timeout")
		}
		return
	}
	r.dropTokens(ctx, h.Env, h.Name)
	if h.State == record.HostProvisioning && p.Name != "" {
		if err := r.send(ctx, p, h.Name, "server", bus.Machine{OpID: uuid.NewString(), Op: model.MachineDestroy, Host: h.Name, Machine: machineName(h.Env, h.Name)}, 0); err != nil {
			r.svc.Log.Warn().Err(err).Str("env", h.Env).Str("host", h.Name).Msg("cannot destroy the machine of a host that timed out; destroy it: tether host destroy")
		}
	}
}
