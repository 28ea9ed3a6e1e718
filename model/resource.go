package model

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Resource is one unit of intent: a thing on one agent in a desired state.
type Resource struct {
	ID ID `json:"id"`
	// Attributes are the desired properties. The identity attribute (ID.Key)
	// is always present and equal to ID.Value.
	Attributes Attributes `json:"attributes"`
	// Requires lists resources that must be deployed before this one, possibly
	// on other agents.
	Requires []ID `json:"requires,omitempty"`
	// Subscribes lists resources whose change triggers this resource's reload.
	Subscribes []ID `json:"subscribes,omitempty"`
	// Purged asks for the thing to be absent.
	Purged bool `json:"purged,omitempty"`
	// Sensitive names attributes that are never logged nor shown in clear.
	Sensitive []string `json:"sensitive,omitempty"`
	// Sealed holds sensitive values encrypted, by attribute name: an
	// attribute sealed here is absent from Attributes. The server seals
	// every sensitive value as it takes a version in, and the values stay
	// sealed in its store, on the bus and in the agent's journal; the
	// agent opens them in memory only, just before a handler acts on the
	// resource (package model/secret).
	Sealed map[string]Sealed `json:"sealed,omitempty"`
	// Undefined marks a resource whose attributes depend on a value not known
	// at compile time (a fact not yet reported); it is not deployed.
	Undefined bool `json:"undefined,omitempty"`
}

// ErrInvalidResource is wrapped by every error Resource.Validate returns.
var ErrInvalidResource = errors.New("invalid resource")

// Validate checks the resource's shape: a valid ID, attributes with a canonical
// form, an identity attribute matching the ID, valid and non-self references.
func (r *Resource) Validate() error {
	if err := r.ID.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidResource, err)
	}
	if _, err := Canonical(r.Attributes); err != nil {
		return fmt.Errorf("%w %s: %w", ErrInvalidResource, r.ID, err)
	}
	if !r.Undefined {
		v, ok := r.Attributes[r.ID.Key]
		if s, isString := v.(string); !ok || !isString || s != r.ID.Value {
			return fmt.Errorf("%w %s: identity attribute %q must be %q", ErrInvalidResource, r.ID, r.ID.Key, r.ID.Value)
		}
	}
	for name, v := range r.Sealed {
		switch _, clear := r.Attributes[name]; {
		case !r.IsSensitive(name):
			return fmt.Errorf("%w %s: sealed attribute %q is not marked sensitive", ErrInvalidResource, r.ID, name)
		case clear:
			return fmt.Errorf("%w %s: attribute %q is both sealed and in clear", ErrInvalidResource, r.ID, name)
		case v.Digest.IsZero() || len(v.Box) == 0 || v.To == "":
			return fmt.Errorf("%w %s: sealed attribute %q lacks its digest, its box or its key", ErrInvalidResource, r.ID, name)
		}
	}
	for _, list := range [][]ID{r.Requires, r.Subscribes} {
		for _, dep := range list {
			if err := dep.Validate(); err != nil {
				return fmt.Errorf("%w %s: reference: %w", ErrInvalidResource, r.ID, err)
			}
			if dep == r.ID {
				return fmt.Errorf("%w %s: refers to itself", ErrInvalidResource, r.ID)
			}
		}
	}
	return nil
}

// Sealed is a sensitive value encrypted: under the server's key at rest, to
// one agent's key-agreement key on the bus and in that agent's journal.
//
// Digest stands for the value in the resource's hash (Canonical): a keyed
// digest of the clear value (an HMAC under a secret only the server holds),
// bound to the resource and the attribute. The hash of a resource then
// still changes exactly when its intent does (an unchanged secret keeps its
// digest whoever it is sealed to, a changed one changes it), yet whoever
// sees a hash or a digest (a broker administrator, a database reader)
// cannot test guesses of the value against it, as they could against a
// hash over the clear value.
type Sealed struct {
	Digest Hash `json:"digest"`
	// To names the key the value is sealed to: SealedToServer, or the
	// fingerprint of an agent's key-agreement key.
	To string `json:"to"`
	// Box is the ciphertext. It is not part of the hash: sealing the same
	// value again gives another box.
	Box []byte `json:"box"`
}

// SealedToServer is Sealed.To of a value sealed at rest, under the
// server's key.
const SealedToServer = "server"

// ClearSensitive lists, sorted, the sensitive attributes whose value the
// resource holds in clear (in Attributes).
func (r *Resource) ClearSensitive() []string {
	var out []string
	for _, name := range r.Sensitive {
		if _, ok := r.Attributes[name]; ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// IsSensitive reports whether the attribute is marked sensitive.
func (r *Resource) IsSensitive(attr string) bool {
	return slices.Contains(r.Sensitive, attr)
}

// Hash is the SHA-256 of a resource's canonical form. Equal hash ⇔ equal intent.
type Hash [sha256.Size]byte

// String returns the hash in lower-case hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is the zero hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// MarshalText implements encoding.TextMarshaler.
func (h Hash) MarshalText() ([]byte, error) {
	b := make([]byte, hex.EncodedLen(len(h)))
	hex.Encode(b, h[:])
	return b, nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (h *Hash) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(h) {
		return fmt.Errorf("hash %q: want %d hex digits", b, 2*len(h))
	}
	_, err := hex.Decode(h[:], b)
	if err != nil {
		return fmt.Errorf("hash %q: %w", b, err)
	}
	return nil
}

// ParseHash parses a hex hash.
func ParseHash(s string) (Hash, error) {
	var h Hash
	err := h.UnmarshalText([]byte(s))
	return h, err
}

// Canonical returns the canonical JSON of the parts of the resource that make
// up its intent: type, ID, attributes, requires and subscribes (sorted, since
// their order carries no meaning), purged, the digests of sealed values
// when there are any, and undefined when set. Sensitive markers only change
// how values are shown, so they are not part of it; nor are the boxes of
// sealed values, which differ for each key and each sealing of one value.
//
// A sensitive value in clear is part of it as it is: only the compiler's
// output and the server's input hold such values. The server seals them
// before it hashes, stores or sends anything, so every hash it keeps,
// shows or sends, and every hash an agent computes, is over digests.
func (r *Resource) Canonical() ([]byte, error) {
	return r.appendCanonical(make([]byte, 0, 256))
}

func (r *Resource) appendCanonical(buf []byte) ([]byte, error) {
	var err error
	buf = append(buf, `{"attributes":`...)
	if buf, err = AppendCanonical(buf, r.Attributes); err != nil {
		return buf, fmt.Errorf("resource %s: %w", r.ID, err)
	}
	buf = append(buf, `,"id":`...)
	if buf, err = appendString(buf, r.ID.String()); err != nil {
		return buf, fmt.Errorf("resource id: %w", err)
	}
	buf = append(buf, `,"purged":`...)
	if r.Purged {
		buf = append(buf, "true"...)
	} else {
		buf = append(buf, "false"...)
	}
	buf = append(buf, `,"requires":`...)
	if buf, err = appendIDs(buf, r.Requires); err != nil {
		return buf, fmt.Errorf("resource %s: requires: %w", r.ID, err)
	}
	if len(r.Sealed) > 0 {
		buf = append(buf, `,"sealed":{`...)
		for i, name := range slices.Sorted(maps.Keys(r.Sealed)) {
			if i > 0 {
				buf = append(buf, ',')
			}
			if buf, err = appendString(buf, name); err != nil {
				return buf, fmt.Errorf("resource %s: sealed: %w", r.ID, err)
			}
			buf = append(buf, `:"`...)
			d := r.Sealed[name].Digest
			buf = hex.AppendEncode(buf, d[:])
			buf = append(buf, '"')
		}
		buf = append(buf, '}')
	}
	buf = append(buf, `,"subscribes":`...)
	if buf, err = appendIDs(buf, r.Subscribes); err != nil {
		return buf, fmt.Errorf("resource %s: subscribes: %w", r.ID, err)
	}
	buf = append(buf, `,"type":`...)
	if buf, err = appendString(buf, r.ID.Type); err != nil {
		return buf, fmt.Errorf("resource type: %w", err)
	}
	if r.Undefined {
		buf = append(buf, `,"undefined":true`...)
	}
	return append(buf, '}'), nil
}

func appendIDs(buf []byte, ids []ID) ([]byte, error) {
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = id.String()
	}
	slices.Sort(strs)
	strs = slices.Compact(strs)
	buf = append(buf, '[')
	for i, s := range strs {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = appendString(buf, s); err != nil {
			return buf, err
		}
	}
	return append(buf, ']'), nil
}

// Hash returns the SHA-256 of the resource's canonical form.
func (r *Resource) Hash() (Hash, error) {
	b, err := r.Canonical()
	if err != nil {
		return Hash{}, err
	}
	return sha256.Sum256(b), nil
}

// Redacted returns a copy of the attributes with sensitive values, in clear
// or sealed, replaced, for logs and API answers.
func (r *Resource) Redacted() Attributes {
	if len(r.Sensitive) == 0 && len(r.Sealed) == 0 {
		return r.Attributes
	}
	out := make(Attributes, len(r.Attributes)+len(r.Sealed))
	for k, v := range r.Attributes {
		if r.IsSensitive(k) {
			v = RedactedValue
		}
		out[k] = v
	}
	for k := range r.Sealed {
		out[k] = RedactedValue
	}
	return out
}

// Redact returns a copy of the resource to show: its sensitive values
// replaced by RedactedValue, in clear or sealed (no box is shown either).
func (r Resource) Redact() Resource {
	if len(r.Sensitive) == 0 && len(r.Sealed) == 0 {
		return r
	}
	r.Attributes = r.Redacted()
	r.Sealed = nil
	return r
}

// RedactedValue stands in for a sensitive value wherever one would be shown.
const RedactedValue = "(sensitive)"
