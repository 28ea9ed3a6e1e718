package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// BenchmarkPages renders console pages, server-side, over a real
// PostgreSQL store at the scale the console is built for: the agents page
// of an environment of 10,000 agents and the resources page of one of
// 200,000 resources (a page of 50 rows each, found and counted by the
// API), and the overview of the large one. docs/performance.md records
// its figures.
func BenchmarkPages(b *testing.B) {
	r := newRig(b, pgtest.Open(b))
	ctx := context.Background()
	r.apiCall("POST", "/envs", api.EnvRequest{Name: "fleet"}, 201)
	r.apiCall("POST", "/envs", api.EnvRequest{Name: "big"}, 201)
	for i := range 10_000 {
		ag := record.Agent{Env: "fleet", Name: fmt.Sprintf("host-%05d", i), State: record.AgentAccepted, Connected: i%10 != 0, LastSeen: time.Now(),
			Labels: map[string]string{"role": []string{"web", "db", "cache"}[i%3], "dc": fmt.Sprintf("dc%d", i%4)},
			Facts:  map[string]any{"os": "debian", "cpus": 4, "ipv4": fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}}
		if err := r.st.UpsertAgent(ctx, ag); err != nil {
			b.Fatal(err)
		}
	}
	res := make([]model.Resource, 0, 200_000)
	for i := range 200_000 {
		res = append(res, file(fmt.Sprintf("node-%04d", i%1000), fmt.Sprintf("/etc/app/conf-%06d", i), "setting = 1\n"))
	}
	v, _, err := r.srv.Export(ctx, "big", res, model.VersionMeta{Source: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.srv.Release(ctx, "big", v.Number); err != nil {
		b.Fatal(err)
	}
	br := r.browser().login("", "ada", r.user("ada", record.RoleAdmin))
	u, _ := url.Parse(r.ts.URL)
	cookies := br.c.Jar.Cookies(u)
	for _, p := range []struct{ name, path, want string }{
		{"agents-10000", "/envs/fleet/agents?state=accepted&offset=5000", "5001–5050 of 10000"},
		{"agents-10000-search", "/envs/fleet/agents?label=role%3Dweb&q=host-09", "of 334"},
		{"resources-200000", "/envs/big/resources?offset=150000", "150001–150050 of 200000"},
		{"resources-200000-agent", "/envs/big/resources?agent=node-0042", "1–50 of 200"},
		{"overview-200000", "/envs/big", "200000 in the released version"},
	} {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest("GET", p.path, nil)
				for _, c := range cookies {
					req.AddCookie(c)
				}
				w := httptest.NewRecorder()
				r.ts.Config.Handler.ServeHTTP(w, req)
				if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), p.want) {
					b.Fatalf("GET %s: %d, want 200 saying %q:\n%s", p.path, w.Code, p.want, w.Body.String())
				}
			}
		})
	}
}
