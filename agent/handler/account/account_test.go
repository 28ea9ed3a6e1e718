package account

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
	"github.com/tetherhq/tether/agent/target/ssh/sshtest"
	"github.com/tetherhq/tether/model"
)

func resource(kind, name string, attrs model.Attributes) model.Resource {
	return handlertest.NamedResource(kind, name, attrs)
}

// etc gives a root the account files shadow-utils expects, with a few
// groups as a fresh Debian has them.
func etc(t *testing.T, root string) {
	t.Helper()
	for _, d := range []string{"etc", "home"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"passwd":  "root:x:0:0:root:/root:/bin/bash\n",
		"group":   "root:x:0:\nusers:x:100:\nstaff:x:50:\nadm:x:4:\n",
		"shadow":  "root:*:19000:0:99999:7:::\n",
		"gshadow": "root:*::\nusers:*::\nstaff:*::\nadm:*::\n",
	}
	for name, content := range files {
		mode := os.FileMode(0o644)
		if strings.Contains(name, "shadow") {
			mode = 0o640
		}
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// line returns the entry of name in an account file below root.
func line(t *testing.T, root, file, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+":") {
			return l
		}
	}
	return ""
}

// These run the real shadow-utils with --prefix on account files in a
// temporary root: real useradd, usermod, userdel, groupadd, groupmod,
// groupdel, without touching the host's accounts.
func TestUserConformance(t *testing.T) {
	handlertest.NeedRoot(t)
	handlertest.NeedCommands(t, "useradd", "usermod", "userdel")
	const hash = "$6$saltsalt$3MqM2hYBdQ4b1ut2vlzK1NTnOLRdJfNzHtHGTA0sPNd6sAVCcQSkCMXPy2nsiVCa6I2FrWBQpwumzHHJNXgyC."
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { return NewUser(rt) },
		// The local host, and this machine reached over SSH (agentless).
		Targets: sshtest.Targets(t),
		Cases: []handlertest.Case{
			{
				Name:  "create with everything, then change it",
				Setup: etc,
				Resource: resource(UserKind, "alice", model.Attributes{
					"uid": 1500, "group": "users", "groups": []any{"staff", "adm"}, "home": "/home/alice",
					"shell": "/bin/sh", "comment": "Alice", "password": hash,
				}),
				Update: new(resource(UserKind, "alice", model.Attributes{
					"uid": 1501, "group": "staff", "groups": []any{"adm"}, "home": "/home/alice",
					"shell": "/bin/bash", "comment": "Alice A.", "password": "!",
				})),
				Check: func(t *testing.T, root string, r *model.Resource) {
					l := line(t, root, "etc/passwd", "alice")
					if !strings.Contains(l, ":"+integer(r.Attributes, "uid")+":") || !strings.HasSuffix(l, ":"+r.Attributes["shell"].(string)) {
						t.Fatalf("passwd entry %q does not match %v", l, r.Attributes)
					}
					if s := line(t, root, "etc/shadow", "alice"); !strings.HasPrefix(s, "alice:"+r.Attributes["password"].(string)+":") {
						t.Fatalf("shadow entry %q", s)
					}
					if _, err := os.Stat(filepath.Join(root, "home/alice")); err != nil {
						t.Fatalf("home not created: %v", err)
					}
				},
			},
			{
				Name:     "system account with defaults",
				Setup:    etc,
				Resource: resource(UserKind, "svc", model.Attributes{"system": true, "shell": "/usr/sbin/nologin"}),
				Check: func(t *testing.T, root string, _ *model.Resource) {
					u, ok, err := lookupUser(handler.Runtime{Root: root}, "svc")
					if err != nil || !ok || u.uid >= 1000 {
						t.Fatalf("system account: %+v %v %v", u, ok, err)
					}
				},
			},
		},
		Invalid: []handlertest.Invalid{
			{Name: "clear-text password", Resource: resource(UserKind, "bob", model.Attributes{"password": "hunter2"})},
			{Name: "upper-case first letter", Resource: resource(UserKind, "Bob", nil)},
			{Name: "relative home", Resource: resource(UserKind, "bob", model.Attributes{"home": "home/bob"})},
			{Name: "negative uid", Resource: resource(UserKind, "bob", model.Attributes{"uid": -1})},
		},
	})
}

func TestGroupConformance(t *testing.T) {
	handlertest.NeedRoot(t)
	handlertest.NeedCommands(t, "groupadd", "groupmod", "groupdel")
	withUsers := func(t *testing.T, root string) {
		etc(t, root)
		f, err := os.OpenFile(filepath.Join(root, "etc/passwd"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString("ann:x:1600:100::/home/ann:/bin/sh\nben:x:1601:100::/home/ben:/bin/sh\n"); err != nil {
			t.Fatal(err)
		}
	}
	handlertest.Run(t, handlertest.Suite{
		New: func(rt handler.Runtime) handler.Handler { return NewGroup(rt) },
		// The local host, and this machine reached over SSH (agentless).
		Targets: sshtest.Targets(t),
		Cases: []handlertest.Case{
			{
				Name:     "gid and members",
				Setup:    withUsers,
				Resource: resource(GroupKind, "ops", model.Attributes{"gid": 2000, "members": []any{"ann", "ben"}}),
				Update:   new(resource(GroupKind, "ops", model.Attributes{"gid": 2001, "members": []any{"ben"}})),
				Check: func(t *testing.T, root string, r *model.Resource) {
					members, _ := r.Attributes.StringList("members")
					want := "ops:x:" + integer(r.Attributes, "gid") + ":" + strings.Join(members, ",")
					if l := line(t, root, "etc/group", "ops"); l != want {
						t.Fatalf("group entry %q, want %q", l, want)
					}
				},
			},
			{
				Name:     "system group, then a member",
				Setup:    withUsers,
				Resource: resource(GroupKind, "daemons", model.Attributes{"system": true}),
				Update:   new(resource(GroupKind, "daemons", model.Attributes{"system": true, "members": []any{"ann"}})),
			},
		},
		Invalid: []handlertest.Invalid{
			{Name: "bad name", Resource: resource(GroupKind, "1ops", nil)},
			{Name: "bad member", Resource: resource(GroupKind, "ops", model.Attributes{"members": []any{"a b"}})},
		},
	})
}

// The real host: a user and a group are created, changed and deleted in
// the machine's own /etc/passwd and /etc/group, through the handlers.
func TestRealHostAccounts(t *testing.T) {
	handlertest.NeedRoot(t)
	handlertest.NeedCommands(t, "useradd", "groupadd")
	ctx := context.Background()
	rt := handler.Runtime{}
	users, groups := NewUser(rt), NewGroup(rt)
	const user, grp = "tether-test-u", "tether-test-g"
	t.Cleanup(func() {
		_, _ = rt.Exec(ctx, "userdel", user)
		_, _ = rt.Exec(ctx, "groupdel", grp)
	})

	apply := func(h handler.Handler, r model.Resource) handler.Changes {
		t.Helper()
		if err := h.Validate(&r); err != nil {
			t.Fatal(err)
		}
		cur, exists, err := h.Read(ctx, &r)
		if err != nil {
			t.Fatal(err)
		}
		changes := handler.ComputeChanges(&r, cur, exists)
		if len(changes) > 0 {
			if err := h.Apply(ctx, &r, cur, changes); err != nil {
				t.Fatal(err)
			}
		}
		return changes
	}
	apply(groups, resource(GroupKind, grp, model.Attributes{"system": true}))
	apply(users, resource(UserKind, user, model.Attributes{"system": true, "shell": "/usr/sbin/nologin", "groups": []any{grp}}))
	if l := line(t, "/", "etc/group", grp); !strings.HasSuffix(l, ":"+user) {
		t.Fatalf("/etc/group: %q does not list %s", l, user)
	}
	if ch := apply(users, resource(UserKind, user, model.Attributes{"shell": "/bin/false", "groups": []any{grp}})); !ch.Has("shell") || len(ch) != 1 {
		t.Fatalf("changing the shell changed %v", ch)
	}
	if l := line(t, "/", "etc/passwd", user); !strings.HasSuffix(l, ":/bin/false") {
		t.Fatalf("/etc/passwd: %q", l)
	}
	// A locked hash ("!" first): nobody can log in to the test account.
	const hash = "!$6$saltsalt$3MqM2hYBdQ4b1ut2vlzK1NTnOLRdJfNzHtHGTA0sPNd6sAVCcQSkCMXPy2nsiVCa6I2FrWBQpwumzHHJNXgyC."
	if ch := apply(users, resource(UserKind, user, model.Attributes{"shell": "/bin/false", "password": hash})); !ch.Has("password") || len(ch) != 1 {
		t.Fatalf("setting the password changed %v", ch)
	}
	if l := line(t, "/", "etc/shadow", user); !strings.HasPrefix(l, user+":"+hash+":") {
		t.Fatalf("/etc/shadow: %q, want the hash", l)
	}
	purge := func(kind, name string) model.Resource {
		r := resource(kind, name, nil)
		r.Purged = true
		return r
	}
	if ch := apply(users, purge(UserKind, user)); !ch.Removed() {
		t.Fatalf("purge changed %v", ch)
	}
	apply(groups, purge(GroupKind, grp))
	if line(t, "/", "etc/passwd", user) != "" || line(t, "/", "etc/group", grp) != "" {
		t.Fatal("the account is still there after purge")
	}
}

// deploy runs one deploy of r through h: validate, read, diff, apply.
func deploy(t *testing.T, h handler.Handler, r model.Resource) (handler.Changes, error) {
	t.Helper()
	ctx := context.Background()
	if err := h.Validate(&r); err != nil {
		t.Fatal(err)
	}
	cur, exists, err := h.Read(ctx, &r)
	if err != nil {
		t.Fatal(err)
	}
	changes := handler.ComputeChanges(&r, cur, exists)
	if len(changes) == 0 {
		return nil, nil
	}
	return changes, h.Apply(ctx, &r, cur, changes)
}

// assertNoHashInArgs fails when a recorded command line holds hash, and
// returns the commands that were fed it.
func assertNoHashInArgs(t *testing.T, rec *handlertest.Recorder, hash string) []handler.Command {
	t.Helper()
	var fed []handler.Command
	for _, c := range rec.Commands() {
		if strings.Contains(strings.Join(c.Args, " "), hash) || strings.Contains(strings.Join(c.Env, " "), hash) {
			t.Fatalf("the password hash is on a command line every local user can read: %s", strings.Join(c.Args, " "))
		}
		if strings.Contains(string(c.Stdin), hash) {
			fed = append(fed, c)
		}
	}
	return fed
}

// The hash reaches the tool on its standard input, below a root prefix and
// on the host's own root, at creation and on a change; never as an argument.
func TestPasswordNotOnCommandLine(t *testing.T) {
	const hash = "$6$saltsalt$3MqM2hYBdQ4b1ut2vlzK1NTnOLRdJfNzHtHGTA0sPNd6sAVCcQSkCMXPy2nsiVCa6I2FrWBQpwumzHHJNXgyC."
	create := handler.Changes{model.AttrPresent: {Current: false, Desired: true}, "password": {Desired: hash}, "shell": {Desired: "/bin/sh"}}
	change := handler.Changes{"password": {Current: "!", Desired: hash}}
	both := handler.Changes{"password": {Current: "!", Desired: hash}, "shell": {Current: "/bin/bash", Desired: "/bin/sh"}}
	tests := []struct {
		name    string
		root    string
		changes handler.Changes
		want    []string
	}{
		{"create below a root", "/srv/sandbox", create,
			[]string{"useradd --prefix /srv/sandbox --shell /bin/sh alice", "chpasswd --encrypted --root /srv/sandbox"}},
		{"change on the host", "", change, []string{"chpasswd --encrypted"}},
		{"change with the shell", "/", both, []string{"usermod --shell /bin/sh alice", "chpasswd --encrypted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &handlertest.Recorder{Respond: func([]string) (string, int) { return "", 0 }}
			h := NewUser(handler.Runtime{Root: tt.root, Run: rec})
			r := resource(UserKind, "alice", model.Attributes{"shell": "/bin/sh", "password": hash})
			if err := h.Apply(context.Background(), &r, nil, tt.changes); err != nil {
				t.Fatal(err)
			}
			if got := rec.Calls(); !slices.Equal(got, tt.want) {
				t.Fatalf("got commands %q, want %q", got, tt.want)
			}
			fed := assertNoHashInArgs(t, rec, hash)
			if len(fed) != 1 || string(fed[0].Stdin) != "alice:"+hash+"\n" {
				t.Fatalf("got %d commands fed the hash, want chpasswd fed %q", len(fed), "alice:"+hash+"\n")
			}
		})
	}
}

// A tool that fails and prints the hash back does not put it in the error,
// which reaches results, logs and the API.
func TestPasswordNotInErrors(t *testing.T) {
	const hash = "$y$j9T$F5Jx5fExrKuPp53xLKQ..1$X3DX6M94c7o.9agCG9G317fhZg9SqC.5i5rd.RhAtQ7"
	rec := &handlertest.Recorder{Respond: func(args []string) (string, int) {
		return "line 1: cannot update the entry alice:" + hash + "\nchanges ignored", 1
	}}
	h := NewUser(handler.Runtime{Run: rec})
	r := resource(UserKind, "alice", model.Attributes{"password": hash})
	err := h.Apply(context.Background(), &r, nil, handler.Changes{"password": {Current: "!", Desired: hash}})
	if err == nil {
		t.Fatal("a failing tool is not an error")
	}
	if strings.Contains(err.Error(), hash) || strings.Contains(err.Error(), hash[len(hash)/2:]) {
		t.Fatalf("the error shows the hash: %v", err)
	}
	if !strings.Contains(err.Error(), "exit status 1") || !strings.Contains(err.Error(), "alice:"+model.RedactedValue) {
		t.Fatalf("got error %q, want the exit status and the tool's output with the hash hidden", err)
	}
}

// The real shadow-utils, recorded: below a temporary root, the password is
// set, read back from the shadow file, changed, and the second deploy is a
// no-op; no command line held the hash. A password for a user that does
// not exist makes chpasswd fail, without the hash in the error.
func TestPasswordRealTools(t *testing.T) {
	handlertest.NeedRoot(t)
	handlertest.NeedCommands(t, "useradd", "usermod", "chpasswd")
	const (
		first  = "$6$saltsalt$3MqM2hYBdQ4b1ut2vlzK1NTnOLRdJfNzHtHGTA0sPNd6sAVCcQSkCMXPy2nsiVCa6I2FrWBQpwumzHHJNXgyC."
		second = "$y$j9T$F5Jx5fExrKuPp53xLKQ..1$X3DX6M94c7o.9agCG9G317fhZg9SqC.5i5rd.RhAtQ7"
	)
	root := t.TempDir()
	etc(t, root)
	rec := &handlertest.Recorder{} // runs the real tools
	h := NewUser(handler.Runtime{Root: root, Run: rec})
	for _, hash := range []string{first, second} {
		r := resource(UserKind, "carol", model.Attributes{"shell": "/bin/sh", "password": hash})
		if _, err := deploy(t, h, r); err != nil {
			t.Fatal(err)
		}
		if s := line(t, root, "etc/shadow", "carol"); !strings.HasPrefix(s, "carol:"+hash+":") {
			t.Fatalf("got shadow entry %q, want the hash %s", s, hash)
		}
		if fed := assertNoHashInArgs(t, rec, hash); len(fed) != 1 || fed[0].Args[0] != "chpasswd" {
			t.Fatalf("got %d commands fed the hash, want chpasswd", len(fed))
		}
		if ch, err := deploy(t, h, r); err != nil || ch != nil {
			t.Fatalf("second deploy: changes %v, error %v; want none", ch, err)
		}
		rec.Reset()
	}

	ghost := resource(UserKind, "ghost", model.Attributes{"password": first})
	err := h.Apply(context.Background(), &ghost, nil, handler.Changes{"password": {Desired: first}})
	if err == nil || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("got %v, want chpasswd's error about ghost", err)
	}
	if strings.Contains(err.Error(), first) {
		t.Fatalf("the error shows the hash: %v", err)
	}
}
