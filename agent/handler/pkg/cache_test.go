package pkg

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/agent/handler"
)

// outOfSync answers apt-cache policy with apt's "out of sync" error its
// first times calls, then with a candidate.
type outOfSync struct {
	times int32
	calls atomic.Int32
}

func (o *outOfSync) Run(_ context.Context, cmd handler.Command) (handler.Output, error) {
	if cmd.Args[0] != "apt-cache" {
		return handler.Output{}, nil
	}
	if o.calls.Add(1) <= o.times {
		return handler.Output{ExitCode: 100, Stderr: []byte("E: Cache is out of sync, can't x-ref a package file")}, nil
	}
	return handler.Output{Stdout: []byte("hello:\n  Installed: (none)\n  Candidate: 2.10-3\n")}, nil
}

// A read of apt's cache while another apt rebuilds it is tried again; a
// cache that stays out of sync is an error that says so.
func TestAptCacheOutOfSync(t *testing.T) {
	saved := cacheRetries
	cacheRetries = []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}
	t.Cleanup(func() { cacheRetries = saved })
	r := &outOfSync{times: 2}
	got, err := apt{rt: handler.Runtime{Run: r}}.candidate(t.Context(), "hello")
	if err != nil || got != "2.10-3" || r.calls.Load() != 3 {
		t.Fatalf("candidate %q (%v) after %d calls, want 2.10-3 after 3", got, err, r.calls.Load())
	}
	stuck := &outOfSync{times: 100}
	if _, err := (apt{rt: handler.Runtime{Run: stuck}}).candidate(t.Context(), "hello"); err == nil || !strings.Contains(err.Error(), "out of sync") {
		t.Fatalf("a cache that stays out of sync: %v", err)
	}
	if n := stuck.calls.Load(); n != int32(len(cacheRetries))+1 {
		t.Fatalf("%d calls, want %d", n, len(cacheRetries)+1)
	}
}
