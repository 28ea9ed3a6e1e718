package journal

import (
	"fmt"
	"testing"

	"github.com/tetherhq/tether/model"
)

// BenchmarkCommitResults measures what a deploy pays per status batch: 64
// results and the event carrying them, in one synced transaction.
func BenchmarkCommitResults(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		b.Run(fmt.Sprintf("nosync=%v", noSync), func(b *testing.B) {
			j, err := Open(b.TempDir(), "a", Config{NoSync: noSync})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			rs := make([]Result, 64)
			for i := range rs {
				rs[i] = Result{ID: model.ID{Type: "file", Agent: "a", Key: "path", Value: fmt.Sprintf("/f%d", i)}, Applied: Applied{State: model.StateDeployed}}
			}
			event := make([]byte, 8<<10)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := j.Begin().Record(rs).Out(uint64(i+1), event).Commit(); err != nil {
					b.Fatal(err)
				}
				if err := j.Sent(uint64(i + 1)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIdentityWrite measures one durable write of the identity file:
// what a reserving signer pays once per 1,024 sequence numbers, and an
// agent once per generation it takes.
func BenchmarkIdentityWrite(b *testing.B) {
	j, err := Open(b.TempDir(), "a", Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	for i := 0; b.Loop(); i++ {
		if err := j.ReserveSeq(uint64(i+1) * 1024); err != nil {
			b.Fatal(err)
		}
	}
}
