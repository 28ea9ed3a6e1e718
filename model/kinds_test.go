package model

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Each kind accepts a typical resource and refuses values a handler could
// not apply.
func TestKindsCatalogue(t *testing.T) {
	n := func(s string) json.Number { return json.Number(s) }
	cases := []struct {
		kind string
		good Attributes
		bad  []Attributes
	}{
		{"symlink", Attributes{"path": "/usr/bin/app", "target": "../lib/app"},
			[]Attributes{{"path": "/x", "target": ""}, {"path": "/x", "target": "a\nb"}}},
		{"package", Attributes{"name": "nginx", "version": "1.22-1", "provider": "apt"},
			[]Attributes{{"name": "-rf"}, {"name": "a b"}, {"name": "x", "provider": "brew"}}},
		{"service", Attributes{"name": "nginx.service", "state": "running", "enabled": true, "reload": "reload"},
			[]Attributes{{"name": "../x"}, {"name": "x", "state": "up"}, {"name": "x", "enabled": "yes"}}},
		{"user", Attributes{"name": "www-data", "uid": n("33"), "groups": []any{"adm", "1000"}, "home": "/var/www", "system": true},
			[]Attributes{{"name": "Root"}, {"name": "x", "uid": n("-1")}, {"name": "x", "uid": n("1.5")}, {"name": "x", "groups": []any{"a", 3}}, {"name": "x", "home": "rel"}}},
		{"group", Attributes{"name": "docker", "gid": n("999")},
			[]Attributes{{"name": "a:b"}, {"name": "g", "gid": n("4294967295")}}},
		{"exec", Attributes{"name": "migrate", "command": "make migrate", "creates": "/var/lib/app/migrated", "env": map[string]any{"A": "1"}, "timeout": n("30")},
			[]Attributes{{"name": "x", "command": " "}, {"name": "x", "command": "c", "env": map[string]any{"A=B": "1"}}, {"name": "x", "command": "c", "timeout": n("0")}}},
		{"cron", Attributes{"name": "backup", "command": "/bin/backup", "schedule": "*/5 * * * 1-5"},
			[]Attributes{{"name": "a/b", "command": "c", "schedule": "@daily"}, {"name": "x", "command": "c", "schedule": "* * *"}, {"name": "x", "command": "c", "schedule": "@sometimes"}}},
		{"repository", Attributes{"name": "docker", "url": "https://download.docker.com/linux/debian", "components": []any{"stable"}},
			[]Attributes{{"name": "d", "url": "download.docker.com"}, {"name": "d", "url": "https://x", "components": []any{"a b"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			k, ok := LookupKind(tc.kind)
			if !ok {
				t.Fatalf("no kind %s", tc.kind)
			}
			if p := k.Problems(tc.good, false, false); p != nil {
				t.Fatalf("good attributes refused: %v", p)
			}
			for _, attrs := range tc.bad {
				if p := k.Problems(attrs, false, false); len(p) == 0 {
					t.Errorf("Problems(%v) = nil, want a problem", attrs)
				}
			}
		})
	}
}

// A required attribute is required unless the resource is purged.
func TestRequiredUnlessPurged(t *testing.T) {
	k, _ := LookupKind("cron")
	p := k.Problems(Attributes{"name": "x"}, false, false)
	if len(p) != 1 || p[0].Rule != RuleRequired || p[0].Attr != "command" || !strings.Contains(p[0].Error(), "requires command") {
		t.Fatalf("got %v, want command required", p)
	}
	if p := k.Problems(Attributes{"name": "x"}, true, false); p != nil {
		t.Fatalf("purged cron refused: %v", p)
	}
	if p := k.Problems(Attributes{"name": "x"}, false, true); p != nil {
		t.Fatalf("undefined cron refused: %v", p)
	}
}

func TestParseInventory(t *testing.T) {
	inv, err := ParseInventory(strings.NewReader(`{"agents": [{"name": "web-7", "labels": {"role": "web"}, "facts": {"ipv4": "10.0.0.7", "cpus": 4}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a := inv.Agents[0]
	if len(inv.Agents) != 1 || a.Name != "web-7" || a.Labels["role"] != "web" || a.Facts["cpus"] != json.Number("4") {
		t.Fatalf("agent %+v", a)
	}
	// Labels are as agents may announce them.
	if inv, err := ParseInventory(strings.NewReader(`{"agents": [{"name": "a", "labels": {"tether-served-by": "server", "tether.io/x": "", "1x": "y"}}]}`)); err == nil {
		t.Fatalf("a label key with a slash: %+v, want ErrInvalidInventory", inv)
	}
	if _, err := ParseInventory(strings.NewReader(`{"agents": [{"name": "a", "labels": {"tether.role": "server", "1x": "y"}}]}`)); err != nil {
		t.Fatalf("labels an agent may announce: %v", err)
	}
	for _, bad := range []string{
		`{"agents": [{"name": "a"}, {"name": "a"}]}`,
		`{"agents": [{"name": "bad name"}]}`,
		`{"agents": [{"name": "a", "labels": {"a b": "y"}}]}`,
		`{"agents": [{"name": "a", "colour": "red"}]}`,
		`{"agents": []} trailing`,
		`[`,
	} {
		if _, err := ParseInventory(strings.NewReader(bad)); !errors.Is(err, ErrInvalidInventory) {
			t.Errorf("ParseInventory(%s) = %v, want ErrInvalidInventory", bad, err)
		}
	}
}

// The output of tether agent list -o json reads as an inventory: the
// accepted agents, with their labels and facts, the other fields ignored.
func TestParseInventoryFromAgentList(t *testing.T) {
	list := `[
	  {"env": "prod", "name": "web-1", "state": "accepted", "labels": {"role": "web"}, "facts": {"ipv4": "10.0.0.1"}, "paused": false, "online": true, "key_fingerprint": "SHA256:x"},
	  {"env": "prod", "name": "web-2", "state": "pending", "labels": {"role": "web"}},
	  {"env": "prod", "name": "db-1", "state": "accepted", "online": false}
	]`
	inv, err := ParseInventory(strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Agents) != 2 || inv.Agents[0].Name != "web-1" || inv.Agents[1].Name != "db-1" ||
		inv.Agents[0].Labels["role"] != "web" || inv.Agents[0].Facts["ipv4"] != "10.0.0.1" {
		t.Fatalf("inventory from an agent list: %+v", inv.Agents)
	}
	for _, bad := range []string{
		`[{"name": "bad name", "state": "accepted"}]`,
		`[{"name": "a"}, {"name": "a"}]`,
		`[] trailing`,
		`[{"name": 5}]`,
	} {
		if _, err := ParseInventory(strings.NewReader(bad)); !errors.Is(err, ErrInvalidInventory) {
			t.Errorf("ParseInventory(%s) = %v, want ErrInvalidInventory", bad, err)
		}
	}
}

// CheckKind judges a whole resource: it names the resource, the attribute
// and what was expected, and lets namespaced kinds through.
func TestCheckKind(t *testing.T) {
	res := func(id string, purged bool, attrs Attributes) *Resource {
		return &Resource{ID: MustParseID(id), Attributes: attrs, Purged: purged}
	}
	cases := []struct {
		name string
		res  *Resource
		rule KindRule // "": no error
		attr string
		want []string // in the message
	}{
		{"good file", res("file[web,path=/etc/motd]", false, Attributes{"path": "/etc/motd", "mode": "0644"}), "", "", nil},
		{"namespaced kind", res("acme:widget[web,name=w]", false, Attributes{"name": "w", "anything": json.Number("5")}), "", "", nil},
		{"purged file", res("file[web,path=/etc/motd]", true, Attributes{"path": "/etc/motd"}), "", "", nil},
		{"unknown kind", res("widget[web,name=w]", false, Attributes{"name": "w"}),
			RuleKind, "", []string{`widget[web,name=w]: "widget" is not a built-in kind`, "vendor:widget"}},
		{"wrong identity key", res("file[web,name=/x]", false, Attributes{"name": "/x"}),
			RuleIdentity, "name", []string{`file resources are identified by "path", not "name"`}},
		{"wrong type", res("file[web,path=/etc/motd]", false, Attributes{"path": "/etc/motd", "mode": json.Number("5")}),
			RuleType, "mode", []string{"file[web,path=/etc/motd]: mode must be a string, not the number 5: permission bits in octal", `"0644"`}},
		{"sensitive value not shown", res("user[web,name=bob]", false, Attributes{"name": "bob", "password": json.Number("123456")}),
			RuleType, "password", []string{"password must be a string, not a number"}},
		{"unknown attribute", res("file[web,path=/x]", false, Attributes{"path": "/x", "colour": "red"}),
			RuleUnknown, "colour", []string{`file[web,path=/x]: file has no attribute "colour" (it has path, content, mode, owner, group)`}},
		{"missing required", res("symlink[web,path=/x]", false, Attributes{"path": "/x"}),
			RuleRequired, "target", []string{"symlink[web,path=/x]: symlink requires target"}},
		{"none of one-of", res("exec[web,name=x]", false, Attributes{"name": "x", "command": "true"}),
			RuleRequired, "", []string{"exec requires one of creates, unless, onlyif, refreshonly"}},
		{"bad enum value", res("package[web,name=nginx]", false, Attributes{"name": "nginx", "provider": "yum"}),
			RuleValue, "provider", []string{`package[web,name=nginx]: provider: "yum": want one of "apt", "dnf", "apk"`}},
		{"bad mode names mode once", res("file[web,path=/x]", false, Attributes{"path": "/x", "mode": "5"}),
			RuleValue, "mode", []string{`file[web,path=/x]: mode "5": want 3 or 4 octal digits`}},
		{"purged with attributes", res("file[web,path=/x]", true, Attributes{"path": "/x", "content": "c"}),
			RulePurged, "content", []string{"a purged file takes no attributes but its path: remove content"}},
		{"values before presence", res("symlink[web,path=/x]", false, Attributes{"path": "/x", "owner": ""}),
			RuleValue, "owner", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckKind(tc.res)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			var ke *KindError
			if !errors.As(err, &ke) {
				t.Fatalf("got %v, want a *KindError", err)
			}
			if ke.Rule != tc.rule || ke.Attr != tc.attr || ke.ID != tc.res.ID {
				t.Fatalf("got rule %q attr %q id %s, want %q %q %s", ke.Rule, ke.Attr, ke.ID, tc.rule, tc.attr, tc.res.ID)
			}
			want := ErrInvalidAttribute
			if tc.rule == RuleKind {
				want = ErrUnknownKind
			}
			if !errors.Is(err, want) {
				t.Fatalf("got %v, want it to wrap %v", err, want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("got %q, want it to contain %q", err, w)
				}
			}
			if tc.rule == RuleType && tc.attr == "password" && strings.Contains(err.Error(), "123456") {
				t.Fatalf("got %q: a sensitive value is shown", err)
			}
		})
	}
}

// BenchmarkCheckKind judges a file resource as the server does for every
// resource of an upload.
//
//	go test ./model -run '^$' -bench CheckKind -benchmem
func BenchmarkCheckKind(b *testing.B) {
	res := Resource{ID: MustParseID("file[host0001,path=/etc/app/0001/001.conf]"),
		Attributes: Attributes{"path": "/etc/app/0001/001.conf", "content": strings.Repeat("x", 256), "mode": "0644", "owner": "root"}}
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckKind(&res); err != nil {
			b.Fatal(err)
		}
	}
}
