package ingest

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/server/record"
)

// A copy read before its agent was forgotten (or its environment, or
// everything) is not kept: the change told may be newer than the copy. A
// copy read after is, and so is one read while another agent was
// forgotten, unless that one shares its stripe.
func TestAgentCacheKeepsNoCopyOlderThanAForget(t *testing.T) {
	c := newAgentCache(nil, time.Hour, time.Hour)
	web := record.Agent{Env: "prod", Name: "web", State: record.AgentAccepted}
	held := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.m[agentKey{"prod", "web"}]
		return ok
	}
	for _, forget := range []func(){
		func() { c.forget("prod", "web") },
		func() { c.forgetEnv("prod") },
		func() { c.forgetEnv("staging") }, // everything read before is read again
		func() { c.setListening(true) },
		func() { c.setListening(false) },
	} {
		c.forget("prod", "web") // start without a copy
		since := c.since("prod", "web")
		forget()
		c.putRead(web, since)
		if held() {
			t.Fatal("a copy read before a forget was kept")
		}
		c.putRead(web, c.since("prod", "web"))
		if !held() {
			t.Fatal("a copy read after the last forget was not kept")
		}
	}
	// Another agent forgotten meanwhile: kept, unless of the same stripe.
	other := ""
	for i := 0; other == ""; i++ {
		if n := "db" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)); (agentKey{"prod", n}).stripe() != (agentKey{"prod", "web"}).stripe() {
			other = n
		}
	}
	c.forget("prod", "web")
	since := c.since("prod", "web")
	c.forget("prod", other)
	c.putRead(web, since)
	if !held() {
		t.Fatalf("a copy read while %s (another stripe) was forgotten was not kept", other)
	}
	c.setListening(true)
	if held() || !c.listening.Load() {
		t.Fatal("listening from now on: every copy is dropped")
	}
}
