package console

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// visit is one request of a signed-in user's page: the page it shows,
// and what its handler needs to ask the API and answer the browser.
// Its methods are the steps every page takes, written once: ask the API
// (a failure becomes the error page), read the request's parameters,
// render, and redirect after a change.
type visit struct {
	*page
	c *Console
	w http.ResponseWriter
	r *http.Request
}

// signedIn serves h as a page of section for a signed-in user (see
// begin); h gets the visit.
func (c *Console) signedIn(section string, h func(*visit)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if p := c.begin(w, r, section); p != nil {
			h(&visit{page: p, c: c, w: w, r: r})
		}
	}
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

// call makes an API request for the visit (see Console.call); its
// failure is the caller's to show.
func (v *visit) call(method, path string, body, out any) error {
	_, err := v.c.call(v.r, method, path, body, out)
	return err
}

// fetch gets path from the API into out, with the answer's headers; a
// failure is shown as the error page, and fetch reports false.
func (v *visit) fetch(path string, out any) (http.Header, bool) {
	h, err := v.c.call(v.r, http.MethodGet, path, nil, out)
	if err != nil {
		v.fail(err)
		return nil, false
	}
	return h, true
}

// get is fetch without the headers.
func (v *visit) get(path string, out any) bool {
	_, ok := v.fetch(path, out)
	return ok
}

// fail shows the error page for err.
func (v *visit) fail(err error) { v.c.fail(v.w, v.r, v.page, err) }

// refused puts the API's refusal err on the page (a form shows it above
// what it was given) and returns it; any other error is shown as the
// error page, and refused returns nil.
func (v *visit) refused(err error) *apiError {
	var ae *apiError
	if !errors.As(err, &ae) {
		v.fail(err)
		return nil
	}
	v.Error = ae
	return ae
}

// render shows the page with template name and data.
func (v *visit) render(name string, status int, data any) {
	v.Data = data
	v.c.render(v.w, v.r, name, status, v.page)
}

// done redirects after a change, saying what it did (see done).
func (v *visit) done(to, msg string) { done(v.w, v.r, to, msg) }

// query is the page's query parameter k.
func (v *visit) query(k string) string { return v.r.URL.Query().Get(k) }

// form is the posted form's field k.
func (v *visit) form(k string) string { return v.r.PostFormValue(k) }

// field is the posted form's field k without surrounding spaces.
func (v *visit) field(k string) string { return strings.TrimSpace(v.r.PostFormValue(k)) }

// envPath is the API's path of the page's environment.
func (v *visit) envPath() string { return "/envs/" + url.PathEscape(v.Env) }
