package handler

import (
	"context"
	"time"

	"github.com/tetherhq/tether/model"
)

// MachineDriver makes and controls machines on a platform (a libvirt
// hypervisor, a PXE tree): the driver of a platform the agent serves.
// Every method is safe to call again with the same arguments: a machine
// already made is not made twice, one already stopped is reported
// stopped.
type MachineDriver interface {
	// Driver names the driver ("libvirt").
	Driver() string
	// Provision makes the machine spec describes and starts it. On an
	// error nothing it made is left behind (disk, definition, files).
	Provision(ctx context.Context, spec model.MachineSpec) (model.InstanceState, error)
	// Control starts, stops (gracefully, then forced after grace) or
	// reboots the machine named by its ID or name.
	Control(ctx context.Context, machine string, op model.MachineOp, grace time.Duration) (model.InstanceState, error)
	// Destroy stops the machine and removes it with its disk and files;
	// a machine that is not there is destroyed already.
	Destroy(ctx context.Context, machine string) error
	// Inventory reports the platform and every machine on it.
	Inventory(ctx context.Context) (model.PlatformState, []model.InstanceState, error)
	// Close releases the driver's connection.
	Close() error
}
