package record

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/model"
)

// ReleaseStrategy is how a release reaches an environment's agents: all
// at once (the default), or in waves: canary agents first, then
// cumulative percentages of the others, each wave sent once the one
// before it succeeded, and the whole halted when more agents failed than
// MaxFailed allows.
type ReleaseStrategy struct {
	// Mode is "all" or "waves".
	Mode string `json:"mode"`
	// Canary chooses the first wave: a count of agents ("1": the first
	// by name) or a label selector ("role=canary", several joined by
	// commas, all must match).
	Canary string `json:"canary"`
	// Waves are the waves after the canary, as cumulative percentages of
	// the other agents, increasing, the last 100% ("25%,100%").
	Waves string `json:"waves"`
	// MaxFailed is how many reached agents may fail before the rollout
	// halts: a count ("0": any failure halts) or a percentage of the
	// agents reached ("10%").
	MaxFailed string `json:"max_failed"`
	// Advance says when a wave that succeeded is followed by the next:
	// "auto" (at once) or "manual" (on continue).
	Advance string `json:"advance"`
}

// Release strategy modes and advances.
const (
	ReleaseAll       = "all"
	ReleaseWaves     = "waves"
	AdvanceAuto      = "auto"
	AdvanceManual    = "manual"
	defaultCanary    = "1"
	defaultWaves     = "100%"
	defaultMaxFailed = "0"
)

// DefaultReleaseStrategy is all at once; its wave settings are the ones a
// switch to waves starts from.
func DefaultReleaseStrategy() ReleaseStrategy {
	return ReleaseStrategy{Mode: ReleaseAll, Canary: defaultCanary, Waves: defaultWaves, MaxFailed: defaultMaxFailed, Advance: AdvanceAuto}
}

// CanaryWave names the first wave of a rollout.
const CanaryWave = "canary"

// Staged reports whether releases go in waves.
func (r ReleaseStrategy) Staged() bool { return r.Mode == ReleaseWaves }

func (r ReleaseStrategy) get(key string) string {
	switch key {
	case "release_strategy":
		return r.Mode
	case "release_canary":
		return r.Canary
	case "release_waves":
		return r.Waves
	case "release_max_failed":
		return r.MaxFailed
	}
	return r.Advance
}

func (r *ReleaseStrategy) set(key, value string) error {
	value = strings.TrimSpace(value)
	switch key {
	case "release_strategy":
		r.Mode = value
	case "release_canary":
		r.Canary = value
	case "release_waves":
		r.Waves = value
	case "release_max_failed":
		r.MaxFailed = value
	case "release_advance":
		r.Advance = value
	}
	return nil
}

// Validate checks every field.
func (r ReleaseStrategy) Validate() error {
	if r.Mode != ReleaseAll && r.Mode != ReleaseWaves {
		return fmt.Errorf("release_strategy %q: want all or waves", model.Clip(r.Mode, 32))
	}
	if r.Advance != AdvanceAuto && r.Advance != AdvanceManual {
		return fmt.Errorf("release_advance %q: want auto or manual", model.Clip(r.Advance, 32))
	}
	if _, _, err := r.canary(); err != nil {
		return err
	}
	if _, err := r.percents(); err != nil {
		return err
	}
	if _, _, err := parseMaxFailed(r.MaxFailed); err != nil {
		return err
	}
	return nil
}

// canary returns the canary wave's size or label selector.
func (r ReleaseStrategy) canary() (int, map[string]string, error) {
	if n, err := strconv.Atoi(r.Canary); err == nil {
		if n < 0 {
			return 0, nil, fmt.Errorf("release_canary %d: want a count of agents (0 or more) or a label selector like role=canary", n)
		}
		return n, nil, nil
	}
	sel := map[string]string{}
	for _, part := range strings.Split(r.Canary, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || k == "" {
			return 0, nil, fmt.Errorf("release_canary %q: want a count of agents (1) or a label selector (role=canary, several joined by commas)", model.Clip(r.Canary, 64))
		}
		sel[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return 0, sel, nil
}

// percents returns the waves after the canary as increasing cumulative
// percentages, the last 100.
func (r ReleaseStrategy) percents() ([]int, error) {
	bad := func(why string) error {
		return fmt.Errorf("release_waves %q: %s: want increasing percentages of the agents after the canary, the last 100%% (25%%,100%%)", model.Clip(r.Waves, 64), why)
	}
	var out []int
	for _, part := range strings.Split(r.Waves, ",") {
		p := strings.TrimSpace(part)
		n, err := strconv.Atoi(strings.TrimSuffix(p, "%"))
		if !strings.HasSuffix(p, "%") || err != nil || n <= 0 || n > 100 {
			return nil, bad(fmt.Sprintf("%q is not a percentage from 1%% to 100%%", model.Clip(p, 16)))
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, bad("not increasing")
		}
		out = append(out, n)
	}
	if out[len(out)-1] != 100 {
		return nil, bad("the last wave is not 100%")
	}
	return out, nil
}

// parseMaxFailed reads a count ("2") or a percentage ("10%").
func parseMaxFailed(s string) (count int, percent int, err error) {
	bad := fmt.Errorf("release_max_failed %q: want a count of failed agents (0: any failure halts) or a percentage of the agents reached (10%%)", model.Clip(s, 32))
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 100 {
			return 0, 0, bad
		}
		return -1, n, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, 0, bad
	}
	return n, -1, nil
}

// Exceeded reports whether failed of reached agents is more than the
// strategy's MaxFailed allows.
func (r ReleaseStrategy) Exceeded(failed, reached int) bool {
	count, percent, err := parseMaxFailed(r.MaxFailed)
	if err != nil {
		return failed > 0
	}
	if count >= 0 {
		return failed > count
	}
	return reached > 0 && failed*100 > percent*reached
}

// Rollout is a staged release's plan and progress.
type Rollout struct {
	// Stage is where the rollout stands.
	Stage RolloutStage `json:"stage"`
	// Wave is the index in Waves of the wave last sent.
	Wave int `json:"wave"`
	// Sent counts the waves sent (Wave+1 once the current one is).
	Sent int `json:"sent"`
	// Previous is the version the agents not reached keep (0: none).
	Previous int64 `json:"previous"`
	// Strategy is the environment's strategy when the release started.
	Strategy ReleaseStrategy `json:"strategy"`
	Waves    []Wave          `json:"waves"`
	// Continues counts the operators' continues the rollout acted on;
	// Asked those asked for (the store counts them).
	Continues int `json:"continues"`
	Asked     int `json:"asked"`
	// Accepted counts the failed agents an operator's continue accepted:
	// the threshold counts the failures after them.
	Accepted int `json:"accepted"`
	// Moved names agents put in a later wave than their share would
	// have, because they require resources of an agent of that wave.
	Moved []string `json:"moved,omitempty"`
}

// Wave is one wave of a rollout and where its agents stand.
type Wave struct {
	Name   string   `json:"name"`
	Agents []string `json:"agents"`
	// Succeeded, Failed and Pending count the wave's agents once it is
	// sent: every resource deployed (or nothing to deploy), some
	// resource failed, and the others.
	Succeeded int `json:"succeeded"`
	// FailedAgents and PendingAgents name them (at most
	// MaxListedPending each).
	FailedAgents  []string `json:"failed_agents,omitempty"`
	PendingAgents []string `json:"pending_agents,omitempty"`
	FailedCount   int      `json:"failed"`
	PendingCount  int      `json:"pending"`
}

// RolloutStage is where a staged release stands.
type RolloutStage string

// Rollout stages.
const (
	// StageDeploying: the current wave is sent and its agents report.
	StageDeploying RolloutStage = "deploying"
	// StageWaiting: the current wave succeeded; the next waits for an
	// operator's continue (release_advance = manual).
	StageWaiting RolloutStage = "waiting"
	// StageHalted: more agents failed than release_max_failed allows;
	// nothing more is sent until continue (accepting the failures) or
	// abort.
	StageHalted RolloutStage = "halted"
	// StageAborted: an operator aborted it; agents not reached keep the
	// previous version.
	StageAborted RolloutStage = "aborted"
	// StageDone: every wave was sent (or a newer release superseded it).
	StageDone RolloutStage = "done"
)

// ErrNotStaged: a continue or abort of a release that is not a staged
// rollout.
var ErrNotStaged = errors.New("not a staged rollout")

// ErrReleaseFinished: a continue or abort of a staged rollout that has
// ended (done, aborted or superseded).
var ErrReleaseFinished = errors.New("the rollout is finished")

// PlanWaves splits agents (accepted, with their labels) into the
// strategy's waves: the canary (the first by name, or those the label
// selector matches), then cumulative percentages of the others in name
// order. waits maps an agent to the agents whose resources it requires:
// an agent never goes in a wave before an agent it requires; it is moved
// to that agent's wave (moved names them). Empty waves are left out.
func (r ReleaseStrategy) PlanWaves(agents []Agent, waits map[string][]string) (waves []Wave, moved []string, err error) {
	count, sel, err := r.canary()
	if err != nil {
		return nil, nil, err
	}
	percents, err := r.percents()
	if err != nil {
		return nil, nil, err
	}
	sorted := slices.Clone(agents)
	slices.SortFunc(sorted, func(a, b Agent) int { return strings.Compare(a.Name, b.Name) })
	var canary, rest []string
	for _, a := range sorted {
		if matches(a.Labels, sel) && (sel != nil || len(canary) < count) {
			canary = append(canary, a.Name)
		} else {
			rest = append(rest, a.Name)
		}
	}
	if sel != nil && len(canary) == 0 && len(sorted) > 0 {
		// The first percentage would go first: not what a canary means.
		return nil, nil, fmt.Errorf("release_canary %q matches none of the %d accepted agents; label the canaries (tether agent run --label) or set release_canary to a count",
			model.Clip(r.Canary, 64), len(sorted))
	}
	wave := map[string]int{}
	for _, a := range canary {
		wave[a] = 0
	}
	from := 0
	for i, p := range percents {
		upto := int(math.Ceil(float64(len(rest)) * float64(p) / 100))
		for _, a := range rest[from:upto] {
			wave[a] = i + 1
		}
		from = max(from, upto)
	}
	// Requirements: a waiter goes no earlier than what it requires; moves
	// only go later, so this ends.
	for changed := true; changed; {
		changed = false
		for _, a := range slices.Sorted(maps.Keys(waits)) {
			w, ok := wave[a]
			if !ok {
				continue
			}
			for _, req := range waits[a] {
				if rw, ok := wave[req]; ok && rw > w {
					wave[a], w, changed = rw, rw, true
					if !slices.Contains(moved, a) {
						moved = append(moved, a)
					}
				}
			}
		}
	}
	all := make([]Wave, len(percents)+1)
	all[0].Name = CanaryWave
	for i, p := range percents {
		all[i+1].Name = strconv.Itoa(p) + "%"
	}
	for _, a := range sorted {
		w := wave[a.Name]
		all[w].Agents = append(all[w].Agents, a.Name)
	}
	for _, w := range all {
		if len(w.Agents) > 0 {
			waves = append(waves, w)
		}
	}
	slices.Sort(moved)
	return waves, moved, nil
}

func matches(labels, sel map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
