package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Event kinds the event log folds: the results of one agent's report are
// stored as one row of kind EventResults, whose data is a result event's
// with "results" (a list) in place of "result". The event stream, and the
// webhooks, unfold it into one EventResult per element, as if each had
// been logged alone.
const (
	EventResult  = "resource.result"
	EventResults = "resource.results"
)

// Unfold returns the events a stored row stands for, as the event stream
// shows them: the row itself, or each element of a folded row (kind
// EventResult, the data of one result event, in the order of the row's
// keys).
func Unfold(kind string, data []byte) (kinds []string, events [][]byte, err error) {
	if kind != EventResults {
		return []string{kind}, [][]byte{data}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, fmt.Errorf("a folded event is not a JSON object")
	}
	var fields []jsonField
	var results []json.RawMessage
	at := -1 // where "results" was, for "result"
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("a folded event: %w", err)
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, fmt.Errorf("a folded event: %s: %w", key, err)
		}
		if key == "results" {
			if err := json.Unmarshal(v, &results); err != nil {
				return nil, nil, fmt.Errorf("a folded event: results: %w", err)
			}
			at = len(fields)
			continue
		}
		if key == "kind" {
			v = json.RawMessage(strconv.Quote(EventResult))
		}
		fields = append(fields, jsonField{key, v})
	}
	if at < 0 {
		return nil, nil, fmt.Errorf("a folded event without results")
	}
	head, tail := objectPart(fields[:at]), objectPart(fields[at:])
	for _, r := range results {
		var b bytes.Buffer
		b.WriteByte('{')
		b.WriteString(head)
		if head != "" {
			b.WriteByte(',')
		}
		b.WriteString(`"result":`)
		b.Write(r)
		if tail != "" {
			b.WriteByte(',')
			b.WriteString(tail)
		}
		b.WriteByte('}')
		kinds, events = append(kinds, EventResult), append(events, b.Bytes())
	}
	return kinds, events, nil
}

// jsonField is a key and value of a JSON object.
type jsonField struct {
	key   string
	value json.RawMessage
}

// objectPart writes fields as the inside of a JSON object.
func objectPart(fields []jsonField) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		k, _ := json.Marshal(f.key) // a string: never fails
		parts[i] = string(k) + ":" + string(f.value)
	}
	return strings.Join(parts, ",")
}

// EventID is the ID the event stream shows for the element i of the
// stored row id: the row's own ID when it is not folded (folded false).
func EventID(id int64, i int, folded bool) string {
	s := strconv.FormatInt(id, 10)
	if folded {
		s += "." + strconv.Itoa(i)
	}
	return s
}

// ParseEventID parses an ID EventID made: a row's ID, and the element
// seen last of it (-1: the whole row).
func ParseEventID(s string) (id int64, elem int, err error) {
	row, e, dotted := strings.Cut(s, ".")
	if id, err = strconv.ParseInt(row, 10, 64); err != nil || id < 0 {
		return 0, 0, fmt.Errorf("event ID %q: want a number, or number.element", s)
	}
	if !dotted {
		return id, -1, nil
	}
	if elem, err = strconv.Atoi(e); err != nil || elem < 0 {
		return 0, 0, fmt.Errorf("event ID %q: want a number, or number.element", s)
	}
	return id, elem, nil
}
