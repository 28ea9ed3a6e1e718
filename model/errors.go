package model

import "errors"

// Errors every layer matches without importing the package that returned
// them (the store, the API client): they live here, at the bottom.
var (
	// ErrNotFound: a named thing does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: a thing with that name or key exists already.
	ErrExists = errors.New("already exists")
	// ErrConflict: the change contradicts the stored state (releasing a
	// retired version, …).
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the input is malformed (a resource that does not
	// validate, an unknown state …).
	ErrInvalid = errors.New("invalid input")
	// ErrUnavailable: a service the answer depends on (the database, the
	// broker) cannot be reached; retry later.
	ErrUnavailable = errors.New("unavailable")
)
