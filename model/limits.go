package model

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on the names and texts that enter the server, from API clients
// and from agents. They are defined here, once, so that the API, the store
// and the ingest path refuse the same things, and every stored row, log
// line and answer stays small whatever a client sends. (Identifiers have
// their own limits: ValidateEnvName, ValidateAgentName, ID.Validate.)
const (
	// MaxNameLen bounds the free-form names people give things: API
	// tokens and enrollment tokens.
	MaxNameLen = 128
	// MaxTextLen bounds short texts: a version's metadata (compiler,
	// source revision, exporter).
	MaxTextLen = 1024
	// MaxSettingLen bounds an environment setting's key and value as
	// written ("deploy_interval", "10m").
	MaxSettingLen = 64
	// MaxLabels bounds an agent's labels; MaxLabelKeyLen and
	// MaxLabelValueLen each label.
	MaxLabels        = 64
	MaxLabelKeyLen   = 63
	MaxLabelValueLen = 255
	// MaxAuditLen bounds an audit entry's actor, target and detail: longer
	// ones are clipped (Clip), never refused, since the change they record
	// was made.
	MaxAuditLen = 1024
	// MaxAgentsPerRequest bounds the agents one operation names.
	MaxAgentsPerRequest = 10_000
	// MaxFactsSize bounds an agent's facts as JSON: they are stored, and
	// read by every compile.
	MaxFactsSize = 1 << 20
)

// ErrInvalidText is wrapped by errors about free-form names and texts.
var ErrInvalidText = errors.New("invalid text")

// ValidateText checks a free-form name or text called field: valid UTF-8,
// no control characters, at most max bytes; required texts are not empty.
// The error never repeats the text, which may be huge.
func ValidateText(field, s string, max int, required bool) error {
	switch {
	case s == "" && required:
		return fmt.Errorf("%w: %s is required", ErrInvalidText, field)
	case len(s) > max:
		return fmt.Errorf("%w: %s is %d bytes long: at most %d", ErrInvalidText, field, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidText, field)
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		return fmt.Errorf("%w: %s has a control character at byte %d", ErrInvalidText, field, i)
	}
	return nil
}

// ValidateLabels checks an agent's labels: at most MaxLabels, keys
// identifiers like role or env.tier (letters, digits, '.', '-', '_') of at
// most MaxLabelKeyLen bytes, values texts of at most MaxLabelValueLen.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%w: %d labels: at most %d", ErrInvalidText, len(labels), MaxLabels)
	}
	for k, v := range labels {
		if k == "" || len(k) > MaxLabelKeyLen || strings.IndexFunc(k, notLabelKey) >= 0 {
			return fmt.Errorf("%w: label key %q: use letters, digits, '.', '-' and '_', at most %d bytes", ErrInvalidText, Clip(k, 64), MaxLabelKeyLen)
		}
		if err := ValidateText("label "+k, v, MaxLabelValueLen, false); err != nil {
			return err
		}
	}
	return nil
}

func notLabelKey(r rune) bool {
	return !(r < utf8.RuneSelf && (isAlnum(byte(r)) || r == '.' || r == '-' || r == '_'))
}

// Validate checks a version's metadata.
func (m VersionMeta) Validate() error {
	for _, f := range []struct{ name, value string }{{"meta.compiler", m.Compiler}, {"meta.source", m.Source}, {"meta.exported_by", m.ExportedBy}} {
		if err := ValidateText(f.name, f.value, MaxTextLen, false); err != nil {
			return err
		}
	}
	return nil
}

// Clip returns s cut to at most max bytes, at a character boundary, and
// marked "…" when cut: for messages and records that repeat what a client
// sent.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
