// Package model holds the vocabulary the agent, the compiler and the server
// all speak: resource identifiers, resources and their attributes, the kind
// catalogue, the canonical hash that decides whether two resources express
// the same intent, versions of an environment, the per-agent slice of a
// version, the diff between two slices, the typed resource and compliance
// states, the drift policy, facts and inventories, and the errors every layer
// matches. The server's own records live in server/record.
//
// The package depends on the standard library only, so the compiler, the server
// and the agent can all share it without dragging each other's dependencies
// along.
package model
