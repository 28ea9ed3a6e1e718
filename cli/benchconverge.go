package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/agent"
	"github.com/tetherhq/tether/agent/facts"
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/builtin"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/store/postgres"
)

func benchConvergeCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:      "converge",
		Usage:     "time a release converging on N agents × M resources: real server, RabbitMQ, PostgreSQL",
		UsageText: "tether bench converge [--agents 1000] [--resources 20] [--dir DIR] [--postgres URL] [--amqp URL] [-o json]",
		Description: "Starts `tether server` (this binary, as a child process) on a new PostgreSQL schema and a\n" +
			"RabbitMQ namespace of its own, then N lightweight agents in this process: each a real agent\n" +
			"(journal, engine, file handler) with a bus client (--per-connection agents share one AMQP\n" +
			"connection, as `tether agent run --name a --name b` does), writing its files under --dir.\n" +
			"Once every agent is enrolled (open enrollment), a version of N × M files is released\n" +
			"through the REST API and timed until the server has recorded every resource deployed.\n" +
			"The server's resident memory is read from /proc at the end (peak and current).\n\n" +
			"   tether bench converge --agents 1000 --resources 20\n" +
			"   tether bench converge --agents 1000 --resources 20 --dir /dev/shm/converge   # tmpfs",
		Flags: append(benchServiceFlags(),
			benchAMQPFlag(),
			&ucli.IntFlag{Name: "agents", Value: 1000, Usage: "how many agents"},
			&ucli.IntFlag{Name: "resources", Value: 20, Usage: "how many file resources each agent gets"},
			&ucli.IntFlag{Name: "per-connection", Value: 50, Usage: "agents sharing one AMQP connection"},
			&ucli.StringFlag{Name: "dir", Usage: "the agents' journals and files go under `DIR` (default: a new temporary directory)"},
			&ucli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "give up after this long"},
		),
		Action: func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			o := convergeOpts{pg: c.String("postgres"), amqp: c.String("amqp"), agents: c.Int("agents"), resources: c.Int("resources"),
				perConn: c.Int("per-connection"), dir: c.String("dir"), timeout: c.Duration("timeout")}
			if o.agents < 1 || o.resources < 1 || o.perConn < 1 {
				return usageError("--agents, --resources and --per-connection must be at least 1")
			}
			res, err := benchConverge(c.Context, term, o)
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(term.stdout, res)
			}
			t := newTable(term.stdout, "AGENTS", "RESOURCES", "ENROLL S", "CONVERGE S", "RESULTS/S", "SERVER PEAK RSS", "SERVER RSS")
			t.row(strconv.Itoa(res.Agents), strconv.Itoa(res.Resources), fmt.Sprintf("%.2f", res.EnrollSeconds),
				fmt.Sprintf("%.2f", res.ConvergeSeconds), fmt.Sprintf("%.0f", res.ResultsPerSecond),
				fmt.Sprintf("%.1f MiB", res.ServerPeakMiB), fmt.Sprintf("%.1f MiB", res.ServerRSSMiB))
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintf(term.stdout, "\ncommand: %s\n", res.Command)
			return nil
		},
	}
}

type convergeOpts struct {
	pg, amqp, dir              string
	agents, resources, perConn int
	timeout                    time.Duration
}

type benchConvergeResult struct {
	Agents           int     `json:"agents"`
	Resources        int     `json:"resources"`
	EnrollSeconds    float64 `json:"enroll_seconds"`
	ConvergeSeconds  float64 `json:"converge_seconds"`
	ResultsPerSecond float64 `json:"results_per_second"`
	ServerPeakMiB    float64 `json:"server_peak_rss_mib"`
	ServerRSSMiB     float64 `json:"server_rss_mib"`
	Dir              string  `json:"dir"`
	Command          string  `json:"command"`
}

func benchConverge(ctx context.Context, term *terminal, o convergeOpts) (*benchConvergeResult, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	pgURL, drop, err := benchSchema(ctx, o.pg)
	if err != nil {
		return nil, err
	}
	defer drop()
	work := o.dir
	if work == "" {
		if work, err = os.MkdirTemp("", "tether-converge-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	bcfg := amqp.Default()
	bcfg.URL, bcfg.QueueType = o.amqp, amqp.QueueClassic
	bcfg.Namespace = "tetherbench." + uuid.NewString()[:8]
	bcfg.Agent = true
	names := make([]string, o.agents)
	inboxes := make([]string, o.agents)
	for i := range names {
		names[i] = fmt.Sprintf("host%05d", i)
	}
	defer func() {
		_ = amqp.DeleteTopology(context.WithoutCancel(ctx), bcfg, inboxes)
	}()

	// The server, a process of its own so that its memory is its own.
	srv, base, token, err := startBenchServer(ctx, pgURL, bcfg)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	cl := &client{base: base, env: "bench", token: token, http: &http.Client{Timeout: time.Minute}}
	settings := map[string]string{"enrollment": "open", "auto_deploy": "true", "deploy_interval": "0s", "repair_interval": "0s"}
	if err := cl.call(ctx, "POST", "/envs", map[string]any{"name": "bench", "settings": settings}, nil); err != nil {
		return nil, fmt.Errorf("create the environment: %w", err)
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
	syncs := handler.NewSyncGroup()                   // shared, as in `tether agent run --name a --name b`
	gather := facts.Cached(time.Minute, facts.Gather) // one gathering for the thousand agents of one host
	enrollStart := time.Now()
	for i, name := range names {
		if i%o.perConn == 0 {
			cfg := bcfg
			cfg.ConnectionName = fmt.Sprintf("tether bench agents %d", i/o.perConn)
			b, err := amqp.New(cfg, zerolog.Nop())
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
		reg, err := builtin.Registry(handler.Runtime{Root: root, Sync: syncs})
		if err != nil {
			return nil, err
		}
		a, err := agent.New(agent.Config{Env: "bench", Name: name, StateDir: filepath.Join(work, name, "state"),
			Heartbeat: time.Minute, Facts: gather}, b, reg, zerolog.Nop())
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
	for {
		var as []model.Agent
		if err := cl.call(ctx, "GET", "/envs/bench/agents", nil, &as); err != nil {
			return nil, err
		}
		n := 0
		for _, a := range as {
			if a.State == model.AgentAccepted {
				n++
			}
		}
		if term.progress {
			fmt.Fprintf(term.stderr, "\r\033[Kagents enrolled: %d/%d", n, o.agents)
		}
		if n == o.agents {
			break
		}
		if err := benchWait(ctx, srv, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
	enroll := time.Since(enrollStart)

	// The release, timed until every resource is recorded deployed.
	rs := make([]model.Resource, 0, o.agents*o.resources)
	for _, name := range names {
		for j := range o.resources {
			path := fmt.Sprintf("/f%03d.conf", j)
			rs = append(rs, model.Resource{ID: model.ID{Type: "file", Agent: name, Key: "path", Value: path},
				Attributes: model.Attributes{"path": path, "content": name + " " + path + "\n", "mode": "0644"}})
		}
	}
	st, err := postgres.Open(ctx, postgres.Config{URL: pgURL})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	start := time.Now()
	var out api.ExportResponse
	if err := cl.call(ctx, "POST", "/envs/bench/versions?release=true", api.ExportRequest{Resources: rs, Meta: model.VersionMeta{Compiler: "tether bench"}}, &out); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	// First the agents' side, cheap to look at: every resource applied
	// and every result confirmed by the broker; then the server's record.
	for {
		n := 0
		for _, a := range agents {
			j := a.Journal()
			s := j.Slice()
			if s.Generation != out.Version.Number || j.OutboxLen() > 0 {
				continue
			}
			for _, r := range s.Resources {
				if ap, ok := j.Applied(r.ID); ok && ap.State == model.StateDeployed {
					n++
				}
			}
		}
		if term.progress {
			fmt.Fprintf(term.stderr, "\r\033[Kreported by the agents: %d/%d", n, len(rs))
		}
		if n == len(rs) {
			break
		}
		if err := benchWait(ctx, srv, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	for {
		sts, err := st.Statuses(ctx, "bench", model.StatusFilter{State: model.StateDeployed})
		if err != nil {
			return nil, err
		}
		n := 0
		for _, s := range sts {
			if s.Version == out.Version.Number {
				n++
			}
		}
		if term.progress {
			fmt.Fprintf(term.stderr, "\r\033[Kdeployed: %d/%d", n, len(rs))
		}
		if n == len(rs) {
			break
		}
		if err := benchWait(ctx, srv, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	converge := time.Since(start)
	if term.progress {
		fmt.Fprint(term.stderr, "\r\033[K")
	}
	peak, cur, err := procMemory(srv.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	cmd := fmt.Sprintf("tether bench converge --agents %d --resources %d", o.agents, o.resources)
	if o.dir != "" {
		cmd += " --dir " + o.dir
	}
	return &benchConvergeResult{Agents: o.agents, Resources: o.resources, EnrollSeconds: enroll.Seconds(),
		ConvergeSeconds: converge.Seconds(), ResultsPerSecond: float64(len(rs)) / converge.Seconds(),
		ServerPeakMiB: float64(peak) / 1024, ServerRSSMiB: float64(cur) / 1024, Dir: work, Command: cmd}, nil
}

// benchServer is a `tether server` child process.
type benchServer struct {
	cmd  *exec.Cmd
	done chan error
	mu   sync.Mutex
	log  strings.Builder // its stderr, for the error when it stops
}

func (s *benchServer) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

func startBenchServer(ctx context.Context, pgURL string, bcfg amqp.Config) (*benchServer, string, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	token := "bench-" + hex.EncodeToString(secret)
	cmd := exec.Command(self, "server", "--listen", addr, "--postgres", pgURL, "--amqp", bcfg.URL,
		"--amqp-namespace", bcfg.Namespace, "--queue-type", amqp.QueueClassic, "--admin-token", token, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "TETHER_SERVER_CONFIG=/dev/null")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, "", "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", "", fmt.Errorf("start tether server: %w", err)
	}
	s := &benchServer{cmd: cmd, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			if s.log.Len() < 1<<16 {
				s.log.WriteString(sc.Text() + "\n")
			}
			s.mu.Unlock()
		}
		s.done <- cmd.Wait()
	}()
	base := "http://" + addr
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, base, token, nil
			}
		}
		if err := benchWait(ctx, s, 50*time.Millisecond); err != nil {
			s.stop()
			return nil, "", "", err
		}
	}
}

// benchWait waits d, or fails when the server stopped or ctx ended.
func benchWait(ctx context.Context, s *benchServer, d time.Duration) error {
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

func (s *benchServer) stop() {
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
