package bus

import (
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
)

// Machine asks the agent serving a platform to act on a machine.
type Machine struct {
	// OpID names the operation; the report answering it carries it.
	OpID     string          `json:"op_id"`
	Op       model.MachineOp `json:"op"`
	Platform string          `json:"platform"`
	// Driver and URI say which of the agent's platforms acts.
	Driver string `json:"driver"`
	URI    string `json:"uri,omitempty"`
	// Host is the blueprint acted for; Machine the machine's ID or name
	// on the platform (every operation but provision and inventory).
	Host    string `json:"host,omitempty"`
	Machine string `json:"machine,omitempty"`
	// Spec is what provision makes.
	Spec *model.MachineSpec `json:"spec,omitempty"`
	// Grace is how long a stop waits for the guest before forcing it
	// off.
	Grace time.Duration `json:"grace,omitempty"`
}

// Validate checks what an agent acts on before it acts.
func (m Machine) Validate() error {
	if m.OpID == "" || !m.Op.Valid() {
		return fmt.Errorf("machine command: op_id and a known op are required (got op %q)", m.Op)
	}
	switch m.Op {
	case model.MachineProvision:
		if m.Spec == nil {
			return fmt.Errorf("machine command %s: provision needs a spec", m.OpID)
		}
		return m.Spec.Validate()
	case model.MachineInventory:
		return nil
	}
	if m.Machine == "" {
		return fmt.Errorf("machine command %s: %s needs the machine", m.OpID, m.Op)
	}
	return nil
}

// MachineReport tells the server what became of a machine command, or
// (OpID "") what the agent's platform holds now.
type MachineReport struct {
	OpID     string          `json:"op_id,omitempty"`
	Op       model.MachineOp `json:"op,omitempty"`
	Platform string          `json:"platform,omitempty"`
	Host     string          `json:"host,omitempty"`
	// Error says why the operation failed ("" when it did not).
	Error string `json:"error,omitempty"`
	// State is the platform, for an inventory.
	State *model.PlatformState `json:"state,omitempty"`
	// Instances are the machines the operation touched, or every machine
	// on the platform when Full.
	Instances []model.InstanceState `json:"instances,omitempty"`
	Full      bool                  `json:"full,omitempty"`
}
