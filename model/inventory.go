package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Inventory is what is known of an environment's agents: their names, the
// labels their operators gave them and the facts they reported. The compiler
// evaluates hostgroups and host.facts against it. Its JSON form is
//
//	{"agents": [{"name": "web-7", "labels": {"role": "web"}, "facts": {"ipv4": "10.0.0.7"}}]}
type Inventory struct {
	Agents []InventoryAgent `json:"agents"`
}

// InventoryAgent is one agent of an inventory.
type InventoryAgent struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// Facts are the facts the agent reported, as JSON values. A fact the
	// agent has not reported is absent (not null): the compiler treats it as
	// unknown.
	Facts map[string]any `json:"facts,omitempty"`
}

// ErrInvalidInventory is wrapped by every error ParseInventory returns.
var ErrInvalidInventory = errors.New("invalid inventory")

// MaxInventorySize bounds an inventory document (64 MiB: 100,000 agents with
// a few hundred bytes of facts each).
const MaxInventorySize = 64 << 20

// ParseInventory reads and checks an inventory document: valid agent names,
// no agent twice, label names that are identifiers. Besides the inventory
// form it reads a list of agents as `tether agent list -o json` prints it
// (a JSON array of agents with name, state, labels and facts among other
// fields); the agents whose state is not accepted are left out, as from the
// server's live inventory.
func ParseInventory(r io.Reader) (*Inventory, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxInventorySize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInventory, err)
	}
	if len(b) > MaxInventorySize {
		return nil, fmt.Errorf("%w: larger than %d MiB", ErrInvalidInventory, MaxInventorySize>>20)
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		return parseAgentList(b)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	var inv Inventory
	if err := dec.Decode(&inv); err != nil {
		return nil, fmt.Errorf("%w: %w (want {\"agents\": [{\"name\": …, \"labels\": {…}, \"facts\": {…}}]})", ErrInvalidInventory, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidInventory)
	}
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	return &inv, nil
}

// parseAgentList reads a JSON array of agents, ignoring the fields an
// inventory does not hold.
func parseAgentList(b []byte) (*Inventory, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var list []struct {
		Name   string            `json:"name"`
		State  string            `json:"state"`
		Labels map[string]string `json:"labels"`
		Facts  map[string]any    `json:"facts"`
	}
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("%w: %w (want the output of tether agent list -o json, or {\"agents\": [{\"name\": …, \"labels\": {…}, \"facts\": {…}}]})", ErrInvalidInventory, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON array", ErrInvalidInventory)
	}
	inv := Inventory{Agents: []InventoryAgent{}}
	for _, a := range list {
		if a.State == "" || a.State == "accepted" {
			inv.Agents = append(inv.Agents, InventoryAgent{Name: a.Name, Labels: a.Labels, Facts: a.Facts})
		}
	}
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	return &inv, nil
}

// Validate checks agent names, duplicates and label names.
func (inv *Inventory) Validate() error {
	seen := make(map[string]bool, len(inv.Agents))
	for i, a := range inv.Agents {
		if err := ValidateAgentName(a.Name); err != nil {
			return fmt.Errorf("%w: agents[%d]: %w", ErrInvalidInventory, i, err)
		}
		if seen[a.Name] {
			return fmt.Errorf("%w: agent %q is listed twice", ErrInvalidInventory, a.Name)
		}
		seen[a.Name] = true
		// An agent's labels are as agents may announce them (one the
		// model could not read would fail every compile of its
		// environment): a key that is no identifier is read as
		// host.labels["tether.role"].
		if err := ValidateLabels(a.Labels); err != nil {
			return fmt.Errorf("%w: agent %q: %w", ErrInvalidInventory, a.Name, err)
		}
		for k := range a.Facts {
			if k == "" || strings.ContainsAny(k, "\x00") {
				return fmt.Errorf("%w: agent %q: empty or invalid fact name %q", ErrInvalidInventory, a.Name, k)
			}
		}
	}
	return nil
}
