// Package console is the operator console: a web UI that tether server
// serves at /. It is a server-rendered client of the REST API: each page
// calls the API in-process with the browser's session cookie (and, for a
// change, the session's CSRF token from the form), decodes its JSON and
// renders Go templates. Authorization, validation and the audit log stay
// the API's alone, so the console cannot do what its user may not.
//
// Pages update live: a little JavaScript follows the API's event stream
// and fetches the page's changing part again (?fragment=1) when an event
// touches it. Templates, the script and the style sheet are embedded.
//
// Each noun of the console has a file of its own (agents.go, hosts.go,
// versions.go, webhooks.go, …) holding only what its pages show and do.
// The steps every page takes are written once: a page handler gets a
// visit (visit.go) to ask the API, where a failure becomes the error
// page; list.go gets listings with their filters and pager; form.go
// serves a page of forms, whose actions post through the API and
// redirect with a flash message; call.go is the in-process API request.
package console

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"

	"github.com/rs/zerolog"
)

//go:embed templates/*.html static/*
var files embed.FS

// sessionCookie is the API's session cookie, forwarded to it.
const sessionCookie = "tether_session"

// PageSize is how many rows a listing shows at once.
const PageSize = 50

// Console serves the console's pages.
type Console struct {
	api   http.Handler
	log   zerolog.Logger
	pages map[string]*template.Template
	mux   *http.ServeMux
}

// New returns the console over api, the REST API's handler (it serves
// /api/v1).
func New(api http.Handler, log zerolog.Logger) (*Console, error) {
	c := &Console{api: api, log: log.With().Str("component", "console").Logger(), pages: map[string]*template.Template{}, mux: http.NewServeMux()}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" || name == "partials" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/partials.html", n)
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		c.pages[name] = t
	}
	static, err := fs.Sub(files, "static")
	if err != nil {
		return nil, err
	}
	c.routes(http.StripPrefix("/static/", http.FileServerFS(static)))
	return c, nil
}

// ServeHTTP serves a console page.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	c.mux.ServeHTTP(w, r)
}

// routes lists the console's pages. A page of a signed-in user is served
// through signedIn, which hands it a visit; the navigation entry it
// belongs to is the first argument.
func (c *Console) routes(static http.Handler) {
	m, in := c.mux, c.signedIn
	m.Handle("GET /static/", static)
	m.HandleFunc("GET /login", c.loginPage)
	m.HandleFunc("POST /login", c.login)
	m.HandleFunc("POST /logout", c.logout)
	m.HandleFunc("GET /{$}", in("home", home))
	m.HandleFunc("GET /envs/{env}", in("overview", overview))
	m.HandleFunc("GET /envs/{env}/agents", in("agents", agents))
	m.HandleFunc("POST /envs/{env}/agents", in("agents", agentAction))
	m.HandleFunc("GET /envs/{env}/agents/{name}", in("agents", agent))
	m.HandleFunc("GET /envs/{env}/resources", in("resources", resources))
	m.HandleFunc("GET /envs/{env}/resources/{id}", in("resources", resource))
	m.HandleFunc("GET /envs/{env}/versions", in("versions", versions))
	m.HandleFunc("GET /envs/{env}/versions/{n}", in("versions", version))
	m.HandleFunc("GET /envs/{env}/versions/{n}/release", in("versions", confirmRelease))
	m.HandleFunc("POST /envs/{env}/versions/{n}/release", in("versions", release))
	m.HandleFunc("POST /envs/{env}/versions/{n}/plan", in("versions", plan))
	m.HandleFunc("GET /envs/{env}/compiles", in("compiles", compiles))
	m.HandleFunc("GET /envs/{env}/deploys", in("deploys", deploys))
	m.HandleFunc("GET /envs/{env}/deploys/{id}", in("deploys", deploy))
	m.HandleFunc("GET /envs/{env}/alerts", in("alerts", alerts))
	m.HandleFunc("GET /envs/{env}/hosts", in("machines", hosts.show))
	m.HandleFunc("POST /envs/{env}/hosts", in("machines", hosts.post))
	m.HandleFunc("GET /envs/{env}/hosts/{name}", in("machines", host))
	m.HandleFunc("GET /envs/{env}/hosts/{name}/destroy", in("machines", confirmDestroy))
	m.HandleFunc("POST /envs/{env}/hosts/{name}/destroy", in("machines", destroy))
	m.HandleFunc("GET /envs/{env}/instances", in("machines", instances))
	m.HandleFunc("GET /envs/{env}/platforms", in("machines", platforms))
	m.HandleFunc("GET /envs/{env}/webhooks", in("webhooks", webhooks.show))
	m.HandleFunc("POST /envs/{env}/webhooks", in("webhooks", webhooks.post))
	m.HandleFunc("GET /envs/{env}/enrollment-tokens", in("enrollment", enrollTokens.show))
	m.HandleFunc("POST /envs/{env}/enrollment-tokens", in("enrollment", enrollTokens.post))
	m.HandleFunc("GET /audit", in("audit", audit))
	m.HandleFunc("GET /admin/users", in("users", users.show))
	m.HandleFunc("POST /admin/users", in("users", users.post))
	m.HandleFunc("GET /admin/tokens", in("tokens", tokens.show))
	m.HandleFunc("POST /admin/tokens", in("tokens", tokens.post))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, "error", http.StatusNotFound, &page{Title: "Not found", Error: &apiError{Status: http.StatusNotFound, Code: "not_found",
			Message: "there is no page " + r.URL.Path, Hint: "start from the home page"}})
	})
}
