package console

import (
	"net/http"
	"net/url"

	"github.com/tetherhq/tether/server/record"
)

// The organization's users, made and deleted by an admin.

type usersData struct {
	Users []record.User
	Form  struct{ Name, Role string }
}

var users = formPage{render: showUsers, actions: map[string]action{"create": createUser, "delete": deleteUser}}

// showUsers shows the users; there is no secret to show.
func showUsers(v *visit, status int, _ string) {
	v.Title = "Users"
	var d usersData
	if !v.get("/users", &d.Users) {
		return
	}
	d.Form.Name, d.Form.Role = v.form("name"), v.form("role")
	v.render("users", status, d)
}

func createUser(v *visit) (change, error) {
	name := v.field("name")
	body := map[string]string{"name": name, "password": v.form("password"), "role": v.form("role")}
	return change{Flash: "user " + name + " created", To: "/admin/users"}, v.call(http.MethodPost, "/users", body, nil)
}

func deleteUser(v *visit) (change, error) {
	name := v.field("name")
	return change{Flash: "user " + name + " deleted", To: "/admin/users"}, v.call(http.MethodDelete, "/users/"+url.PathEscape(name), nil, nil)
}
