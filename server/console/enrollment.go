package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tetherhq/tether/server/record"
)

// The enrollment tokens of an environment, with which agents enroll.

type enrollData struct {
	Tokens []record.EnrollmentToken
	Secret string
	Form   struct{ Name, MaxUses, ExpiresIn string }
}

var enrollTokens = formPage{render: showEnroll, actions: map[string]action{"create": createEnrollToken, "revoke": revokeEnrollToken}}

func showEnroll(v *visit, status int, secret string) {
	v.Title = "Enrollment tokens of " + v.Env
	d := enrollData{Secret: secret}
	if !v.get(v.envPath()+"/enrollment-tokens", &d.Tokens) {
		return
	}
	if secret == "" {
		d.Form.Name, d.Form.MaxUses, d.Form.ExpiresIn = v.form("name"), v.form("max_uses"), v.form("expires_in")
	}
	v.render("enrollment", status, d)
}

func createEnrollToken(v *visit) (change, error) {
	body := map[string]any{"name": v.field("name")}
	if s := v.field("max_uses"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return change{}, &apiError{Status: http.StatusBadRequest, Code: "invalid", Message: fmt.Sprintf("max uses %q: want a whole number of 0 or more (0: no bound)", s)}
		}
		body["max_uses"] = n
	}
	if s := v.field("expires_in"); s != "" {
		body["expires_in"] = s
	}
	var nt struct {
		Token string `json:"token"`
	}
	err := v.call(http.MethodPost, v.envPath()+"/enrollment-tokens", body, &nt)
	return change{Flash: "enrollment token created: copy it now, it is not shown again", Secret: nt.Token}, err
}

func revokeEnrollToken(v *visit) (change, error) {
	e := v.envPath() + "/enrollment-tokens"
	return change{Flash: "enrollment token revoked", To: e}, v.call(http.MethodDelete, e+"/"+url.PathEscape(v.form("id")), nil, nil)
}
