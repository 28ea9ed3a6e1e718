package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// brokerPID finds the process listening on the broker URL's port on this
// machine (RabbitMQ's beam.smp), from /proc: 0 when it cannot be told (a
// remote broker, /proc not readable).
func brokerPID(amqpURL string) int {
	u, err := url.Parse(amqpURL)
	if err != nil {
		return 0
	}
	port := u.Port()
	if port == "" {
		port = "5672"
		if u.Scheme == "amqps" {
			port = "5671"
		}
	}
	if h := u.Hostname(); h != "" && h != "localhost" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			return 0
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			// local_address is HEXIP:HEXPORT; state 0A is LISTEN.
			if len(fs) < 10 || fs[3] != "0A" {
				continue
			}
			i := strings.LastIndexByte(fs[1], ':')
			if lp, err := strconv.ParseInt(fs[1][i+1:], 16, 32); err == nil && int(lp) == p {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", d.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join("/proc", d.Name(), "fd", fd.Name())); err == nil && inodes[target] {
				return pid
			}
		}
	}
	return 0
}

// restartBroker restarts the RabbitMQ application of this machine's node
// (rabbitmqctl stop_app, then start_app): the node's process stays, its
// connections are closed.
func restartBroker(ctx context.Context, ctl brokerCtl, stopped func() error) error {
	if out, err := ctl(ctx, "stop_app"); err != nil {
		return fmt.Errorf("rabbitmqctl stop_app: %w: %s", err, out)
	}
	werr := stopped()
	// Start it again whatever happened meanwhile.
	if out, err := ctl(context.WithoutCancel(ctx), "start_app"); err != nil {
		return fmt.Errorf("rabbitmqctl start_app: %w: %s (start the broker again by hand: rabbitmqctl start_app)", err, out)
	}
	return werr
}

// brokerCtl runs rabbitmqctl with args against the run's broker.
type brokerCtl func(ctx context.Context, args ...string) ([]byte, error)

// machineBrokerRestart runs this machine's rabbitmqctl.
func machineBrokerRestart(ctx context.Context, args ...string) ([]byte, error) {
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		return nil, errors.New("bench converge --restart-broker: rabbitmqctl is not on PATH: run it on the broker's machine, as a user that may run rabbitmqctl (or use --private-broker)")
	}
	return exec.CommandContext(ctx, ctl, args...).CombinedOutput()
}

// procCPU returns the CPU time (user and system, every thread) process
// pid used so far, from /proc; 0 when it cannot be told.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state … utime stime: comm may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * (time.Second / 100)
}

// postgresCPU returns the CPU time every PostgreSQL process of this
// machine used so far, the postmaster's children that ended included
// (its cutime and cstime): 0 when none runs here.
func postgresCPU() time.Duration {
	procs, _ := os.ReadDir("/proc")
	var sum int64
	for _, d := range procs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if i < 0 || j < i || string(b[i+1:j]) != "postgres" {
			continue
		}
		f := strings.Fields(string(b[j+1:]))
		if len(f) < 15 {
			continue
		}
		for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			v, _ := strconv.ParseInt(f[k], 10, 64)
			sum += v
		}
	}
	return time.Duration(sum) * (time.Second / 100)
}

// cpuShares is the CPU time the run's processes used so far: the server
// (every replica), the broker (when on this machine) and this process
// (the agents).
type cpuShares struct{ server, broker, agents, postgres time.Duration }

func cpuNow(servers []*serverProcess, broker int) cpuShares {
	var c cpuShares
	for _, s := range servers {
		c.server += procCPU(s.cmd.Process.Pid)
	}
	c.broker = procCPU(broker)
	c.postgres = postgresCPU()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.agents = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return c
}

func (c cpuShares) since(before cpuShares) CPUSeconds {
	return CPUSeconds{Server: (c.server - before.server).Seconds(), Broker: (c.broker - before.broker).Seconds(), Agents: (c.agents - before.agents).Seconds(), Postgres: (c.postgres - before.postgres).Seconds()}
}
