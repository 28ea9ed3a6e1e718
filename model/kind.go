package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
)

// AttrType is the type of an attribute's value.
type AttrType string

// Attribute types.
const (
	TypeString AttrType = "string"
	TypeNumber AttrType = "number"
	TypeBool   AttrType = "bool"
)

// AttrSpec declares one attribute of a resource kind. The compiler checks
// models against it and handlers validate resources with it, so the attributes
// of a kind are declared exactly once.
type AttrSpec struct {
	Name string
	Type AttrType
	Doc  string
	// Check validates a value beyond its type (nil: any value of the type).
	Check func(v any) error
}

// KindSpec declares a built-in resource kind.
type KindSpec struct {
	Kind string
	// Identity is the attribute that identifies a resource of this kind on an
	// agent (path for files, name for packages). It is always a string.
	Identity string
	Doc      string
	Attrs    []AttrSpec
}

// AttrPresent is the pseudo-attribute in which changes report existence
// (false → true: create, true → false: purge). No kind may declare it.
const AttrPresent = "present"

// ErrInvalidAttribute is wrapped by errors about attribute names and values.
var ErrInvalidAttribute = errors.New("invalid attribute")

// Attr returns the spec of attribute name.
func (k *KindSpec) Attr(name string) (AttrSpec, bool) {
	for _, a := range k.Attrs {
		if a.Name == name {
			return a, true
		}
	}
	return AttrSpec{}, false
}

// AttrNames lists the kind's attribute names in declaration order.
func (k *KindSpec) AttrNames() []string {
	out := make([]string, len(k.Attrs))
	for i, a := range k.Attrs {
		out[i] = a.Name
	}
	return out
}

// CheckAttributes rejects unknown attributes and values of the wrong type or
// failing their check. Errors name the attribute.
func (k *KindSpec) CheckAttributes(attrs Attributes) error {
	for _, n := range slices.Sorted(maps.Keys(attrs)) {
		spec, ok := k.Attr(n)
		if !ok {
			return fmt.Errorf("%w: %s has no attribute %q (it has %s)", ErrInvalidAttribute, k.Kind, n, strings.Join(k.AttrNames(), ", "))
		}
		if err := spec.CheckValue(attrs[n]); err != nil {
			return err
		}
	}
	return nil
}

// CheckValue checks a value against the attribute's type and check.
func (a *AttrSpec) CheckValue(v any) error {
	if !hasType(v, a.Type) {
		return fmt.Errorf("%w: %s must be a %s, got %s", ErrInvalidAttribute, a.Name, a.Type, describeJSONType(v))
	}
	if a.Check != nil {
		if err := a.Check(v); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidAttribute, a.Name, err)
		}
	}
	return nil
}

func hasType(v any, t AttrType) bool {
	switch t {
	case TypeString:
		_, ok := v.(string)
		return ok
	case TypeBool:
		_, ok := v.(bool)
		return ok
	case TypeNumber:
		switch v.(type) {
		case json.Number, float64, int, int64:
			return true
		}
	}
	return false
}

func describeJSONType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number, float64, float32, int, int64, int32, uint32, uint64:
		return "number"
	case []any, []string:
		return "list"
	case map[string]any, Attributes:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// Kinds returns the built-in kinds, sorted by name.
func Kinds() []KindSpec {
	return []KindSpec{directoryKind, fileKind}
}

// LookupKind returns the spec of a built-in kind.
func LookupKind(kind string) (KindSpec, bool) {
	for _, k := range Kinds() {
		if k.Kind == kind {
			return k, true
		}
	}
	return KindSpec{}, false
}

var (
	pathAttr  = AttrSpec{Name: "path", Type: TypeString, Doc: "absolute path on the host (below the agent's root prefix)", Check: checkAbsPath}
	ownerAttr = AttrSpec{Name: "owner", Type: TypeString, Doc: "user name or numeric uid; unmanaged when unset", Check: checkPrincipal}
	groupAttr = AttrSpec{Name: "group", Type: TypeString, Doc: "group name or numeric gid; unmanaged when unset", Check: checkPrincipal}
)

var fileKind = KindSpec{
	Kind:     "file",
	Identity: "path",
	Doc:      "a regular file with the given content, written atomically",
	Attrs: []AttrSpec{
		pathAttr,
		{Name: "content", Type: TypeString, Doc: "the file's full content; unmanaged when unset (an absent file is created empty)"},
		{Name: "mode", Type: TypeString, Doc: `permission bits in octal, e.g. "0644"; new files get 0644 when unset`, Check: checkMode},
		ownerAttr,
		groupAttr,
	},
}

var directoryKind = KindSpec{
	Kind:     "directory",
	Identity: "path",
	Doc:      "a directory; its parent must exist",
	Attrs: []AttrSpec{
		pathAttr,
		{Name: "mode", Type: TypeString, Doc: `permission bits in octal, e.g. "0755"; new directories get 0755 less the umask when unset`, Check: checkMode},
		ownerAttr,
		groupAttr,
	},
}

// ParseMode parses an octal permission string ("644", "0644", "2755").
func ParseMode(s string) (uint32, error) {
	if len(s) < 3 || len(s) > 4 {
		return 0, fmt.Errorf("mode %q: want 3 or 4 octal digits, like \"0644\"", s)
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("mode %q: want 3 or 4 octal digits, like \"0644\"", s)
	}
	return uint32(m), nil
}

// FormatMode prints permission bits as four octal digits.
func FormatMode(m uint32) string {
	return fmt.Sprintf("%04o", m&0o7777)
}

func checkMode(v any) error {
	_, err := ParseMode(v.(string))
	return err
}

// CheckAbsPath accepts absolute, clean paths without NUL bytes: `/etc/motd`,
// not `etc/motd`, `/etc/../motd` or `/etc/`.
func CheckAbsPath(p string) error {
	switch {
	case p == "":
		return errors.New("path is empty")
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is not absolute", p)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("path %q contains a NUL byte", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean (want %q)", p, path.Clean(p))
	case p == "/":
		return errors.New("path is the root directory")
	}
	return nil
}

func checkAbsPath(v any) error { return CheckAbsPath(v.(string)) }

func checkPrincipal(v any) error {
	s := v.(string)
	if s == "" || strings.ContainsAny(s, ": \t\n") {
		return fmt.Errorf("%q: want a user or group name, or a numeric id", s)
	}
	return nil
}
