package server

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/server/record"
)

// A copy read before something was forgotten is not kept: the change told
// may be newer than the copy. A copy read after is.
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
		func() { c.forget("prod", "db") }, // another agent: the count is one for all
		func() { c.forgetEnv("prod") },
		func() { c.setListening(true) },
		func() { c.setListening(false) },
	} {
		c.forget("prod", "web") // start without a copy
		since := c.since()
		forget()
		c.putRead(web, since)
		if held() {
			t.Fatal("a copy read before a forget was kept")
		}
		c.putRead(web, c.since())
		if !held() {
			t.Fatal("a copy read after the last forget was not kept")
		}
	}
	c.setListening(true)
	if held() || !c.listening.Load() {
		t.Fatal("listening from now on: every copy is dropped")
	}
}
