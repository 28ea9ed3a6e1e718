package api_test

import (
	"testing"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// Asking for a compile takes an operator, and a server without sources
// answers it with a conflict saying what to do; viewers read the reports.
func TestCompileRoutes(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	viewer := r.token("dash", record.RoleViewer, "")
	operator := r.token("ci", record.RoleOperator, "prod")
	if _, code := r.do(viewer, "POST", "/api/v1/envs/prod/compile", nil, nil); code != "forbidden" {
		t.Fatalf("compile asked by a viewer: %q, want forbidden", code)
	}
	if status, code := r.do(operator, "POST", "/api/v1/envs/prod/compile", nil, nil); status != 409 || code != "conflict" {
		t.Fatalf("compile without a source: %d %q, want 409 conflict", status, code)
	}
	if _, code := r.do(operator, "POST", "/api/v1/envs/nope/compile", nil, nil); code != "not_found" && code != "forbidden" {
		t.Fatalf("compile of a missing environment: %q", code)
	}
	var list []record.Compile
	r.must(viewer, "GET", "/api/v1/envs/prod/compiles", nil, &list, 200)
	if len(list) != 0 {
		t.Fatalf("compiles %+v, want none", list)
	}
	if _, code := r.do(viewer, "GET", "/api/v1/envs/prod/compiles/0b4c7a52-8a2d-4a86-a0c5-6d0e2b2f0d11", nil, nil); code != "not_found" {
		t.Fatalf("unknown compile: %q, want not_found", code)
	}
}
