package server_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/record"
)

// Where an operator accepts every agent (manual), the token the server
// makes for an agent it runs itself accepts that agent at once, and only
// it: an operator's token there leaves its agent waiting, unspent, and
// another agent saying hello with the own agent's token is refused and
// alerted. A token made again replaces the unused one.
func TestOwnAgentTokenUnderManualEnrollment(t *testing.T) {
	r := newRig(t, record.EnrollManual)
	secret, err := model.NewEnrollmentToken(r.srv.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.CreateEnrollToken(r.ctx, record.EnrollmentToken{ID: "t1", Env: "test", Name: "rack 1", Hash: record.HashSecret(secret), MaxUses: 1, CreatedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	r.startAgentWith(agent.Config{Env: "test", Name: "db", Token: secret})
	if e := r.next(server.EventAgentDiscovered); e.Agent != "db" || e.Error != "" {
		t.Fatalf("agent with an operator's token: %+v, want discovered, waiting", e)
	}
	if a, err := r.store.GetAgent(r.ctx, "test", "db"); err != nil || a.State != record.AgentPending || a.Note != "waiting for an operator to accept it" {
		t.Fatalf("db: %+v, %v; want pending, waiting for an operator", a, err)
	}
	if tok, err := r.store.EnrollToken(r.ctx, "test", record.HashSecret(secret)); err != nil || tok.Uses != 0 {
		t.Fatalf("the operator's token: %+v, %v; want it unspent", tok, err)
	}

	own, err := r.srv.OwnAgentToken(r.ctx, "test", "hv1")
	if err != nil {
		t.Fatal(err)
	}
	r.startAgentWith(agent.Config{Env: "test", Name: "hv1", Token: own})
	r.waitOnline("hv1")
	if a, err := r.store.GetAgent(r.ctx, "test", "hv1"); err != nil || a.State != record.AgentAccepted {
		t.Fatalf("hv1: %+v, %v; want accepted by its own token", a, err)
	}

	// hv2's token, made twice: the first is revoked. Another agent's
	// hello with it is refused, and alerted.
	if _, err := r.srv.OwnAgentToken(r.ctx, "test", "hv2"); err != nil {
		t.Fatal(err)
	}
	hv2, err := r.srv.OwnAgentToken(r.ctx, "test", "hv2")
	if err != nil {
		t.Fatal(err)
	}
	toks, err := r.store.ListEnrollTokens(r.ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	var forHV2 []record.EnrollmentToken
	for _, tok := range toks {
		if tok.OwnAgent == "hv2" {
			forHV2 = append(forHV2, tok)
		}
	}
	if len(forHV2) != 1 || forHV2[0].Name != "own agent hv2" || forHV2[0].MaxUses != 1 || forHV2[0].ExpiresAt == nil {
		t.Fatalf("hv2's tokens: %+v, want one, for one use, expiring", forHV2)
	}
	r.startAgentWith(agent.Config{Env: "test", Name: "intruder", Token: hv2})
	if e := r.next(server.EventSecurity); e.Agent != "intruder" || !strings.Contains(e.Alert.Message, "enrollment token of the server's own agent hv2") {
		t.Fatalf("security alert: %+v, want one about hv2's token", e)
	}
	if e := r.next(server.EventAgentDiscovered); e.Agent != "intruder" || !strings.Contains(e.Error, "bound to the server's own agent hv2") {
		t.Fatalf("intruder: %+v, want discovered, its token refused", e)
	}
	if a, err := r.store.GetAgent(r.ctx, "test", "intruder"); err != nil || a.State != record.AgentPending ||
		!strings.Contains(a.Note, "bound to the server's own agent hv2") {
		t.Fatalf("intruder: %+v, %v; want pending, its token refused", a, err)
	}

	if _, err := r.srv.OwnAgentToken(r.ctx, "nowhere", "hv1"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("token for an environment that does not exist: got %v, want ErrNotFound", err)
	}
}
