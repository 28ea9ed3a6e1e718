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
	// TypeStringList is a list of strings (JSON array).
	TypeStringList AttrType = "list(string)"
	// TypeStringMap is a map from strings to strings (JSON object).
	TypeStringMap AttrType = "map(string)"
)

// AttrSpec declares one attribute of a resource kind. The compiler checks
// models against it and handlers validate resources with it, so the attributes
// of a kind are declared exactly once.
type AttrSpec struct {
	Name string
	Type AttrType
	Doc  string
	// Required attributes must be set unless the resource is purged.
	Required bool
	// Sensitive attributes are always redacted (a password hash), whether
	// or not the model marks their value sensitive.
	Sensitive bool
	// Check validates a value beyond its type (nil: any value of the type).
	Check func(v any) error
	// PurgeOption marks an attribute that says how to purge (a directory's
	// recurse): besides the identity, the only kind a purged resource may
	// carry.
	PurgeOption bool
}

// KindSpec declares a built-in resource kind.
type KindSpec struct {
	Kind string
	// Identity is the attribute that identifies a resource of this kind on an
	// agent (path for files, name for packages). It is always a string.
	Identity string
	Doc      string
	Attrs    []AttrSpec
	// OneOf, when set, lists attributes of which at least one must be set
	// unless the resource is purged; OneOfWhy says why.
	OneOf    []string
	OneOfWhy string
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

// CheckResource checks a resource's attributes: CheckAttributes, then that
// every required attribute is set, unless the resource is purged (a thing
// that must be absent needs only its identity).
func (k *KindSpec) CheckResource(attrs Attributes, purged bool) error {
	if err := k.CheckAttributes(attrs); err != nil {
		return err
	}
	if purged {
		return nil
	}
	return k.CheckRequired(func(name string) bool { _, ok := attrs[name]; return ok })
}

// NotWhenPurged returns the first of names, in order, that a purged
// resource may not carry: neither the identity nor a purge option ("" if
// none).
func (k *KindSpec) NotWhenPurged(names []string) string {
	for _, n := range names {
		if n == k.Identity {
			continue
		}
		if a, ok := k.Attr(n); ok && a.PurgeOption {
			continue
		}
		return n
	}
	return ""
}

// CheckRequired reports the first required attribute that set says is not
// set.
func (k *KindSpec) CheckRequired(set func(name string) bool) error {
	for _, a := range k.Attrs {
		if a.Required && !set(a.Name) {
			return fmt.Errorf("%w: %s requires %s (%s)", ErrInvalidAttribute, k.Kind, a.Name, a.Doc)
		}
	}
	if len(k.OneOf) > 0 && !slices.ContainsFunc(k.OneOf, set) {
		return fmt.Errorf("%w: %s requires one of %s: %s", ErrInvalidAttribute, k.Kind, strings.Join(k.OneOf, ", "), k.OneOfWhy)
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
	case TypeStringList:
		switch l := v.(type) {
		case []string:
			return true
		case []any:
			for _, e := range l {
				if _, ok := e.(string); !ok {
					return false
				}
			}
			return true
		}
	case TypeStringMap:
		switch m := v.(type) {
		case map[string]string:
			return true
		case map[string]any:
			for _, e := range m {
				if _, ok := e.(string); !ok {
					return false
				}
			}
			return true
		case Attributes:
			for _, e := range m {
				if _, ok := e.(string); !ok {
					return false
				}
			}
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
