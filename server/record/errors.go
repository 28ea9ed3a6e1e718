package record

import "errors"

// Errors of the server's operations that the API maps to codes and the
// command line to advice.
var (
	// ErrHalted: the environment is halted; deploys wait for a resume.
	ErrHalted = errors.New("environment is halted")
	// ErrNoAgents: an operation targets no agent that can take it.
	ErrNoAgents = errors.New("no accepted agent to deploy to")
	// ErrNoRelease: the environment has no released version yet.
	ErrNoRelease = errors.New("environment has no released version")
)
