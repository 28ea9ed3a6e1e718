package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tetherhq/tether/cli/embedded"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// eventLine renders a live server event as one line for people:
//
//	15:04:05.000  drift     web-1  file:/etc/motd  content "hello" (want "hi")
//
// Drift is red, what healed or came back is green; JSON readers get the
// event itself.
func eventLine(term *terminal, e server.Event) string {
	at := e.At
	if at.IsZero() {
		at = time.Now()
	}
	label, tint, subject, detail := describeEvent(e)
	return fmt.Sprintf("%s  %s  %s", at.Local().Format("15:04:05.000"), term.paint(tint, fmt.Sprintf("%-9s", label)), strings.TrimSpace(subject+"  "+detail))
}

// describeEvent says what an event is about: a short label and its colour,
// the agent or resource it concerns, and what happened.
func describeEvent(e server.Event) (label string, tint colour, subject, detail string) {
	subject = e.Agent
	switch e.Kind {
	case server.EventDrift:
		a := e.Alert
		if a == nil {
			return "drift", red, subject, ""
		}
		if a.ID != nil {
			subject = a.ID.String()
		}
		detail = a.Message
		switch {
		case a.Compliance == model.NonCompliant:
			label, tint = "drift", red
			if d := describeChanges(a.Changes); d != "" {
				detail = d
				// A message past the generic words ("flapping: …", "heal
				// failed: …") says more than the changes.
				if _, more, ok := strings.Cut(a.Message, ": "); ok {
					detail = more + "; " + d
				}
			}
		case strings.HasPrefix(a.Message, "healed"):
			label, tint, detail = "healed", green, "re-applied"
			if d := changedNames(a.Changes); d != "" {
				detail += ": " + d
			}
		default:
			label, tint = "restored", green
		}
	case server.EventResult:
		r := e.Result
		if r == nil {
			return "result", none, subject, ""
		}
		label, subject, detail = embedded.Outcome(r), r.ID.String(), r.Message
		switch label {
		case "failed":
			tint = red
		case "created", "changed", "removed":
			tint = green
			if detail == "" {
				detail = changedNames(r.Changes)
			}
		}
	case server.EventDeployDone:
		label, detail = "done", "deploy "+e.DeployID
		if e.Error != "" {
			tint, detail = red, detail+": "+e.Error
		}
	case server.EventAgentOnline:
		label, tint = "online", green
	case server.EventAgentOffline:
		label, tint = "offline", yellow
	case server.EventAgentDiscovered:
		label, detail = "new agent", "awaits acceptance"
	case server.EventAgentChanged:
		label, detail = "agent", e.Error
	case server.EventScheduled:
		label, detail = "scheduled", string(e.Operation)
	case server.EventSecurity:
		label, tint = "security", boldRed
		if e.Alert != nil {
			detail = e.Alert.Message
		}
	case server.EventEnvHalted:
		label, subject, detail = "env", e.Env, e.Error
	case server.EventCompileStarted, server.EventCompileFinished:
		label, subject = "compile", e.Env
		if c := e.Compile; c != nil {
			label, tint, detail = compileEvent(*c)
		}
	case server.EventCompileAlert, server.EventCompileRecovered:
		// An alert stored before compile.recovered was a kind of its own
		// is a compile.alert of a compliant compile.failed alert.
		label, tint, subject = "failing", red, e.Env
		if a := e.Alert; a != nil {
			detail = a.Message
			if a.Kind.Good() || a.Compliance == model.Compliant {
				label, tint = "recovered", green
			}
		}
	case server.EventReleaseStarted, server.EventReleaseProgress, server.EventReleaseDone:
		label, subject = "release", fmt.Sprintf("version %d", e.Generation)
		if r := e.Release; r != nil {
			detail = string(r.State) + ": " + releaseCounts(*r)
			if r.State == record.ReleaseFailed {
				tint, detail = red, detail+"; "+r.Note
			} else if r.State == record.ReleaseDone {
				tint = green
			}
		}
	default:
		label = string(e.Kind)
		b, _ := json.Marshal(e)
		detail = string(b)
	}
	return label, tint, subject, detail
}

// compileEvent describes a compile's report for one line.
func compileEvent(c record.Compile) (label string, tint colour, detail string) {
	label, detail = "compile", string(c.Outcome)
	if c.Revision != "" {
		detail += " at " + shortRev(c.Revision)
	}
	switch c.Outcome {
	case record.CompileRunning:
		detail = "started: " + c.Triggers.String()
	case record.CompileReleased:
		tint, detail = green, fmt.Sprintf("version %d released (revision %s)", c.Version, shortRev(c.Revision))
	case record.CompileCandidate:
		tint, detail = yellow, fmt.Sprintf("version %d a candidate (revision %s): tether version release %d", c.Version, shortRev(c.Revision), c.Version)
	case record.CompileSkipped:
		detail += ": nothing changed since compile " + shortID(c.SameAs)
	case record.CompileFailed:
		tint, detail = red, detail+": "+firstDiagnostic(c.Diagnostics)
	}
	return label, tint, detail
}

// firstDiagnostic is a report's first error, as file:line:col: message.
func firstDiagnostic(ds []record.CompileDiagnostic) string {
	for _, d := range ds {
		if d.Severity != "error" {
			continue
		}
		if d.File == "" {
			return d.Message
		}
		return fmt.Sprintf("%s:%d:%d: %s", d.File, d.Line, d.Col, d.Message)
	}
	return "see tether compiles show"
}

// describeChanges renders drifted attributes as `name current (want desired)`.
func describeChanges(c model.Changes) string {
	if ch, ok := c[model.AttrPresent]; ok {
		// Gone, or there when it should not be: the attributes say nothing.
		if ch.Desired == true {
			return "missing"
		}
		return "present but should not be"
	}
	parts := make([]string, 0, len(c))
	for _, k := range changedAttrs(c) {
		ch := c[k]
		parts = append(parts, fmt.Sprintf("%s %s (want %s)", k, shortValue(ch.Current), shortValue(ch.Desired)))
	}
	return strings.Join(parts, ", ")
}

// changedNames lists the attributes of c, or says it was created or
// removed.
func changedNames(c model.Changes) string {
	switch {
	case c.Created():
		return "created"
	case c.Removed():
		return "removed"
	}
	return strings.Join(changedAttrs(c), ", ")
}

// shortValue renders a value for one line: JSON, a long string cut (before
// quoting, so never inside an escape) to its first 32 characters and "...".
func shortValue(v any) string {
	cut := false
	if str, ok := v.(string); ok && utf8.RuneCountInString(str) > 40 {
		v, cut = string([]rune(str)[:32]), true
	}
	var b strings.Builder
	s := fmt.Sprint(v)
	if writeJSONLine(&b, v) == nil {
		s = strings.TrimSuffix(b.String(), "\n")
	}
	if cut {
		s += "..."
	}
	return s
}
