package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// alertList is what the alert list partial shows.
type alertList struct {
	Env    string
	Alerts []record.Alert
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"show":     show,
	"path":     url.PathEscape,
	"query":    url.QueryEscape,
	"when":     when,
	"ago":      ago,
	"mark":     mark,
	"outcome":  outcome,
	"labels":   labels,
	"shortid":  func(s string) string { return s[:min(len(s), 8)] },
	"eq2":      func(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) },
	"add":      func(a, b int) int { return a + b },
	"list":     func(v ...string) []string { return v },
	"alertsOf": func(env string, al []record.Alert) alertList { return alertList{Env: env, Alerts: al} },
	"redacted": func(v string) bool { return v == `"`+model.RedactedValue+`"` || v == model.RedactedValue },
	"power":    power,
	"actions":  actionsOf,
	"settings": settingsLine,
}

// show writes a value for a person: a string as it is, anything else as
// compact JSON; nil as "—" (absent).
func show(v any) string {
	switch v := v.(type) {
	case nil:
		return "—"
	case string:
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func when(t any) string {
	switch t := t.(type) {
	case time.Time:
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	case *time.Time:
		if t == nil || t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return ""
}

// ago says how long ago t was, roughly.
func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t)
	switch {
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// marks are the symbols shown with a state, so that it never rests on
// colour alone; the class colours it too.
var marks = map[string][2]string{
	"deployed": {"✔", "good"}, "compliant": {"✔", "good"}, "online": {"●", "good"}, "accepted": {"✔", "good"}, "done": {"✔", "good"},
	"released": {"★", "good"}, "succeeded": {"✔", "good"}, "ok": {"✔", "good"}, "waiting": {"◌", "warn"},
	"enabled": {"✔", "good"}, "disabled": {"·", "muted"}, "delivered": {"✔", "good"},
	"failed": {"✖", "bad"}, "non_compliant": {"≠", "bad"}, "rejected": {"✖", "bad"}, "offline": {"○", "bad"}, "drift": {"≠", "bad"},
	"security": {"⚠", "bad"}, "compile.failed": {"✖", "bad"}, "compile.recovered": {"✔", "good"}, "unavailable": {"✖", "bad"}, "undefined": {"?", "warn"},
	"pending": {"◌", "warn"}, "deploying": {"↻", "warn"}, "running": {"↻", "warn"}, "available": {"◌", "warn"}, "paused": {"‖", "warn"},
	"unknown": {"?", "warn"}, "skipped": {"↷", "warn"}, "skipped_for_undefined": {"↷", "warn"}, "cancelled": {"↷", "warn"},
	"orphaned": {"∅", "warn"}, "candidate": {"◌", "warn"}, "retired": {"·", "muted"},
	// Hosts of blueprints.
	"defined": {"○", "muted"}, "provisioning": {"↻", "warn"}, "provisioned": {"✔", "good"}, "deprovisioning": {"↻", "warn"},
	"discovered": {"◌", "warn"},
}

// mark shows a state as a symbol and its word, in a span its class
// colours: <span class="state good">✔ deployed</span>.
func mark(v any) template.HTML {
	s := fmt.Sprint(v)
	if s == "" {
		s = "unknown"
	}
	m, ok := marks[s]
	if !ok {
		m = [2]string{"·", "muted"}
	}
	return markAs(m, s)
}

func markAs(m [2]string, s string) template.HTML {
	word := strings.ReplaceAll(s, "_", " ")
	return template.HTML(`<span class="state ` + m[1] + `"><span aria-hidden="true">` + m[0] + `</span> ` + template.HTMLEscapeString(word) + `</span>`)
}

// powers are the marks of an instance's power states ("running" is a
// deploy's work in progress elsewhere, a machine's good state here).
var powers = map[record.PowerState][2]string{
	record.PowerRunning: {"●", "good"}, record.PowerStopped: {"■", "muted"}, record.PowerPaused: {"‖", "warn"},
	record.PowerCrashed: {"✖", "bad"}, record.PowerStarting: {"↻", "warn"}, record.PowerUnknown: {"?", "warn"},
}

// power shows an instance's power state as mark does; "" (no instance)
// as a dash.
func power(p record.PowerState) template.HTML {
	if p == "" {
		return "—"
	}
	m, ok := powers[p]
	if !ok {
		m = [2]string{"·", "muted"}
	}
	return markAs(m, string(p))
}

// outcome shows a compile's outcome as mark does; a compile skipped for
// nothing changed is no warning (a resource skipped is).
func outcome(o record.CompileOutcome) template.HTML {
	if o == record.CompileSkipped {
		return markAs([2]string{"=", "muted"}, string(o))
	}
	return mark(o)
}

// labels writes labels as key=value, sorted.
func labels(l map[string]string) string {
	out := make([]string, 0, len(l))
	for k, v := range l {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
