package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Attributes are a resource's desired (or, from a handler, current) properties.
// Values are JSON values: nil, bool, string, numbers (float64, json.Number or
// Go integers), []any and map[string]any.
type Attributes map[string]any

// ErrInvalidValue is wrapped by errors about values that have no canonical JSON
// form (NaN, channels, invalid UTF-8 …).
var ErrInvalidValue = errors.New("invalid attribute value")

// maxValueDepth bounds the nesting of attribute values so hostile input cannot
// exhaust the stack.
const maxValueDepth = 64

// Canonical returns the canonical JSON encoding of v: object keys sorted by
// their UTF-8 bytes, no insignificant white space, no HTML escaping, numbers in
// their shortest form (integers without a fraction or exponent). Two values with
// the same canonical encoding express the same intent.
func Canonical(v any) ([]byte, error) {
	return AppendCanonical(nil, v)
}

// AppendCanonical appends the canonical JSON encoding of v to buf.
func AppendCanonical(buf []byte, v any) ([]byte, error) {
	return appendCanonical(buf, v, 0)
}

func appendCanonical(buf []byte, v any, depth int) ([]byte, error) {
	if depth > maxValueDepth {
		return buf, fmt.Errorf("%w: nested deeper than %d levels", ErrInvalidValue, maxValueDepth)
	}
	switch x := v.(type) {
	case nil:
		return append(buf, "null"...), nil
	case bool:
		return strconv.AppendBool(buf, x), nil
	case string:
		return appendString(buf, x)
	case json.Number:
		return appendNumber(buf, x)
	case float64:
		return appendFloat(buf, x)
	case float32:
		return appendFloat(buf, float64(x))
	case int:
		return strconv.AppendInt(buf, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(buf, x, 10), nil
	case int32:
		return strconv.AppendInt(buf, int64(x), 10), nil
	case uint32:
		return strconv.AppendUint(buf, uint64(x), 10), nil
	case uint64:
		return strconv.AppendUint(buf, x, 10), nil
	case []any:
		buf = append(buf, '[')
		for i, e := range x {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendCanonical(buf, e, depth+1); err != nil {
				return buf, err
			}
		}
		return append(buf, ']'), nil
	case []string:
		buf = append(buf, '[')
		for i, e := range x {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendString(buf, e); err != nil {
				return buf, err
			}
		}
		return append(buf, ']'), nil
	case Attributes:
		return appendObject(buf, x, depth)
	case map[string]any:
		return appendObject(buf, x, depth)
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, s := range x {
			m[k] = s
		}
		return appendObject(buf, m, depth)
	default:
		return buf, fmt.Errorf("%w: unsupported type %T", ErrInvalidValue, v)
	}
}

func appendObject(buf []byte, m map[string]any, depth int) ([]byte, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	buf = append(buf, '{')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = appendString(buf, k); err != nil {
			return buf, err
		}
		buf = append(buf, ':')
		if buf, err = appendCanonical(buf, m[k], depth+1); err != nil {
			return buf, err
		}
	}
	return append(buf, '}'), nil
}

const hexDigits = "0123456789abcdef"

func appendString(buf []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return buf, fmt.Errorf("%w: string is not valid UTF-8", ErrInvalidValue)
	}
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case '\t':
			buf = append(buf, '\\', 't')
		default:
			buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"'), nil
}

func appendNumber(buf []byte, n json.Number) ([]byte, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return strconv.AppendInt(buf, i, 10), nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return buf, fmt.Errorf("%w: number %q: %w", ErrInvalidValue, string(n), err)
	}
	return appendFloat(buf, f)
}

// appendFloat prints integral values below 2^53 as integers, others in Go's
// shortest round-tripping form.
func appendFloat(buf []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return buf, fmt.Errorf("%w: %v has no JSON form", ErrInvalidValue, f)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.AppendInt(buf, int64(f), 10), nil
	}
	return strconv.AppendFloat(buf, f, 'g', -1, 64), nil
}

// Equal reports whether two attribute values have the same canonical form, so
// 1, 1.0 and json.Number("1") are equal, and map key order never matters.
// Values that cannot be encoded are equal only to nothing.
func Equal(a, b any) bool {
	// Fast paths for the common scalar cases.
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	ca, err := Canonical(a)
	if err != nil {
		return false
	}
	cb, err := Canonical(b)
	if err != nil {
		return false
	}
	return bytes.Equal(ca, cb)
}

// DecodeJSON decodes a JSON document keeping numbers as json.Number, so
// integers of any size survive a round trip unchanged.
func DecodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}
