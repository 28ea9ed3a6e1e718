package compile

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/server/event"
	"github.com/tetherhq/tether/server/record"
)

// diagnostics are the compiler's diagnostics of the model in dir as a
// report keeps them, their files relative to the source's root.
func diagnostics(dir string, ds []lang.Diagnostic) []record.CompileDiagnostic {
	out := make([]record.CompileDiagnostic, 0, len(ds))
	for _, d := range ds {
		if rel, err := filepath.Rel(dir, d.File); err == nil && filepath.IsAbs(d.File) && !strings.HasPrefix(rel, "..") {
			d.File = filepath.ToSlash(rel)
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		out = append(out, record.CompileDiagnostic{File: d.File, Line: d.Start.Line, Col: d.Start.Column, Severity: string(d.Severity), Message: msg})
	}
	return out
}

// firstError is the first error of a report's diagnostics, as file:line:col:
// message.
func firstError(ds []record.CompileDiagnostic) string {
	i := slices.IndexFunc(ds, func(d record.CompileDiagnostic) bool { return d.Severity == string(lang.SeverityError) })
	if i < 0 {
		return "failed"
	}
	return diagnosticString(ds[i])
}

func diagnosticString(d record.CompileDiagnostic) string {
	switch {
	case d.File == "":
		return d.Message
	case d.Col == 0: // a block's line, from the machines' room
		return fmt.Sprintf("%s:%d: %s", d.File, d.Line, d.Message)
	}
	return fmt.Sprintf("%s:%d:%d: %s", d.File, d.Line, d.Col, d.Message)
}

// alertCompile raises a compile.failed alert when a compile fails after
// one that did not (the first of a streak), and a compile.recovered one
// when a compile succeeds after a streak of failures. The newest compile
// alert says where the environment stands, so the streak survives a
// restart.
func (cc *Compiler) alertCompile(ctx context.Context, c record.Compile) {
	last, err := cc.store.Alerts(ctx, record.AlertFilter{Env: c.Env, Kinds: []record.AlertKind{record.AlertCompileFailed, record.AlertCompileRecovered}, Limit: 1})
	if err != nil {
		cc.log.Warn().Err(err).Str("env", c.Env).Msg("cannot read the compile alerts; none raised")
		return
	}
	failing := len(last) > 0 && last[0].Kind == record.AlertCompileFailed && last[0].Compliance == model.NonCompliant
	var a record.Alert
	kind := event.CompileAlert
	switch {
	case c.Outcome == record.CompileFailed && !failing:
		a = record.Alert{Kind: record.AlertCompileFailed, Compliance: model.NonCompliant,
			Message: fmt.Sprintf("compile %s of revision %q failed: %s", c.ID, c.Revision, firstError(c.Diagnostics))}
	case c.Outcome != record.CompileFailed && failing:
		a = record.Alert{Kind: record.AlertCompileRecovered, Compliance: model.Compliant, Version: c.Version,
			Message: fmt.Sprintf("compile %s of revision %q succeeded (%s): compiles fail no more", c.ID, c.Revision, c.Outcome)}
		kind = event.CompileRecovered
	default:
		return
	}
	a.At, a.Env = time.Now().UTC(), c.Env
	ev := event.Event{Kind: kind, Env: c.Env, Alert: &a, At: a.At}
	events, err := event.InLog(&ev)
	if err != nil {
		cc.log.Error().Err(err).Str("env", c.Env).Msg("cannot record a compile alert")
		return
	}
	if err := cc.store.RecordAlerts(ctx, []record.Alert{a}, events...); err != nil {
		cc.log.Warn().Err(err).Str("env", c.Env).Msg("cannot record a compile alert")
		return
	}
	cc.feed.Logged(ev)
}
