package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
)

// benchDrift measures, over b.N trials, the time from an out-of-band write
// to a watched file to the compliance event that reports it leaving the
// agent (published on the in-process bus), and with heal, to the event
// that reports it restored. It reports p50 and p99.
func benchDrift(b *testing.B, policy model.DriftPolicy) {
	s := newFakeServer(b)
	root := b.TempDir()
	var seen int
	// Flapping would hold reports back: this benchmark drifts one file
	// thousands of times on purpose.
	start(b, s, "web", b.TempDir(), root, nil, func(c *Config) { c.FlapCount = 1 << 30 })
	s.next(&seen, "web", bus.KindHello)
	s.enroll("web")
	const files = 100
	var rs []model.Resource
	for i := range files {
		rs = append(rs, file("web", fmt.Sprintf("/f%03d", i), "intent\n"))
	}
	s.deploy(&seen, "web", 1, "d1", policy, rs...)

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		r := rs[i%files]
		path := filepath.Join(root, r.ID.Value)
		want := model.NonCompliant
		if policy == model.DriftHeal {
			want = model.Compliant
		}
		t0 := time.Now()
		if err := os.WriteFile(path, fmt.Appendf(nil, "drift %d\n", i), 0o644); err != nil {
			b.Fatal(err)
		}
		q := &reports{s: s, from: &seen, agent: "web", id: r.ID}
		for q.next().Compliance != want {
		}
		lat = append(lat, time.Since(t0))
		if policy != model.DriftHeal {
			// Put it back and wait for the compliant report, so the next
			// trial on this file starts from its intent.
			if err := os.WriteFile(path, []byte("intent\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			for q.next().Compliance != model.Compliant {
			}
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// go test ./agent -run '^$' -bench DriftDetect -benchtime 1000x
func BenchmarkDriftDetect(b *testing.B) { benchDrift(b, model.DriftAlert) }

// go test ./agent -run '^$' -bench DriftHeal -benchtime 1000x
func BenchmarkDriftHeal(b *testing.B) { benchDrift(b, model.DriftHeal) }
