package console

import (
	"net/http"
	"net/url"

	"github.com/tetherhq/tether/server/record"
)

// The organization's API tokens, made and revoked by an admin.

type tokensData struct {
	Tokens []record.Token
	// Secret is a token just made, shown once.
	Secret string
	Form   struct{ Name, Role, Env, ExpiresIn string }
}

var tokens = formPage{render: showTokens, actions: map[string]action{"create": createToken, "revoke": revokeToken}}

func showTokens(v *visit, status int, secret string) {
	v.Title = "API tokens"
	d := tokensData{Secret: secret}
	if !v.get("/tokens", &d.Tokens) {
		return
	}
	if secret == "" {
		d.Form.Name, d.Form.Role, d.Form.Env, d.Form.ExpiresIn = v.form("name"), v.form("role"), v.form("env"), v.form("expires_in")
	}
	v.render("tokens", status, d)
}

func createToken(v *visit) (change, error) {
	body := map[string]string{"name": v.field("name"), "role": v.form("role"), "env": v.form("env"), "expires_in": v.field("expires_in")}
	var nt struct {
		Secret string `json:"secret"`
	}
	err := v.call(http.MethodPost, "/tokens", body, &nt)
	return change{Flash: "token " + body["name"] + " created: copy its secret now, it is not shown again", Secret: nt.Secret}, err
}

func revokeToken(v *visit) (change, error) {
	return change{Flash: "token revoked", To: "/admin/tokens"}, v.call(http.MethodDelete, "/tokens/"+url.PathEscape(v.form("id")), nil, nil)
}
