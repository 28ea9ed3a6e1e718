package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
)

// An upload is judged by the kind catalogue, resource by resource, before
// anything is stored: a resource no agent could apply is refused with 422,
// a code, and a message naming the resource, the attribute and what was
// expected. Namespaced kinds are not the catalogue's and pass.
func TestUploadChecksKinds(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	const motd = `{"id":"file[web,path=/etc/motd]","attributes":{"path":"/etc/motd","content":"hi\n"}}`
	upload := func(resources ...string) string {
		return `{"resources":[` + strings.Join(resources, ",") + `],"meta":{"source":"test"}}`
	}
	bad := []struct {
		name     string
		resource string
		code     string
		want     []string // in the message
	}{
		{"wrong type", `{"id":"file[web,path=/etc/app.conf]","attributes":{"path":"/etc/app.conf","mode":5}}`,
			"invalid_attribute", []string{`file[web,path=/etc/app.conf]: mode must be a string, not the number 5: permission bits in octal, e.g. "0644"`}},
		{"unknown attribute", `{"id":"file[web,path=/etc/app.conf]","attributes":{"path":"/etc/app.conf","colour":"red"}}`,
			"invalid_attribute", []string{`file[web,path=/etc/app.conf]: file has no attribute "colour" (it has path, content, mode, owner, group)`}},
		{"missing required", `{"id":"symlink[web,path=/usr/bin/app]","attributes":{"path":"/usr/bin/app"}}`,
			"invalid_attribute", []string{"symlink[web,path=/usr/bin/app]: symlink requires target (what the link points at"}},
		{"missing one of", `{"id":"exec[web,name=migrate]","attributes":{"name":"migrate","command":"make migrate"}}`,
			"invalid_attribute", []string{"exec[web,name=migrate]: exec requires one of creates, unless, onlyif, refreshonly"}},
		{"bad enum value", `{"id":"package[web,name=nginx]","attributes":{"name":"nginx","provider":"yum"}}`,
			"invalid_attribute", []string{`package[web,name=nginx]: provider: "yum": want one of "apt", "dnf", "apk"`}},
		{"bad value", `{"id":"file[web,path=/etc/app.conf]","attributes":{"path":"/etc/app.conf","mode":"rw-r--r--"}}`,
			"invalid_attribute", []string{`file[web,path=/etc/app.conf]: mode "rw-r--r--": want 3 or 4 octal digits, like "0644"`}},
		{"list of the wrong type", `{"id":"user[web,name=bob]","attributes":{"name":"bob","groups":"adm"}}`,
			"invalid_attribute", []string{"user[web,name=bob]: groups must be a list(string), not a string"}},
		{"purged with attributes", `{"id":"file[web,path=/etc/old]","attributes":{"path":"/etc/old","content":"x"},"purged":true}`,
			"invalid_attribute", []string{"file[web,path=/etc/old]: a purged file takes no attributes but its path: remove content"}},
		{"wrong identity", `{"id":"file[web,name=motd]","attributes":{"name":"motd"}}`,
			"invalid_attribute", []string{`file[web,name=motd]: file resources are identified by "path", not "name"`}},
		{"unknown kind", `{"id":"widget[web,name=w]","attributes":{"name":"w"}}`,
			"unknown_kind", []string{`widget[web,name=w]: "widget" is not a built-in kind (kinds: cron, directory,`, "namespaced, like vendor:widget"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			// The bad resource among good ones, and with ?release=true:
			// nothing is stored, nothing released.
			a := r.send(r.admin, "POST", "/api/v1/envs/prod/versions?release=true", upload(motd, tt.resource))
			if a.status != http.StatusUnprocessableEntity || a.code() != tt.code {
				t.Fatalf("got %d %s (%s), want 422 %s", a.status, a.code(), a.body, tt.code)
			}
			for _, w := range tt.want {
				if !strings.Contains(a.err.Message, w) {
					t.Fatalf("got message %q, want it to contain %q", a.err.Message, w)
				}
			}
			if a.err.Hint == "" {
				t.Fatalf("got no hint in %s", a.body)
			}
		})
	}
	var vs []model.Version
	r.must(r.admin, "GET", "/api/v1/envs/prod/versions", nil, &vs, 200)
	if len(vs) != 0 {
		t.Fatalf("bad uploads stored %d versions", len(vs))
	}

	// A good upload of every kind of check, with a namespaced kind whose
	// attributes the catalogue knows nothing about, is stored and released.
	good := upload(motd,
		`{"id":"symlink[web,path=/usr/bin/app]","attributes":{"path":"/usr/bin/app","target":"../lib/app","owner":"0"}}`,
		`{"id":"user[web,name=bob]","attributes":{"name":"bob","uid":1001,"groups":["adm"],"password":"!"},"sensitive":["password"]}`,
		`{"id":"exec[web,name=migrate]","attributes":{"name":"migrate","command":"make migrate","creates":"/var/lib/app/migrated","timeout":30}}`,
		`{"id":"file[web,path=/etc/old]","attributes":{"path":"/etc/old"},"purged":true}`,
		`{"id":"acme:widget[web,name=w]","attributes":{"name":"w","mode":5,"colour":["red"]}}`)
	var exp api.ExportResponse
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions?release=true", good, &exp, 202)
	if exp.Version.Number != 1 || exp.Version.Count != 6 || !exp.Released {
		t.Fatalf("good upload: got version %d of %d resources, released %v; want 1 of 6, released", exp.Version.Number, exp.Version.Count, exp.Released)
	}

	// The embedded mode (tether deploy) stores versions through the same
	// exporter without the API: it is checked there, not in the handler.
	wrong := model.Resource{ID: model.MustParseID("file[web,path=/etc/motd]"), Attributes: model.Attributes{"path": "/etc/motd", "mode": json.Number("644")}}
	_, _, err := r.srv.Export(context.Background(), "prod", []model.Resource{wrong}, model.VersionMeta{})
	var ke *model.KindError
	if !errors.As(err, &ke) || ke.ID != wrong.ID || ke.Attr != "mode" || ke.Rule != model.RuleType {
		t.Fatalf("Export of a wrong resource: got %v, want a *model.KindError about %s's mode", err, wrong.ID)
	}
	r.must(r.admin, "GET", "/api/v1/envs/prod/versions", nil, &vs, 200)
	if len(vs) != 1 {
		t.Fatalf("got %d versions after a refused export, want 1", len(vs))
	}
}

// A password hash uploaded without being marked sensitive (a hand-written
// upload; the compiler always marks it) is stored marked and never shown in
// clear.
func TestUploadMarksAlwaysSensitiveAttributes(t *testing.T) {
	r := newRig(t, openSQLite(t))
	r.must(r.admin, "POST", "/api/v1/envs", api.EnvRequest{Name: "prod"}, nil, 201)
	const hash = "$6$salt$0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopq"
	body := `{"resources":[{"id":"user[web,name=bob]","attributes":{"name":"bob","password":"` + hash + `"}}]}`
	r.must(r.admin, "POST", "/api/v1/envs/prod/versions", body, nil, 201)
	var v model.Version
	r.must(r.admin, "GET", "/api/v1/envs/prod/versions/1?resources=true", nil, &v, 200)
	if len(v.Resources) != 1 || v.Resources[0].Attributes["password"] != model.RedactedValue || !v.Resources[0].IsSensitive("password") {
		t.Fatalf("the password came back as %+v, want %q and marked sensitive", v.Resources, model.RedactedValue)
	}
}
