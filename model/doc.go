// Package model holds the vocabulary every other part of Tether speaks: resource
// identifiers, resources and their attributes, the canonical hash that decides
// whether two resources express the same intent, versions of an environment,
// the per-agent slice of a version, the diff between two slices, and the typed
// resource and compliance states.
//
// The package depends on the standard library only, so the compiler, the server
// and the agent can all share it without dragging each other's dependencies
// along.
package model
