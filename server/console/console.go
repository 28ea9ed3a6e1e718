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
package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/record"
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

// apiError is the API's answer to a request it refused.
type apiError struct {
	Status     int
	Code       string `json:"code"`
	Message    string `json:"message"`
	Hint       string `json:"hint"`
	RetryAfter string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// call makes one API request for the browser's request r: its session
// cookie and client address go along (so that login throttling and rate
// limits count the browser, as the API would for a direct call), and for
// a change the CSRF token the page's form carries. The JSON answer is
// decoded into out (when not nil). Its headers are returned.
func (c *Console) call(r *http.Request, method, path string, body, out any) (http.Header, error) {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, "/api/v1"+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.RemoteAddr, req.TLS, req.Host = r.RemoteAddr, r.TLS, r.Host
	for _, k := range []string{"X-Forwarded-For", "User-Agent"} {
		if v := r.Header.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	if ck, err := r.Cookie(sessionCookie); err == nil {
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: ck.Value})
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if method != http.MethodGet {
		req.Header.Set("X-CSRF-Token", r.PostFormValue("csrf"))
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	c.api.ServeHTTP(rec, req)
	if rec.status >= 400 {
		var b struct {
			Error *apiError `json:"error"`
		}
		if json.Unmarshal(rec.body.Bytes(), &b) != nil || b.Error == nil {
			b.Error = &apiError{Code: "internal", Message: http.StatusText(rec.status)}
		}
		b.Error.Status, b.Error.RetryAfter = rec.status, rec.header.Get("Retry-After")
		return rec.header, b.Error
	}
	if out != nil && rec.body.Len() > 0 {
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			return rec.header, fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return rec.header, nil
}

// recorder keeps an in-process API answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (w *recorder) Header() http.Header { return w.header }
func (w *recorder) Write(b []byte) (int, error) {
	w.wrote = true
	return w.body.Write(b)
}
func (w *recorder) WriteHeader(s int) {
	if !w.wrote {
		w.status, w.wrote = s, true
	}
}

// session is the logged-in user, as GET /api/v1/session tells.
type session struct {
	User record.User `json:"user"`
	Org  string      `json:"org"`
	CSRF string      `json:"csrf"`
}

// env is an environment as the navigation shows it.
type env struct {
	Name string `json:"name"`
}

// page is what every page's template gets.
type page struct {
	Title string
	// Session is the logged-in user (nil on the login page).
	Session *session
	// Env is the environment the page is of; Envs those the user sees.
	Env  string
	Envs []env
	// Section names the navigation entry of the page.
	Section string
	// Flash says what the last change did; Error what went wrong.
	Flash string
	Error *apiError
	// Live: the page follows the event stream of Env.
	Live bool
	Data any
}

// CanOperate reports whether the user may change things in the page's
// environment (the API decides; this only hides what it would refuse).
func (p page) CanOperate() bool {
	return p.Session != nil && p.Session.User.RoleIn(p.Env).Allows(record.RoleOperator)
}

// EnvListed reports whether the page's environment is one the user
// sees (the navigation shows no other).
func (p page) EnvListed() bool {
	for _, e := range p.Envs {
		if e.Name == p.Env {
			return p.Env != ""
		}
	}
	return false
}

// CanAdmin reports whether the user administers the organization.
func (p page) CanAdmin() bool {
	return p.Session != nil && p.Session.User.Role.Allows(record.RoleAdmin)
}

// begin authenticates a page request: without a valid session the
// browser goes to the login page, and begin returns nil.
func (c *Console) begin(w http.ResponseWriter, r *http.Request, section string) *page {
	var s session
	if _, err := c.call(r, http.MethodGet, "/session", nil, &s); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return nil
		}
		c.fail(w, r, &page{Title: "Error"}, err)
		return nil
	}
	p := &page{Session: &s, Section: section, Env: r.PathValue("env")}
	if _, err := c.call(r, http.MethodGet, "/envs", nil, &p.Envs); err != nil {
		c.fail(w, r, p, err)
		return nil
	}
	if ck, err := r.Cookie(flashCookie); err == nil {
		p.Flash, _ = url.QueryUnescape(ck.Value)
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	return p
}

// flashCookie carries what a change did to the page shown after it.
const flashCookie = "tether_flash"

// done redirects to to after a change, saying what it did there.
func done(w http.ResponseWriter, r *http.Request, to, msg string) {
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(msg), Path: "/", MaxAge: 60, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// render writes a page (only its changing part with ?fragment=1).
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, status int, p *page) {
	t, ok := c.pages[name]
	if !ok {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	tpl := "layout.html"
	if r.URL.Query().Get("fragment") == "1" {
		tpl = "content"
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, tpl, p); err != nil {
		c.log.Error().Err(err).Str("page", name).Msg("page not rendered")
		http.Error(w, "the page could not be rendered; the server's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail shows what went wrong, with the API's status.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, p *page, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		c.log.Error().Err(err).Str("path", r.URL.Path).Msg("console page failed")
		ae = &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "the page failed; the server's log says why"}
	}
	if p.Title == "" {
		p.Title = "Error"
	}
	p.Error, p.Live = ae, false
	c.render(w, r, "error", ae.Status, p)
}

// offset reads the page's ?offset.
func offset(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("offset"))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// pager is where a listing's page stands.
type pager struct {
	Total, Offset, Shown int
	Prev, Next           string
}

func newPager(r *http.Request, h http.Header, shown int) pager {
	total, _ := strconv.Atoi(h.Get("X-Total-Count"))
	p := pager{Total: total, Offset: offset(r), Shown: shown}
	q := r.URL.Query()
	q.Del("fragment")
	if p.Offset > 0 {
		q.Set("offset", strconv.Itoa(max(p.Offset-PageSize, 0)))
		p.Prev = "?" + q.Encode()
	}
	if p.Offset+shown < total {
		q.Set("offset", strconv.Itoa(p.Offset+PageSize))
		p.Next = "?" + q.Encode()
	}
	return p
}

// Last is the number of the last row shown (1-based).
func (p pager) Last() int { return p.Offset + p.Shown }

// query builds an API query from the page's filters that are set.
func query(r *http.Request, keys ...string) url.Values {
	q := url.Values{}
	for _, k := range keys {
		if v := strings.TrimSpace(r.URL.Query().Get(k)); v != "" {
			q.Set(k, v)
		}
	}
	return q
}
