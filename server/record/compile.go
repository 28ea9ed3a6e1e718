package record

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
)

// Compile is the report of one compile the server ran of an environment's
// model: what asked for it, which source it read, how it ended and what it
// found. It is stored when the compile starts (Outcome running) and
// completed when it ends.
type Compile struct {
	ID  string `json:"id"`
	Env string `json:"env"`
	// Triggers are what asked for the compile, one per kind, in the order
	// they first came: triggers that came while it waited are folded in.
	Triggers Triggers `json:"triggers"`
	// Revision is the source compiled: a commit id, or the hash of an
	// uploaded archive; empty until known.
	Revision string `json:"revision,omitempty"`
	// Inputs is a digest of what, besides the revision, the compile's
	// outcome depends on: the source's URL, ref and sub-directory, the
	// live inventory (accepted agents, their labels and facts), the
	// variables, the compiler (the server's build), the environment's
	// settings and the version released after it. A compile whose
	// revision and inputs are those of the last one that succeeded is
	// skipped. Empty: the compile cannot be repeated from them (it read
	// a git module by branch or tag, which may move), or it failed before
	// they were known.
	Inputs     string         `json:"inputs,omitempty"`
	StartedAt  time.Time      `json:"started_at"`
	FinishedAt *time.Time     `json:"finished_at,omitempty"`
	Outcome    CompileOutcome `json:"outcome"`
	CompileResult
}

// Duration is how long the compile took; 0 while it runs.
func (c Compile) Duration() time.Duration {
	if c.FinishedAt == nil {
		return 0
	}
	return c.FinishedAt.Sub(c.StartedAt)
}

// CompileResult is what a finished compile found.
type CompileResult struct {
	// Diagnostics are the compiler's errors and warnings: the first
	// MaxCompileDiagnostics of them; DiagnosticsTotal counts them all.
	Diagnostics      []CompileDiagnostic `json:"diagnostics,omitempty"`
	DiagnosticsTotal int                 `json:"diagnostics_total,omitempty"`
	// ResourcesPerAgent counts the compiled resources of each agent.
	ResourcesPerAgent map[string]int `json:"resources_per_agent,omitempty"`
	// Undefined lists what the compiler left out because facts it reads
	// are not known yet: the first MaxCompileUndefined; UndefinedTotal
	// counts them all.
	Undefined      []UndefinedBlock `json:"undefined,omitempty"`
	UndefinedTotal int              `json:"undefined_total,omitempty"`
	// Version is the version the compile stored; 0 when it stored none.
	Version int64 `json:"version,omitempty"`
	// SameAs is, for a skipped compile, the compile that ran with the
	// same revision and inputs: its resources per agent and undefined
	// blocks are that compile's, which still hold.
	SameAs string `json:"same_as,omitempty"`
}

// CompileDiagnostic is one of the compiler's findings, where it is.
type CompileDiagnostic struct {
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Col      int    `json:"col,omitempty"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
}

// UndefinedBlock is a resource or block the compiler left out, and the
// facts it waits for.
type UndefinedBlock struct {
	// Name is a resource ID or a block's name.
	Name  string   `json:"name"`
	Facts []string `json:"facts,omitempty"`
}

// Bounds of a stored compile report: the rest is cut (and counted), never
// refused, since the compile it reports happened.
const (
	MaxCompileDiagnostics = 100
	MaxCompileUndefined   = 100
	// MaxUndefinedFacts bounds the facts listed for one undefined block.
	MaxUndefinedFacts = 20
	// MaxCompileMessage bounds a diagnostic's message, file and severity,
	// and a fact's name.
	MaxCompileMessage = 1024
)

// Bound cuts a result to what a report stores: at most
// MaxCompileDiagnostics diagnostics and MaxCompileUndefined undefined
// blocks (the totals count the rest), each text at most MaxCompileMessage
// bytes.
func (r CompileResult) Bound() CompileResult {
	r.DiagnosticsTotal = max(r.DiagnosticsTotal, len(r.Diagnostics))
	ds := make([]CompileDiagnostic, 0, min(len(r.Diagnostics), MaxCompileDiagnostics))
	for _, d := range r.Diagnostics[:min(len(r.Diagnostics), MaxCompileDiagnostics)] {
		d.File = model.Clip(d.File, MaxCompileMessage)
		d.Severity = model.Clip(d.Severity, MaxCompileMessage)
		d.Message = model.Clip(d.Message, MaxCompileMessage)
		ds = append(ds, d)
	}
	r.Diagnostics = ds
	r.UndefinedTotal = max(r.UndefinedTotal, len(r.Undefined))
	us := make([]UndefinedBlock, 0, min(len(r.Undefined), MaxCompileUndefined))
	for _, u := range r.Undefined[:min(len(r.Undefined), MaxCompileUndefined)] {
		facts := make([]string, 0, min(len(u.Facts), MaxUndefinedFacts))
		for _, f := range u.Facts[:min(len(u.Facts), MaxUndefinedFacts)] {
			facts = append(facts, model.Clip(f, MaxCompileMessage))
		}
		us = append(us, UndefinedBlock{Name: model.Clip(u.Name, MaxCompileMessage), Facts: facts})
	}
	r.Undefined = us
	r.SameAs = model.Clip(r.SameAs, 64)
	return r
}

// CompileOutcome is how a compile ended.
type CompileOutcome string

// Compile outcomes.
const (
	// CompileRunning: the compile has not ended (or its server stopped
	// before it did).
	CompileRunning CompileOutcome = "running"
	// CompileReleased: it stored a new version and released it.
	CompileReleased CompileOutcome = "released"
	// CompileCandidate: it stored a new version, left for an operator to
	// release.
	CompileCandidate CompileOutcome = "candidate"
	// CompileUnchanged: the resources are those of the newest version;
	// nothing was stored.
	CompileUnchanged CompileOutcome = "unchanged"
	// CompileFailed: the source could not be read or did not compile.
	CompileFailed CompileOutcome = "failed"
	// CompileSkipped: nothing changed since the last compile that
	// succeeded (its revision and inputs are this one's, SameAs names
	// it), so the model was not compiled again. An operator's request
	// always compiles.
	CompileSkipped CompileOutcome = "skipped"
)

// Valid reports whether o is a known outcome.
func (o CompileOutcome) Valid() bool {
	switch o {
	case CompileRunning, CompileReleased, CompileCandidate, CompileUnchanged, CompileFailed, CompileSkipped:
		return true
	}
	return false
}

// TriggerKind is what asked for a compile.
type TriggerKind string

// Trigger kinds.
const (
	// TriggerOperator: someone asked, through the API.
	TriggerOperator TriggerKind = "operator"
	// TriggerWebhook: the source's repository said it changed.
	TriggerWebhook TriggerKind = "webhook"
	// TriggerPoll: the poll interval passed.
	TriggerPoll TriggerKind = "poll"
	// TriggerAgent: an agent was accepted, rejected or deleted.
	TriggerAgent TriggerKind = "agent"
	// TriggerFacts: an agent's facts or labels changed.
	TriggerFacts TriggerKind = "facts"
)

// Valid reports whether k is a known trigger kind.
func (k TriggerKind) Valid() bool {
	switch k {
	case TriggerOperator, TriggerWebhook, TriggerPoll, TriggerAgent, TriggerFacts:
		return true
	}
	return false
}

// Trigger is something that asked for a compile, or several of one kind
// folded together.
type Trigger struct {
	Kind TriggerKind `json:"kind"`
	// By says who or what: a token's name, a webhook's repository, an
	// agent. Folded triggers keep the first one's.
	By string `json:"by,omitempty"`
	// Count is how many triggers of the kind were folded (at least 1).
	Count int `json:"count"`
}

// Triggers are the triggers of one compile, one per kind.
type Triggers []Trigger

// Add folds t into ts: into the trigger of its kind, counted, or as a new
// one at the end. A count below 1 counts as 1.
func (ts Triggers) Add(t Trigger) Triggers {
	t.Count = max(t.Count, 1)
	for i := range ts {
		if ts[i].Kind == t.Kind {
			ts[i].Count += t.Count
			if ts[i].By == "" {
				ts[i].By = t.By
			}
			return ts
		}
	}
	return append(ts, t)
}

// Count is how many triggers were folded, of every kind.
func (ts Triggers) Count() int {
	n := 0
	for _, t := range ts {
		n += t.Count
	}
	return n
}

// String says what triggered a compile, as "operator (alice), facts ×200".
func (ts Triggers) String() string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		s := string(t.Kind)
		if t.Count > 1 {
			s += " ×" + strconv.Itoa(t.Count)
		}
		if t.By != "" {
			s += " (" + t.By + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// Validate checks the triggers of a compile: at least one, of known kinds,
// each kind once.
func (ts Triggers) Validate() error {
	if len(ts) == 0 {
		return fmt.Errorf("compile: no trigger")
	}
	seen := map[TriggerKind]bool{}
	for _, t := range ts {
		if !t.Kind.Valid() {
			return fmt.Errorf("compile: trigger kind %q: want operator, webhook, poll, agent or facts", model.Clip(string(t.Kind), 32))
		}
		if seen[t.Kind] {
			return fmt.Errorf("compile: trigger kind %s twice: fold them (Triggers.Add)", t.Kind)
		}
		if t.Count < 1 {
			return fmt.Errorf("compile: trigger %s counts %d: want 1 or more", t.Kind, t.Count)
		}
		seen[t.Kind] = true
	}
	return nil
}

// CompileRequest is what asking for a compile did: the environment's
// compile queue after the request.
type CompileRequest struct {
	Env string `json:"env"`
	// Running: a compile of the environment runs now; the one requested
	// waits for it to end.
	Running bool `json:"running"`
	// Queued are the triggers of the compile waiting, this one among them.
	Queued Triggers `json:"queued"`
}

// Succeeded says whether a compile that ended so left the environment as
// its model says: it released, stored a candidate, found nothing new, or
// was skipped for nothing changed.
func (o CompileOutcome) Succeeded() bool {
	switch o {
	case CompileReleased, CompileCandidate, CompileUnchanged, CompileSkipped:
		return true
	}
	return false
}
