package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// An agent serving a platform (Config.Platforms) carries out the server's
// machine commands through the platform's driver and reports what became
// of each, and the platform's machines every InventoryInterval: how the
// server makes machines behind NAT, and discovers hypervisors.

// Bounds of a machine command: a provision waits for the machine to
// start, not to boot; other operations for the stop's grace period and a
// margin.
const (
	provisionTimeout = 5 * time.Minute
	controlMargin    = 2 * time.Minute
)

// machineCommand runs a machine command in the background; its report
// goes through the outbox. The commands of one machine run one after the
// other, in the order they came (a stop, then a start, then a destroy);
// those of different machines at once.
func (a *Agent) machineCommand(ctx context.Context, m bus.Machine) {
	key := m.Host
	if key == "" {
		key = m.Machine
	}
	if key == "" {
		// Of no machine (an inventory): nothing to keep in order.
		a.machineOps.Add(1)
		go func() { defer a.machineOps.Done(); a.reportMachine(ctx, m) }()
		return
	}
	a.machineMu.Lock()
	if a.machineQueues == nil {
		a.machineQueues = map[string][]bus.Machine{}
	}
	queue := a.machineQueues[key]
	a.machineQueues[key] = append(queue, m)
	a.machineMu.Unlock()
	if len(queue) > 0 {
		return // the machine's runner takes it next
	}
	a.machineOps.Add(1)
	go func() {
		defer a.machineOps.Done()
		for {
			a.machineMu.Lock()
			q := a.machineQueues[key]
			if len(q) == 0 {
				delete(a.machineQueues, key)
				a.machineMu.Unlock()
				return
			}
			next := q[0]
			a.machineQueues[key] = q[1:]
			a.machineMu.Unlock()
			a.reportMachine(ctx, next)
		}
	}()
}

// reportMachine carries out m and journals its report.
func (a *Agent) reportMachine(ctx context.Context, m bus.Machine) {
	rep := a.runMachine(ctx, m)
	if rep.Error != "" {
		a.log.Warn().Str("op", string(m.Op)).Str("host", m.Host).Str("platform", m.Platform).Str("error", rep.Error).Msg("machine command failed")
	} else {
		a.log.Info().Str("op", string(m.Op)).Str("host", m.Host).Str("platform", m.Platform).Msg("machine command done")
	}
	if err := a.emit(a.journal.Begin(), bus.KindMachineReport, rep); err != nil {
		a.log.Error().Err(err).Str("op", string(m.Op)).Msg("cannot journal the report of a machine command")
	}
}

// runMachine carries out m and says what became of it.
func (a *Agent) runMachine(ctx context.Context, m bus.Machine) bus.MachineReport {
	rep := bus.MachineReport{OpID: m.OpID, Op: m.Op, Platform: m.Platform, Host: m.Host}
	if err := m.Validate(); err != nil {
		rep.Error = err.Error()
		return rep
	}
	d := a.platform(m.Driver)
	if d == nil {
		rep.Error = fmt.Sprintf("agent %s serves no %s platform: start it with --platform %s", a.cfg.Name, m.Driver, m.Driver)
		return rep
	}
	timeout := provisionTimeout
	if m.Op != model.MachineProvision {
		timeout = m.Grace + controlMargin
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch m.Op {
	case model.MachineProvision:
		is, err := d.Provision(ctx, *m.Spec)
		if err != nil {
			rep.Error = err.Error()
			return rep
		}
		rep.Instances = []model.InstanceState{is}
	case model.MachineDestroy:
		if err := d.Destroy(ctx, m.Machine); err != nil {
			rep.Error = err.Error()
		}
	case model.MachineInventory:
		state, all, err := d.Inventory(ctx)
		if err != nil {
			rep.Error = err.Error()
			return rep
		}
		rep.State, rep.Instances, rep.Full = &state, all, true
	default:
		is, err := d.Control(ctx, m.Machine, m.Op, m.Grace)
		if err != nil {
			rep.Error = err.Error()
		}
		if is.ID != "" {
			rep.Instances = []model.InstanceState{is}
		}
	}
	return rep
}

// platform returns the driver of the agent's platform of that driver.
func (a *Agent) platform(driver string) handler.MachineDriver {
	for _, d := range a.cfg.Platforms {
		if d.Driver() == driver {
			return d
		}
	}
	return nil
}

// reportPlatforms reports each platform's inventory once the agent is
// enrolled, then every InventoryInterval, until ctx ends.
func (a *Agent) reportPlatforms(ctx context.Context) {
	select {
	case <-a.enrolled:
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(a.cfg.InventoryInterval)
	defer t.Stop()
	for {
		for _, d := range a.cfg.Platforms {
			rep := a.runMachine(ctx, bus.Machine{OpID: "inventory", Op: model.MachineInventory, Driver: d.Driver()})
			rep.OpID = ""
			if rep.Error != "" {
				a.log.Warn().Str("driver", d.Driver()).Str("error", rep.Error).Msg("cannot take the platform's inventory")
				continue
			}
			if err := a.emit(a.journal.Begin(), bus.KindMachineReport, rep); err != nil {
				a.log.Error().Err(err).Msg("cannot journal the platform's inventory")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// closePlatforms closes the platforms' drivers.
func (a *Agent) closePlatforms() {
	for _, d := range a.cfg.Platforms {
		if err := d.Close(); err != nil {
			a.log.Warn().Err(err).Str("driver", d.Driver()).Msg("closing the platform's driver")
		}
	}
}
