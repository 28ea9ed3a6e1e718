package server_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/scheduler"
)

// A plan of a candidate: the agent answers what a deploy would change,
// per attribute, sensitive values redacted; an agent older than plans,
// which answers a dry run of what it holds, is told apart; nothing is
// deployed, the statuses of the released version stay, and so does the
// release.
func TestPlanOfACandidate(t *testing.T) {
	r := newRig(t, record.EnrollOpen)
	secret := func(v string) model.Resource {
		s := file("web", "/secret", v)
		s.Sensitive = []string{"content"}
		return s
	}
	f := file("web", "/f", "one")
	v1 := r.release(f, secret("s1"))
	r.startAgent("web", true)
	r.waitOnline("web")
	r.deploy(scheduler.DeployRequest{Operation: record.OpDeploy})

	v2, _, err := r.srv.Export(r.ctx, "test", []model.Resource{file("web", "/f", "two"), secret("s2")}, model.VersionMeta{Compiler: "test"})
	if err != nil {
		t.Fatal(err)
	}

	// "old" is an agent older than plans: it dry-runs what it holds.
	pub, key, _ := bus.GenerateKey()
	if err := r.store.UpsertAgent(r.ctx, record.Agent{Env: "test", Name: "old", PublicKey: pub, State: record.AgentAccepted,
		Connected: true, LastSeen: time.Now(), Generation: v1.Number}); err != nil {
		t.Fatal(err)
	}
	if err := r.bus.DeclareInbox(r.ctx, "test", "old"); err != nil {
		t.Fatal(err)
	}
	signer := bus.NewSigner(key, 0)
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	asked := make(chan bus.DryRun, 1)
	go func() {
		_ = r.bus.ConsumeInbox(ctx, "test", "old", func(ctx context.Context, d bus.Delivery) error {
			var body bus.DryRun
			if d.Envelope.Kind != bus.KindDryRun || d.Envelope.DecodeBody(&body) != nil {
				return nil
			}
			select {
			case asked <- body:
			default:
			}
			e, err := signer.Seal(bus.KindDryRunResult, "test", "old", bus.ResourceStatus{DeployID: body.DeployID, Generation: body.Generation, Done: true})
			if err != nil {
				return err
			}
			return r.bus.Publish(ctx, e)
		})
	}()

	p, err := r.srv.Plan(r.ctx, "test", v2.Number, record.PlanRequest{Timeout: patience})
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != v2.Number || p.Released != v1.Number || len(p.NotAnswered) != 0 || len(p.Agents) != 2 {
		t.Fatalf("plan %+v; want version %d against %d, two agents, all answered", p, v2.Number, v1.Number)
	}
	// The plan's dry run is listed with the deploys, of the planned version.
	if ds, err := r.store.ListDeploys(r.ctx, "test", record.DeployFilter{Kind: record.OpDryRun}); err != nil || len(ds) == 0 ||
		ds[0].ID != p.ID || ds[0].Trigger != record.DeployByPlan || ds[0].Version != v2.Number || ds[0].Asked != 2 {
		t.Fatalf("dry runs listed after the plan: %+v, %v; want the plan's, of version %d, to 2 agents", ds, err, v2.Number)
	}
	old, web := p.Agents[0], p.Agents[1]
	if old.Name != "old" || old.Outcome != record.PlanTooOld {
		t.Fatalf("plan: %+v; want old too old", old)
	}
	if body := <-asked; body.Plan == nil || body.Generation != v1.Number || body.Plan.Generation != v2.Number {
		t.Fatalf("the old agent was sent %+v; want a dry run of generation %d carrying a plan of %d", body, v1.Number, v2.Number)
	}
	if web.Name != "web" || web.Outcome != record.PlanAnswered || len(web.Resources) != 2 || web.Unchanged != 0 {
		t.Fatalf("plan: %+v; want web answered, two resources to change", web)
	}
	if fr := web.Resources[0]; fr.ID != f.ID || fr.Would != model.WouldChange || fr.Changes["content"] != (model.Change{Current: "one", Desired: "two"}) {
		t.Fatalf("plan of %s: %+v; want content one → two", f.ID, fr)
	}
	if sr := web.Resources[1]; sr.Would != model.WouldChange || sr.Changes["content"] != (model.Change{Current: model.RedactedValue, Desired: model.RedactedValue}) {
		t.Fatalf("plan of the secret: %+v; want its content change redacted", sr)
	}

	if b, err := os.ReadFile(filepath.Join(r.roots["web"], "f")); err != nil || string(b) != "one" {
		t.Fatalf("/f after a plan: %q, %v; want one", b, err)
	}
	sts, err := r.store.Statuses(r.ctx, "test", record.StatusFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Version != v1.Number || st.State != model.StateDeployed || st.Compliance != model.Compliant {
			t.Fatalf("status after a plan: %+v; want version %d deployed and compliant", st, v1.Number)
		}
	}
	if rel, err := r.store.ReleasedVersion(r.ctx, "test"); err != nil || rel.Number != v1.Number {
		t.Fatalf("released after a plan: %d, %v; want %d", rel.Number, err, v1.Number)
	}
}
