package model

import (
	"encoding/json"
	"math"
)

// Typed reads of attribute values, one per type of the catalogue. A value
// comes as JSON decodes it (string, bool, json.Number or float64, []any,
// map[string]any) or as Go code builds it ([]string, integers); each
// reader accepts every form of its type, so code that acts on attributes
// (handlers) never asserts a type itself. A value that is unset, null or
// of another type reads as unset (ok false): CheckKind refuses a resource
// with such a value before a handler is asked to act on it.

// String returns attribute name as a string.
func (a Attributes) String(name string) (string, bool) {
	s, ok := a[name].(string)
	return s, ok
}

// Bool returns attribute name as a bool: its value, and whether it is set.
func (a Attributes) Bool(name string) (value, ok bool) {
	b, ok := a[name].(bool)
	return b, ok
}

// Number returns attribute name as a number.
func (a Attributes) Number(name string) (float64, bool) {
	return numberValue(a[name])
}

// Int returns attribute name as a whole number (a uid); a number with a
// fraction, or beyond int64, reads as unset.
func (a Attributes) Int(name string) (int64, bool) {
	if n, ok := a[name].(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return i, true
		}
	}
	f, ok := numberValue(a[name])
	if !ok || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}

// StringList returns attribute name as a list of strings.
func (a Attributes) StringList(name string) ([]string, bool) {
	v := a[name]
	if !hasType(v, TypeStringList) {
		return nil, false
	}
	return stringList(v), true
}

// StringMap returns attribute name as a map from strings to strings.
func (a Attributes) StringMap(name string) (map[string]string, bool) {
	v := a[name]
	if !hasType(v, TypeStringMap) {
		return nil, false
	}
	return stringMap(v), true
}
