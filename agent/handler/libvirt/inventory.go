package libvirt

import (
	"context"
	"fmt"
	"strings"

	lv "github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"
	"libvirt.org/go/libvirtxml"

	"github.com/tetherhq/tether/model"
)

// Power states, as the server records them.
const (
	powerRunning = "running"
	powerStopped = "stopped"
	powerPaused  = "paused"
	powerCrashed = "crashed"
	powerUnknown = "unknown"
)

func power(state lv.DomainState) string {
	switch state {
	// A domain shutting down still runs.
	case lv.DomainRunning, lv.DomainBlocked, lv.DomainShutdown:
		return powerRunning
	case lv.DomainPaused, lv.DomainPmsuspended:
		return powerPaused
	case lv.DomainShutoff:
		return powerStopped
	case lv.DomainCrashed:
		return powerCrashed
	}
	return powerUnknown
}

// Inventory reports the hypervisor and every domain on it, running or
// not.
func (d *Driver) Inventory(ctx context.Context) (model.PlatformState, []model.InstanceState, error) {
	p := model.PlatformState{Driver: d.Driver(), URI: d.uri}
	var doms []lv.Domain
	err := d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		var err error
		if p.Hostname, err = l.ConnectGetHostname(); err != nil {
			return fmt.Errorf("hostname: %w", err)
		}
		v, err := l.ConnectGetLibVersion()
		if err != nil {
			return fmt.Errorf("version: %w", err)
		}
		p.Version = fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
		_, memKiB, cpus, _, _, _, _, _, err := l.NodeGetInfo()
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		p.CPUs, p.MemoryMiB = int(cpus), int64(memKiB/1024)
		doms, _, err = l.ConnectListAllDomains(1, lv.ConnectListDomainsActive|lv.ConnectListDomainsInactive)
		if err != nil {
			return fmt.Errorf("domains: %w", err)
		}
		return nil
	})
	if err != nil {
		return p, nil, fmt.Errorf("inventory of %s: %w", d.uri, err)
	}
	out := make([]model.InstanceState, 0, len(doms))
	for _, dom := range doms {
		st, _, err := d.describe(ctx, dom)
		if isCode(err, lv.ErrNoDomain) {
			continue // gone since listed
		}
		if err != nil {
			return p, nil, fmt.Errorf("inventory of %s: %w", d.uri, err)
		}
		out = append(out, st)
	}
	return p, out, nil
}

// find looks the machine up by its UUID, or else its name.
func (d *Driver) find(ctx context.Context, machine string) (dom lv.Domain, found bool, err error) {
	err = d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		if id, perr := uuid.Parse(machine); perr == nil {
			dom, err = l.DomainLookupByUUID(lv.UUID(id))
			if err == nil || !isCode(err, lv.ErrNoDomain) {
				found = err == nil
				return err
			}
		}
		dom, err = l.DomainLookupByName(machine)
		if isCode(err, lv.ErrNoDomain) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return dom, false, fmt.Errorf("look up machine %s on %s: %w", machine, d.uri, err)
	}
	return dom, found, nil
}

// describe reads a domain's state, with the driver's metadata on it (nil
// for a domain made otherwise).
func (d *Driver) describe(ctx context.Context, dom lv.Domain) (model.InstanceState, *machineMeta, error) {
	st := model.InstanceState{ID: uuid.UUID(dom.UUID).String(), Name: dom.Name, Power: powerUnknown}
	var meta *machineMeta
	err := d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		state, _, err := l.DomainGetState(dom, 0)
		if err != nil {
			return err
		}
		st.Power = power(lv.DomainState(state))
		doc, err := l.DomainGetXMLDesc(dom, 0)
		if err != nil {
			return err
		}
		var def libvirtxml.Domain
		if err := def.Unmarshal(doc); err != nil {
			return fmt.Errorf("domain XML: %w", err)
		}
		if def.Metadata != nil {
			if meta, err = readMeta(def.Metadata.XML); err != nil {
				return err
			}
		}
		hw := map[string]any{}
		if def.Memory != nil {
			hw["memory_mib"] = int64(toBytes(def.Memory.Value, def.Memory.Unit) >> 20)
		}
		if def.VCPU != nil {
			hw["cpus"] = int(def.VCPU.Value)
		}
		if meta != nil {
			st.Host = meta.Host
			if st.Power == powerRunning || st.Power == powerPaused {
				st.BootedAt = meta.bootedAt()
			}
			if meta.Volume != nil {
				if size, ok := volumeCapacity(l, *meta.Volume); ok {
					hw["disk_gib"] = int64(size >> 30)
				}
			}
		}
		st.Hardware = hw
		return nil
	})
	if err != nil {
		return st, nil, fmt.Errorf("machine %s: %w", dom.Name, err)
	}
	return st, meta, nil
}

// volumeCapacity is the capacity of a volume the driver made, in bytes;
// false if it is not there (any more).
func volumeCapacity(l *lv.Libvirt, v metaVolume) (uint64, bool) {
	pool, err := l.StoragePoolLookupByName(v.Pool)
	if err != nil {
		return 0, false
	}
	vol, err := l.StorageVolLookupByName(pool, v.Name)
	if err != nil {
		return 0, false
	}
	_, capacity, _, err := l.StorageVolGetInfo(vol)
	return capacity, err == nil
}

// toBytes reads a libvirt size (its default unit is KiB).
func toBytes(v uint, unit string) uint64 {
	n := uint64(v)
	switch strings.ToLower(unit) {
	case "b", "bytes":
		return n
	case "kb":
		return n * 1000
	case "mb":
		return n * 1000 * 1000
	case "gb":
		return n * 1000 * 1000 * 1000
	case "m", "mib":
		return n << 20
	case "g", "gib":
		return n << 30
	case "t", "tib":
		return n << 40
	}
	return n << 10 // "", k, KiB
}
