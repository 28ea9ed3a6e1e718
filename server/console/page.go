package console

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"

	"github.com/tetherhq/tether/server/record"
)

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
