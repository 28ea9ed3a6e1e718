package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/bus"
)

// TestInboxDeletedSaysHelloAgain deletes an enrolled agent's inbox with a
// command in it, as a client with rights on the broker could: the agent,
// which never declares its inbox, says hello, so the server declares it
// again and sends what it lacks, and what the server sends then is
// applied.
func TestInboxDeletedSaysHelloAgain(t *testing.T) {
	s := newFakeServer(t)
	root := t.TempDir()
	var seen int
	start(t, s, "web", t.TempDir(), root, nil)
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	s.next(&seen, "web", bus.KindHeartbeat) // enrolled: no more hellos
	s.bus.DeleteQueue(bus.InboxName("test", "web"))
	e := s.next(&seen, "web", bus.KindHello)
	var h bus.Hello
	if err := e.DecodeBody(&h); err != nil {
		t.Fatal(err)
	}
	if h.Token != "" {
		t.Fatalf("hello after the inbox was lost carries token %q, want none (enrolled)", h.Token)
	}
	got := s.deploy(&seen, "web", 1, "d1", "", file("web", "/a", "A"))
	if len(got) != 1 {
		t.Fatalf("deploy after the inbox came back: %d results, want 1", len(got))
	}
	if b, err := os.ReadFile(filepath.Join(root, "a")); err != nil || string(b) != "A" {
		t.Fatalf("/a holds %q (%v), want A", b, err)
	}
}
