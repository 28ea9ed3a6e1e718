package model

import (
	"fmt"
	"time"
)

// Machines made from blueprints, as the server and the agent that serves a
// platform speak of them: what to make (MachineSpec), what to do to a made
// one (MachineOp), and what a machine is like (InstanceState).

// MachineOp is what the server asks a platform's agent to do.
type MachineOp string

// Machine operations.
const (
	// MachineProvision makes the machine (its disk, its definition) and
	// starts it; on failure nothing made is left behind.
	MachineProvision MachineOp = "provision"
	MachineStart     MachineOp = "start"
	// MachineStop asks the guest to power off, then forces it off after
	// the grace period.
	MachineStop   MachineOp = "stop"
	MachineReboot MachineOp = "reboot"
	// MachineDestroy stops the machine and removes it with its disk.
	MachineDestroy MachineOp = "destroy"
	// MachineInventory reports the platform and every machine on it.
	MachineInventory MachineOp = "inventory"
)

// Valid reports whether op is a known operation.
func (op MachineOp) Valid() bool {
	switch op {
	case MachineProvision, MachineStart, MachineStop, MachineReboot, MachineDestroy, MachineInventory:
		return true
	}
	return false
}

// MachineSpec says what machine to make: the platform's settings (after
// the host's own), how it boots, and the template of its definition.
type MachineSpec struct {
	// Host is the blueprint's name; Name the machine's on the platform
	// (a libvirt domain's name).
	Host string `json:"host"`
	Name string `json:"name"`
	// Template overrides the driver's own template of the machine's
	// definition ("" keeps the driver's).
	Template string `json:"template,omitempty"`
	// Settings are the platform driver's settings, defaults and the
	// host's overrides applied (memory_mib, cpus, disk_gib, pool…).
	Settings map[string]any `json:"settings"`
	Boot     MachineBoot    `json:"boot"`
	// Files are written for the machine to fetch (a PXE tree: paths
	// relative to the platform's root), already rendered.
	Files map[string]string `json:"files,omitempty"`
	// Seed holds the files of the machine's cloud-init NoCloud seed, by
	// name (user-data; meta-data, network-config), already rendered: the
	// driver gives the machine a read-only disk labelled cidata holding
	// them, and writes a meta-data naming the machine when there is none.
	Seed map[string]string `json:"seed,omitempty"`
}

// MachineBoot says how a machine boots: a kernel and an initrd (netboot,
// or the network when Network is set), or a gold image its disk is made
// from.
type MachineBoot struct {
	Kernel  string `json:"kernel,omitempty"`
	Initrd  string `json:"initrd,omitempty"`
	Cmdline string `json:"cmdline,omitempty"`
	Image   string `json:"image,omitempty"`
	// Network: the machine boots from the network (PXE).
	Network bool `json:"network,omitempty"`
}

// Validate checks the spec's own fields.
func (s MachineSpec) Validate() error {
	if err := ValidateAgentName(s.Host); err != nil {
		return fmt.Errorf("machine: host: %w", err)
	}
	if err := ValidateAgentName(s.Name); err != nil {
		return fmt.Errorf("machine %s: name: %w", s.Host, err)
	}
	b := s.Boot
	switch {
	case b.Image != "" && (b.Kernel != "" || b.Initrd != "" || b.Network):
		return fmt.Errorf("machine %s: boot: an image boots on its own: no kernel, initrd or network boot with it", s.Host)
	case b.Image == "" && !b.Network && (b.Kernel == "" || b.Initrd == ""):
		return fmt.Errorf("machine %s: boot: want a kernel and an initrd, an image, or a network boot", s.Host)
	}
	return nil
}

// InstanceState is a machine as its platform's driver sees it.
type InstanceState struct {
	// ID is the driver's ID of the machine (a libvirt domain's UUID).
	ID   string `json:"id"`
	Name string `json:"name"`
	// Host is the blueprint the machine was made from, as the driver
	// recorded it on the machine ("" for one made otherwise).
	Host     string     `json:"host,omitempty"`
	Power    string     `json:"power"`
	BootedAt *time.Time `json:"booted_at,omitempty"`
	// Addresses the driver knows (a guest agent's, a DHCP lease's).
	Addresses []string       `json:"addresses,omitempty"`
	Hardware  map[string]any `json:"hardware,omitempty"`
}

// PlatformState is the platform an agent serves, as its driver sees it:
// what hypervisor discovery reports.
type PlatformState struct {
	Driver   string `json:"driver"`
	URI      string `json:"uri"`
	Hostname string `json:"hostname,omitempty"`
	Version  string `json:"version,omitempty"`
	// CPUs and MemoryMiB are the hypervisor's.
	CPUs      int   `json:"cpus,omitempty"`
	MemoryMiB int64 `json:"memory_mib,omitempty"`
}
