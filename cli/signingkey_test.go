package cli

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/keyring"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// `tether server signing-key` against a real API (SQLite, the in-process
// bus, a key file's key): each step in turn, the refusals of steps out of
// order or with agents not ready, admin tokens only, -o json.
func TestServerSigningKeyCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := bus.NewLocal(zerolog.Nop())
	t.Cleanup(b.Close)
	ring, err := keyring.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := server.SigningKey(ctx, st, ring, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Key: key, Keyring: ring, SigningKeyRefresh: 10 * time.Millisecond}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(api.New(api.Config{}, server.APIServices(srv, nil), zerolog.Nop()).Handler())
	t.Cleanup(ts.Close)
	token := func(role record.Role) string {
		tok, secret, err := api.IssueToken(string(role), role, "", "test", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
		return secret
	}
	operator, admin := token(record.RoleOperator), token(record.RoleAdmin)
	if _, err := srv.EnsureEnv(ctx, "prod", record.DefaultEnvSettings()); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web-1", State: record.AgentAccepted, PublicKey: make([]byte, 32), LastSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeclareInbox(ctx, "prod", "web-1"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TETHER_SERVER", ts.URL)
	t.Setenv("TETHER_TOKEN", operator)
	if code, _, stderr := invoke(t, "server", "signing-key", "status"); code != 1 || !strings.Contains(stderr, "needs admin") {
		t.Fatalf("status with an operator's token: exit %d, %q; want 1, admin needed", code, stderr)
	}
	t.Setenv("TETHER_TOKEN", admin)
	old := bus.Fingerprint(srv.PublicKey())
	if code, stdout, stderr := invoke(t, "server", "signing-key", "status"); code != 0 || !strings.Contains(stdout, "phase      steady") || !strings.Contains(stdout, "signing    "+old) {
		t.Fatalf("status: exit %d, %q / %q", code, stdout, stderr)
	}
	for _, step := range []string{"switch", "retire"} {
		if code, _, stderr := invoke(t, "server", "signing-key", step); code != 1 || !strings.Contains(stderr, "signing-key new") && !strings.Contains(stderr, "no old signing key") {
			t.Fatalf("%s before new: exit %d, %q; want it refused, saying why", step, code, stderr)
		}
	}
	code, stdout, stderr := invoke(t, "server", "signing-key", "new")
	if code != 0 || !strings.Contains(stdout, "announced to 1 agent(s)") || !strings.Contains(stdout, "tether server signing-key status") {
		t.Fatalf("new: exit %d, %q / %q", code, stdout, stderr)
	}
	if code, stdout, _ := invoke(t, "server", "signing-key", "status"); code != 0 || !strings.Contains(stdout, "waiting  prod/web-1 (offline; never said which server keys it takes: older") {
		t.Fatalf("status after new: exit %d, %q; want web-1 listed as waiting", code, stdout)
	}
	var status record.SigningKeyStatus
	if code, stdout, _ := invoke(t, "server", "signing-key", "status", "-o", "json"); code != 0 || json.Unmarshal([]byte(stdout), &status) != nil ||
		status.Phase != record.SigningKeyAnnounced || status.Next == nil || status.WaitingCount != 1 {
		t.Fatalf("status -o json after new: exit %d, %q", code, stdout)
	}
	if code, _, stderr := invoke(t, "server", "signing-key", "new"); code != 1 || !strings.Contains(stderr, "under way") {
		t.Fatalf("a second new: exit %d, %q; want it refused", code, stderr)
	}
	if code, _, stderr := invoke(t, "server", "signing-key", "switch"); code != 1 || !strings.Contains(stderr, "prod/web-1") || !strings.Contains(stderr, "--force") {
		t.Fatalf("switch with an agent not ready: exit %d, %q; want it refused, naming it and --force", code, stderr)
	}
	if code, stdout, stderr := invoke(t, "server", "signing-key", "switch", "--force"); code != 0 || !strings.Contains(stdout, "every server signs with "+status.Next.Fingerprint) {
		t.Fatalf("switch --force: exit %d, %q / %q", code, stdout, stderr)
	}
	if code, _, stderr := invoke(t, "server", "signing-key", "retire"); code != 1 || !strings.Contains(stderr, "--force") {
		t.Fatalf("retire with an agent not taking the new key: exit %d, %q; want it refused", code, stderr)
	}
	code, stdout, stderr = invoke(t, "server", "signing-key", "retire", "--force", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(stdout), &status) != nil || status.Phase != record.SigningKeySteady || status.Signing.Fingerprint == old {
		t.Fatalf("retire --force -o json: exit %d, %q / %q; want the new key alone", code, stdout, stderr)
	}
	if code, stdout, _ := invoke(t, "server", "key", "-o", "json"); code != 0 || !strings.Contains(stdout, status.Signing.Fingerprint) {
		t.Fatalf("server key after the rollover: %q; want the new key", stdout)
	}
}
