package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/server/keyring"
	"github.com/tetherhq/tether/server/store/postgres"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// newKeyFile makes a key file for a server under test.
func newKeyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server.key")
	if _, err := keyring.Create(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestKeygen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.key")
	code, out, errs := invoke(t, "server", "keygen", path)
	if code != 0 || !strings.Contains(out, "created "+path) || !strings.Contains(out, "apart from the database") {
		t.Fatalf("keygen: exit %d, %q %q", code, out, errs)
	}
	first, err := keyring.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %04o, want 0600", fi.Mode().Perm())
	}
	before, _ := os.ReadFile(path)
	if code, _, errs := invoke(t, "server", "keygen", path); code != exitUsage || !strings.Contains(errs, "keygen --add "+path) {
		t.Fatalf("keygen over an existing file: exit %d, %q; want it refused, pointing at --add", code, errs)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("keygen changed an existing key file")
	}
	code, out, errs = invoke(t, "server", "keygen", path, "--add")
	if code != 0 || !strings.Contains(out, "rotate-key") {
		t.Fatalf("keygen --add: exit %d, %q %q", code, out, errs)
	}
	r, err := keyring.Load(path)
	if err != nil || len(r.KeyIDs()) != 2 || r.KeyIDs()[1] != first.KeyID() {
		t.Fatalf("after --add: %v, %v; want a new key before %s", r, err, first.KeyID())
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no file named", []string{"server", "keygen"}, "name the key file"},
		{"add to a missing file", []string{"server", "keygen", "--add", filepath.Join(t.TempDir(), "none")}, "create one with tether server keygen"},
		{"missing directory", []string{"server", "keygen", filepath.Join(t.TempDir(), "none", "server.key")}, "create the directory first"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code, _, errs := invoke(t, tt.args...); code != exitUsage || !strings.Contains(errs, tt.want) {
				t.Fatalf("got exit %d, %q; want exit %d saying %q", code, errs, exitUsage, tt.want)
			}
		})
	}
}

// Without usable keys the server stops before it touches the database, and
// says how to make them.
func TestServerKeyErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.key")
	config := filepath.Join(dir, "server.toml") // so that no /etc/tether/server.toml counts
	if err := os.WriteFile(config, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	good := newKeyFile(t)
	tests := []struct {
		name string
		env  string // TETHER_KEY
		args []string
		want []string
	}{
		{"no key file", "", []string{"--key-file", missing}, []string{"no key file at " + missing, "tether server keygen " + missing, "--key-file " + missing}},
		{"both", keyring.EncodeKey(keyring.NewKey()), []string{"--key-file", good}, []string{"TETHER_KEY and --key-file"}},
		{"a bad TETHER_KEY", "not a key", nil, []string{"TETHER_KEY: line 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TETHER_KEY", tt.env)
			args := append([]string{"server", "--config", config, "--postgres", "postgres://nobody@127.0.0.1:1/x"}, tt.args...)
			code, _, errs := invoke(t, args...)
			if code != exitUsage {
				t.Fatalf("exit %d (%q), want %d", code, errs, exitUsage)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs, w) {
					t.Errorf("error %q does not say %q", errs, w)
				}
			}
		})
	}
}

var fingerprintRE = regexp.MustCompile(`server key (SHA256:\S+)`)

// startUntilKey runs `tether server` with args until it says which key it
// signs with, stops it, and returns that key's fingerprint.
func startUntilKey(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"tether", "server", "--listen", "127.0.0.1:0", "--admin-token", "0123456789abcdef0123"}, args...), strings.NewReader(""), &out, &errb)
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if m := fingerprintRE.FindStringSubmatch(errb.String()); m != nil {
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("server exited %d: %s", code, errb.String())
			}
			return m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("server exited %d before saying its key: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not say its key within 60s: %s", errb.String())
		}
	}
}

// TestServerKeyUpgradeAndRotation plays both procedures of docs/operations.md
// with real server processes: a database whose signing key an older server
// stored in clear is sealed on start; its key is rotated from A to B, A
// removed, and the server signs with the same key throughout.
func TestServerKeyUpgradeAndRotation(t *testing.T) {
	pg := pgtest.Fresh(t)
	cfg := amqptest.Config(t)
	amqptest.Open(t, cfg) // its cleanup removes what the servers declare
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Config{URL: pg})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The row as older servers wrote it.
	pub, clear, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Secret(ctx, "server-signing-key", func() ([]byte, error) { return clear, nil }); err != nil {
		t.Fatal(err)
	}
	row := func() []byte {
		all, err := st.Secrets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return all["server-signing-key"]
	}
	want := bus.Fingerprint(pub)
	keyFile := filepath.Join(t.TempDir(), "server.key")
	if code, _, errs := invoke(t, "server", "keygen", keyFile); code != 0 {
		t.Fatalf("keygen: %s", errs)
	}
	a, _ := keyring.Load(keyFile)
	server := []string{"--postgres", pg, "--amqp", cfg.URL, "--amqp-namespace", cfg.Namespace, "--queue-type", "classic", "--key-file", keyFile}

	if got := startUntilKey(t, server...); got != want {
		t.Fatalf("after the upgrade the server signs with %s, want %s (the key agents pinned)", got, want)
	}
	if r := row(); strings.Contains(string(r), string(clear.Seed())) || a.SealedWith(r) != a.KeyID() {
		t.Fatalf("after the upgrade the row is %x: want it sealed with key %s", r, a.KeyID())
	}

	// Rotation: B first, A kept; seal again; remove A.
	if code, _, errs := invoke(t, "server", "keygen", "--add", keyFile); code != 0 {
		t.Fatalf("keygen --add: %s", errs)
	}
	ba, _ := keyring.Load(keyFile)
	b := ba.KeyID()
	// rotate-key reads the server's config file, as the server does.
	config := filepath.Join(t.TempDir(), "server.toml")
	if err := os.WriteFile(config, []byte("postgres = \""+pg+"\"\nkey-file = \""+keyFile+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := invoke(t, "server", "rotate-key", "--config", config)
	if code != 0 || !strings.Contains(out, "sealed 1 secret(s) again with key "+b) || !strings.Contains(out, "key(s) "+a.KeyID()) {
		t.Fatalf("rotate-key: exit %d, %q %q", code, out, errs)
	}
	if ba.SealedWith(row()) != b {
		t.Fatalf("after rotate-key the row is sealed with %s, want %s", ba.SealedWith(row()), b)
	}
	if code, out, _ := invoke(t, "server", "rotate-key", "--postgres", pg, "--key-file", keyFile); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("rotate-key again: exit %d, %q; want nothing to do", code, out)
	}
	text, _ := os.ReadFile(keyFile)
	head, _, ok := strings.Cut(string(text), "# key "+a.KeyID())
	if !ok {
		t.Fatalf("key A is not in the key file:\n%s", text)
	}
	if err := os.WriteFile(keyFile, []byte(head), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := keyring.Load(keyFile); err != nil || len(r.KeyIDs()) != 1 || r.KeyID() != b {
		t.Fatalf("key file without A: %v, %v", r, err)
	}
	if got := startUntilKey(t, server...); got != want {
		t.Fatalf("after the rotation the server signs with %s, want %s", got, want)
	}

	// The key in TETHER_KEY works as the file does.
	t.Setenv("TETHER_KEY", head)
	if got := startUntilKey(t, server[:len(server)-2]...); got != want {
		t.Fatalf("with TETHER_KEY the server signs with %s, want %s", got, want)
	}
}
