package api

import (
	"net/http"
	"slices"
	"strings"
)

// openapi serves an OpenAPI 3.0 document built from the route table, so it
// lists exactly what is served, with the role each operation needs.
func (a *API) openapi(r *request) (int, any, error) { return http.StatusOK, a.Document(), nil }

// Document returns the API's OpenAPI document.
func (a *API) Document() map[string]any {
	paths := map[string]map[string]any{}
	for _, rt := range a.routes() {
		p := "/api/v1" + openapiPath(rt.path)
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		var params []map[string]any
		for _, seg := range strings.Split(rt.path, "/") {
			if name, ok := strings.CutPrefix(seg, ":"); ok {
				params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]string{"type": "string"}})
			}
		}
		for _, q := range rt.query {
			params = append(params, map[string]any{"name": q, "in": "query", "schema": map[string]string{"type": "string"}})
		}
		desc := rt.summary
		if rt.role != "" {
			desc += ". Needs role " + string(rt.role)
			if rt.global {
				desc += " on every environment"
			}
			desc += "."
		}
		op := map[string]any{
			"summary":     rt.summary,
			"description": desc,
			"operationId": strings.ToLower(rt.method) + strings.NewReplacer("/", "_", ":", "", "{", "", "}", "").Replace(rt.path),
			"responses": map[string]any{
				"2XX":     map[string]any{"description": "success", "content": map[string]any{"application/json": map[string]any{}}},
				"default": map[string]any{"description": "error", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}},
			},
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if rt.body != "" {
			op["requestBody"] = map[string]any{"description": rt.body, "content": map[string]any{"application/json": map[string]any{}}}
		}
		if rt.role == "" {
			op["security"] = []any{}
		}
		paths[p][strings.ToLower(rt.method)] = op
	}
	codes := make([]string, 0, len(Codes))
	for c := range Codes {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":       "Tether API",
			"version":     a.cfg.Version,
			"description": "Every request but this document carries Authorization: Bearer <token>. Errors are {\"error\": {code, message, hint}}; codes are stable.",
		},
		"paths":    paths,
		"security": []any{map[string]any{"bearer": []any{}}},
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
			"schemas": map[string]any{
				"Error": map[string]any{"type": "object", "properties": map[string]any{"error": map[string]any{"type": "object", "properties": map[string]any{
					"code":    map[string]any{"type": "string", "enum": codes},
					"message": map[string]any{"type": "string"},
					"hint":    map[string]any{"type": "string"},
				}}}},
			},
		},
	}
}

// openapiPath writes echo's :param as OpenAPI's {param}.
func openapiPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			segs[i] = "{" + name + "}"
		}
	}
	return strings.Join(segs, "/")
}
