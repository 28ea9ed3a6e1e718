package bench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/postgres"
)

// CompileOptions configure the compile scenario.
type CompileOptions struct {
	// Tether is the tether binary run as the server (default: this
	// process's).
	Tether string
	// Postgres is the database URL; the scenario works in a new schema,
	// dropped after.
	Postgres string
	// AMQP is the broker URL (the server needs one); the scenario uses a
	// namespace of its own.
	AMQP string
	// Agents is the size of the fleet; Runs how many compiles are timed.
	Agents, Runs int
	// Storm is how many compile requests the coalescing step sends at
	// once (0: none).
	Storm    int
	Timeout  time.Duration
	Progress io.Writer // if not nil, shows how far it got (a terminal)
}

// CompileResult is what the compile scenario measured.
type CompileResult struct {
	Agents    int `json:"agents"`
	Resources int `json:"resources"`
	// FirstSeconds is the first compile: from the source's upload to the
	// released version.
	FirstSeconds float64 `json:"first_seconds"`
	// TriggerToReleased are the timed runs, from the compile request to
	// the version's release in the store (the queue's 200 ms settle
	// included); TriggerToReport to the compile's report, which is written
	// once every agent was sent what the version changes for it (or found
	// unreachable); ServerSeconds the server's own duration of each
	// compile (fetch, inventory, compile, store, release, fan-out).
	TriggerToReleased []float64 `json:"trigger_to_released_seconds"`
	TriggerToReport   []float64 `json:"trigger_to_report_seconds"`
	ServerSeconds     []float64 `json:"server_seconds"`
	MedianSeconds     float64   `json:"median_trigger_to_released_seconds"`
	MedianReport      float64   `json:"median_trigger_to_report_seconds"`
	ServerPeakMiB     float64   `json:"server_peak_rss_mib"`
	ServerRSSMiB      float64   `json:"server_rss_mib"`
	// StormTriggers requests sent within StormSeconds made StormCompiles
	// compiles, whose triggers counted StormFolded requests.
	StormTriggers int     `json:"storm_triggers"`
	StormSeconds  float64 `json:"storm_seconds"`
	StormCompiles int     `json:"storm_compiles"`
	StormFolded   int     `json:"storm_folded"`
	Command       string  `json:"command"`
}

// benchFleetModel is the model of the compile scenario: web hosts (a page
// naming each one's port, a config, nginx), database hosts (PostgreSQL, an
// access rule), four load balancers listing every web host, and a motd on
// every host.
const benchFleetModel = `hostgroup "all" {
  match = true
  file "/etc/motd" { content = "${host.name} (${host.facts.os.family})\n" }
}

hostgroup "web" {
  match = host.labels.role == "web"
  directory "/srv/www" {}
  file "/srv/www/index.html" {
    content  = "served by ${host.name} on port ${host.facts.app.port}\n"
    requires = [directory["/srv/www"]]
  }
  file "/etc/nginx/conf.d/site.conf" { content = "server { listen ${host.facts.app.port}; root /srv/www; }\n" }
  package "nginx" {}
  service "nginx" {
    state      = "running"
    subscribes = [file["/etc/nginx/conf.d/site.conf"]]
  }
}

hostgroup "db" {
  match = host.labels.role == "db"
  package "postgresql" {}
  file "/etc/postgresql/pg_hba.conf" { content = "host all all 10.0.0.0/8 scram-sha-256\n" }
  service "postgresql" {
    state      = "running"
    subscribes = [file["/etc/postgresql/pg_hba.conf"]]
  }
}

hostgroup "lb" {
  match = host.labels.role == "lb"
  file "/etc/haproxy/backends" {
    content = join("", [for h in hostgroup.web.hosts : "server ${h.name} ${h.facts.ipv4}:${h.facts.app.port}\n"])
  }
}
`

// benchAgent is agent i of the scenario's fleet, port its app.port.
func benchAgent(i, port int) record.Agent {
	role := "web"
	switch {
	case i < 4:
		role = "lb"
	case i%100 == 0:
		role = "db"
	}
	now := time.Now().UTC()
	return record.Agent{Env: "bench", Name: fmt.Sprintf("host%05d", i), State: record.AgentAccepted, FirstSeen: now, LastSeen: now,
		Labels: map[string]string{"role": role},
		Facts: map[string]any{"ipv4": fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), "os": map[string]any{"family": "debian"},
			"app": map[string]any{"port": port}}}
}

// RunCompile starts `tether server` (a child process, so that its memory
// is its own) on a new PostgreSQL schema, stores a fleet of Agents
// accepted agents with labels and facts, uploads the fleet model as the
// environment's source and times its compiles: the first, then Runs
// compiles asked for through the API after one agent's facts changed, each
// from the request to the report of the released version. Then Storm
// compile requests at once, and how many compiles they made.
func RunCompile(ctx context.Context, o CompileOptions) (*CompileResult, error) {
	if o.Agents < 5 || o.Runs < 1 || o.Storm < 0 {
		return nil, errors.New("bench compile: at least 5 agents and 1 run")
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	pgURL, drop, err := newSchema(ctx, o.Postgres)
	if err != nil {
		return nil, err
	}
	defer drop()
	bcfg := amqp.Default()
	bcfg.URL, bcfg.QueueType = o.AMQP, amqp.QueueClassic
	bcfg.Namespace = "tetherbench." + uuid.NewString()[:8]
	defer func() { _ = amqp.DeleteTopology(context.WithoutCancel(ctx), bcfg, nil) }()
	id := newServerIdentity()
	srv, err := startServer(ctx, o.Tether, pgURL, bcfg, id, nil)
	token := id.token
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	cl := &apiClient{base: srv.base, token: token, http: &http.Client{Timeout: 5 * time.Minute}}
	settings := map[string]string{"enrollment": "manual", "auto_deploy": "false", "auto_release": "true", "deploy_interval": "0s", "repair_interval": "0s"}
	if err := cl.call(ctx, "POST", "/envs", map[string]any{"name": "bench", "settings": settings}, nil); err != nil {
		return nil, fmt.Errorf("create the environment: %w", err)
	}

	// The fleet, written to the server's database as enrolled agents.
	st, err := postgres.Open(ctx, postgres.Config{URL: pgURL})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	for i := range o.Agents {
		if err := st.UpsertAgent(ctx, benchAgent(i, 8080)); err != nil {
			return nil, fmt.Errorf("store agent %d: %w", i, err)
		}
		if i%500 == 0 {
			showProgress(o.Progress, "storing agents: %d/%d", i, o.Agents)
		}
	}

	archive, err := tarGz(map[string]string{"main.hcl": benchFleetModel})
	if err != nil {
		return nil, err
	}
	res := &CompileResult{Agents: o.Agents}
	showProgress(o.Progress, "first compile of %d agents…", o.Agents)
	seen := map[string]bool{}
	start := time.Now()
	if err := cl.send(ctx, "PUT", "/envs/bench/source/archive", "application/gzip", archive, nil); err != nil {
		return nil, fmt.Errorf("upload the model: %w", err)
	}
	first, err := nextCompile(ctx, cl, srv, seen)
	if err != nil {
		return nil, err
	}
	res.FirstSeconds = time.Since(start).Seconds()
	if first.Outcome != record.CompileReleased {
		return nil, fmt.Errorf("the first compile %s: %s", first.Outcome, describe(first))
	}
	for _, n := range first.ResourcesPerAgent {
		res.Resources += n
	}

	for run := range o.Runs {
		showProgress(o.Progress, "compile %d/%d…", run+1, o.Runs)
		// One web agent's port changes: the next compile has a new
		// version to release.
		if err := st.UpsertAgent(ctx, benchAgent(5, 9000+run)); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := cl.call(ctx, "POST", "/envs/bench/compile", nil, nil); err != nil {
			return nil, fmt.Errorf("ask for a compile: %w", err)
		}
		c, err := nextCompile(ctx, cl, srv, seen)
		if err != nil {
			return nil, err
		}
		if c.Outcome != record.CompileReleased {
			return nil, fmt.Errorf("compile %d %s: %s", run+1, c.Outcome, describe(c))
		}
		res.TriggerToReport = append(res.TriggerToReport, time.Since(start).Seconds())
		res.ServerSeconds = append(res.ServerSeconds, c.Duration().Seconds())
		var v struct {
			ReleasedAt *time.Time `json:"released_at"`
		}
		if err := cl.call(ctx, "GET", fmt.Sprintf("/envs/bench/versions/%d", c.Version), nil, &v); err != nil {
			return nil, err
		}
		if v.ReleasedAt == nil {
			return nil, fmt.Errorf("version %d is not released", c.Version)
		}
		res.TriggerToReleased = append(res.TriggerToReleased, v.ReleasedAt.Sub(start).Seconds())
	}
	res.MedianSeconds, res.MedianReport = median(res.TriggerToReleased), median(res.TriggerToReport)
	peak, cur, err := procMemory(srv.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	res.ServerPeakMiB, res.ServerRSSMiB = float64(peak)/1024, float64(cur)/1024

	if o.Storm > 0 {
		showProgress(o.Progress, "%d compile requests at once…", o.Storm)
		if err := storm(ctx, cl, srv, o.Storm, seen, res); err != nil {
			return nil, err
		}
	}
	showProgress(o.Progress, "")
	res.Command = fmt.Sprintf("tether bench compile --agents %d --runs %d --storm %d", o.Agents, o.Runs, o.Storm)
	return res, nil
}

// storm sends n compile requests from 8 clients at once, waits until the
// compiles they asked for ended, and counts them.
func storm(ctx context.Context, cl *apiClient, srv *serverProcess, n int, seen map[string]bool, res *CompileResult) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for range next {
				if err := cl.call(ctx, "POST", "/envs/bench/compile", nil, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	res.StormTriggers, res.StormSeconds = n, time.Since(start).Seconds()
	select {
	case err := <-errs:
		return fmt.Errorf("ask for a compile: %w", err)
	default:
	}
	// Every request is folded into a compile: count them until all are.
	for res.StormFolded < n {
		c, err := nextCompile(ctx, cl, srv, seen)
		if err != nil {
			return err
		}
		res.StormCompiles++
		for _, t := range c.Triggers {
			if t.Kind == record.TriggerOperator {
				res.StormFolded += t.Count
			}
		}
	}
	return nil
}

// nextCompile waits for a compile not in seen to end, and returns it.
func nextCompile(ctx context.Context, cl *apiClient, srv *serverProcess, seen map[string]bool) (record.Compile, error) {
	for {
		var cs []record.Compile
		if err := cl.call(ctx, "GET", "/envs/bench/compiles?limit=20", nil, &cs); err != nil {
			return record.Compile{}, err
		}
		for i := len(cs) - 1; i >= 0; i-- {
			if c := cs[i]; !seen[c.ID] && c.Outcome != record.CompileRunning {
				seen[c.ID] = true
				return c, nil
			}
		}
		if err := waitServer(ctx, srv, 10*time.Millisecond); err != nil {
			return record.Compile{}, err
		}
	}
}

func median(xs []float64) float64 {
	sorted := slices.Clone(xs)
	sort.Float64s(sorted)
	return sorted[len(sorted)/2]
}

func describe(c record.Compile) string {
	if len(c.Diagnostics) == 0 {
		return "no diagnostics"
	}
	d := c.Diagnostics[0]
	return fmt.Sprintf("%s:%d:%d: %s", d.File, d.Line, d.Col, d.Message)
}

// tarGz packs files as a tar.gz archive.
func tarGz(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
