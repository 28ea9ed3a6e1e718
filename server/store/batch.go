package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/tetherhq/tether/model"
)

// CheckBatch validates a result batch before any of it is written: every
// result names a valid resource of the batch's agent and a known state.
func CheckBatch(b *ResultBatch) error {
	if err := model.ValidateEnvName(b.Env); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for i := range b.Results {
		r := &b.Results[i]
		if err := r.ID.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !r.State.Valid() {
			return fmt.Errorf("%w: %s: state %q", ErrInvalid, r.ID, r.State)
		}
		if r.ID.Agent != b.Agent {
			return fmt.Errorf("%w: agent %s reported %s, which is not its resource", ErrInvalid, b.Agent, r.ID)
		}
	}
	for i := range b.Alerts {
		a := &b.Alerts[i]
		if a.Env != b.Env || a.Agent != b.Agent || (a.ID != nil && a.ID.Agent != b.Agent) {
			return fmt.Errorf("%w: agent %s of %s sent an alert about another agent or environment", ErrInvalid, b.Agent, b.Env)
		}
		if err := CheckAlert(a); err != nil {
			return err
		}
	}
	return nil
}

// CheckAlert refuses an alert that could not be stored or read back.
func CheckAlert(a *model.Alert) error {
	if a.Kind != model.AlertDrift && a.Kind != model.AlertSecurity {
		return fmt.Errorf("%w: alert kind %q", ErrInvalid, a.Kind)
	}
	if a.ID != nil {
		if err := a.ID.Validate(); err != nil {
			return fmt.Errorf("%w: alert: %w", ErrInvalid, err)
		}
	}
	if a.Compliance != "" && !a.Compliance.Valid() {
		return fmt.Errorf("%w: alert: compliance %q", ErrInvalid, a.Compliance)
	}
	return nil
}

// SetsCompliance reports whether an alert sets its resource's compliance:
// a drift alert naming a resource, a version and a compliance.
func SetsCompliance(a *model.Alert) bool {
	return a.Kind == model.AlertDrift && a.ID != nil && a.Version > 0 && a.Compliance != ""
}

// Verified is the compliance a successful dry run of a resource found.
func Verified(r *model.Result) model.Compliance {
	if len(r.Changes) > 0 {
		return model.NonCompliant
	}
	return model.Compliant
}

// Logged reports whether a result deserves an action-log entry: it changed
// something, found something to change, or did not succeed.
func Logged(r *model.Result) bool {
	return len(r.Changes) > 0 || r.State != model.StateDeployed
}

// ActionKindOf is the action-log kind of a result.
func ActionKindOf(r *model.Result) model.ActionKind {
	if r.DryRun {
		return model.ActionDryRun
	}
	return model.ActionDeploy
}

// AppliedHash is the desired-state hash a result says it was applied at,
// as a column value: nil when the result does not say (it then matches no
// status row's hash).
func AppliedHash(r *model.Result) []byte {
	if r.Hash.IsZero() {
		return nil
	}
	return r.Hash[:]
}

// EncodeChanges is a result's changes as stored in the action log (nil when
// there are none).
func EncodeChanges(r *model.Result) ([]byte, error) {
	if len(r.Changes) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(r.Changes)
	if err != nil {
		return nil, fmt.Errorf("%w: changes of %s: %w", ErrInvalid, r.ID, err)
	}
	return b, nil
}

// SortHashes sorts resource hashes by ID.
func SortHashes(hs []ResourceHash) {
	slices.SortFunc(hs, func(a, b ResourceHash) int { return a.ID.Compare(b.ID) })
}

// DecodeAlert fills an alert's resource ID and changes from their stored form.
func DecodeAlert(a *model.Alert, id string, changes []byte) error {
	if id != "" {
		parsed, err := model.ParseID(id)
		if err != nil {
			return fmt.Errorf("%w: alert %d: %w", ErrCorrupt, a.Seq, err)
		}
		a.ID = &parsed
	}
	if len(changes) > 0 {
		if err := model.DecodeJSON(changes, &a.Changes); err != nil {
			return fmt.Errorf("%w: alert %d: %w", ErrCorrupt, a.Seq, err)
		}
	}
	return nil
}

// DecodeAction fills an action's resource ID and changes from their stored form.
func DecodeAction(a *model.Action, id string, changes []byte) error {
	parsed, err := model.ParseID(id)
	if err != nil {
		return fmt.Errorf("%w: action %d: %w", ErrCorrupt, a.Seq, err)
	}
	a.ID = parsed
	if len(changes) > 0 {
		if err := model.DecodeJSON(changes, &a.Changes); err != nil {
			return fmt.Errorf("%w: action %d: %w", ErrCorrupt, a.Seq, err)
		}
	}
	return nil
}

// Bodies gathers stored resource bodies and decodes them at once, as one
// JSON array: one decoder and one buffer for a whole set instead of one per
// resource.
type Bodies struct {
	buf bytes.Buffer
	n   int
}

// Add appends one stored body.
func (b *Bodies) Add(body []byte) {
	if b.n == 0 {
		b.buf.WriteByte('[')
	} else {
		b.buf.WriteByte(',')
	}
	b.buf.Write(body)
	b.n++
}

// Resources decodes the bodies added, sorted by ID.
func (b *Bodies) Resources() ([]model.Resource, error) {
	out := make([]model.Resource, 0, b.n)
	if b.n == 0 {
		return out, nil
	}
	b.buf.WriteByte(']')
	if err := model.DecodeJSON(b.buf.Bytes(), &out); err != nil {
		return nil, fmt.Errorf("%w: resource bodies: %w", ErrCorrupt, err)
	}
	model.SortResources(out)
	return out, nil
}

// EncodeAgent returns an agent's labels, facts and kinds as stored (JSON,
// never null).
func EncodeAgent(a *model.Agent) (labels, facts, kinds []byte, err error) {
	labels, _ = json.Marshal(orEmpty(a.Labels))
	if facts, err = json.Marshal(orEmpty(a.Facts)); err != nil {
		return nil, nil, nil, fmt.Errorf("agent %s: facts: %w: %w", a.Name, ErrInvalid, err)
	}
	if a.Kinds == nil {
		kinds = []byte("[]")
	} else {
		kinds, _ = json.Marshal(a.Kinds)
	}
	return labels, facts, kinds, nil
}

// DecodeAgent fills an agent's labels, facts and kinds from their stored form.
func DecodeAgent(a *model.Agent, labels, facts, kinds []byte) error {
	if err := json.Unmarshal(labels, &a.Labels); err != nil {
		return fmt.Errorf("%w: labels of agent %s: %w", ErrCorrupt, a.Name, err)
	}
	if err := model.DecodeJSON(facts, &a.Facts); err != nil {
		return fmt.Errorf("%w: facts of agent %s: %w", ErrCorrupt, a.Name, err)
	}
	if err := json.Unmarshal(kinds, &a.Kinds); err != nil {
		return fmt.Errorf("%w: kinds of agent %s: %w", ErrCorrupt, a.Name, err)
	}
	return nil
}

func orEmpty[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}
