package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/model"
)

// How values and errors come back from the drivers.

// Classify is how a store's Conn explains its driver's errors: nil and
// errors that say what they mean already (a sentinel of model or of this
// package, the end of the context) stay as they are, the driver's noRows is
// model.ErrNotFound, and the rest is for explain to say.
func Classify(err, noRows error, explain func(error) error) error {
	if err == nil {
		return nil
	}
	for _, known := range []error{model.ErrNotFound, model.ErrExists, model.ErrConflict, model.ErrInvalid, model.ErrUnavailable,
		ErrLocked, ErrCorrupt, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, known) {
			return err
		}
	}
	if errors.Is(err, noRows) {
		return model.ErrNotFound
	}
	return explain(err)
}

// Classified returns a driver's row with its errors explained by classify
// (for a store's Conn.QueryRow).
func Classified(row Row, classify func(error) error) Row {
	return classifiedRow{row, classify}
}

// ClassifiedRows returns a driver's rows with their errors explained by
// classify, closed by close (for a store's Conn.Query).
func ClassifiedRows(rows interface {
	Row
	Next() bool
	Err() error
}, close func(), classify func(error) error) Rows {
	return classifiedRows{classifiedRow{rows, classify}, rows, close}
}

type classifiedRow struct {
	row      Row
	classify func(error) error
}

func (r classifiedRow) Scan(dest ...any) error { return r.classify(r.row.Scan(dest...)) }

type classifiedRows struct {
	classifiedRow
	rows interface {
		Next() bool
		Err() error
	}
	close func()
}

func (r classifiedRows) Next() bool { return r.rows.Next() }
func (r classifiedRows) Err() error { return r.classify(r.rows.Err()) }
func (r classifiedRows) Close()     { r.close() }

// timeCol scans a time column: a TIMESTAMPTZ in PostgreSQL, Unix
// nanoseconds in SQLite.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(src any) error {
	switch v := src.(type) {
	case time.Time:
		*c.t = v.UTC()
	case int64:
		*c.t = time.Unix(0, v).UTC()
	default:
		return fmt.Errorf("%w: %T in a time column", ErrCorrupt, src)
	}
	return nil
}

// idCol scans a resource ID column.
type idCol struct{ id *model.ID }

func (c idCol) Scan(src any) error {
	var text string
	switch v := src.(type) {
	case string:
		text = v
	case []byte:
		text = string(v)
	default:
		return fmt.Errorf("%w: %T in a resource ID column", ErrCorrupt, src)
	}
	id, err := model.ParseID(text)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	*c.id = id
	return nil
}

// hashCol scans a hash column.
type hashCol struct{ h *model.Hash }

func (c hashCol) Scan(src any) error {
	b, ok := src.([]byte)
	if !ok || len(b) != len(c.h) {
		return fmt.Errorf("%w: %T of %d bytes in a hash column", ErrCorrupt, src, len(b))
	}
	copy(c.h[:], b)
	return nil
}

// nullTimeCol scans a time column that may be NULL.
type nullTimeCol struct{ t **time.Time }

func (c nullTimeCol) Scan(src any) error {
	if src == nil {
		*c.t = nil
		return nil
	}
	var t time.Time
	if err := (timeCol{&t}).Scan(src); err != nil {
		return err
	}
	*c.t = &t
	return nil
}
