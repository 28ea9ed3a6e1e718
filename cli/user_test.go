package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// invokeWith runs tether with stdin.
func invokeWith(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"tether"}, args...), strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// logIn logs in to the test server and reports the status.
func logIn(t *testing.T, org, name, password string) int {
	t.Helper()
	body, _ := json.Marshal(api.SessionRequest{Org: org, Name: name, Password: password})
	resp, err := http.Post(os.Getenv("TETHER_SERVER")+"/api/v1/session", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestUserCommands(t *testing.T) {
	newTestAPI(t)
	ok := func(stdin string, args ...string) string {
		t.Helper()
		code, out, errs := invokeWith(t, stdin, args...)
		if code != 0 {
			t.Fatalf("tether %s: exit %d: %s", strings.Join(args, " "), code, errs)
		}
		return out
	}
	out := ok("a good long password\n", "user", "add", "alice", "--role", "viewer", "--env-role", "prod=operator", "--password-stdin")
	if !strings.Contains(out, "user alice of organization default created; roles *=viewer prod=operator") || strings.Contains(out, "password (shown once") {
		t.Fatalf("user add: %q", out)
	}
	if got := logIn(t, "", "alice", "a good long password"); got != 200 {
		t.Fatalf("alice logs in: %d, want 200", got)
	}
	// A made-up password is printed once, and works.
	var made userWithPassword
	if err := json.Unmarshal([]byte(ok("", "user", "add", "bob", "-o", "json")), &made); err != nil || made.Password == "" || made.Name != "bob" {
		t.Fatalf("user add bob -o json: %+v, %v; want the made-up password", made, err)
	}
	if got := logIn(t, "", "bob", made.Password); got != 200 {
		t.Fatalf("bob logs in with the made-up password: %d, want 200", got)
	}
	var users []record.User
	if err := json.Unmarshal([]byte(ok("", "user", "list", "-o", "json")), &users); err != nil || len(users) != 2 {
		t.Fatalf("user list -o json: %+v, %v", users, err)
	}
	if out := ok("", "user", "list"); !strings.Contains(out, "alice") || !strings.Contains(out, "*=viewer prod=operator") {
		t.Fatalf("user list:\n%s", out)
	}
	if out := ok("", "user", "grant", "bob", "admin", "--in", "prod"); !strings.Contains(out, "user bob: roles prod=admin") {
		t.Fatalf("user grant: %q", out)
	}
	if out := ok("", "user", "grant", "bob", "viewer"); !strings.Contains(out, "roles *=viewer prod=admin") {
		t.Fatalf("user grant org-wide: %q", out)
	}
	if out := ok("", "user", "revoke", "bob", "--in", "prod"); !strings.Contains(out, "roles *=viewer") || strings.Contains(out, "prod=") {
		t.Fatalf("user revoke --in prod: %q", out)
	}
	if out := ok("", "user", "revoke", "bob"); !strings.Contains(out, "roles none") {
		t.Fatalf("user revoke: %q", out)
	}
	var u record.User
	if err := json.Unmarshal([]byte(ok("", "user", "show", "alice", "-o", "json")), &u); err != nil || u.Roles["prod"] != record.RoleOperator {
		t.Fatalf("user show -o json: %+v, %v", u, err)
	}
	if out := ok("", "user", "passwd", "alice"); !strings.Contains(out, "password (shown once") {
		t.Fatalf("user passwd: %q", out)
	}
	if got := logIn(t, "", "alice", "a good long password"); got != 401 {
		t.Fatalf("alice's old password after passwd: %d, want 401", got)
	}
	ok("", "user", "delete", "alice")
	if code, _, errs := invokeWith(t, "", "user", "show", "alice"); code == 0 || !strings.Contains(errs, "not found") {
		t.Fatalf("user show of a deleted user: exit %d, %q", code, errs)
	}
	// Bad input: a clear error, nothing made.
	for _, args := range [][]string{
		{"user", "add", "carol", "--password-stdin"},
		{"user", "add", "carol", "--role", "root"},
		{"user", "add", "carol", "--env-role", "prod"},
		{"user", "grant", "bob", "root"},
		{"user", "add", "carol", "--env-role", "nope=viewer"},
	} {
		if code, _, errs := invokeWith(t, "short\n", args...); code == 0 || errs == "" {
			t.Fatalf("tether %s: exit %d, %q; want an error", strings.Join(args, " "), code, errs)
		}
	}
	if code, _, _ := invokeWith(t, "", "user", "show", "carol"); code == 0 {
		t.Fatal("carol was made by a refused command")
	}

	// Organizations.
	if out := ok("", "org", "add", "acme"); !strings.Contains(out, "organization acme created") {
		t.Fatalf("org add: %q", out)
	}
	var orgs []record.Org
	if err := json.Unmarshal([]byte(ok("", "org", "list", "-o", "json")), &orgs); err != nil || len(orgs) != 2 || orgs[0].Name != "acme" {
		t.Fatalf("org list -o json: %+v, %v", orgs, err)
	}
	ok("a good long password\n", "user", "add", "ann", "--org", "acme", "--role", "admin", "--password-stdin")
	if got := logIn(t, "acme", "ann", "a good long password"); got != 200 {
		t.Fatalf("ann logs in to acme: %d, want 200", got)
	}
	if out := ok("", "user", "list", "--org", "acme"); !strings.Contains(out, "ann") || strings.Contains(out, "bob") {
		t.Fatalf("user list --org acme:\n%s", out)
	}
	ok("", "org", "delete", "acme")
	if got := logIn(t, "acme", "ann", "a good long password"); got != 401 {
		t.Fatalf("ann after acme was deleted: %d, want 401", got)
	}
	for _, cmd := range [][]string{{"user", "--help"}, {"user", "add", "--help"}, {"user", "grant", "--help"}, {"org", "--help"}, {"org", "add", "--help"}} {
		if out := ok("", cmd...); !strings.Contains(out, "USAGE") {
			t.Fatalf("tether %s: %q", strings.Join(cmd, " "), out)
		}
	}
}

func TestBootstrapAdmin(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	var out, logs bytes.Buffer
	term := &terminal{stdout: &out, stderr: &out}
	log := zerolog.New(&logs).Level(zerolog.WarnLevel) // the default level
	login, err := bootstrapAdmin(ctx, a.st, "", term, log)
	if err != nil {
		t.Fatal(err)
	}
	if login != "with the password printed above" {
		t.Fatalf("first start: how to log in %q, want with the password printed above", login)
	}
	_, rest, found := strings.Cut(out.String(), "user admin, password ")
	password, _, _ := strings.Cut(rest, "\n")
	if !found || len(password) < record.MinPasswordLen {
		t.Fatalf("first start printed %q; want the admin's password", out.String())
	}
	if !strings.Contains(logs.String(), "log in as admin") || strings.Contains(logs.String(), password) {
		t.Fatalf("log %q: want how to log in, never the password", logs.String())
	}
	if got := logIn(t, "", "admin", password); got != 200 {
		t.Fatalf("admin logs in with the printed password: %d, want 200", got)
	}
	out.Reset()
	logs.Reset()
	if login, err := bootstrapAdmin(ctx, a.st, "", term, log); err != nil || login != "" || out.Len() > 0 || logs.Len() > 0 {
		t.Fatalf("second start: %v, how to log in %q, printed %q, logged %q; want nothing", err, login, out.String(), logs.String())
	}
	u, err := a.st.GetUser(ctx, record.DefaultOrg, "admin")
	if err != nil || u.Role != record.RoleAdmin || !record.UserPrincipal(u).ServerAdmin() {
		t.Fatalf("admin: %+v, %v; want a server admin", u, err)
	}
}

func TestBootstrapAdminPassword(t *testing.T) {
	a := newTestAPI(t)
	var out, logs bytes.Buffer
	term := &terminal{stdout: &out, stderr: &out}
	if _, err := bootstrapAdmin(context.Background(), a.st, "short", term, zerolog.New(&logs)); err == nil {
		t.Fatal("a short --admin-password was taken")
	}
	login, err := bootstrapAdmin(context.Background(), a.st, "chosen by the operator", term, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	if login != "with the password of --admin-password" {
		t.Fatalf("how to log in %q, want with the password of --admin-password", login)
	}
	if out.Len() > 0 || !strings.Contains(logs.String(), "--admin-password") {
		t.Fatalf("printed %q, logged %q: want nothing printed and the log saying which password", out.String(), logs.String())
	}
	if got := logIn(t, "", "admin", "chosen by the operator"); got != 200 {
		t.Fatalf("admin logs in with --admin-password: %d, want 200", got)
	}
}

func TestConsoleURL(t *testing.T) {
	for _, tc := range []struct{ scheme, addr, want string }{
		{"http", "127.0.0.1:8420", "http://127.0.0.1:8420/"},
		{"https", "0.0.0.0:8443", "https://localhost:8443/"},
		{"http", "[::]:8420", "http://localhost:8420/"},
		{"http", "[::1]:8420", "http://[::1]:8420/"},
		{"http", "10.0.0.5:80", "http://10.0.0.5:80/"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			addr, err := net.ResolveTCPAddr("tcp", tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			if got := consoleURL(tc.scheme, addr); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}
