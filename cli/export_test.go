package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// apiServer starts a server on SQLite with environment prod behind its
// API, wrapped by wrap when given; it returns the store, the API's URL and
// an admin token's secret.
func apiServer(t *testing.T, wrap func(http.Handler) http.Handler) (*sqlite.Store, string, string) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(func() { b.Close() })
	srv, err := server.New(server.Config{}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tok, secret, err := api.IssueToken("root", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.EnsureEnv(ctx, "prod", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	h := api.New(api.Config{}, server.APIServices(srv, nil), zerolog.Nop()).Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return st, ts.URL, secret
}

// When the server refuses an upload by the kind catalogue (here: a
// compiler of another version writing a file's mode as a number), `tether
// export` prints the server's message as it is, on one line: the resource,
// the attribute, what was expected, and the hint.
func TestExportRefusedByKinds(t *testing.T) {
	ctx := context.Background()
	st, url, secret := apiServer(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			body = bytes.ReplaceAll(body, []byte(`"mode":"0644"`), []byte(`"mode":644`))
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			h.ServeHTTP(w, r)
		})
	})

	dir := t.TempDir()
	model := "host \"web\" {\n  file \"/etc/motd\" {\n    content = \"hi\\n\"\n    mode    = \"0644\"\n  }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(model), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TETHER_SERVER", url)
	t.Setenv("TETHER_TOKEN", secret)
	t.Setenv("TETHER_ENV", "prod")
	code, stdout, stderr := invoke(t, "export", dir)
	want := `tether: file[web,path=/etc/motd]: mode must be a string, not the number 644: permission bits in octal, e.g. "0644"; new files get 0644 when unset ` +
		`(each kind's attributes are in docs/model-language.md; tether compile of the server's version applies the same check)` + "\n"
	if code != exitFailed || stdout != "" || stderr != want {
		t.Fatalf("got exit %d, stdout %q, stderr\n%s\nwant exit %d, stderr\n%s", code, stdout, stderr, exitFailed, want)
	}
	if vs, err := st.ListVersions(ctx, "prod"); err != nil || len(vs) != 0 {
		t.Fatalf("got versions %v (%v), want none stored", vs, err)
	}
	if strings.Contains(stderr, "invalid attribute") {
		t.Fatalf("got %q: the sentinel's text leaks into the message", stderr)
	}
}
