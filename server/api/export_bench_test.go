package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// exportBody is an upload of file resources (256 bytes of content each)
// of at least size bytes, as `tether export` sends it.
func exportBody(size int) ([]byte, int) { return exportBodyOf(size, 256) }

// exportBodyOf is an upload of at least size bytes of file resources
// with content bytes of content each (none: a file of path only, which
// says nothing but that it exists: the smallest resource there is).
func exportBodyOf(size, content int) ([]byte, int) {
	var b bytes.Buffer
	b.Grow(size + 4096)
	b.WriteString(`{"meta":{"compiler":"bench"},"resources":[`)
	n := 0
	for b.Len() < size {
		if n > 0 {
			b.WriteByte(',')
		}
		path, agent := fmt.Sprintf("/etc/app/%04d/%03d.conf", n/1000, n%1000), fmt.Sprintf("host%04d", n/100)
		attrs := model.Attributes{"path": path}
		if content > 0 {
			attrs["content"], attrs["mode"], attrs["owner"] = strings.Repeat("x", content), "0644", "root"
		} else {
			path, agent = fmt.Sprintf("/%06d", n), fmt.Sprintf("a%03d", n/1000)
			attrs["path"] = path
		}
		res := model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path}, Attributes: attrs}
		j, err := json.Marshal(res)
		if err != nil {
			panic(err)
		}
		b.Write(j)
		n++
	}
	b.WriteString(`]}`)
	return b.Bytes(), n
}

// peakRSS resets the process's peak resident memory (reset) or reads it
// in MiB (Linux: /proc/self/clear_refs and /proc/self/status).
func resetPeakRSS() error { return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func peakRSS() (float64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}

// discard is an Exporter that stores nothing, so that a benchmark sees
// what the API itself costs.
type discard struct{ api.Records }

func (discard) Upload(env string) api.Upload { return &discarded{env: env} }

// discarded is an upload that counts its resources and keeps none.
type discarded struct {
	env string
	n   int
}

func (d *discarded) Add(context.Context, *model.Resource) error { d.n++; return nil }
func (d *discarded) Size() int64                                { return 0 }
func (d *discarded) Store(_ context.Context, meta model.VersionMeta) (model.Version, bool, error) {
	return model.Version{Env: d.env, Number: 1, Count: d.n, Meta: meta}, false, nil
}

func (discard) Release(context.Context, string, int64) (record.Released, error) {
	return record.Released{}, nil
}

func (discard) RecordAudit(context.Context, record.AuditEntry) error { return nil }

// anyEnv is an Environments where every environment exists, of the
// default organization.
type anyEnv struct{ api.Environments }

func (anyEnv) GetEnv(_ context.Context, name string) (record.Environment, error) {
	return record.Environment{Name: name, Settings: record.DefaultEnvSettings()}, nil
}

// BenchmarkExport64MB uploads a 64 MB version through real HTTP and
// reports the time per upload and the process's peak resident memory
// above what it held before (the body to send included in that baseline):
// into the SQLite and PostgreSQL stores, and into nothing (api-only: the
// API's own share, decoding and checking). Run with -benchtime 1x: every
// iteration stores a new version.
//
//	go test ./server/api -run '^$' -bench Export64MB -benchtime 1x -count 3
func BenchmarkExport64MB(b *testing.B) {
	body, n := exportBody(64 << 20)
	benchmarkExport(b, body, n)
}

// BenchmarkExport900k is BenchmarkExport64MB with the smallest resources:
// 55 MiB of files of path only, 900,000 of them, where what the server
// holds per resource rather than per byte tells.
//
//	go test ./server/api -run '^$' -bench Export900k -benchtime 1x -count 3
func BenchmarkExport900k(b *testing.B) {
	body, n := exportBodyOf(55<<20, 0)
	benchmarkExport(b, body, n)
}

func benchmarkExport(b *testing.B, body []byte, n int) {
	tok, secret, err := api.IssueToken("bench", record.RoleAdmin, "", "bench", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	for _, backend := range []struct {
		name string
		open func(testing.TB) store.Store
	}{
		{"api-only", nil},
		{"sqlite", func(tb testing.TB) store.Store { return openSQLite(tb) }},
		{"postgres", func(tb testing.TB) store.Store { return pgtest.Open(tb) }},
	} {
		b.Run(backend.name, func(b *testing.B) {
			cfg := api.Default()
			cfg.MaxUpload = 2 * int64(len(body))
			ctx := context.Background()
			svc := api.Services{Tokens: oneToken{tok: tok}, Envs: anyEnv{}, Exporter: discard{}, Records: discard{}}
			var st store.Store
			if backend.open != nil {
				st = backend.open(b)
				bs := bus.NewLocal(zerolog.Nop())
				b.Cleanup(func() { bs.Close() })
				srv, err := server.New(server.Config{}, st, bs, zerolog.Nop())
				if err != nil {
					b.Fatal(err)
				}
				if err := st.CreateToken(ctx, tok); err != nil {
					b.Fatal(err)
				}
				svc = server.APIServices(srv, nil)
			}
			ts := httptest.NewServer(api.New(cfg, svc, zerolog.Nop()).Handler())
			b.Cleanup(ts.Close)
			var peak float64
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				env := fmt.Sprintf("bench%d", i)
				if st != nil {
					if err := st.CreateEnv(ctx, record.Environment{Name: env, Settings: record.DefaultEnvSettings(), CreatedAt: time.Now()}); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				debug.FreeOSMemory()
				if err := resetPeakRSS(); err != nil {
					b.Skipf("cannot measure peak memory here: %v", err)
				}
				base, _ := peakRSS()
				b.StartTimer()
				req, _ := http.NewRequest("POST", ts.URL+"/api/v1/envs/"+env+"/versions", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				answer, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Fatalf("status %d: %s", resp.StatusCode, answer)
				}
				b.StopTimer()
				p, err := peakRSS()
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, p-base)
				b.StartTimer()
			}
			b.ReportMetric(float64(len(body))/(1<<20), "body-MiB")
			b.ReportMetric(float64(n), "resources")
			b.ReportMetric(peak, "peak-RSS-MiB")
		})
	}
}
