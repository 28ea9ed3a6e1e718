package account

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/handlertest"
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
