package api

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// schemas derives the OpenAPI document's JSON Schemas (OpenAPI 3.0's
// dialect) from the Go types the handlers read and write, as
// encoding/json writes and reads them: json tags name the properties, a
// field without omitempty is required, a pointer, slice or map written
// as null when nil is nullable, embedded structs lend their fields.
// Every named struct, and every enumerated string type, is a component
// that the document refers to with $ref, so the document cannot refer
// to a schema it does not define.
type schemas struct {
	// defs are the components, by name; names the name of each type
	// given one.
	defs  map[string]any
	names map[reflect.Type]string
	// seen are the types met, for tests.
	seen map[reflect.Type]bool
	// issues are what the types do not say (a type that writes itself
	// with MarshalJSON and has no schema in special, two types of one
	// name): a test fails on them.
	issues []string
}

func newSchemas() *schemas {
	return &schemas{defs: map[string]any{}, names: map[reflect.Type]string{}, seen: map[reflect.Type]bool{}}
}

// obj is a schema, or any part of the document, as JSON writes it.
type obj = map[string]any

var (
	timeType       = reflect.TypeFor[time.Time]()
	marshalerType  = reflect.TypeFor[json.Marshaler]()
	textMarshaler  = reflect.TypeFor[encoding.TextMarshaler]()
	rawMessageType = reflect.TypeFor[json.RawMessage]()
)

// of returns T's type: the route table names its bodies so.
func of[T any]() reflect.Type { return reflect.TypeFor[T]() }

// schema returns the schema of a value of type t where it appears: a
// $ref to t's component, or t's schema inline.
func (s *schemas) schema(t reflect.Type) obj {
	s.seen[t] = true
	if sc, ok := special[t]; ok {
		return clone(sc)
	}
	if vals, ok := enumValues()[t]; ok {
		return s.component(t, func() obj { return obj{"type": "string", "enum": vals} })
	}
	if t.Kind() != reflect.Pointer && t != rawMessageType && (t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType)) {
		s.issues = append(s.issues, fmt.Sprintf("%s writes itself with MarshalJSON: give its schema in special (server/api/schemas.go)", t))
		return obj{}
	}
	if t.Kind() != reflect.Pointer && (t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler)) {
		return obj{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return obj{"type": "boolean"}
	case reflect.Int, reflect.Int64:
		return obj{"type": "integer", "format": "int64"}
	case reflect.Int8, reflect.Int16, reflect.Int32:
		return obj{"type": "integer", "format": "int32"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return obj{"type": "integer", "minimum": 0}
	case reflect.Float32:
		return obj{"type": "number", "format": "float"}
	case reflect.Float64:
		return obj{"type": "number", "format": "double"}
	case reflect.String:
		return obj{"type": "string"}
	case reflect.Interface:
		// Any JSON value, null included.
		return obj{"nullable": true}
	case reflect.Pointer:
		return s.schema(t.Elem())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !t.Elem().Implements(marshalerType) && !t.Elem().Implements(textMarshaler) {
			return obj{"type": "string", "format": "byte"}
		}
		return obj{"type": "array", "items": s.schema(t.Elem())}
	case reflect.Array:
		return obj{"type": "array", "items": s.schema(t.Elem()), "minItems": t.Len(), "maxItems": t.Len()}
	case reflect.Map:
		return obj{"type": "object", "additionalProperties": s.schema(t.Elem())}
	case reflect.Struct:
		if t.Name() == "" {
			return s.object(t)
		}
		return s.component(t, func() obj { return s.object(t) })
	}
	s.issues = append(s.issues, fmt.Sprintf("%s: JSON cannot carry a %s", t, t.Kind()))
	return obj{}
}

// component returns a $ref to t's component, made by build the first
// time.
func (s *schemas) component(t reflect.Type, build func() obj) obj {
	name, ok := s.names[t]
	if !ok {
		name = componentName(t)
		for other, n := range s.names {
			if n == name {
				s.issues = append(s.issues, fmt.Sprintf("%s and %s are both named %s: name one in componentNames (server/api/schemas.go)", other, t, name))
			}
		}
		s.names[t] = name
		s.defs[name] = obj{} // taken: a type that refers to itself finds it
		sc := build()
		if d := typeDescriptions[t]; d != "" {
			sc["description"] = d
		}
		s.defs[name] = sc
	}
	return obj{"$ref": "#/components/schemas/" + name}
}

// componentName is a type's name in the document: its Go name, unless
// componentNames gives another.
func componentName(t reflect.Type) string {
	if n, ok := componentNames[t]; ok {
		return n
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, t.Name())
}

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	name      string
	typ       reflect.Type
	omitempty bool
	quoted    bool // ",string"
	tagged    bool
	depth     int
	owner     reflect.Type
}

// object is a struct's schema: its fields, with those of its embedded
// structs, as encoding/json writes them.
func (s *schemas) object(t reflect.Type) obj {
	props := obj{}
	var required []string
	for _, f := range jsonFields(t) {
		var p obj
		switch sc, ok := fieldSchemas()[f.owner][f.name]; {
		case ok:
			p = clone(sc)
		case f.quoted:
			p = obj{"type": "string"}
		default:
			p = s.schema(f.typ)
		}
		if !f.omitempty && nullable(f.typ) {
			p = nullableSchema(p)
		}
		if d := fieldDescriptions[f.owner][f.name]; d != "" {
			p = described(p, d)
		}
		props[f.name] = p
		if !f.omitempty {
			required = append(required, f.name)
		}
	}
	sc := obj{"type": "object", "properties": props}
	if len(required) > 0 {
		slices.Sort(required)
		sc["required"] = required
	}
	return sc
}

// nullable reports whether encoding/json writes a nil value of t as null.
func nullable(t reflect.Type) bool {
	if _, ok := special[t]; ok {
		return false
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		return true
	}
	return false
}

// nullableSchema makes p accept null too: a $ref cannot take a sibling in
// OpenAPI 3.0, so it is wrapped.
func nullableSchema(p obj) obj {
	if _, ok := p["$ref"]; ok {
		return obj{"allOf": []any{p}, "nullable": true}
	}
	p["nullable"] = true
	return p
}

// described adds a description to p (wrapping a $ref, which takes no
// sibling).
func described(p obj, d string) obj {
	if _, ok := p["$ref"]; ok {
		return obj{"allOf": []any{p}, "description": d}
	}
	p["description"] = d
	return p
}

// jsonFields lists t's fields as encoding/json does: exported ones,
// those of embedded structs promoted, a name held at a shallower depth
// hiding deeper ones, two at one depth hiding each other unless one of
// them is tagged.
func jsonFields(t reflect.Type) []jsonField {
	var all []jsonField
	var walk func(t reflect.Type, depth int, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, depth int, seen map[reflect.Type]bool) {
		if seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := sf.Type
			if sf.Anonymous {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if !sf.IsExported() && et.Kind() != reflect.Struct {
					continue
				}
				if name == "" && et.Kind() == reflect.Struct {
					walk(et, depth+1, seen)
					continue
				}
			} else if !sf.IsExported() {
				continue
			}
			f := jsonField{name: name, typ: ft, tagged: name != "", depth: depth, owner: t}
			if f.name == "" {
				f.name = sf.Name
			}
			for o := range strings.SplitSeq(opts, ",") {
				switch o {
				case "omitempty", "omitzero":
					f.omitempty = true
				case "string":
					switch ft.Kind() {
					case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
						reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
						f.quoted = true
					}
				}
			}
			all = append(all, f)
		}
	}
	walk(t, 0, map[reflect.Type]bool{})
	byName := map[string][]jsonField{}
	var order []string
	for _, f := range all {
		if byName[f.name] == nil {
			order = append(order, f.name)
		}
		byName[f.name] = append(byName[f.name], f)
	}
	var out []jsonField
	for _, name := range order {
		fs := byName[name]
		least := slices.MinFunc(fs, func(a, b jsonField) int { return a.depth - b.depth }).depth
		var top []jsonField
		for _, f := range fs {
			if f.depth == least {
				top = append(top, f)
			}
		}
		if len(top) > 1 {
			var tagged []jsonField
			for _, f := range top {
				if f.tagged {
					tagged = append(tagged, f)
				}
			}
			top = tagged
		}
		if len(top) == 1 {
			out = append(out, top[0])
		}
	}
	return out
}

// clone copies a schema written once (special), so that the document's
// parts never share a map.
func clone(sc obj) obj {
	b, _ := json.Marshal(sc)
	var out obj
	_ = json.Unmarshal(b, &out)
	return out
}
