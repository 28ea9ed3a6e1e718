// Package openapiclient is a Go client of the Tether API that oapi-codegen
// generated from the API's OpenAPI document (docs/openapi.json). The api
// package's tests call a real server with it: a client generated from the
// document compiles, and reads what the server answers.
//
// After a change to the route table or to a type it reads or answers,
// write the document and this client again (openapigen's test fails until
// they are):
//
//	go test ./server/api/internal/openapigen -update
//
// which writes the client as this does from the document, with the
// pinned tool:
//
//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../../../docs/openapi.json
package openapiclient
