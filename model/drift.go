package model

// DriftPolicy is what an agent does about drift.
type DriftPolicy string

// Drift policies.
const (
	// DriftAlert reports drift only.
	DriftAlert DriftPolicy = "alert"
	// DriftHeal reports drift, re-applies the intent and reports it restored.
	DriftHeal DriftPolicy = "heal"
)
