package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
)

// Environment is a named deployment target (prod, staging, local) with its
// own versions, agents and settings.
type Environment struct {
	Name string `json:"name"`
	// Org is the organization the environment belongs to ("" read as
	// the default one).
	Org       string      `json:"org,omitempty"`
	Settings  EnvSettings `json:"settings"`
	CreatedAt time.Time   `json:"created_at"`
}

// Incarnation names this environment apart from one of the same name
// deleted before or created after it: agents keep their generations per
// incarnation, so a re-created environment's versions, numbered from 1
// again, are not taken for old ones.
func (e Environment) Incarnation() string {
	sum := sha256.Sum256([]byte(e.Name + "\x00" + e.CreatedAt.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano)))
	return hex.EncodeToString(sum[:12])
}

// EnvSettings tune how the server schedules an environment. Keys and values
// as operators write them are listed by SettingKeys and set with Set.
type EnvSettings struct {
	// AutoDeploy: a release, or an agent coming online behind, deploys
	// without an operator asking. The embedded mode turns it off and asks.
	AutoDeploy bool `json:"auto_deploy"`
	// AutoRelease: a server-side compile that stores a new version
	// releases it; off, the version is left as a candidate for an
	// operator to release.
	AutoRelease bool `json:"auto_release"`
	// DeployInterval: how often agents with failed or unfinished resources
	// are deployed again (0: never).
	DeployInterval Duration `json:"deploy_interval"`
	// RepairInterval: how often every agent verifies (and, by DriftPolicy,
	// repairs) everything it holds (0: never).
	RepairInterval Duration `json:"repair_interval"`
	// DriftPolicy: what an agent does when it sees drift.
	DriftPolicy model.DriftPolicy `json:"drift_policy"`
	// PurgeOnDelete removes from hosts what leaves the model.
	PurgeOnDelete bool `json:"purge_on_delete"`
	// VersionsToKeep bounds stored versions (0: keep all).
	VersionsToKeep int `json:"versions_to_keep"`
	// Halted is hands off until resumed: the environment's agents are
	// paused (no deploy, repair or heal; drift is still reported).
	Halted bool `json:"halted"`
	// Enrollment decides how newly discovered agents are accepted.
	Enrollment Enrollment `json:"enrollment"`
	// Release is how a release reaches the agents: at once, or in waves.
	Release ReleaseStrategy `json:"release"`
	// MaxPending bounds the agents waiting for acceptance: beyond, the
	// hellos of agents the server does not know are refused (an
	// enrollment token that holds is not bound by it). A name anyone who
	// reaches the broker may invent must not fill the agent list.
	MaxPending int `json:"max_pending"`
	// PendingExpiry: a pending agent not heard from for this long is
	// forgotten (an agent that still waits says hello again, and is
	// listed again).
	PendingExpiry Duration `json:"pending_expiry"`
	// MachineSettings are the environment's own settings of the machines
	// its hosts become: the first layer of a host's context, under its
	// platform's, its distribution's and its own (HostContext).
	MachineSettings map[string]any `json:"machine_settings,omitempty"`
}

// Enrollment is an environment's policy for newly discovered agents.
type Enrollment string

// Enrollment policies.
const (
	// EnrollManual: an operator accepts or rejects each agent.
	EnrollManual Enrollment = "manual"
	// EnrollToken: a valid enrollment token in the hello accepts the agent.
	EnrollToken Enrollment = "token"
	// EnrollOpen accepts every agent: development and the embedded mode only.
	EnrollOpen Enrollment = "open"
)

// DefaultEnvSettings are the settings of a new environment.
func DefaultEnvSettings() EnvSettings {
	return EnvSettings{
		AutoDeploy:     true,
		AutoRelease:    true,
		DeployInterval: Duration(10 * time.Minute),
		RepairInterval: Duration(time.Hour),
		DriftPolicy:    model.DriftAlert,
		VersionsToKeep: 100,
		Enrollment:     EnrollManual,
		Release:        DefaultReleaseStrategy(),
		MaxPending:     DefaultMaxPending,
		PendingExpiry:  Duration(DefaultPendingExpiry),
	}
}

// Defaults of the pending agents' settings: room for a site's hosts
// installed at once (as many as the server records at once before it
// slows discoveries down), and a day to accept them, which an agent that
// still waits outlives by saying hello again (at least every 30 minutes).
const (
	DefaultMaxPending    = 1000
	DefaultPendingExpiry = 24 * time.Hour
	// maxPendingBound bounds max_pending itself.
	maxPendingBound = 100_000
)

// ErrInvalidSetting is returned (wrapped) for an unknown setting or a bad value.
var ErrInvalidSetting = errors.New("invalid setting")

// settingKeys are the settings operators name, in the order they are shown.
var settingKeys = []string{
	"auto_deploy", "auto_release", "deploy_interval", "repair_interval", "drift_policy",
	"enrollment", "max_pending", "pending_expiry", "purge_on_delete", "versions_to_keep", "halted",
	"release_strategy", "release_canary", "release_waves", "release_max_failed", "release_advance",
	"machine_settings",
}

// SettingKeys lists the names of every environment setting.
func SettingKeys() []string { return append([]string(nil), settingKeys...) }

// Get returns a setting's value as an operator writes it.
func (s EnvSettings) Get(key string) (string, error) {
	switch key {
	case "auto_deploy":
		return strconv.FormatBool(s.AutoDeploy), nil
	case "auto_release":
		return strconv.FormatBool(s.AutoRelease), nil
	case "deploy_interval":
		return s.DeployInterval.String(), nil
	case "repair_interval":
		return s.RepairInterval.String(), nil
	case "drift_policy":
		return string(s.DriftPolicy), nil
	case "enrollment":
		return string(s.Enrollment), nil
	case "max_pending":
		return strconv.Itoa(s.MaxPending), nil
	case "pending_expiry":
		return s.PendingExpiry.String(), nil
	case "purge_on_delete":
		return strconv.FormatBool(s.PurgeOnDelete), nil
	case "versions_to_keep":
		return strconv.Itoa(s.VersionsToKeep), nil
	case "halted":
		return strconv.FormatBool(s.Halted), nil
	case "release_strategy", "release_canary", "release_waves", "release_max_failed", "release_advance":
		return s.Release.get(key), nil
	case "machine_settings":
		if len(s.MachineSettings) == 0 {
			return "{}", nil
		}
		b, err := json.Marshal(s.MachineSettings)
		return string(b), err
	}
	return "", fmt.Errorf("%w: no setting %q (settings: %s)", ErrInvalidSetting, key, strings.Join(settingKeys, ", "))
}

// Set changes one setting from its written form, e.g. ("deploy_interval",
// "5m"). The settings are left unchanged on error.
func (s *EnvSettings) Set(key, value string) error {
	next := *s
	var err error
	switch key {
	case "auto_deploy":
		next.AutoDeploy, err = strconv.ParseBool(value)
	case "auto_release":
		next.AutoRelease, err = strconv.ParseBool(value)
	case "deploy_interval":
		next.DeployInterval, err = ParseDuration(value)
	case "repair_interval":
		next.RepairInterval, err = ParseDuration(value)
	case "drift_policy":
		next.DriftPolicy = model.DriftPolicy(value)
	case "enrollment":
		next.Enrollment = Enrollment(value)
	case "max_pending":
		next.MaxPending, err = strconv.Atoi(value)
	case "pending_expiry":
		next.PendingExpiry, err = ParseDuration(value)
	case "purge_on_delete":
		next.PurgeOnDelete, err = strconv.ParseBool(value)
	case "versions_to_keep":
		next.VersionsToKeep, err = strconv.Atoi(value)
	case "halted":
		next.Halted, err = strconv.ParseBool(value)
	case "release_strategy", "release_canary", "release_waves", "release_max_failed", "release_advance":
		err = next.Release.set(key, value)
	case "machine_settings":
		next.MachineSettings = nil
		dec := json.NewDecoder(strings.NewReader(value))
		dec.UseNumber()
		if err = dec.Decode(&next.MachineSettings); err == nil {
			for k, v := range next.MachineSettings {
				if n, ok := v.(json.Number); ok {
					if i, ierr := n.Int64(); ierr == nil {
						next.MachineSettings[k] = i
					} else {
						err = fmt.Errorf("%s: %s is not a whole number", k, n)
					}
				}
			}
		}
	default:
		_, err = next.Get(key)
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %s = %q: %w", ErrInvalidSetting, key, value, err)
	}
	if err := next.Validate(); err != nil {
		return err
	}
	*s = next
	return nil
}

// Validate checks every setting's value.
func (s EnvSettings) Validate() error {
	switch {
	case s.DeployInterval < 0 || (s.DeployInterval > 0 && s.DeployInterval < Duration(time.Second)):
		return fmt.Errorf("%w: deploy_interval %s: want 0 (never) or at least 1s", ErrInvalidSetting, s.DeployInterval)
	case s.RepairInterval < 0 || (s.RepairInterval > 0 && s.RepairInterval < Duration(time.Second)):
		return fmt.Errorf("%w: repair_interval %s: want 0 (never) or at least 1s", ErrInvalidSetting, s.RepairInterval)
	case s.DriftPolicy != model.DriftAlert && s.DriftPolicy != model.DriftHeal:
		return fmt.Errorf("%w: drift_policy %q: want alert or heal", ErrInvalidSetting, s.DriftPolicy)
	case s.Enrollment != EnrollManual && s.Enrollment != EnrollToken && s.Enrollment != EnrollOpen:
		return fmt.Errorf("%w: enrollment %q: want manual, token or open", ErrInvalidSetting, s.Enrollment)
	case s.VersionsToKeep < 0:
		return fmt.Errorf("%w: versions_to_keep %d: want 0 (keep all) or more", ErrInvalidSetting, s.VersionsToKeep)
	case s.MaxPending < 1 || s.MaxPending > maxPendingBound:
		return fmt.Errorf("%w: max_pending %d: want 1 to %d (the agents that may wait for acceptance at once)", ErrInvalidSetting, s.MaxPending, maxPendingBound)
	case s.PendingExpiry < Duration(time.Minute):
		return fmt.Errorf("%w: pending_expiry %s: want at least 1m (how long a pending agent not heard from is kept)", ErrInvalidSetting, s.PendingExpiry)
	}
	if err := s.Release.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSetting, err)
	}
	if err := checkMachineSettings(s.MachineSettings); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSetting, err)
	}
	return nil
}

// Duration is a time.Duration written as "90s", "10m", "1h" in JSON and
// settings.
type Duration time.Duration

// ParseDuration reads a duration as Go writes it ("90s", "1h30m"); "0" is zero.
func ParseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(s)
	return Duration(d), err
}

// String writes d as Go does, "0s" for zero.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a string ("10m") or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("duration: want a string such as \"10m\", got %s", b)
		}
		*d = Duration(n)
		return nil
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// AgentState is where an agent stands in enrollment.
type AgentState string

// Agent states.
const (
	AgentPending  AgentState = "pending"
	AgentAccepted AgentState = "accepted"
	AgentRejected AgentState = "rejected"
)

// Agent is what the server knows of one agent.
type Agent struct {
	Env       string     `json:"env"`
	Name      string     `json:"name"`
	State     AgentState `json:"state"`
	PublicKey []byte     `json:"public_key,omitempty"`
	// KeyAgreementKey is the agent's X25519 public key, to which
	// sensitive values are sealed; nil for an agent older than sealed
	// values, which is sent none.
	KeyAgreementKey []byte            `json:"key_agreement_key,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Facts           map[string]any    `json:"facts,omitempty"`
	Kinds           []string          `json:"kinds,omitempty"`
	// Note says why an agent is not accepted, as the server found on its
	// last hello or an operator's action: an enrollment token refused,
	// waiting for an operator to accept it, rejected. Empty once
	// accepted.
	Note string `json:"note,omitempty"`
	// AgentVersion is the version of the agent's build and Protocol the
	// protocol version it speaks ("major.minor"), as it last said (hello,
	// heartbeats); empty from agents older than versions, which speak
	// protocol 1.0.
	AgentVersion string `json:"agent_version,omitempty"`
	Protocol     string `json:"protocol,omitempty"`
	// Paused agents are sent no deploy, repair or dry run until resumed,
	// and heal no drift.
	Paused bool `json:"paused"`
	// Connected is set by hello and heartbeats and cleared by goodbye; an
	// agent is online when connected and heard from recently.
	Connected bool `json:"connected"`
	// Generation is the version the agent's slice was last taken from, as
	// the agent reported it.
	Generation int64     `json:"generation"`
	FirstSeen  time.Time `json:"first_seen"`
	LastSeen   time.Time `json:"last_seen"`
	// LastSeq is the highest sequence number accepted from the agent's
	// current key: a later event may run ahead of it only so far.
	LastSeq int64 `json:"last_seq,omitempty"`
	// PreviousKey is the agent's key before its last key rollover. Its
	// events, and its broker login, still hold until PreviousUntil — nil
	// until the agent is first heard from with its new key (it has not
	// switched yet), then a grace later — so nothing the agent signed
	// before it switched is lost.
	PreviousKey   []byte     `json:"previous_key,omitempty"`
	PreviousUntil *time.Time `json:"previous_until,omitempty"`
	// ServerKeys are the fingerprints of the server keys the agent takes
	// commands signed by, as it last said (hello, server.rollover.ack):
	// the one it pinned, and the next one a rollover announced; before
	// enrollment, the one it expects. Empty for agents older than
	// rollovers of the server's key.
	ServerKeys []string `json:"server_keys,omitempty"`
	// ServerKeysSeq is the sequence number of the event that said them:
	// a store keeps the word of the latest.
	ServerKeysSeq int64 `json:"-"`
	// FactsSeq is the sequence number of the event that said Labels,
	// Facts and Kinds (a hello, a facts report): a store keeps the word of
	// the latest, so a report delivered late or replayed moves nothing
	// back.
	FactsSeq int64 `json:"-"`
}

// PreviousHolds reports whether key is the agent's previous key and still
// holds at now.
func (a *Agent) PreviousHolds(key []byte, now time.Time) bool {
	return len(a.PreviousKey) > 0 && bytes.Equal(a.PreviousKey, key) && (a.PreviousUntil == nil || now.Before(*a.PreviousUntil))
}

// Switched reports whether the agent was heard from with its new key since
// its last rollover (or never rolled its key over).
func (a *Agent) Switched() bool { return len(a.PreviousKey) == 0 || a.PreviousUntil != nil }

// ResourceStatus is where one resource of an environment stands.
type ResourceStatus struct {
	ID      model.ID            `json:"id"`
	Version int64               `json:"version"`
	Hash    model.Hash          `json:"hash"`
	State   model.ResourceState `json:"state"`
	// Compliance and when it was last verified (nil: never).
	Compliance   model.Compliance `json:"compliance"`
	LastVerified *time.Time       `json:"last_verified,omitempty"`
	Message      string           `json:"message,omitempty"`
	UpdatedAt    time.Time        `json:"updated_at"`
}

// ActionKind says what an action-log entry records.
type ActionKind string

// Action kinds.
const (
	ActionDeploy ActionKind = "deploy"
	ActionDryRun ActionKind = "dryrun"
	// ActionHeal is a drifted resource its agent re-applied by drift
	// policy (heal), between deploys; its changes are the drift undone.
	ActionHeal ActionKind = "heal"
)

// Action is one entry of a resource's action log: something a deploy, dry
// run or heal did or found.
type Action struct {
	Seq      int64               `json:"seq"`
	ID       model.ID            `json:"id"`
	Kind     ActionKind          `json:"kind"`
	DeployID string              `json:"deploy_id"`
	Version  int64               `json:"version"`
	State    model.ResourceState `json:"state"`
	Changes  model.Changes       `json:"changes,omitempty"`
	Message  string              `json:"message,omitempty"`
	At       time.Time           `json:"at"`
	Duration time.Duration       `json:"duration_ns"`
}

// UnmarshalJSON reads settings over the defaults, so that settings stored
// before a setting existed read back with its default.
func (s *EnvSettings) UnmarshalJSON(b []byte) error {
	type plain EnvSettings
	v := plain(DefaultEnvSettings())
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = EnvSettings(v)
	return nil
}

// AgentAction is what an operator does to an agent.
type AgentAction string

// Agent actions.
const (
	AgentAccept AgentAction = "accept"
	AgentReject AgentAction = "reject"
	AgentPause  AgentAction = "pause"
	AgentResume AgentAction = "resume"
)

// Valid reports whether a is a known action.
func (a AgentAction) Valid() bool {
	return a == AgentAccept || a == AgentReject || a == AgentPause || a == AgentResume
}

// Inventory is the live inventory of an environment whose agents are
// agents: every accepted one, in the given order, with its labels and the
// facts it reported, as the compiler reads it. Pending and rejected agents
// are not in it: a model cannot configure a host before an operator or a
// token let it in. The API's inventory and the server's compiles both
// build it here, so that what an operator downloads is what the server
// compiles with.
func Inventory(agents []Agent) model.Inventory {
	inv := model.Inventory{Agents: []model.InventoryAgent{}}
	for _, a := range agents {
		if a.State == AgentAccepted {
			inv.Agents = append(inv.Agents, model.InventoryAgent{Name: a.Name, Labels: a.Labels, Facts: a.Facts})
		}
	}
	return inv
}
