package bench

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/facts"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/agent/journal"
	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/rabbitnode"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/keyring"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/postgres"
)

// ConvergeOptions configure the converge scenario: a release of Agents ×
// Resources files converging on Agents agents.
type ConvergeOptions struct {
	// Tether is the tether binary run as the server (default: this
	// process's).
	Tether string
	// Postgres is the database URL; the scenario works in a new schema,
	// dropped after.
	Postgres string
	// AMQP is the broker URL; the scenario uses a namespace of its own,
	// deleted after.
	AMQP string
	// Dir holds the agents' journals and files (default: a new temporary
	// directory); it is removed after.
	Dir               string
	Agents, Resources int
	PerConnection     int // agents sharing one AMQP connection
	// Forged events are published on the events exchange just before the
	// release, as a host holding a broker login might: signed by keys the
	// server does not know, in the fleet's agents' names. The release is
	// timed through the flood.
	Forged int
	// Token: the environment enrolls by token and every agent says hello
	// with one, created through the API, as on real hosts (it carries the
	// server key's fingerprint: no key is pinned beforehand). Default:
	// open enrollment, the server's key pinned.
	Token bool
	// RestartBroker: once every agent converged, restart this machine's
	// RabbitMQ (rabbitmqctl stop_app, then start_app), time until every
	// agents' connection is back, then a second release until the server
	// recorded every resource deployed and every agent's outbox drained.
	RestartBroker bool
	// Heartbeat is the agents' heartbeat interval (default: a minute).
	Heartbeat time.Duration
	// Idle, if set, holds the fleet idle this long once it converged (and
	// before any broker restart), and measures what it costs meanwhile:
	// CPU of each process, messages.
	Idle time.Duration
	// CPUProfile, if set, is where a CPU profile of this process (the
	// agents) during the first release is written; the enrollment's goes
	// to CPUProfile+".enroll".
	CPUProfile string
	// PrivateBroker: the run has a RabbitMQ node of its own (package
	// rabbitnode), started with this process's limit on open files
	// (raised to the hard limit), not the machine's broker: AMQP is
	// ignored, and --restart-broker restarts that node alone.
	PrivateBroker bool
	// Servers is how many server processes share the store and the
	// broker (replicas; default 1).
	Servers int
	// ServerCPUProfile, if set, is where the server writes a CPU profile
	// of its whole run (go tool pprof).
	ServerCPUProfile string
	// ServerLog, if set, receives the server's whole log (stderr): a
	// goroutine dump (SIGQUIT) of a stalled run included.
	ServerLog io.Writer
	// AgentsLog, if set, receives the agents' warnings and errors, and
	// their buses' (JSON lines, each naming its agent or connection).
	AgentsLog io.Writer
	Timeout   time.Duration
	Progress  io.Writer // if not nil, shows how far it got (a terminal)
	// Warn, if not nil, is told what makes the run unlike real hosts
	// (standard error).
	Warn io.Writer
}

// ConvergeResult is what the converge scenario measured.
type ConvergeResult struct {
	Agents           int     `json:"agents"`
	Resources        int     `json:"resources"`
	EnrollSeconds    float64 `json:"enroll_seconds"`
	ConvergeSeconds  float64 `json:"converge_seconds"`
	ResultsPerSecond float64 `json:"results_per_second"`
	Forged           int     `json:"forged_events,omitempty"`
	ForgedSeconds    float64 `json:"forged_publish_seconds,omitempty"` // all of them, the release started halfway
	Servers          int     `json:"servers"`
	ServerPeakMiB    float64 `json:"server_peak_rss_mib"` // of the largest replica
	ServerRSSMiB     float64 `json:"server_rss_mib"`
	Enrollment       string  `json:"enrollment"` // open or token
	// BrokerRSSMiB is the resident memory of the broker's process
	// (beam.smp, found by the port it listens on) at the end; 0 when it
	// cannot be told (a broker on another machine).
	BrokerRSSMiB  float64 `json:"broker_rss_mib"`
	BrokerPeakMiB float64 `json:"broker_peak_rss_mib"`
	// PostgresMiB is what the run's schema takes on disk at the end:
	// its tables with their indexes and TOAST.
	PostgresMiB float64 `json:"postgres_schema_mib"`
	// PostgresTables are the schema's six largest tables.
	PostgresTables []postgres.TableSize `json:"postgres_tables"`
	// OpenFiles is how many files this process (the agents) held open
	// once they all converged.
	OpenFiles int `json:"open_files"`
	// InotifyInstances is the machine's limit on inotify instances per
	// user during the run: agents past it poll their files instead of
	// watching them.
	InotifyInstances int `json:"inotify_instances"`
	// EnrollChannels and ConvergeChannels are the AMQP channels the
	// agents opened while enrolling and while converging: each costs the
	// broker a process, and its close a message to the broker's channel
	// registry, a single process.
	// FanoutSeconds is how long the release's fan-out took, by the
	// server's record of it: within ConvergeSeconds.
	FanoutSeconds float64 `json:"fanout_seconds"`
	// ReportedSeconds is how long until every agent had applied the
	// release and the broker had taken every result (within
	// ConvergeSeconds: the rest is the server recording them).
	ReportedSeconds float64 `json:"reported_seconds"`
	// RequestSeconds is how long the release's request took to be
	// answered (the version uploaded and stored, its release started):
	// within ConvergeSeconds, before the fan-out.
	RequestSeconds float64 `json:"release_request_seconds"`
	// RecordedPerSecond is the rate the server recorded the release's
	// results at once they came: the results in the action log written
	// by the transactions after the first, over the time from the first
	// one's start to the last one's (postgres.ActionSpan), where
	// ResultsPerSecond spreads them over the whole converge (the upload
	// and the fan-out's start included).
	RecordedPerSecond float64 `json:"recorded_per_second"`
	// IngestTransactions, IngestEventsPerTransaction and IngestBusySeconds
	// are the servers' ingest transactions committed while converging
	// (from their metrics, summed over the replicas), the agents' reports
	// each wrote on average, and the time spent in them, added up over
	// the writers (two a server by default, --ingest-writers): busy
	// seconds near the writers' count times ConvergeSeconds say they
	// bound the converge (a transaction that failed, and was written
	// again, counts only once it committed).
	IngestTransactions         int64   `json:"ingest_transactions"`
	IngestEventsPerTransaction float64 `json:"ingest_events_per_transaction"`
	IngestBusySeconds          float64 `json:"ingest_busy_seconds"`
	// EnrollCPU and ConvergeCPU are the CPU seconds each process used
	// while the agents enrolled and while they converged.
	EnrollCPU        CPUSeconds `json:"enroll_cpu_seconds"`
	ConvergeCPU      CPUSeconds `json:"converge_cpu_seconds"`
	EnrollChannels   int64      `json:"enroll_channels_opened"`
	ConvergeChannels int64      `json:"converge_channels_opened"`
	// ReadsHeld is how many times the agents' connections read on past
	// a deadline gone stale or while the broker held their writes (flow
	// control), over the whole run: each would have dropped a
	// connection before (amqp.ReadsHeld).
	ReadsHeld int64 `json:"reads_held"`
	// EnrollMessages and ConvergeMessages are the messages the agents
	// published and had delivered while enrolling and while converging.
	EnrollMessages   Messages `json:"enroll_messages"`
	ConvergeMessages Messages `json:"converge_messages"`
	// IdleSeconds, IdleCPU and IdleMessages: the fleet held idle once
	// converged (Idle), and what it cost meanwhile.
	IdleSeconds  float64    `json:"idle_seconds,omitempty"`
	IdleCPU      CPUSeconds `json:"idle_cpu_seconds,omitzero"`
	IdleMessages Messages   `json:"idle_messages,omitzero"`
	// ReconnectSeconds: from the broker's start_app to every agents'
	// connection open again; ReconvergeSeconds: the release after it,
	// until all recorded deployed and every outbox drained.
	ReconnectSeconds  float64 `json:"reconnect_seconds,omitempty"`
	ReconvergeSeconds float64 `json:"reconverge_seconds,omitempty"`
	Dir               string  `json:"dir"`
	Command           string  `json:"command"`
}

// RunConverge starts `tether server` (a child process, so that its memory
// is its own) on a new PostgreSQL schema and RabbitMQ namespace, then the
// agents in this process: each a real agent (journal, engine, file handler)
// with a bus client shared by PerConnection agents, writing below Dir. Once
// every agent is enrolled (open enrollment), a version of Agents ×
// Resources files is released through the REST API and timed until the
// server has recorded every resource deployed. The server's resident
// memory is read from /proc at the end.
func RunConverge(ctx context.Context, o ConvergeOptions) (*ConvergeResult, error) {
	if o.Agents < 1 || o.Resources < 1 || o.PerConnection < 1 {
		return nil, errors.New("bench converge: agents, resources and agents per connection must be at least 1")
	}
	// One file per agent (its journal's log; the journals share one lock),
	// one per connection, room for the rest of the process, and at least
	// 256 files being written at once (all the agents share the bound).
	if o.PrivateBroker {
		// The node inherits this process's limit: each of its queues
		// keeps files open, and one short of them spends its time
		// closing and opening them again.
		raiseHardFileLimit(privateBrokerFiles)
	}
	held := uint64(o.Agents + o.Agents/o.PerConnection + 1024)
	// Each agent watches its files with an inotify instance (one more
	// open file), as on a host, as far as the hard limit on open files
	// leaves room (the instances of other processes counted in a margin).
	watchers := o.Agents
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		watchers = max(0, min(watchers, int(lim.Max)-int(held)-256-inotifyMargin))
	}
	instances, warning, restoreInotify := raiseInotifyLimits(watchers)
	defer restoreInotify()
	if watchers < o.Agents {
		if warning != "" {
			warning += "; "
		}
		warning += fmt.Sprintf("the hard limit on open files (%d) leaves room for %d of the %d agents' inotify instances: the rest poll their files every 5 s instead of watching them", lim.Max, watchers, o.Agents)
	}
	if warning != "" && o.Warn != nil {
		fmt.Fprintln(o.Warn, "warning: "+warning)
	}
	held += uint64(min(o.Agents, instances))
	limit, err := raiseFileLimit(held + 256)
	if err != nil {
		return nil, fmt.Errorf("bench converge: %w", err)
	}
	writing := int(min(limit-held, 4096))
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	pgURL, schema, drop, err := newNamedSchema(ctx, o.Postgres)
	if err != nil {
		return nil, err
	}
	defer drop()
	work := o.Dir
	if work == "" {
		if work, err = os.MkdirTemp("", "tether-converge-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	// The agents' journals share one lock on the directory rather than
	// one lock file each: one open file per agent instead of two.
	lock, err := journal.LockDir(work)
	if err != nil {
		return nil, err
	}
	defer lock.Close()

	restart := machineBrokerRestart
	if o.PrivateBroker {
		showProgress(o.Progress, "starting a RabbitMQ node of this run's own")
		// RabbitMQ's default channel_max: the agents share
		// connections, --per-connection of them each.
		node, err := rabbitnode.Start(rabbitnode.Options{ChannelMax: 2047})
		if err != nil {
			return nil, fmt.Errorf("bench converge --private-broker: %w", err)
		}
		defer node.Stop()
		o.AMQP = node.URL
		restart = func(ctx context.Context, args ...string) ([]byte, error) { return node.Ctl(ctx, args...) }
	}
	bcfg := amqp.Default()
	bcfg.URL, bcfg.QueueType = o.AMQP, amqp.QueueClassic
	bcfg.Namespace = "tetherbench." + uuid.NewString()[:8]
	bcfg.Agent = true
	names := make([]string, o.Agents)
	inboxes := make([]string, o.Agents)
	for i := range names {
		names[i] = fmt.Sprintf("host%05d", i)
	}
	defer func() {
		_ = amqp.DeleteTopology(context.WithoutCancel(ctx), bcfg, inboxes)
	}()

	// The server, a process of its own so that its memory is its own.
	var global []string
	if o.ServerCPUProfile != "" {
		global = []string{"--cpu-profile", o.ServerCPUProfile}
	}
	id := newServerIdentity()
	srv, err := startServer(ctx, o.Tether, pgURL, bcfg, id, o.ServerLog, global...)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	token := id.token
	// Replicas: the same store, broker namespace and keys; they share
	// the events queue, and one of them leads (fan-out, schedules).
	servers := []*serverProcess{srv}
	for range max(o.Servers, 1) - 1 {
		r, err := startServer(ctx, o.Tether, pgURL, bcfg, id, nil)
		if err != nil {
			return nil, fmt.Errorf("a server replica: %w", err)
		}
		defer r.stop()
		servers = append(servers, r)
	}
	// Uploading the version of 10,000 agents (200,000 resources) while
	// the machine is busy with the fleet takes more than a minute on two
	// cores: a request's bound is generous, and --timeout bounds the run.
	cl := &apiClient{base: srv.base, token: token, http: &http.Client{Timeout: 10 * time.Minute}}
	enrollment := "open"
	if o.Token {
		enrollment = "token"
	}
	settings := map[string]string{"enrollment": enrollment, "auto_deploy": "true", "deploy_interval": "0s", "repair_interval": "0s"}
	if err := cl.call(ctx, "POST", "/envs", map[string]any{"name": "bench", "settings": settings}, nil); err != nil {
		return nil, fmt.Errorf("create the environment: %w", err)
	}
	// The agents pin the server's key, as they would on a host.
	var srvInfo api.ServerInfo
	if err := cl.call(ctx, "GET", "/server", nil, &srvInfo); err != nil {
		return nil, fmt.Errorf("the server's key: %w", err)
	}
	var enrollToken api.NewEnrollmentToken
	if o.Token {
		req := map[string]any{"name": "bench", "max_uses": o.Agents}
		if err := cl.call(ctx, "POST", "/envs/bench/enrollment-tokens", req, &enrollToken); err != nil {
			return nil, fmt.Errorf("create an enrollment token: %w", err)
		}
	}

	// The agents.
	actx, stopAgents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var buses []*amqp.Bus
	var agents []*agent.Agent
	defer func() {
		stopAgents()
		wg.Wait()
		for _, a := range agents {
			a.Close()
		}
		for _, b := range buses {
			b.Close()
		}
	}()
	agentsLog := zerolog.Nop()
	if o.AgentsLog != nil {
		agentsLog = zerolog.New(zerolog.SyncWriter(o.AgentsLog)).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	}
	syncs := handler.NewSyncGroup()                   // shared, as in `tether agent run --name a --name b`
	files := handler.NewFileLimit(writing)            // shared: within the limit on open files
	gather := facts.Cached(time.Minute, facts.Gather) // one gathering for the thousand agents of one host
	brokerProc := brokerPID(o.AMQP)
	stopProfile, err := startCPUProfile(o.CPUProfile, ".enroll")
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	enrollStart, channels0, cpu0, msgs0 := time.Now(), amqp.ChannelsOpened(), cpuNow(servers, brokerProc), messagesNow()
	for i, name := range names {
		if i%o.PerConnection == 0 {
			cfg := bcfg
			cfg.ConnectionName = fmt.Sprintf("tether bench agents %d", i/o.PerConnection)
			b, err := amqp.New(cfg, agentsLog.With().Str("connection", cfg.ConnectionName).Logger())
			if err != nil {
				return nil, err
			}
			buses = append(buses, b)
		}
		b := buses[len(buses)-1]
		inboxes[i] = b.InboxQueue("bench", name)
		root := filepath.Join(work, name, "root")
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
		reg, err := builtin.Registry(handler.Runtime{Root: root, Sync: syncs, Files: files})
		if err != nil {
			return nil, err
		}
		acfg := agent.Config{Env: "bench", Name: name, StateDir: filepath.Join(work, name, "state"),
			Heartbeat: cmp.Or(o.Heartbeat, time.Minute), Facts: gather, ServerKey: srvInfo.PublicKey, Journal: journal.Config{Lock: lock}}
		if o.Token {
			acfg.ServerKey, acfg.Token = nil, enrollToken.Token
		}
		a, err := agent.New(acfg, b, reg, agentsLog)
		if err != nil {
			return nil, err
		}
		agents = append(agents, a)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = a.Run(actx)
		}()
	}
	// Counted in the store, not listed through the API: listing
	// thousands of agents five times a second would cost the server
	// more than their enrollment.
	st, err := postgres.Open(ctx, postgres.Config{URL: pgURL})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	for {
		n, err := st.CountAgents(ctx, "bench", record.AgentAccepted)
		if err != nil {
			return nil, err
		}
		showProgress(o.Progress, "agents enrolled: %d/%d", n, o.Agents)
		if n == o.Agents {
			break
		}
		if err := waitServer(ctx, srv, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
	enroll, channels1, cpu1, msgs1 := time.Since(enrollStart), amqp.ChannelsOpened(), cpuNow(servers, brokerProc), messagesNow()
	ingest1 := ingestNow(ctx, servers)
	stopProfile()
	if stopProfile, err = startCPUProfile(o.CPUProfile, ""); err != nil {
		return nil, err
	}
	fl := &fleet{cl: cl, srv: srv, st: st, names: names, agents: agents, resources: o.Resources, progress: o.Progress,
		postgres: o.Postgres, schema: schema}
	// A flood runs through the release: it starts once half of it is
	// on the broker.
	var forged time.Duration
	forgeDone := make(chan error, 1)
	if o.Forged > 0 {
		half := make(chan struct{})
		go func() {
			var err error
			forged, err = forge(ctx, bcfg, names, o.Forged, half)
			forgeDone <- err
		}()
		select {
		case <-half:
		case err := <-forgeDone:
			return nil, err
		}
	} else {
		forgeDone <- nil
	}
	converge, err := fl.release(ctx, "")
	if err != nil {
		return nil, err
	}
	nfiles, channels2, cpu2, msgs2 := openFiles(), amqp.ChannelsOpened(), cpuNow(servers, brokerProc), messagesNow()
	ingest2 := ingestNow(ctx, servers)
	stopProfile()
	showProgress(o.Progress, "forging the rest of the events")
	if err := <-forgeDone; err != nil {
		return nil, err
	}
	showProgress(o.Progress, "")
	// The largest replica's.
	var peak, cur int64
	for _, r := range servers {
		p, c, err := procMemory(r.cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		peak, cur = max(peak, p), max(cur, c)
	}
	res := &ConvergeResult{Agents: o.Agents, Resources: o.Resources, EnrollSeconds: enroll.Seconds(),
		Forged: o.Forged, ForgedSeconds: forged.Seconds(), Enrollment: enrollment, OpenFiles: nfiles, InotifyInstances: instances,
		EnrollChannels: channels1 - channels0, ConvergeChannels: channels2 - channels1, FanoutSeconds: fl.fanout.Seconds(), ReportedSeconds: fl.reported.Seconds(),
		RequestSeconds: fl.requested.Seconds(), RecordedPerSecond: fl.recorded,
		IngestTransactions: int64(ingest2.transactions - ingest1.transactions), IngestBusySeconds: ingest2.seconds - ingest1.seconds,
		EnrollCPU: cpu1.since(cpu0), ConvergeCPU: cpu2.since(cpu1), EnrollMessages: msgs1.since(msgs0), ConvergeMessages: msgs2.since(msgs1),
		ConvergeSeconds: converge.Seconds(), ResultsPerSecond: float64(o.Agents*o.Resources) / converge.Seconds(),
		ServerPeakMiB: float64(peak) / 1024, ServerRSSMiB: float64(cur) / 1024, Dir: work}
	if res.IngestTransactions > 0 {
		res.IngestEventsPerTransaction = (ingest2.events - ingest1.events) / float64(res.IngestTransactions)
	}
	if pid := brokerProc; pid != 0 {
		if peak, cur, err := procMemory(pid); err == nil {
			res.BrokerPeakMiB, res.BrokerRSSMiB = float64(peak)/1024, float64(cur)/1024
		}
	}
	size, err := postgres.SchemaSize(ctx, o.Postgres, schema)
	if err != nil {
		return nil, err
	}
	res.PostgresMiB = float64(size) / (1 << 20)
	if res.PostgresTables, err = postgres.TableSizes(ctx, o.Postgres, schema); err != nil {
		return nil, err
	}
	if len(res.PostgresTables) > 6 {
		res.PostgresTables = res.PostgresTables[:6]
	}

	if o.Idle > 0 {
		showProgress(o.Progress, "converged; the fleet idle for %v", o.Idle)
		cpu0, msgs0 := cpuNow(servers, brokerProc), messagesNow()
		if err := waitServer(ctx, srv, o.Idle); err != nil {
			return nil, err
		}
		res.IdleSeconds, res.IdleCPU, res.IdleMessages = o.Idle.Seconds(), cpuNow(servers, brokerProc).since(cpu0), messagesNow().since(msgs0)
	}
	if o.RestartBroker {
		d, err := fl.reconnect(ctx, buses, restart)
		if err != nil {
			return nil, err
		}
		res.ReconnectSeconds = d.Seconds()
		d, err = fl.release(ctx, " after the broker restarted")
		if err != nil {
			return nil, fmt.Errorf("the release after the broker restarted: %w", err)
		}
		res.ReconvergeSeconds = d.Seconds()
	}
	showProgress(o.Progress, "")

	cmd := fmt.Sprintf("tether bench converge --agents %d --resources %d", o.Agents, o.Resources)
	if o.Dir != "" {
		cmd += " --dir " + o.Dir
	}
	if o.Forged > 0 {
		cmd += fmt.Sprintf(" --forged %d", o.Forged)
	}
	if o.Token {
		cmd += " --token"
	}
	if o.Heartbeat > 0 {
		cmd += " --heartbeat " + o.Heartbeat.String()
	}
	if o.Idle > 0 {
		cmd += " --idle " + o.Idle.String()
	}
	if o.RestartBroker {
		cmd += " --restart-broker"
	}
	if o.PrivateBroker {
		cmd += " --private-broker"
	}
	if o.Servers > 1 {
		cmd += fmt.Sprintf(" --servers %d", o.Servers)
	}
	res.Servers = max(o.Servers, 1)
	res.ReadsHeld = amqp.ReadsHeld()
	res.Command = cmd
	return res, nil
}

// fleet is the converge scenario's agents and the server they answer to.
type fleet struct {
	cl        *apiClient
	srv       *serverProcess
	st        *postgres.Store
	names     []string
	agents    []*agent.Agent
	resources int
	releases  int
	// fanout is how long the last release's fan-out took (from its
	// start to its end, as the server recorded them).
	fanout time.Duration
	// reported is how long until the agents had applied the last release
	// and the broker had taken their results.
	reported time.Duration
	// requested is how long the last release's request took to be
	// answered: the version uploaded, stored and its release started.
	requested time.Duration
	// recorded is the rate the server recorded the last release's deploy
	// results at once they came: those of the transactions after the
	// first over the time from its start to the last's (ActionSpan); 0
	// when one transaction recorded them all.
	recorded float64
	// postgres and schema name the run's store, read directly.
	postgres, schema string
	progress         io.Writer
}

// release releases a version of every agent's files, with contents of
// their own (each release changes every file), and returns how long until
// every agent applied it and drained its outbox and the server recorded
// every resource deployed.
func (f *fleet) release(ctx context.Context, what string) (time.Duration, error) {
	f.releases++
	rs := make([]model.Resource, 0, len(f.names)*f.resources)
	for _, name := range f.names {
		for j := range f.resources {
			path := fmt.Sprintf("/f%03d.conf", j)
			rs = append(rs, model.Resource{ID: model.ID{Type: "file", Agent: name, Key: "path", Value: path},
				Attributes: model.Attributes{"path": path, "content": fmt.Sprintf("%s %s %d\n", name, path, f.releases), "mode": "0644"}})
		}
	}
	start := time.Now()
	var out api.ExportResponse
	if err := f.cl.call(ctx, "POST", "/envs/bench/versions?release=true", api.ExportRequest{Resources: rs, Meta: model.VersionMeta{Compiler: "tether bench"}}, &out); err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	f.requested = time.Since(start)
	// First the agents' side: every resource applied and every result
	// confirmed by the broker; then the server's record. An agent found
	// done is not looked at again. The looks share the machine's cores
	// with what is measured (looking at 10,000 journals, or counting
	// 200,000 statuses in PostgreSQL, takes tens of milliseconds):
	// each waits ten times as long as the one before it took, at least
	// 100 ms (agents) or 50 ms (the store) and at most a second, so they
	// take a tenth of a core unless a look takes more than 100 ms.
	done := make([]bool, len(f.agents))
	n := 0
	for {
		looked := time.Now()
		for i, a := range f.agents {
			if done[i] {
				continue
			}
			j := a.Journal()
			s := j.Slice()
			if s.Generation != out.Version.Number || j.OutboxLen() > 0 {
				continue
			}
			applied := 0
			for _, r := range s.Resources {
				if ap, ok := j.Applied(r.ID); ok && ap.State == model.StateDeployed {
					applied++
				}
			}
			if applied == len(s.Resources) {
				done[i], n = true, n+applied
			}
		}
		showProgress(f.progress, "reported by the agents%s: %d/%d", what, n, len(rs))
		if n == len(rs) {
			f.reported = time.Since(start)
			break
		}
		if err := waitServer(ctx, f.srv, lookPause(looked, 100*time.Millisecond)); err != nil {
			return 0, err
		}
	}
	for {
		looked := time.Now()
		n, err := f.st.CountStatuses(ctx, "bench", record.StatusFilter{State: model.StateDeployed}, out.Version.Number)
		if err != nil {
			return 0, err
		}
		showProgress(f.progress, "deployed%s: %d/%d", what, n, len(rs))
		if n == len(rs) {
			break
		}
		if err := waitServer(ctx, f.srv, lookPause(looked, 50*time.Millisecond)); err != nil {
			return 0, err
		}
	}
	took := time.Since(start)
	if after, first, last, err := postgres.ActionSpan(ctx, f.postgres, f.schema, "bench", out.Version.Number); err == nil && last.After(first) {
		f.recorded = float64(after) / last.Sub(first).Seconds()
	}
	if r, err := f.st.GetRelease(ctx, "bench", out.ReleaseID); err == nil && r.FinishedAt != nil {
		f.fanout = r.FinishedAt.Sub(r.StartedAt)
	}
	return took, nil
}

// reconnect restarts the broker and returns how long from its start_app
// until every agents' connection is open again.
func (f *fleet) reconnect(ctx context.Context, buses []*amqp.Bus, ctl brokerCtl) (time.Duration, error) {
	connected := func() int {
		n := 0
		for _, b := range buses {
			c, cancel := context.WithTimeout(ctx, time.Millisecond)
			if b.Ready(c) == nil {
				n++
			}
			cancel()
		}
		return n
	}
	showProgress(f.progress, "restarting the broker")
	// Stopped: every connection seen lost, so that the time counted is
	// that of connecting again.
	stopped := func() error {
		for deadline := time.Now().Add(30 * time.Second); connected() > 0; {
			if time.Now().After(deadline) {
				return errors.New("bench converge: the agents' connections stayed open 30 s after rabbitmqctl stop_app")
			}
			if err := waitServer(ctx, f.srv, 20*time.Millisecond); err != nil {
				return err
			}
		}
		return nil
	}
	if err := restartBroker(ctx, ctl, stopped); err != nil {
		return 0, err
	}
	start := time.Now()
	for {
		n := connected()
		showProgress(f.progress, "connections open again: %d/%d", n, len(buses))
		if n == len(buses) {
			return time.Since(start), nil
		}
		if err := waitServer(ctx, f.srv, 20*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// forge publishes n heartbeats signed by a key the server does not know,
// in the names of the fleet's agents, over 8 connections, closes half once
// half of them are confirmed, and returns how long the broker took to
// confirm them all.
func forge(ctx context.Context, bcfg amqp.Config, names []string, n int, half chan<- struct{}) (time.Duration, error) {
	_, key, err := bus.GenerateKey()
	if err != nil {
		return 0, err
	}
	forger := bus.NewSigner(key, 0)
	const conns = 8
	start := time.Now()
	var sent atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for c := range conns {
		g.Go(func() error {
			cfg := bcfg
			cfg.ConnectionName = fmt.Sprintf("tether bench forger %d", c)
			b, err := amqp.New(cfg, zerolog.Nop())
			if err != nil {
				return err
			}
			defer b.Close()
			for i := c; i < n; i += conns {
				e, err := forger.Seal(bus.KindHeartbeat, "bench", names[i%len(names)], bus.Heartbeat{})
				if err != nil {
					return err
				}
				if err := b.Publish(gctx, e); err != nil {
					return fmt.Errorf("forged event %d: %w", i, err)
				}
				if sent.Add(1) == int64((n+1)/2) {
					close(half)
				}
			}
			return nil
		})
	}
	err = g.Wait()
	return time.Since(start), err
}

// ingestShares is what the servers' ingest did so far, by their metrics:
// transactions, the events they wrote, the seconds spent in them.
type ingestShares struct{ transactions, events, seconds float64 }

// ingestNow reads every server's metrics (a server whose metrics cannot
// be read counts for nothing: the figures are for people, not checks).
func ingestNow(ctx context.Context, servers []*serverProcess) ingestShares {
	var in ingestShares
	for _, s := range servers {
		m, err := readMetrics(ctx, s.base)
		if err != nil {
			continue
		}
		in.transactions += m["tether_ingest_batch_events_count"]
		in.events += m["tether_ingest_batch_events_sum"]
		in.seconds += m["tether_ingest_commit_seconds_sum"]
	}
	return in
}

// readMetrics reads the unlabelled samples of a server's /metrics.
func readMetrics(ctx context.Context, base string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// serverProcess is a `tether server` child process.
type serverProcess struct {
	cmd  *exec.Cmd
	base string // its API's URL
	done chan error
	mu   sync.Mutex
	log  strings.Builder // its stderr, for the error when it stops
}

func (s *serverProcess) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// privateBrokerFiles is the limit on open files the benchmark gives the
// private broker node, where it may raise it (as root).
const privateBrokerFiles = 1 << 18

// CPUSeconds is the CPU time of the run's processes over one phase.
type CPUSeconds struct {
	Server float64 `json:"server"` // every replica
	Broker float64 `json:"broker"` // 0 when not on this machine
	Agents float64 `json:"agents"` // this process
	// Postgres: every PostgreSQL process of this machine (0 when the
	// database runs elsewhere).
	Postgres float64 `json:"postgres"`
}

// Messages are what the agents (this process) published to the broker
// and had delivered from it over one phase.
type Messages struct {
	Published int64 `json:"published"`
	Delivered int64 `json:"delivered"`
}

func messagesNow() Messages {
	p, d := amqp.Messages()
	return Messages{Published: p, Delivered: d}
}

func (m Messages) since(before Messages) Messages {
	return Messages{Published: m.Published - before.Published, Delivered: m.Delivered - before.Delivered}
}

// serverIdentity is what the server processes of a run share: the API's
// admin token, and the key of the server's key file (replicas of one
// server hold the same).
type serverIdentity struct{ token, key string }

func newServerIdentity() serverIdentity {
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	return serverIdentity{token: "bench-" + hex.EncodeToString(secret), key: keyring.EncodeKey(keyring.NewKey())}
}

// startServer starts tether (default: this process's binary) as a server
// on the database and broker namespace given, and returns it with its API's
// base URL and admin token once it is ready. The global flags go before
// the command (--cpu-profile FILE). logTo, if not nil, gets the server's
// whole stderr; the error of a server that stopped holds its first 64 KiB.
func startServer(ctx context.Context, self, pgURL string, bcfg amqp.Config, id serverIdentity, logTo io.Writer, global ...string) (*serverProcess, error) {
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	token := id.token
	cmd := exec.Command(self, append(global, "server", "--listen", addr, "--postgres", pgURL, "--amqp", bcfg.URL,
		"--amqp-namespace", bcfg.Namespace, "--queue-type", amqp.QueueClassic, "--admin-token", token, "--log-level", "warn")...)
	// The server's keys: the run's own, as the database is the run's alone.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "TETHER_KEY_FILE=") })
	cmd.Env = append(cmd.Env, "TETHER_SERVER_CONFIG=/dev/null", "TETHER_KEY="+id.key)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start tether server: %w", err)
	}
	s := &serverProcess{cmd: cmd, base: "http://" + addr, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if logTo != nil {
				_, _ = fmt.Fprintln(logTo, sc.Text())
			}
			s.mu.Lock()
			if s.log.Len() < 1<<16 {
				s.log.WriteString(sc.Text() + "\n")
			}
			s.mu.Unlock()
		}
		s.done <- cmd.Wait()
	}()
	for {
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if err := waitServer(ctx, s, 50*time.Millisecond); err != nil {
			s.stop()
			return nil, err
		}
	}
}

// waitServer waits d, or fails when the server stopped or ctx ended.
// lookPause is the pause after a look begun at looked: ten times as long
// as it took, at least least and at most a second (the resolution of the
// times measured).
func lookPause(looked time.Time, least time.Duration) time.Duration {
	return min(time.Second, max(least, 10*time.Since(looked)))
}

func waitServer(ctx context.Context, s *serverProcess, d time.Duration) error {
	select {
	case err := <-s.done:
		s.done <- err
		return fmt.Errorf("tether server stopped during the benchmark (%v): %s", err, s.output())
	case <-ctx.Done():
		return fmt.Errorf("benchmark: %w (raise --timeout?)", ctx.Err())
	case <-time.After(d):
		return nil
	}
}

func (s *serverProcess) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
	}
}

// procMemory reads a process's peak and current resident memory, in kB.
func procMemory(pid int) (peak, cur int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmHWM:":
			peak, _ = strconv.ParseInt(f[1], 10, 64)
		case "VmRSS:":
			cur, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	if peak == 0 {
		return 0, 0, errors.New("no VmHWM in /proc/PID/status")
	}
	return peak, cur, nil
}

// startCPUProfile starts a CPU profile of this process into file+suffix,
// if file is set; the function it returns stops it and may be called
// again.
func startCPUProfile(file, suffix string) (func(), error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file + suffix)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}
