package model

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrInvalidID is wrapped by every error that rejects a resource identifier.
var ErrInvalidID = errors.New("invalid resource id")

// Limits on the parts of an ID. They keep identifiers usable as database keys,
// log fields and AMQP routing-key fragments.
const (
	maxTypeLen  = 64
	maxAgentLen = 253
	maxKeyLen   = 64
	maxValueLen = 4096
)

// ID identifies one resource on one agent: `type[agent,key=value]`, for example
// `file[web-1,path=/etc/motd]` or `package[web-1,name=nginx]`.
//
// Key is the resource's identity attribute (path for files, name for packages)
// and Value its value. Value runs to the closing bracket at the very end of the
// string, so it may itself contain brackets, commas and equal signs: a path like
// `/srv/a,b=[c]` needs no escaping and printing always round-trips.
type ID struct {
	Type  string
	Agent string
	Key   string
	Value string
}

// String prints the ID in its canonical form; ParseID(id.String()) == id for
// every valid id.
func (id ID) String() string {
	var b strings.Builder
	b.Grow(len(id.Type) + len(id.Agent) + len(id.Key) + len(id.Value) + 4)
	b.WriteString(id.Type)
	b.WriteByte('[')
	b.WriteString(id.Agent)
	b.WriteByte(',')
	b.WriteString(id.Key)
	b.WriteByte('=')
	b.WriteString(id.Value)
	b.WriteByte(']')
	return b.String()
}

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id == ID{} }

// Compare orders IDs by their printed form's components, so sorting is stable
// across processes and languages: type, agent, key, value.
func (id ID) Compare(o ID) int {
	if c := strings.Compare(id.Type, o.Type); c != 0 {
		return c
	}
	if c := strings.Compare(id.Agent, o.Agent); c != 0 {
		return c
	}
	if c := strings.Compare(id.Key, o.Key); c != 0 {
		return c
	}
	return strings.Compare(id.Value, o.Value)
}

// MarshalText implements encoding.TextMarshaler, so IDs are JSON strings.
func (id ID) MarshalText() ([]byte, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	return []byte(id.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *ID) UnmarshalText(b []byte) error {
	p, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// ParseID parses `type[agent,key=value]`.
func ParseID(s string) (ID, error) {
	open := strings.IndexByte(s, '[')
	if open < 0 {
		return ID{}, fmt.Errorf("%w %q: want type[agent,key=value]", ErrInvalidID, s)
	}
	if !strings.HasSuffix(s, "]") || len(s) < open+2 {
		return ID{}, fmt.Errorf("%w %q: missing closing ']' at the end", ErrInvalidID, s)
	}
	inner := s[open+1 : len(s)-1]
	comma := strings.IndexByte(inner, ',')
	if comma < 0 {
		return ID{}, fmt.Errorf("%w %q: missing ',' between agent and key", ErrInvalidID, s)
	}
	rest := inner[comma+1:]
	eq := strings.IndexByte(rest, '=')
	if eq < 0 {
		return ID{}, fmt.Errorf("%w %q: missing '=' between key and value", ErrInvalidID, s)
	}
	id := ID{Type: s[:open], Agent: inner[:comma], Key: rest[:eq], Value: rest[eq+1:]}
	if err := id.Validate(); err != nil {
		return ID{}, err
	}
	return id, nil
}

// MustParseID is ParseID for identifiers known to be valid, such as constants
// in tests; it panics on an invalid ID.
func MustParseID(s string) ID {
	id, err := ParseID(s)
	if err != nil {
		panic(err)
	}
	return id
}

// Validate checks every part of the ID.
func (id ID) Validate() error {
	if err := ValidateType(id.Type); err != nil {
		return err
	}
	if err := ValidateAgentName(id.Agent); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidID, err)
	}
	if !isIdent(id.Key, maxKeyLen) {
		return fmt.Errorf("%w: key %q: want a lower-case identifier like path or name", ErrInvalidID, id.Key)
	}
	return validateIDValue(id.Value)
}

// ValidateType checks a resource type: a lower-case identifier, optionally
// namespaced `vendor:type` for plug-in handlers.
func ValidateType(t string) error {
	if len(t) > maxTypeLen {
		return fmt.Errorf("%w: type %q is longer than %d characters", ErrInvalidID, t, maxTypeLen)
	}
	ns, name, found := strings.Cut(t, ":")
	if found && isIdent(ns, maxTypeLen) && isIdent(name, maxTypeLen) {
		return nil
	}
	if !found && isIdent(t, maxTypeLen) {
		return nil
	}
	return fmt.Errorf("%w: type %q: want a lower-case identifier like file or vendor:thing", ErrInvalidID, t)
}

// ErrInvalidName is wrapped by errors about agent and environment names.
var ErrInvalidName = errors.New("invalid name")

// ValidateAgentName checks an agent name: letters, digits, '.', '-' and '_',
// starting with a letter or digit (host names and FQDNs fit).
func ValidateAgentName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: agent name is empty", ErrInvalidName)
	}
	if len(name) > maxAgentLen {
		return fmt.Errorf("%w: agent name %q is longer than %d characters", ErrInvalidName, name, maxAgentLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case isAlnum(c):
		case i > 0 && (c == '.' || c == '-' || c == '_'):
		default:
			return fmt.Errorf("%w: agent name %q: use letters, digits, '.', '-' and '_', starting with a letter or digit", ErrInvalidName, name)
		}
	}
	return nil
}

// ValidateEnvName checks an environment name: lower-case letters, digits, '-'
// and '_', starting with a letter, at most 63 characters. Environment names are
// routing-key prefixes on the bus, so they may not contain dots.
func ValidateEnvName(name string) error {
	ok := name != "" && len(name) <= 63 && name[0] >= 'a' && name[0] <= 'z'
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'
	}
	if !ok {
		return fmt.Errorf("%w: environment name %q: use lower-case letters, digits, '-' and '_', starting with a letter, at most 63 characters", ErrInvalidName, name)
	}
	return nil
}

func validateIDValue(v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: empty value", ErrInvalidID)
	case len(v) > maxValueLen:
		return fmt.Errorf("%w: value is longer than %d bytes", ErrInvalidID, maxValueLen)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: value %q is not valid UTF-8", ErrInvalidID, v)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: value %q contains a control character", ErrInvalidID, v)
		}
	}
	return nil
}

// isIdent reports whether s is a lower-case identifier: [a-z][a-z0-9_]*.
func isIdent(s string, max int) bool {
	if s == "" || len(s) > max || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '_' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}
