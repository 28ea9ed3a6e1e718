package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/api/internal/openapiclient"
	"github.com/tetherhq/tether/server/keyring"
	"github.com/tetherhq/tether/server/record"
)

// TestGeneratedClient calls a real server with the Go client oapi-codegen
// generated from the OpenAPI document (package openapiclient): it
// compiles, sends what the server reads, and reads typed answers, errors
// included.
func TestGeneratedClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A server with a key file, as tether server has: its signing key can
	// be rolled over.
	st := openSQLite(t)
	kr, err := keyring.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := server.SigningKey(ctx, st, kr, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	r := newServerRig(t, st, server.Config{Key: key, Keyring: kr, SigningKeyRefresh: 20 * time.Millisecond, Webhooks: localWebhooks}, api.Config{}, zerolog.Nop())
	c, err := openapiclient.NewClientWithResponses(r.ts.URL, openapiclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+r.admin)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	// status fails the test unless an answer has the status wanted.
	status := func(what string, got *http.Response, body []byte, want int) {
		t.Helper()
		if got.StatusCode != want {
			t.Fatalf("%s: status %d (%s), want %d", what, got.StatusCode, body, want)
		}
	}

	created, err := c.PostEnvsWithResponse(ctx, openapiclient.EnvRequest{Name: "prod", Settings: &map[string]string{"drift_policy": "heal"}})
	if err != nil {
		t.Fatal(err)
	}
	status("create prod", created.HTTPResponse, created.Body, http.StatusCreated)
	if e := created.JSON201; e == nil || e.Name != "prod" || e.Settings.DriftPolicy != openapiclient.DriftPolicyHeal || e.Settings.Enrollment != openapiclient.EnrollmentPolicyManual {
		t.Fatalf("created %+v, want prod healing drift, enrolling by hand", e)
	}
	envs, err := c.GetEnvsWithResponse(ctx)
	if err != nil {
		t.Fatal(err)
	}
	status("list environments", envs.HTTPResponse, envs.Body, http.StatusOK)
	if envs.JSON200 == nil || len(*envs.JSON200) != 1 || (*envs.JSON200)[0].Name != "prod" {
		t.Fatalf("environments %s, want prod", envs.Body)
	}

	// An upload released at once: 202, the version released, the release
	// named.
	release := true
	resources := []openapiclient.Resource{{Id: "file[web-1,path=/etc/motd]", Attributes: map[string]*any{"path": anyOf("/etc/motd"), "content": anyOf("hello\n")}}}
	up, err := c.PostEnvsEnvVersionsWithResponse(ctx, "prod", &openapiclient.PostEnvsEnvVersionsParams{Release: &release}, openapiclient.ExportRequest{
		Resources: &resources, Meta: &openapiclient.VersionMeta{Source: strPtr("client test")}})
	if err != nil {
		t.Fatal(err)
	}
	status("upload", up.HTTPResponse, up.Body, http.StatusAccepted)
	if v := up.JSON202; v == nil || v.Version.Number != 1 || v.Version.State != openapiclient.VersionStateReleased || !v.Released ||
		v.ReleaseId == nil || *v.ReleaseId == "" || v.Version.ResourceCount != 1 || len(v.Version.SetHash) != 64 ||
		v.Version.Meta.Source == nil || *v.Version.Meta.Source != "client test" || v.Version.Meta.ExportedBy == nil || *v.Version.Meta.ExportedBy != "root" {
		t.Fatalf("upload answered %s, want version 1 of the client test's, exported by root, released with its release's id", up.Body)
	}
	diff, err := c.GetEnvsEnvVersionsNDiffWithResponse(ctx, "prod", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	status("diff", diff.HTTPResponse, diff.Body, http.StatusOK)
	if d := diff.JSON200; d == nil || d.Added == nil || len(*d.Added) != 1 || (*d.Added)[0] != resources[0].Id {
		t.Fatalf("diff %s, want %s added", diff.Body, resources[0].Id)
	}

	// An agent that said hello: read, accepted, listed with typed filters.
	if err := r.st.UpsertAgent(ctx, record.Agent{Env: "prod", Name: "web-1", PublicKey: make([]byte, 32), LastSeen: time.Now(), Connected: true,
		Labels: map[string]string{"role": "web"}}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetEnvsEnvAgentsNameWithResponse(ctx, "prod", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	status("read an agent", got.HTTPResponse, got.Body, http.StatusOK)
	if a := got.JSON200; a == nil || a.Name != "web-1" || a.State != openapiclient.AgentStatePending || !a.Online ||
		a.KeyFingerprint == nil || !strings.HasPrefix(*a.KeyFingerprint, "SHA256:") || a.Labels == nil || (*a.Labels)["role"] != "web" {
		t.Fatalf("agent %s, want web-1 pending, online, with its key's fingerprint and label", got.Body)
	}
	acc, err := c.PostEnvsEnvAgentsNameAcceptWithResponse(ctx, "prod", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	status("accept", acc.HTTPResponse, acc.Body, http.StatusOK)
	if acc.JSON200 == nil || acc.JSON200.State != openapiclient.AgentStateAccepted {
		t.Fatalf("accepted %s", acc.Body)
	}
	accepted, limit := openapiclient.AgentStateAccepted, int64(10)
	list, err := c.GetEnvsEnvAgentsWithResponse(ctx, "prod", &openapiclient.GetEnvsEnvAgentsParams{State: &accepted, Limit: &limit})
	if err != nil {
		t.Fatal(err)
	}
	status("list agents", list.HTTPResponse, list.Body, http.StatusOK)
	if list.JSON200 == nil || len(*list.JSON200) != 1 || list.Headers200 == nil || list.Headers200.XTotalCount == nil || *list.Headers200.XTotalCount != 1 {
		t.Fatalf("accepted agents %s (headers %+v), want web-1 and X-Total-Count 1", list.Body, list.Headers200)
	}

	// The agent connects: a repair reaches it, and it is asked to rotate
	// its key.
	if err := r.bus.DeclareInbox(ctx, "prod", "web-1"); err != nil {
		t.Fatal(err)
	}
	rep, err := c.PostEnvsEnvRepairWithResponse(ctx, "prod", openapiclient.OperationRequest{Agents: &[]string{"web-1"}})
	if err != nil {
		t.Fatal(err)
	}
	status("repair", rep.HTTPResponse, rep.Body, http.StatusAccepted)
	if d := rep.JSON202; d == nil || d.Id == "" || d.Agents == nil || len(*d.Agents) != 1 || (*d.Agents)[0] != "web-1" {
		t.Fatalf("repair %s, want one sent to web-1", rep.Body)
	}
	rot, err := c.PostEnvsEnvAgentsNameRotateKeyWithResponse(ctx, "prod", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	status("rotate key", rot.HTTPResponse, rot.Body, http.StatusAccepted)
	if rot.JSON202 == nil || rot.JSON202.Name != "web-1" {
		t.Fatalf("rotate key %s", rot.Body)
	}

	// The server's key, and a rollover of it that the agent is not ready
	// for: refused with a typed error, then forced.
	info, err := c.GetServerWithResponse(ctx)
	if err != nil {
		t.Fatal(err)
	}
	status("server", info.HTTPResponse, info.Body, http.StatusOK)
	if info.JSON200 == nil || !strings.HasPrefix(info.JSON200.Fingerprint, "SHA256:") {
		t.Fatalf("server %s", info.Body)
	}
	sk, err := c.GetServerSigningKeyWithResponse(ctx)
	if err != nil {
		t.Fatal(err)
	}
	status("signing key", sk.HTTPResponse, sk.Body, http.StatusOK)
	if sk.JSON200 == nil || sk.JSON200.Phase != openapiclient.SigningKeyPhaseSteady || sk.JSON200.Signing.Fingerprint != info.JSON200.Fingerprint {
		t.Fatalf("signing key %s, want steady, signing with %s", sk.Body, info.JSON200.Fingerprint)
	}
	next, err := c.PostServerSigningKeyNewWithResponse(ctx)
	if err != nil {
		t.Fatal(err)
	}
	status("new signing key", next.HTTPResponse, next.Body, http.StatusOK)
	if next.JSON200 == nil || next.JSON200.Phase != openapiclient.SigningKeyPhaseAnnounced || next.JSON200.Next == nil {
		t.Fatalf("new signing key %s, want a next key announced", next.Body)
	}
	sw, err := c.PostServerSigningKeySwitchWithResponse(ctx, openapiclient.SigningKeyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	status("switch", sw.HTTPResponse, sw.Body, http.StatusConflict)
	if sw.JSON409 == nil || sw.JSON409.Error == nil || sw.JSON409.Error.Code != openapiclient.ErrorDetailCodeNotReady {
		t.Fatalf("switch with web-1 not ready: %s, want not_ready", sw.Body)
	}
	force := true
	sw, err = c.PostServerSigningKeySwitchWithResponse(ctx, openapiclient.SigningKeyRequest{Force: &force})
	if err != nil {
		t.Fatal(err)
	}
	status("forced switch", sw.HTTPResponse, sw.Body, http.StatusOK)
	if sw.JSON200 == nil || sw.JSON200.Phase == openapiclient.SigningKeyPhaseAnnounced || sw.JSON200.Phase == openapiclient.SigningKeyPhaseSteady {
		t.Fatalf("forced switch %s, want switching or switched", sw.Body)
	}
	ret, err := c.PostServerSigningKeyRetireWithResponse(ctx, openapiclient.SigningKeyRequest{Force: &force})
	if err != nil {
		t.Fatal(err)
	}
	if ret.StatusCode() != http.StatusOK && (ret.JSON409 == nil || ret.JSON409.Error.Code != openapiclient.ErrorDetailCodeConflict) {
		t.Fatalf("retire: %d %s, want done, or refused as a conflict while the switch is under way", ret.StatusCode(), ret.Body)
	}

	// The agent deleted: the answer is the agent as it was; then it is
	// not found, a typed error.
	del, err := c.DeleteEnvsEnvAgentsNameWithResponse(ctx, "prod", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	status("delete agent", del.HTTPResponse, del.Body, http.StatusOK)
	if del.JSON200 == nil || del.JSON200.Name != "web-1" || del.JSON200.State != openapiclient.AgentStateAccepted {
		t.Fatalf("deleted %s, want web-1 as it was, accepted", del.Body)
	}
	gone, err := c.GetEnvsEnvAgentsNameWithResponse(ctx, "prod", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	status("read a deleted agent", gone.HTTPResponse, gone.Body, http.StatusNotFound)
	if gone.JSON404 == nil || gone.JSON404.Error == nil || gone.JSON404.Error.Code != openapiclient.ErrorDetailCodeNotFound || gone.JSON404.Error.Message == "" {
		t.Fatalf("deleted agent: %s, want a not_found error", gone.Body)
	}
}

func anyOf(v any) *any        { return &v }
func strPtr(s string) *string { return &s }
