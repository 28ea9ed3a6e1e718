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
			if err := k.CheckResource(tc.good, false); err != nil {
				t.Fatalf("good attributes refused: %v", err)
			}
			for _, attrs := range tc.bad {
				if err := k.CheckResource(attrs, false); !errors.Is(err, ErrInvalidAttribute) {
					t.Errorf("CheckResource(%v) = %v, want ErrInvalidAttribute", attrs, err)
				}
			}
		})
	}
}

// A required attribute is required unless the resource is purged.
func TestRequiredUnlessPurged(t *testing.T) {
	k, _ := LookupKind("cron")
	err := k.CheckResource(Attributes{"name": "x"}, false)
	if err == nil || !strings.Contains(err.Error(), "requires command") {
		t.Fatalf("got %v, want command required", err)
	}
	if err := k.CheckResource(Attributes{"name": "x"}, true); err != nil {
		t.Fatalf("purged cron refused: %v", err)
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
	for _, bad := range []string{
		`{"agents": [{"name": "a"}, {"name": "a"}]}`,
		`{"agents": [{"name": "bad name"}]}`,
		`{"agents": [{"name": "a", "labels": {"1x": "y"}}]}`,
		`{"agents": [{"name": "a", "colour": "red"}]}`,
		`{"agents": []} trailing`,
		`[`,
	} {
		if _, err := ParseInventory(strings.NewReader(bad)); !errors.Is(err, ErrInvalidInventory) {
			t.Errorf("ParseInventory(%s) = %v, want ErrInvalidInventory", bad, err)
		}
	}
}
