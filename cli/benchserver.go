package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/store"
	"github.com/tetherhq/tether/server/store/postgres"
)

// Server-mode scenarios: each works in a schema and a broker namespace of
// its own, created for the run and dropped after it.

const benchPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func benchServiceFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "postgres", Value: benchPostgres, EnvVars: []string{"TETHER_POSTGRES"},
			Usage: "PostgreSQL `URL`; the scenario works in a new schema, dropped after"},
		outputFlag(),
	}
}

// benchAMQPFlag names the broker of a server-mode scenario.
func benchAMQPFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "amqp", Value: "amqp://guest:guest@127.0.0.1:5672/", EnvVars: []string{"TETHER_AMQP"},
		Usage: "RabbitMQ `URL`; the scenario uses a namespace of its own, deleted after"}
}

// benchSchema creates a fresh schema and returns its URL and a drop func.
func benchSchema(ctx context.Context, base string) (string, func(), error) {
	name := "tether_bench_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if err := postgres.CreateSchema(ctx, base, name); err != nil {
		return "", nil, fmt.Errorf("create a schema for the benchmark (is PostgreSQL running? --postgres): %w", err)
	}
	return postgres.WithSchema(base, name), func() { _ = postgres.DropSchema(context.WithoutCancel(ctx), base, name) }, nil
}

// benchStore opens a store on a fresh schema; closing drops the schema.
func benchStore(ctx context.Context, base string) (*postgres.Store, string, func(), error) {
	url, drop, err := benchSchema(ctx, base)
	if err != nil {
		return nil, "", nil, err
	}
	st, err := postgres.Open(ctx, postgres.Config{URL: url})
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	return st, url, func() { st.Close(); drop() }, nil
}

func benchIngestCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "ingest",
		Usage:     "measure status events per second from RabbitMQ into PostgreSQL through the server's ingest path",
		UsageText: "tether bench ingest [--events 20000] [--agents 100] [--consumers 8] [--postgres URL] [--amqp URL] [-o json]",
		Description: "Fills the server's events queue with signed resource.status events of --agents agents (one\n" +
			"result each), then starts a server on that backlog and times it until every event is written\n" +
			"(verified, deduplicated, group-committed, acknowledged). In the same run, a baseline writes the\n" +
			"same rows with bare pgx batch inserts, as many per transaction as the server wrote on average,\n" +
			"and the broker's ceiling: the same events consumed and acknowledged with no work at all.\n\n" +
			"   tether bench ingest --events 20000",
		Flags: append(benchServiceFlags(),
			benchAMQPFlag(),
			&ucli.IntFlag{Name: "events", Value: 20000, Usage: "how many status events to ingest"},
			&ucli.IntFlag{Name: "agents", Value: 100, Usage: "how many agents send them (100 resources each)"},
			&ucli.IntFlag{Name: "consumers", Value: 8, Usage: "the server's ingest consumers (each handles 64 events at once)"},
			&ucli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the timed ingest to `FILE` (go tool pprof)"},
		),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if c.Int("events") < 1 || c.Int("agents") < 1 || c.Int("consumers") < 1 {
				return usageError("--events, --agents and --consumers must be at least 1")
			}
			res, err := benchIngest(c.Context, term, c.String("postgres"), c.String("amqp"), c.Int("events"), c.Int("agents"), c.Int("consumers"), c.String("cpuprofile"))
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			t := newTable(term.stdout, "PATH", "EVENTS", "SECONDS", "EVENTS/S", "PER TRANSACTION")
			t.row("server ingest (RabbitMQ → PostgreSQL)", strconv.Itoa(res.Events), fmt.Sprintf("%.2f", res.IngestSeconds),
				fmt.Sprintf("%.0f", res.IngestRate), fmt.Sprintf("%.1f", res.PerTransaction))
			t.row("baseline (bare pgx batches)", strconv.Itoa(res.Events), fmt.Sprintf("%.2f", res.BaselineSeconds),
				fmt.Sprintf("%.0f", res.BaselineRate), strconv.Itoa(res.BaselineChunk))
			t.row("broker ceiling (consume and ack, no work)", strconv.Itoa(res.Events), fmt.Sprintf("%.2f", res.BrokerSeconds),
				fmt.Sprintf("%.0f", res.BrokerRate), "-")
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintf(term.stdout, "\n%.2f of the baseline, %.2f of the broker ceiling; %d consumers; command: %s\n",
				res.Ratio, res.IngestRate/res.BrokerRate, res.Consumers, res.Command)
			return nil
		},
	}
}

type benchIngestResult struct {
	Events          int     `json:"events"`
	Agents          int     `json:"agents"`
	Consumers       int     `json:"consumers"`
	IngestSeconds   float64 `json:"ingest_seconds"`
	IngestRate      float64 `json:"ingest_events_per_second"`
	Transactions    uint64  `json:"transactions"`
	PerTransaction  float64 `json:"events_per_transaction"`
	BaselineSeconds float64 `json:"baseline_seconds"`
	BaselineRate    float64 `json:"baseline_events_per_second"`
	BaselineChunk   int     `json:"baseline_events_per_transaction"`
	BrokerSeconds   float64 `json:"broker_seconds"`
	BrokerRate      float64 `json:"broker_events_per_second"`
	Ratio           float64 `json:"ratio"`
	Command         string  `json:"command"`
}

const benchResourcesPerAgent = 100

// benchFleet stores a released version of agents × 100 files in env and
// the agents, accepted, with keys of their own.
func benchFleet(ctx context.Context, st store.Store, env string, agents int) ([]*bus.Signer, []model.Resource, error) {
	if err := st.CreateEnv(ctx, model.Environment{Name: env, Settings: benchSettings(), CreatedAt: time.Now().UTC()}); err != nil {
		return nil, nil, err
	}
	var rs []model.Resource
	signers := make([]*bus.Signer, agents)
	for a := range agents {
		name := fmt.Sprintf("host%04d", a)
		for i := range benchResourcesPerAgent {
			path := fmt.Sprintf("/etc/app/%03d.conf", i)
			rs = append(rs, model.Resource{ID: model.ID{Type: "file", Agent: name, Key: "path", Value: path},
				Attributes: model.Attributes{"path": path, "content": "v1 " + path, "mode": "0644"}})
		}
		pub, key, err := bus.GenerateKey()
		if err != nil {
			return nil, nil, err
		}
		signers[a] = bus.NewSigner(key, 0)
		now := time.Now().UTC()
		if err := st.UpsertAgent(ctx, model.Agent{Env: env, Name: name, State: model.AgentAccepted, PublicKey: pub, FirstSeen: now, LastSeen: now}); err != nil {
			return nil, nil, err
		}
	}
	v, err := st.PutVersion(ctx, env, model.VersionMeta{Compiler: "tether bench"}, rs)
	if err != nil {
		return nil, nil, err
	}
	_, err = st.Release(ctx, env, v.Number)
	return signers, rs, err
}

func benchSettings() model.EnvSettings {
	s := model.DefaultEnvSettings()
	s.AutoDeploy, s.DeployInterval, s.RepairInterval = false, 0, 0
	return s
}

func benchIngest(ctx context.Context, term *terminal, pgURL, amqpURL string, n, agents, consumers int, cpuprofile string) (*benchIngestResult, error) {
	st, _, closeStore, err := benchStore(ctx, pgURL)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	const env = "bench"
	signers, rs, err := benchFleet(ctx, st, env, agents)
	if err != nil {
		return nil, err
	}
	bcfg := amqp.Default()
	bcfg.URL, bcfg.QueueType = amqpURL, amqp.QueueClassic
	bcfg.Namespace = "tetherbench." + uuid.NewString()[:8]
	b, err := amqp.New(bcfg, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	defer func() {
		b.Close()
		_ = amqp.DeleteTopology(context.WithoutCancel(ctx), bcfg, nil)
	}()
	readyCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = b.Ready(readyCtx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ at --amqp: %w (start it with `rabbitmq-server -detached`)", err)
	}

	// The events, and the same rows for the baseline.
	events := make([]*bus.Envelope, n)
	batches := make([]store.ResultBatch, n)
	for i := range n {
		a := i % agents
		r := rs[a*benchResourcesPerAgent+(i/agents)%benchResourcesPerAgent]
		body := bus.ResourceStatus{DeployID: "bench", Generation: 1,
			Results: []model.Result{{ID: r.ID, State: model.StateDeployed, Message: "bench " + strconv.Itoa(i)}}}
		e, err := signers[a].Seal(bus.KindResourceStatus, env, r.ID.Agent, body)
		if err != nil {
			return nil, err
		}
		events[i] = e
		batches[i] = store.ResultBatch{Env: env, Agent: r.ID.Agent, Seq: e.Seq, Version: 1, DeployID: "bench", Results: body.Results}
	}
	if err := benchFill(ctx, term, b, events); err != nil {
		return nil, err
	}

	srv, err := server.New(server.Config{Consumers: consumers}, st, b, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- srv.Run(runCtx) }()
	for srv.IngestStats().Events < uint64(n) {
		select {
		case err := <-done:
			stop()
			return nil, fmt.Errorf("the server stopped during the benchmark: %w", err)
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		if term.progress {
			fmt.Fprintf(term.stderr, "\r\033[Kingesting: %d/%d", srv.IngestStats().Events, n)
		}
	}
	ingest := time.Since(start)
	stats := srv.IngestStats()
	if cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	stop()
	<-done
	if term.progress {
		fmt.Fprint(term.stderr, "\r\033[K")
	}
	if stats.Written != uint64(n) {
		return nil, fmt.Errorf("the server wrote %d of %d events", stats.Written, n)
	}

	// The baseline, on a schema of its own holding the same fleet.
	bst, burl, closeBaseline, err := benchStore(ctx, pgURL)
	if err != nil {
		return nil, err
	}
	defer closeBaseline()
	if _, _, err := benchFleet(ctx, bst, env, agents); err != nil {
		return nil, err
	}
	per := float64(stats.Written) / float64(max(stats.Transactions, 1))
	chunk := max(int(per+0.5), 1)
	base, err := postgres.WriteBare(ctx, burl, batches, chunk)
	if err != nil {
		return nil, err
	}
	broker, err := benchBroker(ctx, term, b, events, consumers)
	if err != nil {
		return nil, err
	}
	res := &benchIngestResult{Events: n, Agents: agents, Consumers: consumers,
		BrokerSeconds: broker.Seconds(), BrokerRate: float64(n) / broker.Seconds(),
		IngestSeconds: ingest.Seconds(), IngestRate: float64(n) / ingest.Seconds(),
		Transactions: stats.Transactions, PerTransaction: per,
		BaselineSeconds: base.Seconds(), BaselineRate: float64(n) / base.Seconds(), BaselineChunk: chunk,
		Command: fmt.Sprintf("tether bench ingest --events %d --agents %d --consumers %d", n, agents, consumers)}
	res.Ratio = res.IngestRate / res.BaselineRate
	return res, nil
}

// benchBroker fills the queue with events again and times consumers that
// acknowledge them without any work: what the broker and the bus can
// deliver on this machine.
func benchBroker(ctx context.Context, term *terminal, b bus.Bus, events []*bus.Envelope, consumers int) (time.Duration, error) {
	if err := benchFill(ctx, term, b, events); err != nil {
		return 0, err
	}
	var got atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for range consumers {
		go func() {
			_ = b.ConsumeEvents(cctx, bus.QueueEvents, func(context.Context, bus.Delivery) error { got.Add(1); return nil })
		}()
	}
	for got.Load() < int64(len(events)) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return time.Since(start), nil
}

// benchFill publishes events with 32 publishers, showing progress.
func benchFill(ctx context.Context, term *terminal, b bus.Bus, events []*bus.Envelope) error {
	work := make(chan *bus.Envelope)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sent := 0
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				err := b.Publish(ctx, e)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				sent++
				if term.progress && sent%500 == 0 {
					fmt.Fprintf(term.stderr, "\r\033[Kfilling the queue: %d/%d", sent, len(events))
				}
				mu.Unlock()
			}
		}()
	}
	for _, e := range events {
		work <- e
	}
	close(work)
	wg.Wait()
	return firstErr
}

func benchExportCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "export",
		Usage:     "time uploading a version of N resources to a server and diffing it against the previous one",
		UsageText: "tether bench export [--resources 100000] [--change 1] [--postgres URL] [-o json]",
		Description: "Starts a server's REST API on PostgreSQL (in-process, on a loopback port), uploads a version\n" +
			"of N file resources as `tether export` does, then a second one with --change percent of them\n" +
			"changed, and asks the server for the diff between the two. Each step is timed from the\n" +
			"client: JSON encoding, HTTP, validation, hashing and storing included.\n\n" +
			"   tether bench export --resources 100000",
		Flags: append(benchServiceFlags(),
			&ucli.IntFlag{Name: "resources", Value: 100000, Usage: "resources per version"},
			&ucli.Float64Flag{Name: "change", Value: 1, Usage: "`PERCENT` of the resources the second version changes"},
		),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if c.Int("resources") < 1 || c.Float64("change") < 0 || c.Float64("change") > 100 {
				return usageError("--resources must be at least 1 and --change between 0 and 100")
			}
			res, err := benchExport(c.Context, term, c.String("postgres"), c.Int("resources"), c.Float64("change"))
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			t := newTable(term.stdout, "STEP", "SECONDS")
			t.row("upload the first version", fmt.Sprintf("%.2f", res.FirstUpload))
			t.row("upload the second version", fmt.Sprintf("%.2f", res.SecondUpload))
			t.row("diff second against first", fmt.Sprintf("%.2f", res.Diff))
			t.row("upload second + diff", fmt.Sprintf("%.2f", res.SecondUpload+res.Diff))
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintf(term.stdout, "\n%d resources, %d changed (%d in the diff); command: %s\n", res.Resources, res.Changed, res.DiffChanged, res.Command)
			return nil
		},
	}
}

type benchExportResult struct {
	Resources    int     `json:"resources"`
	Changed      int     `json:"changed"`
	DiffChanged  int     `json:"diff_changed"`
	FirstUpload  float64 `json:"first_upload_seconds"`
	SecondUpload float64 `json:"second_upload_seconds"`
	Diff         float64 `json:"diff_seconds"`
	Command      string  `json:"command"`
}

func benchExport(ctx context.Context, term *terminal, pgURL string, n int, change float64) (*benchExportResult, error) {
	st, _, closeStore, err := benchStore(ctx, pgURL)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	srv, err := server.New(server.Config{}, st, bus.NewLocal(zerolog.Nop()), zerolog.Nop())
	if err != nil {
		return nil, err
	}
	const env = "bench"
	if err := st.CreateEnv(ctx, model.Environment{Name: env, Settings: benchSettings(), CreatedAt: time.Now().UTC()}); err != nil {
		return nil, err
	}
	tok, secret, err := api.IssueToken("bench", model.RoleAdmin, "", "tether bench", time.Now())
	if err != nil {
		return nil, err
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: api.New(api.Config{}, server.APIServices(srv, nil), zerolog.Nop()).Handler()}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	cl := &client{base: "http://" + ln.Addr().String(), env: env, token: secret, http: &http.Client{}}

	resources := func(changed int) []model.Resource {
		rs := make([]model.Resource, n)
		for i := range n {
			agent := fmt.Sprintf("host%04d", i/benchResourcesPerAgent)
			path := fmt.Sprintf("/etc/app/%03d.conf", i%benchResourcesPerAgent)
			content := "v1 " + path
			if i < changed {
				content = "v2 " + path
			}
			rs[i] = model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path},
				Attributes: model.Attributes{"path": path, "content": content, "mode": "0644", "owner": "root"}}
		}
		return rs
	}
	changed := int(float64(n) * change / 100)
	upload := func(rs []model.Resource) (float64, int64, error) {
		start := time.Now()
		var out api.ExportResponse
		err := cl.call(ctx, "POST", "/envs/"+env+"/versions", api.ExportRequest{Resources: rs, Meta: model.VersionMeta{Compiler: "tether bench"}}, &out)
		return time.Since(start).Seconds(), out.Version.Number, err
	}
	res := &benchExportResult{Resources: n, Changed: changed,
		Command: fmt.Sprintf("tether bench export --resources %d --change %g", n, change)}
	if term.progress {
		fmt.Fprint(term.stderr, "\r\033[Kuploading the first version")
	}
	var first, second int64
	if res.FirstUpload, first, err = upload(resources(0)); err != nil {
		return nil, err
	}
	if term.progress {
		fmt.Fprint(term.stderr, "\r\033[Kuploading the second version")
	}
	if res.SecondUpload, second, err = upload(resources(changed)); err != nil {
		return nil, err
	}
	if term.progress {
		fmt.Fprint(term.stderr, "\r\033[K")
	}
	start := time.Now()
	var d api.Diff
	if err := cl.call(ctx, "GET", fmt.Sprintf("/envs/%s/versions/%d/diff?from=%d", env, second, first), nil, &d); err != nil {
		return nil, err
	}
	res.Diff = time.Since(start).Seconds()
	res.DiffChanged = len(d.Changed)
	if len(d.Changed) != changed || len(d.Added)+len(d.Removed) != 0 {
		return nil, fmt.Errorf("the diff has %d changed, %d added, %d removed; want %d changed only", len(d.Changed), len(d.Added), len(d.Removed), changed)
	}
	return res, nil
}
