package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/cli/bench"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/brokerauth"
)

func benchCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:  "bench",
		Usage: "measure Tether on this machine (benchmark scenarios)",
		Description: "Each scenario prints its figures and the command that reproduces them;\n" +
			"docs/performance.md records them.",
		Subcommands: []*ucli.Command{benchDeployCommand(term), benchIngestCommand(term), benchExportCommand(term), benchConvergeCommand(term), benchCompileCommand(term),
			benchBrokerAuthCommand(term), benchIngestTLSCommand(term)},
	}
}

// benchProgress is where a scenario draws its progress line: stderr when
// it is a terminal.
func benchProgress(term *terminal) io.Writer {
	if term.progress {
		return term.stderr
	}
	return nil
}

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

func benchDeployCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "deploy",
		Usage:     "time `tether deploy` of a generated model of N files, as a process: create, then no-op",
		UsageText: "tether bench deploy [--files 1000] [--runs 5] [--dir DIR] [--keep] [-o json]",
		Description: "Generates a model of N file resources (distinct content, mode 0644) into an empty\n" +
			"directory, then runs this tether binary as a child process: `deploy` on a fresh store\n" +
			"and an empty directory (create), then `deploy` again (no-op). Each run is timed from\n" +
			"start to exit with its peak resident memory (like /usr/bin/time -v). The file system is\n" +
			"synced before each run so one run's write-back does not land on the next.\n\n" +
			"   tether bench deploy --files 1000 --runs 10\n" +
			"   tether bench deploy --keep --dir /tmp/bench   # keep the model, e.g. for hyperfine",
		Flags: []ucli.Flag{
			&ucli.IntFlag{Name: "files", Value: 1000, Usage: "how many file resources the model has"},
			&ucli.IntFlag{Name: "runs", Value: 5, Usage: "how many create and no-op runs to time"},
			&ucli.StringFlag{Name: "dir", Usage: "work in `DIR` (default: a new temporary directory)"},
			&ucli.BoolFlag{Name: "keep", Usage: "keep the generated model and outputs"},
			outputFlag(),
		},
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			n, runs := c.Int("files"), c.Int("runs")
			if n < 1 || runs < 1 {
				return usageError("--files and --runs must be at least 1")
			}
			res, err := bench.RunDeploy(c.Context, bench.DeployOptions{Dir: c.String("dir"), Keep: c.Bool("keep"),
				Files: n, Runs: runs, Progress: benchProgress(term)})
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			return printBenchDeploy(term, res)
		},
	}
}

func printBenchDeploy(term *terminal, r *bench.DeployResult) error {
	t := newTable(term, "PHASE", "RUNS", "WALL MEDIAN", "WALL MIN", "WALL MAX", "CPU MEDIAN", "PEAK RSS MAX")
	for _, p := range []struct {
		name string
		runs []bench.DeployRun
	}{{"create", r.Create}, {"no-op", r.Noop}} {
		walls := make([]time.Duration, len(p.runs))
		cpus := make([]time.Duration, len(p.runs))
		var rss int64
		for i, x := range p.runs {
			walls[i], cpus[i] = x.Wall, x.CPU
			rss = max(rss, x.MaxRSS)
		}
		slices.Sort(walls)
		slices.Sort(cpus)
		t.row(p.name, strconv.Itoa(len(p.runs)), secs(walls[len(walls)/2]), secs(walls[0]), secs(walls[len(walls)-1]),
			secs(cpus[len(cpus)/2]), fmt.Sprintf("%.1f MiB", float64(rss)/(1<<20)))
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(term.stdout, "\n%d files; each run: %s\n", r.Files, r.Command)
	return err
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

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
			&ucli.IntFlag{Name: "consumers", Value: server.Default().Consumers, Usage: "the server's ingest consumers (each handles 64 events at once)"},
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
			res, err := bench.RunIngest(c.Context, bench.IngestOptions{Postgres: c.String("postgres"), AMQP: c.String("amqp"),
				Events: c.Int("events"), Agents: c.Int("agents"), Consumers: c.Int("consumers"), CPUProfile: c.String("cpuprofile"),
				Progress: benchProgress(term)})
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			t := newTable(term, "PATH", "EVENTS", "SECONDS", "EVENTS/S", "PER TRANSACTION")
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
			res, err := bench.RunExport(c.Context, bench.ExportOptions{Postgres: c.String("postgres"), Resources: c.Int("resources"),
				Change: c.Float64("change"), Progress: benchProgress(term)})
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			t := newTable(term, "STEP", "SECONDS")
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

func benchCompileCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "compile",
		Usage:     "time the server compiling a fleet's model against its live inventory: trigger to released version",
		UsageText: "tether bench compile [--agents 10000] [--runs 5] [--storm 1000] [--postgres URL] [--amqp URL] [-o json]",
		Description: "Starts `tether server` (this binary, as a child process) on a new PostgreSQL schema, stores a fleet\n" +
			"of N enrolled agents with labels and facts in its database, uploads a fleet model (web, database\n" +
			"and load-balancer hostgroups; the balancers list every web host) as the environment's source,\n" +
			"and times its compiles from the request to the report of the released version: the first, then\n" +
			"--runs more, each after one agent's facts changed. Then --storm compile requests at once, and how\n" +
			"many compiles they made. The server's resident memory is read from /proc (peak and current).\n\n" +
			"   tether bench compile --agents 10000 --runs 5 --storm 1000",
		Flags: append(benchServiceFlags(),
			benchAMQPFlag(),
			&ucli.IntFlag{Name: "agents", Value: 10000, Usage: "how many agents the inventory holds"},
			&ucli.IntFlag{Name: "runs", Value: 5, Usage: "how many compiles to time after the first"},
			&ucli.IntFlag{Name: "storm", Value: 1000, Usage: "compile requests sent at once to measure folding (0: none)"},
			&ucli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "give up after this long"},
		),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			o := bench.CompileOptions{Postgres: c.String("postgres"), AMQP: c.String("amqp"), Agents: c.Int("agents"), Runs: c.Int("runs"),
				Storm: c.Int("storm"), Timeout: c.Duration("timeout"), Progress: benchProgress(term)}
			if o.Agents < 5 || o.Runs < 1 || o.Storm < 0 {
				return usageError("--agents must be at least 5, --runs at least 1, --storm 0 or more")
			}
			res, err := bench.RunCompile(c.Context, o)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			runs := make([]string, len(res.TriggerToReleased))
			for i, s := range res.TriggerToReleased {
				runs[i] = fmt.Sprintf("%.2f (report %.2f)", s, res.TriggerToReport[i])
			}
			t := newTable(term, "AGENTS", "RESOURCES", "FIRST S", "RELEASED S", "REPORT S", "SERVER PEAK RSS", "SERVER RSS")
			t.row(strconv.Itoa(res.Agents), strconv.Itoa(res.Resources), fmt.Sprintf("%.2f", res.FirstSeconds), fmt.Sprintf("%.2f", res.MedianSeconds),
				fmt.Sprintf("%.2f", res.MedianReport), fmt.Sprintf("%.1f MiB", res.ServerPeakMiB), fmt.Sprintf("%.1f MiB", res.ServerRSSMiB))
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintf(term.stdout, "\nmedians above; each run, seconds from the request to the released version (and to the compile's report, agents sent): %s\n", strings.Join(runs, ", "))
			if res.StormTriggers > 0 {
				fmt.Fprintf(term.stdout, "%d compile requests in %.2f s made %d compiles (folding %d requests)\n", res.StormTriggers, res.StormSeconds, res.StormCompiles, res.StormFolded)
			}
			fmt.Fprintf(term.stdout, "command: %s\n", res.Command)
			return nil
		},
	}
}

func benchConvergeCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "converge",
		Usage:     "time a release converging on N agents × M resources: real server, RabbitMQ, PostgreSQL",
		UsageText: "tether bench converge [--agents 1000] [--resources 20] [--dir DIR] [--token] [--restart-broker] [--postgres URL] [--amqp URL] [-o json]",
		Description: "Starts `tether server` (this binary, as a child process) on a new PostgreSQL schema and a\n" +
			"RabbitMQ namespace of its own, then N lightweight agents in this process: each a real agent\n" +
			"(journal, engine, file handler) with a bus client (--per-connection agents share one AMQP\n" +
			"connection, as `tether agent run --name a --name b` does), writing its files under --dir.\n" +
			"Once every agent is enrolled (open enrollment), a version of N × M files is released\n" +
			"through the REST API and timed until the server has recorded every resource deployed.\n" +
			"The server's and the broker's resident memory are read from /proc at the end (peak and\n" +
			"current; the broker's when it runs on this machine), and the size of the run's PostgreSQL schema.\n" +
			"The agents' journals share one lock: one open file per agent; the limit on open files is raised\n" +
			"to the hard limit, and too low a hard limit is an error before anything starts. Each agent watches\n" +
			"its files with an inotify instance of its own, as on a host: as root, the machine's limits on\n" +
			"inotify instances and watches per user are raised for the run and put back after; else agents past\n" +
			"the limit poll their files every 5 s instead (a warning says so).\n\n" +
			"--token enrolls every agent with an enrollment token (enrollment policy token), as on real hosts.\n" +
			"--restart-broker then restarts this machine's RabbitMQ (rabbitmqctl stop_app, start_app: every\n" +
			"connection of every user is closed; never on a broker others are using), times until every\n" +
			"agents' connection is back, and a second release until all recorded and every outbox drained.\n" +
			"--private-broker runs on a RabbitMQ node of the run's own (its ports, data and configuration, the\n" +
			"limit on open files raised), so that --restart-broker disturbs nobody and the machine's broker\n" +
			"and its limits do not bound the run. --servers N starts N server replicas on the same store and broker.\n" +
			"--idle D holds the fleet idle for D once converged and says what it costs meanwhile (CPU of each\n" +
			"process, messages): what the agents' heartbeats (--heartbeat, 1m here; agents default to 30s) cost.\n\n" +
			"   tether bench converge --agents 1000 --resources 20\n" +
			"   tether bench converge --agents 1000 --resources 20 --dir /dev/shm/converge   # tmpfs\n" +
			"   tether bench converge --agents 200 --resources 20 --forged 100000            # through a flood\n" +
			"   tether bench converge --agents 10000 --dir /dev/shm/converge --private-broker --timeout 30m\n" +
			"   tether bench converge --agents 1000 --resources 20 --token --restart-broker --private-broker\n" +
			"   tether bench converge --agents 10000 --dir /dev/shm/converge --private-broker --timeout 30m --heartbeat 30s --idle 2m",
		Flags: append(benchServiceFlags(),
			benchAMQPFlag(),
			&ucli.IntFlag{Name: "agents", Value: 1000, Usage: "how many agents"},
			&ucli.IntFlag{Name: "resources", Value: 20, Usage: "how many file resources each agent gets"},
			&ucli.IntFlag{Name: "per-connection", Value: 50, Usage: "agents sharing one AMQP connection"},
			&ucli.IntFlag{Name: "forged", Usage: "publish `N` forged events (a key the server does not know, the agents' names) just before the release, and time the release through them (it starts when half are on the broker)"},
			&ucli.StringFlag{Name: "dir", Usage: "the agents' journals and files go under `DIR` (default: a new temporary directory)"},
			&ucli.BoolFlag{Name: "token", Usage: "enrollment policy token: every agent enrolls with an enrollment token (default: open enrollment)"},
			&ucli.BoolFlag{Name: "restart-broker", Usage: "once converged, restart this machine's RabbitMQ (rabbitmqctl stop_app, start_app) and time the reconnect and a second release"},
			&ucli.DurationFlag{Name: "heartbeat", Value: time.Minute, Usage: "the agents' heartbeat interval (agents run with 30s by default)"},
			&ucli.DurationFlag{Name: "idle", Usage: "once converged, hold the fleet idle this long and measure what it costs meanwhile (CPU of each process, messages)"},
			&ucli.IntFlag{Name: "servers", Value: 1, Usage: "how many `N` server processes (replicas) share the store and the broker: they take events from one queue, one leads"},
			&ucli.BoolFlag{Name: "private-broker", Usage: "run on a RabbitMQ node of the run's own (its own ports, data and configuration, the limit on open files raised), not the machine's broker; --restart-broker then restarts that node alone"},
			&ucli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "give up after this long"},
			&ucli.StringFlag{Name: "server-cpuprofile", Usage: "have the server write a CPU profile of its whole run to `FILE` (go tool pprof)"},
			&ucli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of this process (the agents) during the first release to `FILE`, and during enrollment to FILE.enroll"},
			&ucli.StringFlag{Name: "server-log", Usage: "copy the server's whole log to `FILE` (with a goroutine dump, should you send the server SIGQUIT)"},
			&ucli.StringFlag{Name: "agents-log", Usage: "write the agents' warnings and errors, and their broker connections', to `FILE` (JSON lines, each naming its agent or connection)"},
		),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			serverLog, closeServerLog, err := logFile(c.String("server-log"))
			if err != nil {
				return err
			}
			defer closeServerLog()
			agentsLog, closeAgentsLog, err := logFile(c.String("agents-log"))
			if err != nil {
				return err
			}
			defer closeAgentsLog()
			o := bench.ConvergeOptions{ServerLog: serverLog, AgentsLog: agentsLog, ServerCPUProfile: c.String("server-cpuprofile"), CPUProfile: c.String("cpuprofile"), Postgres: c.String("postgres"), AMQP: c.String("amqp"), Agents: c.Int("agents"), Resources: c.Int("resources"),
				PerConnection: c.Int("per-connection"), Forged: c.Int("forged"), Dir: c.String("dir"),
				Token: c.Bool("token"), Heartbeat: c.Duration("heartbeat"), Idle: c.Duration("idle"), RestartBroker: c.Bool("restart-broker"), PrivateBroker: c.Bool("private-broker"), Servers: c.Int("servers"), Timeout: c.Duration("timeout"), Progress: benchProgress(term), Warn: term.stderr}
			if o.Agents < 1 || o.Resources < 1 || o.PerConnection < 1 {
				return usageError("--agents, --resources and --per-connection must be at least 1")
			}
			if o.Heartbeat <= 0 || o.Idle < 0 {
				return usageError("--heartbeat must be above 0 and --idle not below 0 (e.g. --heartbeat 30s --idle 2m)")
			}
			res, err := bench.RunConverge(c.Context, o)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			t := newTable(term, "AGENTS", "RESOURCES", "ENROLLMENT", "ENROLL S", "CONVERGE S", "RESULTS/S", "SERVER PEAK RSS", "SERVER RSS", "BROKER RSS", "PG SCHEMA")
			broker := "unknown"
			if res.BrokerRSSMiB > 0 {
				broker = fmt.Sprintf("%.1f MiB", res.BrokerRSSMiB)
			}
			t.row(strconv.Itoa(res.Agents), strconv.Itoa(res.Resources), res.Enrollment, fmt.Sprintf("%.2f", res.EnrollSeconds),
				fmt.Sprintf("%.2f", res.ConvergeSeconds), fmt.Sprintf("%.0f", res.ResultsPerSecond),
				fmt.Sprintf("%.1f MiB", res.ServerPeakMiB), fmt.Sprintf("%.1f MiB", res.ServerRSSMiB), broker, fmt.Sprintf("%.1f MiB", res.PostgresMiB))
			if err := t.flush(); err != nil {
				return err
			}
			if res.Forged > 0 {
				fmt.Fprintf(term.stdout, "\n%d forged events published in %.2f s; the release started once half were on the broker\n", res.Forged, res.ForgedSeconds)
			}
			if res.ReconnectSeconds > 0 {
				fmt.Fprintf(term.stdout, "\nbroker restarted: every connection open again %.2f s after start_app; the next release converged in %.2f s, every outbox drained\n", res.ReconnectSeconds, res.ReconvergeSeconds)
			}
			fmt.Fprintf(term.stdout, "\n%d files open in the agents' process once converged\n", res.OpenFiles)
			type phase struct {
				what string
				cpu  bench.CPUSeconds
				msgs bench.Messages
			}
			phases := []phase{{"enrolling", res.EnrollCPU, res.EnrollMessages}, {"converging", res.ConvergeCPU, res.ConvergeMessages}}
			if res.IdleSeconds > 0 {
				phases = append(phases, phase{fmt.Sprintf("idle (%.0f s)", res.IdleSeconds), res.IdleCPU, res.IdleMessages})
			}
			for _, ph := range phases {
				fmt.Fprintf(term.stdout, "CPU seconds while %s: server %.1f, broker %.1f, agents %.1f, PostgreSQL %.1f; the agents published %d messages and got %d\n",
					ph.what, ph.cpu.Server, ph.cpu.Broker, ph.cpu.Agents, ph.cpu.Postgres, ph.msgs.Published, ph.msgs.Delivered)
			}
			fmt.Fprintf(term.stdout, "of the %.1f s to converge, the release's request took %.1f s (the version uploaded and stored) and its fan-out %.1f s; every agent had applied it and its results were on the broker after %.1f s\n",
				res.ConvergeSeconds, res.RequestSeconds, res.FanoutSeconds, res.ReportedSeconds)
			if res.RecordedPerSecond > 0 {
				fmt.Fprintf(term.stdout, "the server recorded %.0f results a second from the first recorded to the last\n", res.RecordedPerSecond)
			}
			if res.IngestTransactions > 0 {
				fmt.Fprintf(term.stdout, "ingest: %d transactions, %.1f reports each, %.1f s spent in them\n",
					res.IngestTransactions, res.IngestEventsPerTransaction, res.IngestBusySeconds)
			}
			fmt.Fprintf(term.stdout, "AMQP channels the agents opened: %d while enrolling (%.1f per agent), %d while converging\n",
				res.EnrollChannels, float64(res.EnrollChannels)/float64(res.Agents), res.ConvergeChannels)
			if res.ReadsHeld > 0 {
				fmt.Fprintf(term.stdout, "the agents' connections read on past a stale deadline or a blocked write %d times (each would have dropped a connection)\n", res.ReadsHeld)
			}
			fmt.Fprintf(term.stdout, "\ncommand: %s\n", res.Command)
			return nil
		},
	}
}

// logFile creates the file a log goes to, named by a flag: nil (and a
// close that does nothing) when the flag was not given.
func logFile(path string) (io.Writer, func(), error) {
	if path == "" {
		return nil, func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { _ = f.Close() }, nil
}

func benchBrokerAuthCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "broker-auth",
		Usage:     "time N agents logging in to the broker as themselves at once, over TLS, through the server's answers to RabbitMQ",
		UsageText: "tether bench broker-auth [--agents 1000] [--first-contact 200] [--postgres URL] [-o json]",
		Description: "Starts a RabbitMQ node of its own (rabbitmq-server must be installed; nothing of the machine's\n" +
			"broker is used) set up as docs/operations.md says for agents that log in as themselves: a TLS\n" +
			"listener, the broker's own users first, then rabbitmq_auth_backend_cache (10 s) in front of\n" +
			"rabbitmq_auth_backend_http, asking a server run in this process on a new PostgreSQL schema. It\n" +
			"stores N enrolled agents, each with an ed25519 key of its own, then times, from this process\n" +
			"(one goroutine and one connection per agent):\n" +
			"  connect        every agent opens its connection at once, with its own signed login, as after a\n" +
			"                 broker restart (the broker's cache is empty, the agents' inboxes are there);\n" +
			"  first event    every agent publishes a heartbeat, confirmed;\n" +
			"  first contact  --first-contact agents the server does not know connect and say hello; also\n" +
			"                 timed until the server has recorded them all (pending).\n" +
			"Each phase counts the questions the server answered (user, vhost, resource, topic) per second, and\n" +
			"the processor time the broker node and this process (the agents' side and the server) used.\n" +
			"For comparison, the same agents then connect with the broker's own user (no questions), over TLS\n" +
			"and over plain AMQP.\n" +
			"The limit of open files is raised to its hard limit (`ulimit -Hn`), which must exceed N + 1024.\n\n" +
			"   tether bench broker-auth --agents 1000",
		Flags: append(benchServiceFlags(),
			&ucli.IntFlag{Name: "agents", Value: 1000, Usage: "how many enrolled agents connect at once"},
			&ucli.IntFlag{Name: "first-contact", Value: brokerauth.StrangerBurst,
				Usage: fmt.Sprintf("how many agents the server does not know connect after them (0 to %d: the logins of unknown keys the server lets in at once from one address)", brokerauth.StrangerBurst)},
			&ucli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "give up after this long"},
			&ucli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the connect phase (this process: agents and server) to `FILE`"},
		),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			o := bench.BrokerAuthOptions{Postgres: c.String("postgres"), Agents: c.Int("agents"), FirstContact: c.Int("first-contact"),
				Timeout: c.Duration("timeout"), CPUProfile: c.String("cpuprofile"), Progress: benchProgress(term)}
			if o.Agents < 1 || o.FirstContact < 0 || o.FirstContact > brokerauth.StrangerBurst {
				return usageError("--agents must be at least 1 and --first-contact 0 to %d", brokerauth.StrangerBurst)
			}
			res, err := bench.RunBrokerAuth(c.Context, o)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			t := newTable(term, "PHASE", "AGENTS", "SECONDS", "AGENT P50", "AGENT P95", "AGENT MAX", "CPU S NODE/OWN", "QUESTIONS", "QUESTIONS/S", "REFUSED", "BY KIND")
			for _, p := range res.Phases {
				secs := fmt.Sprintf("%.2f", p.Seconds)
				if p.RecordedSeconds > 0 {
					secs += fmt.Sprintf(" (recorded %.2f)", p.RecordedSeconds)
				}
				t.row(p.Name, strconv.Itoa(p.Agents), secs, fmt.Sprintf("%.2f", p.P50Seconds), fmt.Sprintf("%.2f", p.P95Seconds),
					fmt.Sprintf("%.2f", p.MaxSeconds), fmt.Sprintf("%.2f/%.2f", p.NodeCPUSeconds, p.SelfCPUSeconds), strconv.FormatInt(p.Questions, 10), fmt.Sprintf("%.0f", p.QuestionsPerSecond), strconv.FormatInt(p.Refused, 10),
					byKind(p.ByKind))
			}
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintf(term.stdout, "\nnode started in %.1f s; %d files open in this process with every agent connected (limit %d); command: %s\n",
				res.NodeStartSeconds, res.OpenFiles, res.FileLimit, res.Command)
			return nil
		},
	}
}

// byKind shows the broker's questions by kind, in the order it asks them.
func byKind(m map[string]int64) string {
	var parts []string
	for _, k := range []string{"user", "vhost", "resource", "topic"} {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func benchIngestTLSCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "ingest-tls",
		Usage:     "compare the ingest path over TLS with per-agent broker logins against plain AMQP with a shared user",
		UsageText: "tether bench ingest-tls [--events 20000] [--agents 100] [--consumers 8] [--rounds 2] [--postgres URL] [-o json]",
		Description: "Starts a RabbitMQ node of its own (rabbitmq-server must be installed; nothing of the machine's\n" +
			"broker is used), set up as for `tether bench broker-auth`, and runs the ingest path on it in three\n" +
			"setups, each run on a new PostgreSQL schema:\n" +
			"  plain AMQP, one shared user        amqp://, the agents and the server with one user of the broker's\n" +
			"                                     own, as on a trusted network;\n" +
			"  TLS, one shared user               the same over amqps:// (TLS alone);\n" +
			"  TLS, each agent logs in as itself  amqps://, as on an untrusted network: the broker asks the server,\n" +
			"                                     through its cache, about each agent; the server over TLS with the\n" +
			"                                     broker's own user.\n" +
			"Each time --agents agents connect at once and publish their share of the --events signed\n" +
			"resource.status events (one result each, one after the other, each confirmed); then a server takes\n" +
			"the backlog into PostgreSQL, timed as in `tether bench ingest`. Each round runs every setup, in\n" +
			"that order and in the reverse order in turn. Prints each run, each setup's sum over the rounds, the\n" +
			"processor time the broker node and this process used, and the ratios to plain.\n\n" +
			"   tether bench ingest-tls --events 20000",
		Flags: append(benchServiceFlags(),
			&ucli.IntFlag{Name: "events", Value: 20000, Usage: "how many status events to publish and ingest, each time"},
			&ucli.IntFlag{Name: "agents", Value: 100, Usage: "how many agents send them (a connection each)"},
			&ucli.IntFlag{Name: "consumers", Value: server.Default().Consumers, Usage: "the server's ingest consumers (each handles 64 events at once)"},
			&ucli.IntFlag{Name: "rounds", Value: 2, Usage: "how many runs of each setup (in that order and in the reverse order in turn)"},
			&ucli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "give up after this long"},
		),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			o := bench.IngestTLSOptions{Postgres: c.String("postgres"), Events: c.Int("events"), Agents: c.Int("agents"),
				Consumers: c.Int("consumers"), Rounds: c.Int("rounds"), Timeout: c.Duration("timeout"), Progress: benchProgress(term)}
			if o.Events < 1 || o.Agents < 1 || o.Consumers < 1 || o.Rounds < 1 {
				return usageError("--events, --agents, --consumers and --rounds must be at least 1")
			}
			res, err := bench.RunIngestTLS(c.Context, o)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			t := newTable(term, "RUN", "SETUP", "CONNECT S", "PUBLISH S", "PUBLISHED/S", "CPU S NODE/OWN", "INGEST S", "INGESTED/S", "CPU S NODE/OWN", "PER TRANSACTION", "QUESTIONS")
			runs := make([]string, 0, len(res.Runs)+2)
			for i := range res.Runs {
				runs = append(runs, strconv.Itoa(i+1))
			}
			runs = append(runs, "all", "all", "all")
			for i, x := range append(res.Runs, res.Plain, res.TLSShared, res.TLSAuth) {
				t.row(runs[i], x.Setup, fmt.Sprintf("%.2f", x.ConnectSeconds), fmt.Sprintf("%.2f", x.PublishSeconds), fmt.Sprintf("%.0f", x.PublishRate),
					fmt.Sprintf("%.2f/%.2f", x.PublishNodeCPU, x.PublishSelfCPU), fmt.Sprintf("%.2f", x.IngestSeconds), fmt.Sprintf("%.0f", x.IngestRate),
					fmt.Sprintf("%.2f/%.2f", x.IngestNodeCPU, x.IngestSelfCPU), fmt.Sprintf("%.1f", x.PerTransaction), strconv.FormatInt(x.Questions, 10))
			}
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintf(term.stdout, "\nTLS with per-agent logins / plain: ingest %.2f, publish %.2f (TLS alone: %.2f, %.2f); by processor time per event: ingest %.2f, publish %.2f\n"+
				"%d events of %d agents, %d consumers; command: %s\n",
				res.IngestRatio, res.PublishRatio, res.TLSIngestRatio, res.TLSPublishRatio, res.IngestCPURatio, res.PublishCPURatio,
				res.Events, res.Agents, res.Consumers, res.Command)
			return nil
		},
	}
}
