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

// AttrSpec declares one attribute of a resource kind. CheckKind judges
// resources by it (for the compiler, the server and the handlers alike), so
// the attributes of a kind are declared exactly once.
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

// ErrUnknownKind is wrapped by the error for a resource type that is
// neither built in nor namespaced (vendor:type).
var ErrUnknownKind = errors.New("unknown kind")

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

// KindRule names the part of a kind's declaration a resource breaks.
type KindRule string

// The rules of the catalogue, in the order they are judged.
const (
	// RuleKind: the type is neither a built-in kind nor namespaced.
	RuleKind KindRule = "kind"
	// RuleIdentity: the ID's key is not the kind's identity attribute.
	RuleIdentity KindRule = "identity"
	// RuleUnknown: the kind has no such attribute.
	RuleUnknown KindRule = "unknown"
	// RuleType: the value is not of the attribute's type.
	RuleType KindRule = "type"
	// RuleValue: the value fails the attribute's check.
	RuleValue KindRule = "value"
	// RulePurged: a purged resource carries more than its identity and
	// purge options.
	RulePurged KindRule = "purged"
	// RuleRequired: a required attribute, or one of a set (OneOf), is not
	// set.
	RuleRequired KindRule = "required"
)

// KindError is one way a resource breaks its kind's declaration: the
// attribute at fault, the rule, and what was expected. It wraps
// ErrInvalidAttribute (ErrUnknownKind for RuleKind) and Err.
type KindError struct {
	// ID is the resource's; zero when only attributes were checked
	// (KindSpec.Problems).
	ID ID
	// Attr is the attribute at fault: for RuleIdentity the ID's key, for
	// RuleRequired the missing attribute ("" for a OneOf set), for
	// RuleKind "".
	Attr string
	Rule KindRule
	// Err says what was wrong and what was expected. For RuleValue it is
	// the attribute's Check error as it is.
	Err error
}

func (e *KindError) Error() string {
	msg := e.Err.Error()
	// A check's message may name its attribute already (`mode "5": …`).
	if e.Rule == RuleValue && !strings.HasPrefix(msg, e.Attr+" ") {
		msg = e.Attr + ": " + msg
	}
	if e.ID.IsZero() {
		return msg
	}
	return e.ID.String() + ": " + msg
}

func (e *KindError) Unwrap() []error {
	if e.Rule == RuleKind {
		return []error{ErrUnknownKind, e.Err}
	}
	return []error{ErrInvalidAttribute, e.Err}
}

// CheckKind checks a resource against the catalogue: the one rule book for
// every resource of a built-in kind, whoever made it. The compiler applies
// it to what it produces (KindSpec.Problems, with diagnostics at their
// place), the server to every version uploaded, handlers to what they are
// asked to enforce (handler.Declared). A namespaced type (vendor:type) is
// not the catalogue's and passes; another type that is not a built-in kind
// is refused. The error is a *KindError naming the resource and the
// attribute. CheckKind does not check the resource's shape (Validate).
func CheckKind(res *Resource) error {
	k, ok := lookupKind(res.ID.Type)
	if ok {
		return k.CheckResource(res)
	}
	if strings.Contains(res.ID.Type, ":") {
		return nil
	}
	return &KindError{ID: res.ID, Rule: RuleKind, Err: fmt.Errorf("%q is not a built-in kind (kinds: %s); a kind of your own is namespaced, like vendor:%s",
		res.ID.Type, strings.Join(KindNames(), ", "), res.ID.Type)}
}

// MarkSensitive adds to res.Sensitive every attribute that res sets and its
// kind declares always sensitive (a password hash), so a resource that did
// not come from the compiler is shown redacted all the same. Sensitive
// markers are not part of a resource's hash.
func MarkSensitive(res *Resource) {
	k, ok := lookupKind(res.ID.Type)
	if !ok {
		return
	}
	for _, a := range k.Attrs {
		if _, set := res.Attributes[a.Name]; set && a.Sensitive && !res.IsSensitive(a.Name) {
			res.Sensitive = append(res.Sensitive, a.Name)
			slices.Sort(res.Sensitive)
		}
	}
}

// CheckResource is CheckKind for a resource of kind k: its ID names k's
// identity attribute, then the first of Problems, with the resource's ID.
func (k *KindSpec) CheckResource(res *Resource) error {
	if res.ID.Key != k.Identity {
		return &KindError{ID: res.ID, Attr: res.ID.Key, Rule: RuleIdentity,
			Err: fmt.Errorf("%s resources are identified by %q, not %q", k.Kind, k.Identity, res.ID.Key)}
	}
	if p := k.problems(res.Attributes, res.Sealed, res.Purged, res.Undefined); len(p) > 0 {
		e := p[0]
		e.ID = res.ID
		return &e
	}
	return nil
}

// Problems judges attributes against the declaration. Values come first:
// every unknown attribute (sorted), then every declared one whose value has
// the wrong type or fails its check (in declaration order). Only when all
// values are right does it look at what is set: a purged resource may carry
// nothing but its identity and purge options; another, unless undefined
// (its attributes wait for facts), needs its required attributes. It
// returns nil when all is well.
func (k *KindSpec) Problems(attrs Attributes, purged, undefined bool) []KindError {
	return k.problems(attrs, nil, purged, undefined)
}

// problems is Problems of a resource with sealed values: they count as set,
// and only their names are judged (their values are not known here).
func (k *KindSpec) problems(attrs Attributes, sealed map[string]Sealed, purged, undefined bool) []KindError {
	if len(sealed) > 0 {
		all := make(Attributes, len(attrs)+len(sealed))
		maps.Copy(all, attrs)
		for n := range sealed {
			all[n] = nil
		}
		attrs = all
	}
	var out []KindError
	known := 0
	for _, a := range k.Attrs {
		v, ok := attrs[a.Name]
		if !ok {
			continue
		}
		known++
		if _, isSealed := sealed[a.Name]; isSealed {
			continue
		}
		if err := a.checkValue(v); err != nil {
			out = append(out, *err)
		}
	}
	if known < len(attrs) {
		var unknown []KindError
		for _, n := range slices.Sorted(maps.Keys(attrs)) {
			if _, ok := k.Attr(n); !ok {
				unknown = append(unknown, KindError{Attr: n, Rule: RuleUnknown,
					Err: fmt.Errorf("%s has no attribute %q (it has %s)", k.Kind, n, strings.Join(k.AttrNames(), ", "))})
			}
		}
		out = append(unknown, out...)
	}
	if len(out) > 0 {
		return out
	}
	if purged {
		if n := k.NotWhenPurged(slices.Sorted(maps.Keys(attrs))); n != "" {
			return []KindError{{Attr: n, Rule: RulePurged,
				Err: fmt.Errorf("a purged %s takes no attributes but its %s: remove %s", k.Kind, k.Identity, n)}}
		}
		return nil
	}
	if undefined {
		return nil
	}
	if err := k.CheckRequired(func(name string) bool { _, ok := attrs[name]; return ok }); err != nil {
		return []KindError{*err.(*KindError)}
	}
	return nil
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

// CheckRequired reports, as a *KindError of RuleRequired, the first
// required attribute that set says is not set, or a OneOf set none of
// which is. The compiler also calls it on a block's static shape.
func (k *KindSpec) CheckRequired(set func(name string) bool) error {
	for _, a := range k.Attrs {
		if a.Required && !set(a.Name) {
			return &KindError{Attr: a.Name, Rule: RuleRequired, Err: fmt.Errorf("%s requires %s (%s)", k.Kind, a.Name, a.Doc)}
		}
	}
	if len(k.OneOf) > 0 && !slices.ContainsFunc(k.OneOf, set) {
		return &KindError{Rule: RuleRequired, Err: fmt.Errorf("%s requires one of %s: %s", k.Kind, strings.Join(k.OneOf, ", "), k.OneOfWhy)}
	}
	return nil
}

// checkValue checks a value against the attribute's type and check.
func (a *AttrSpec) checkValue(v any) *KindError {
	if !hasType(v, a.Type) {
		return &KindError{Attr: a.Name, Rule: RuleType,
			Err: fmt.Errorf("%s must be a %s, not %s: %s", a.Name, a.Type, describeValue(v, !a.Sensitive), a.Doc)}
	}
	if a.Check != nil {
		if err := a.Check(v); err != nil {
			return &KindError{Attr: a.Name, Rule: RuleValue, Err: err}
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

// describeValue says what v is for a message about a value of the wrong
// type: "a string", "the number 5" (a number's or bool's value only when
// show is set: never for a sensitive attribute).
func describeValue(v any, show bool) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		if show {
			return fmt.Sprintf("the bool %v", v)
		}
		return "a bool"
	case json.Number, float64, float32, int, int64, int32, uint32, uint64:
		if show {
			return fmt.Sprintf("the number %v", v)
		}
		return "a number"
	case []any, []string:
		return "a list"
	case map[string]any, Attributes:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
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
