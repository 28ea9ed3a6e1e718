package console

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// The login page and logging out: the pages served without a session.

type loginForm struct {
	Org, Name, Next string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c.render(w, r, "login", http.StatusOK, &page{Title: "Log in", Data: loginForm{Org: q.Get("org"), Next: localPath(q.Get("next"))}})
}

// localPath keeps a redirect on this site: a path of its own, else /.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		return "/"
	}
	return p
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	f := loginForm{Org: strings.TrimSpace(r.PostFormValue("org")), Name: strings.TrimSpace(r.PostFormValue("name")), Next: localPath(r.PostFormValue("next"))}
	body := map[string]string{"org": f.Org, "name": f.Name, "password": r.PostFormValue("password")}
	h, err := c.call(r, http.MethodPost, "/session", body, nil)
	if err != nil {
		v := &visit{page: &page{Title: "Log in", Data: f}, c: c, w: w, r: r}
		ae := v.refused(err)
		if ae == nil {
			return
		}
		if ae.Status == http.StatusTooManyRequests {
			ae.Message = "Too many failed logins: " + ae.Message + "."
			if ae.RetryAfter != "" {
				ae.Message = fmt.Sprintf("Too many failed logins for this user or from this address: try again in %s seconds.", ae.RetryAfter)
			}
		}
		v.render("login", ae.Status, f)
		return
	}
	passCookies(w, h)
	http.Redirect(w, r, f.Next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	h, err := c.call(r, http.MethodDelete, "/session", nil, nil)
	passCookies(w, h)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			c.fail(w, r, &page{Title: "Log out"}, err)
			return
		}
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// passCookies hands the browser the cookies the API set (its session's).
func passCookies(w http.ResponseWriter, h http.Header) {
	for _, ck := range h.Values("Set-Cookie") {
		w.Header().Add("Set-Cookie", ck)
	}
}
