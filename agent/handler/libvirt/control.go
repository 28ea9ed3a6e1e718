package libvirt

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"time"

	lv "github.com/digitalocean/go-libvirt"

	"github.com/tetherhq/tether/model"
)

// DefaultGrace is how long a stop waits for the guest to power off before
// forcing it off, when Control is given no grace.
const DefaultGrace = 2 * time.Minute

// pollInterval is how often a stop looks whether the guest is off.
const pollInterval = 250 * time.Millisecond

// Control starts, stops or reboots the machine named by its ID (the
// domain's UUID) or its name. A stop asks the guest to power off (ACPI)
// and forces it off when it has not after grace (DefaultGrace if grace is
// not positive); a reboot is a stop, then a start, so the machine boots
// anew. A start records the time in the domain's metadata: the machine's
// BootedAt.
func (d *Driver) Control(ctx context.Context, machine string, op model.MachineOp, grace time.Duration) (model.InstanceState, error) {
	switch op {
	case model.MachineStart, model.MachineStop, model.MachineReboot:
	default:
		return model.InstanceState{}, fmt.Errorf("%s %s: want start, stop or reboot (provision, destroy and inventory have methods of their own)", op, machine)
	}
	if grace <= 0 {
		grace = DefaultGrace
	}
	dom, found, err := d.find(ctx, machine)
	if err != nil {
		return model.InstanceState{}, fmt.Errorf("%s: %w", op, err)
	}
	if !found {
		return model.InstanceState{}, fmt.Errorf("%s %s: %w on %s", op, machine, ErrNotFound, d.uri)
	}
	switch op {
	case model.MachineStart:
		err = d.start(ctx, dom)
	case model.MachineStop:
		err = d.stop(ctx, dom, grace)
	case model.MachineReboot:
		if err = d.stop(ctx, dom, grace); err == nil {
			err = d.start(ctx, dom)
		}
	}
	if err != nil {
		return model.InstanceState{}, fmt.Errorf("%s %s: %w", op, dom.Name, err)
	}
	st, _, err := d.describe(ctx, dom)
	if err != nil {
		return st, fmt.Errorf("%s: %w", op, err)
	}
	return st, nil
}

// start starts the domain unless it runs (a paused one is resumed, a
// crashed one destroyed first) and records when.
func (d *Driver) start(ctx context.Context, dom lv.Domain) error {
	return d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		state, _, err := l.DomainGetState(dom, 0)
		if err != nil {
			return err
		}
		switch lv.DomainState(state) {
		case lv.DomainRunning, lv.DomainBlocked, lv.DomainShutdown:
			return nil
		case lv.DomainPaused, lv.DomainPmsuspended:
			return l.DomainResume(dom)
		case lv.DomainCrashed:
			if err := l.DomainDestroyFlags(dom, lv.DomainDestroyDefault); err != nil && !isCode(err, lv.ErrOperationInvalid) {
				return err
			}
		}
		if err := l.DomainCreate(dom); err != nil {
			return err
		}
		bootedAt := time.Now().UTC()
		meta, err := domainMeta(l, dom)
		if err != nil {
			return err
		}
		if meta == nil {
			meta = &machineMeta{}
		}
		meta.BootedAt = bootedAt.Format(time.RFC3339Nano)
		return writeMeta(l, dom, meta)
	})
}

// stop asks the guest to power off, waits for it up to grace, then
// forces it off.
func (d *Driver) stop(ctx context.Context, dom lv.Domain, grace time.Duration) error {
	off := func() (bool, error) {
		var state int32
		err := d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
			var err error
			state, _, err = l.DomainGetState(dom, 0)
			return err
		})
		return lv.DomainState(state) == lv.DomainShutoff, err
	}
	if isOff, err := off(); err != nil || isOff {
		return err
	}
	err := d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		return l.DomainShutdownFlags(dom, lv.DomainShutdownAcpiPowerBtn)
	})
	var refused lv.Error
	switch {
	case errors.As(err, &refused):
		// The domain stopped meanwhile, or has no ACPI: nothing to wait for.
		grace = 0
	case err != nil:
		return fmt.Errorf("shutdown: %w", err)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			err := d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
				return l.DomainDestroyFlags(dom, lv.DomainDestroyDefault)
			})
			if err != nil && !isCode(err, lv.ErrOperationInvalid) {
				return fmt.Errorf("force off after %s: %w", grace, err)
			}
			return nil
		case <-tick.C:
			if isOff, err := off(); err != nil || isOff {
				return err
			}
		}
	}
}

// Destroy forces the machine off and removes its definition, with the
// disk, seed and files the driver made for it. A machine that is not
// there is destroyed already.
func (d *Driver) Destroy(ctx context.Context, machine string) error {
	dom, found, err := d.find(ctx, machine)
	if err != nil || !found {
		return err
	}
	var meta *machineMeta
	err = d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		var err error
		if meta, err = domainMeta(l, dom); err != nil {
			return err
		}
		if err := l.DomainDestroyFlags(dom, lv.DomainDestroyDefault); err != nil && !isCode(err, lv.ErrOperationInvalid) && !isCode(err, lv.ErrNoDomain) {
			return fmt.Errorf("force off: %w", err)
		}
		if err := undefine(l, dom); err != nil {
			return fmt.Errorf("undefine: %w", err)
		}
		return nil
	})
	if isCode(err, lv.ErrNoDomain) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy %s: %w", dom.Name, err)
	}
	if meta == nil {
		return nil
	}
	errs := d.deleteVolumes(ctx, meta.Volume, meta.Seed)
	errs = append(errs, removeFiles(meta.TFTPRoot, meta.Files, dom.Name)...)
	if err := removeSerialLog(meta.SerialLog, dom.Name); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy %s: %w", dom.Name, err)
	}
	return nil
}

// domainMeta reads the driver's metadata of a domain (nil if none), from
// the running domain if it runs.
func domainMeta(l *lv.Libvirt, dom lv.Domain) (*machineMeta, error) {
	doc, err := l.DomainGetMetadata(dom, int32(lv.DomainMetadataElement), lv.OptString{MetadataNS}, lv.DomainAffectCurrent)
	if isCode(err, lv.ErrNoDomainMetadata) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// libvirt gives the element without its namespace.
	var m machineMeta
	if err := xml.Unmarshal([]byte(doc), &m); err != nil {
		return nil, fmt.Errorf("domain metadata: %s: %w", MetadataNS, err)
	}
	return &m, nil
}
