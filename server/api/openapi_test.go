package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/api"
)

// document is the API's OpenAPI document as JSON.
func document(t testing.TB) []byte {
	t.Helper()
	b, err := json.Marshal(api.New(api.Config{}, api.Services{}, zerolog.Nop()).Document())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOpenAPIValid: the document is a valid OpenAPI 3.0 document for
// kin-openapi's loader and validator (every $ref resolves, every schema
// is well formed), and the route table and the types leave nothing out
// (a type that writes itself has a schema, two types do not share a
// name, every description names a field there is).
func TestOpenAPIValid(t *testing.T) {
	a := api.New(api.Config{}, api.Services{}, zerolog.Nop())
	for _, issue := range a.DocumentIssues() {
		t.Error(issue)
	}
	doc, err := openapi3.NewLoader().LoadFromData(document(t))
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableSchemaFormatValidation()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if got := len(doc.Paths.Map()); got < 60 {
		t.Fatalf("%d paths, want the whole route table", got)
	}
}

// TestOpenAPIEveryOperationTyped walks every operation of the document:
// each success answers a typed JSON body (a $ref or a typed schema; the
// document itself is the one free-form object), or nothing (204), or the
// event stream; each body read is typed the same way, or a raw archive
// or push payload; every parameter has a type; every error status
// answers the catalogue's error.
func TestOpenAPIEveryOperationTyped(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(document(t))
	if err != nil {
		t.Fatal(err)
	}
	typed := func(s *openapi3.SchemaRef) bool {
		return s != nil && (s.Ref != "" || s.Value != nil && s.Value.Type != nil && len(s.Value.Type.Slice()) == 1 ||
			s.Value != nil && len(s.Value.AllOf) == 1 && s.Value.AllOf[0].Ref != "")
	}
	ops := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops++
			where := method + " " + path
			successes := 0
			for status, r := range op.Responses.Map() {
				code, _ := strconv.Atoi(status)
				switch {
				case status == "default" || code >= 400:
					mt := r.Value.Content.Get("application/json")
					if mt == nil || mt.Schema == nil || mt.Schema.Ref != "#/components/schemas/Error" {
						t.Errorf("%s: error %s does not answer the Error schema", where, status)
					}
				case code == http.StatusNoContent:
					successes++
					if len(r.Value.Content) > 0 {
						t.Errorf("%s: 204 with a body", where)
					}
				case code >= 200 && code < 300:
					successes++
					if mt := r.Value.Content.Get("text/event-stream"); mt != nil {
						continue
					}
					mt := r.Value.Content.Get("application/json")
					switch {
					case mt == nil:
						t.Errorf("%s: %s has no JSON body", where, status)
					case !typed(mt.Schema):
						t.Errorf("%s: %s answers an untyped body", where, status)
					case path != "/api/v1/openapi.json" && mt.Schema.Value.Type.Is("object") && len(mt.Schema.Value.Properties) == 0:
						if ap := mt.Schema.Value.AdditionalProperties.Schema; ap == nil || !typed(ap) {
							t.Errorf("%s: %s answers a free-form object", where, status)
						}
					}
				default:
					t.Errorf("%s: status %s", where, status)
				}
			}
			if successes == 0 {
				t.Errorf("%s: no success answer", where)
			}
			if rb := op.RequestBody; rb != nil {
				for ct, mt := range rb.Value.Content {
					if ct == "application/json" && !typed(mt.Schema) {
						t.Errorf("%s: untyped request body", where)
					}
					if ct != "application/json" && !typed(mt.Schema) {
						t.Errorf("%s: untyped %s body", where, ct)
					}
				}
			}
			for _, p := range op.Parameters {
				if !typed(p.Value.Schema) {
					t.Errorf("%s: parameter %s has no type", where, p.Value.Name)
				}
			}
		}
	}
	if ops < 75 {
		t.Fatalf("%d operations, want every route", ops)
	}
}

// answered are the operations (method and path of the document) the
// server answered under conform.
var answered sync.Map

// TestMain runs the package's tests, then, when every one of them ran
// and passed, fails if the server never answered an operation of the
// OpenAPI document under conform: every operation's answer is checked
// against the document by some test.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == "" {
		if missing := unanswered(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: no test of server/api had the server answer these operations of its OpenAPI document, "+
				"so their answers were never checked against it: %s; add a test that calls them\n", strings.Join(missing, ", "))
			code = 1
		}
	}
	os.Exit(code)
}

// unanswered lists the operations of the document no test had answered.
func unanswered() []string {
	c, err := strictDocument()
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			if _, ok := answered.Load(method + " " + path); !ok {
				out = append(out, method+" "+path)
			}
		}
	}
	slices.Sort(out)
	return out
}

// conformance checks the API's answers against its OpenAPI document, made
// strict: an object may hold only the properties its schema names (as a
// client generated from the document reads them), and the requests it
// took (the document must not refuse what the server takes). Every test
// server of this package serves through it, so every answer any test gets
// is checked against the document.
type conformance struct {
	doc    *openapi3.T
	router routers.Router
}

var strictDocument = sync.OnceValues(func() (*conformance, error) {
	var raw map[string]any
	a := api.New(api.Config{}, api.Services{}, zerolog.Nop())
	b, err := json.Marshal(a.Document())
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	closeObjects(raw)
	if b, err = json.Marshal(raw); err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	doc.Servers = openapi3.Servers{{URL: "/"}} // what it means without servers
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &conformance{doc: doc, router: router}, nil
})

// closeObjects sets additionalProperties false on every schema of an
// object that lists its properties and says nothing of others.
func closeObjects(v any) {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["properties"]; ok && v["type"] == "object" {
			if _, ok := v["additionalProperties"]; !ok {
				v["additionalProperties"] = false
			}
		}
		for _, e := range v {
			closeObjects(e)
		}
	case []any:
		for _, e := range v {
			closeObjects(e)
		}
	}
}

// conform serves h, checking each answer of a route of the document
// against it, and each request of a route it took; a mismatch fails t.
func conform(t testing.TB, h http.Handler) http.Handler {
	c, err := strictDocument()
	if err != nil {
		t.Fatalf("the OpenAPI document: %v", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		route, params, err := c.router.FindRoute(req)
		if err != nil {
			if !strings.HasPrefix(req.URL.Path, "/api/") {
				h.ServeHTTP(w, req) // health, metrics, the console
				return
			}
			// Not an operation of the document: the API must answer
			// that there is no such route.
			rec := &recorder{ResponseWriter: w}
			h.ServeHTTP(rec, req)
			if rec.status != http.StatusNotFound && rec.status != http.StatusMethodNotAllowed && rec.status != http.StatusTooManyRequests && !rec.failed && rec.status != 0 {
				t.Errorf("%s %s answered %d, but the OpenAPI document has no such operation (%v)", req.Method, req.URL.Path, rec.status, err)
			}
			return
		}
		answered.Store(route.Method+" "+route.Path, true)
		// What the handler reads of the body is kept, to check a request
		// the server took against the document too.
		var sent bytes.Buffer
		if req.Body != nil {
			req.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(req.Body, &sent), req.Body}
		}
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, req)
		if err := c.check(req, route, params, rec); err != nil {
			t.Errorf("%s %s answered %d, not as the OpenAPI document says: %v\nbody: %.2000s", req.Method, req.URL.Path, rec.status, err, rec.body.Bytes())
		}
		if rec.status >= 200 && rec.status < 300 {
			if err := c.checkRequest(req, route, params, sent.Bytes()); err != nil {
				t.Errorf("%s %s was taken (%d), but the OpenAPI document refuses it: %v\nbody: %.2000s", req.Method, req.URL.Path, rec.status, err, sent.Bytes())
			}
		}
	})
}

// check checks one answer.
func (c *conformance) check(req *http.Request, route *routers.Route, params map[string]string, rec *recorder) error {
	if rec.failed || rec.status == 0 {
		return nil // the client went away, or the connection was cut: nothing was answered
	}
	status := strconv.Itoa(rec.status)
	if rec.status < 400 && route.Operation.Responses.Value(status) == nil {
		return fmt.Errorf("status %d is not one the operation answers (%v)", rec.status, slices.Sorted(func(yield func(string) bool) {
			for k := range route.Operation.Responses.Map() {
				if !yield(k) {
					return
				}
			}
		}))
	}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
		if route.Operation.Responses.Value(status).Value.Content.Get("text/event-stream") == nil {
			return fmt.Errorf("an event stream where the document says otherwise")
		}
		return nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 rec.status,
		Header:                 rec.Header(),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(rec.body.Bytes())
	return openapi3filter.ValidateResponse(req.Context(), in)
}

// checkRequest checks a request the server took against the document
// (strict, as the server is: it refuses unknown fields): the document must
// not refuse what the server takes.
func (c *conformance) checkRequest(req *http.Request, route *routers.Route, params map[string]string, body []byte) error {
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	if len(body) == 0 {
		r.Body, r.ContentLength = http.NoBody, 0
	}
	// The server reads a body as what the operation takes, whatever its
	// Content-Type says (tests send none, or application/json for all).
	if rb := route.Operation.RequestBody; rb != nil && len(body) > 0 {
		ct, _, _ := strings.Cut(req.Header.Get("Content-Type"), ";")
		if rb.Value.Content.Get(ct) == nil {
			r.Header.Set("Content-Type", slices.Sorted(maps.Keys(rb.Value.Content))[0])
		}
	}
	return openapi3filter.ValidateRequest(req.Context(), &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}})
}

// recorder keeps what a handler answers while passing it on.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
	stream bool
	failed bool
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
		r.stream = strings.HasPrefix(r.Header().Get("Content-Type"), "text/event-stream")
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !r.stream {
		r.body.Write(b)
	}
	n, err := r.ResponseWriter.Write(b)
	if err != nil {
		r.failed = true
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushes).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

var _ io.Writer = (*recorder)(nil)
