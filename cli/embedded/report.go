package embedded

import (
	"time"

	"github.com/tetherhq/tether/model"
)

// Report is what a run deployed; `tether deploy -o json` prints it as is,
// so its JSON is what scripts read.
type Report struct {
	Dir        string            `json:"dir"`
	Env        string            `json:"env"`
	Version    int64             `json:"version"`
	NewVersion bool              `json:"new_version"`
	Compiled   bool              `json:"compiled"`
	DryRun     bool              `json:"dry_run"`
	Duration   time.Duration     `json:"duration_ns"`
	Summary    Counts            `json:"summary"`
	Agents     map[string]Counts `json:"agents"`
	Results    []model.Result    `json:"results"`
}

// NewReport is the report of a run that has deployed nothing yet.
func NewReport(o Options) *Report {
	return &Report{Dir: o.Dir, Env: Env, DryRun: o.DryRun, Agents: map[string]Counts{}}
}

// Counts tallies results by outcome.
type Counts struct {
	Created   int `json:"created"`
	Changed   int `json:"changed"`
	Removed   int `json:"removed"`
	Unchanged int `json:"unchanged"`
	Failed    int `json:"failed"`
	Skipped   int `json:"skipped"`
}

// Outcome names what happened to a resource, for people: created, changed,
// removed, unchanged, failed or skipped.
func Outcome(r *model.Result) string {
	switch r.State {
	case model.StateDeployed:
		switch {
		case r.Changes.Created():
			return "created"
		case r.Changes.Removed():
			return "removed"
		case len(r.Changes) > 0:
			return "changed"
		}
		return "unchanged"
	case model.StateFailed, model.StateUnavailable:
		return "failed"
	}
	return "skipped"
}

func (c *Counts) add(r *model.Result) {
	switch Outcome(r) {
	case "created":
		c.Created++
	case "removed":
		c.Removed++
	case "changed":
		c.Changed++
	case "unchanged":
		c.Unchanged++
	case "failed":
		c.Failed++
	default:
		c.Skipped++
	}
}

// Undefined counts the resources not deployed because they, or a
// requirement of theirs, depend on a value not known yet (a fact the host
// does not report).
func (r *Report) Undefined() int {
	n := 0
	for i := range r.Results {
		if s := r.Results[i].State; s == model.StateUndefined || s == model.StateSkippedForUndefined {
			n++
		}
	}
	return n
}

// tally adds the results to the report's counts.
func (r *Report) tally(results []model.Result, hosts []string) {
	r.Results = results
	for i := range results {
		res := &results[i]
		r.Summary.add(res)
		c := r.Agents[res.ID.Agent]
		c.add(res)
		r.Agents[res.ID.Agent] = c
	}
	for _, h := range hosts {
		if _, ok := r.Agents[h]; !ok {
			r.Agents[h] = Counts{}
		}
	}
}
