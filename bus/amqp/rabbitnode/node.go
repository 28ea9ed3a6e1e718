// Package rabbitnode starts private RabbitMQ nodes: each a node of its
// own, with its own node name, ports (AMQP, TLS, Erlang distribution,
// management), configuration, certificates and data, under a temporary
// directory. It never touches the machine's broker, so a test or a
// benchmark may give its node TLS, take its plaintext listener away or
// point its authentication at an HTTP backend. Tests start them through
// bus/amqp/amqptest (StartNode, Shared); `tether bench` scenarios that
// need such a broker start them with Start.
//
// Starting one takes 5-6 s on the 2-core reference machine, up to 11 s
// when other work loads it: RabbitMQ's boot, most of it spent loading
// every module of its applications to find their boot steps, which no
// setting shortens; rabbitmqctl await_startup starts when the node's
// distribution port opens, so it waits alongside. Stopping one takes 2 s
// (7 s with Management). Measured with `go test -v ./bus/amqp
// ./bus/amqp/amqptest`, whose tests log each node's start. So a test
// package shares one node (amqptest.Shared) and starts one of its own
// only for what that node cannot be at the same time.
package rabbitnode

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNoRabbitMQ is returned when rabbitmq-server is not installed.
var ErrNoRabbitMQ = errors.New("rabbitmq-server is not installed (apt-get install rabbitmq-server, or put its sbin directory in PATH); it runs the private RabbitMQ nodes of tests and benchmarks")

// ChannelMax is the channels one connection to a private node may open
// (channel_max), as operations.md sets it on production brokers: the
// server's and agents' buses stay within it, and a client cannot open
// more.
const ChannelMax = 64

// Options is what a private node is made with.
type Options struct {
	// TLS adds a TLS listener (verify_peer, without requiring a client
	// certificate) serving a certificate for the host name localhost,
	// signed by the node's own CA (Node.CAFile).
	TLS bool
	// ExpiredCert makes the TLS listener serve a certificate that expired
	// a day ago, otherwise like the good one (same CA, same name).
	ExpiredCert bool
	// RequireClientCert makes the TLS listener refuse a client without a
	// certificate its CA signed (fail_if_no_peer_cert = true).
	RequireClientCert bool
	// CertIPs are IP addresses the node's certificate names besides the
	// host name localhost (a node reached through a forwarded address).
	CertIPs []string
	// NoPlain: no plaintext AMQP listener at all (listeners.tcp = none).
	NoPlain bool
	// AuthHTTP, when set, is the base URL of an HTTP authentication
	// backend: the node authenticates a user with its internal database
	// first, then with rabbitmq_auth_backend_cache in front of
	// rabbitmq_auth_backend_http, which POSTs to AuthHTTP+"/user",
	// "/vhost", "/resource" and "/topic".
	AuthHTTP string
	// CacheTTL is how long the cache keeps the HTTP backend's answers
	// (auth_cache.cache_ttl; default 2s).
	CacheTTL time.Duration
	// Management enables rabbitmq_management on a port of its own.
	Management bool
	// ChannelMax overrides channel_max (0: ChannelMax). A benchmark
	// that puts many simulated agents on one connection needs more.
	ChannelMax int
}

// Node is a running private node. When the process that started it dies
// without stopping it (a panic, a test's timeout, a signal), a reaper
// process it started ends the node and removes Dir.
type Node struct {
	// URL is amqp://AdminUser:AdminPassword@127.0.0.1:Port/ ("" with
	// NoPlain). The administrator has every right on the vhost /; there
	// is no guest user.
	URL string
	// TLSURL is amqps://AdminUser:AdminPassword@localhost:TLSPort/ (with
	// TLS): localhost is the name the node's certificate holds, 127.0.0.1
	// is not (a test of a name mismatch dials 127.0.0.1).
	TLSURL string
	// Host is 127.0.0.1, where every listener of the node is.
	Host string
	// Port is the plaintext AMQP port (0 with NoPlain), TLSPort the TLS
	// one (0 without TLS), DistPort Erlang distribution's and
	// ManagementPort the management plugin's (0 without Management).
	Port, TLSPort, DistPort, ManagementPort int
	// AdminUser and AdminPassword are the node's administrator.
	AdminUser, AdminPassword string
	// CAFile is the CA that signed the node's certificate (with TLS).
	CAFile string
	// ClientCertFile and ClientKeyFile are a client certificate signed by
	// CAFile's CA: the node accepts it.
	ClientCertFile, ClientKeyFile string
	// OtherCAFile is a CA that signed neither the node's certificate nor
	// the client one, for tests of an untrusted certificate;
	// OtherClientCertFile and OtherClientKeyFile a client certificate it
	// signed, which the node refuses.
	OtherCAFile                             string
	OtherClientCertFile, OtherClientKeyFile string
	// ManagementURL is http://AdminUser:AdminPassword@127.0.0.1:ManagementPort
	// (with Management).
	ManagementURL string
	// Dir holds the node's configuration, certificates, data and logs; it
	// is removed when the node stops.
	Dir string
	// Name is the node's Erlang node name (tethertest-…@localhost).
	Name string

	scripts scripts
	env     []string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the node's process returned
	reaper  *exec.Cmd
	lifeIn  io.WriteCloser // the reaper's stdin: closed when this process ends
	stopped sync.Once
	stopErr error
}

// scripts are RabbitMQ's own scripts. Debian and RPM packages put a
// wrapper in PATH that runs them as the rabbitmq user through su, which
// would give the node another home directory (another Erlang cookie) and
// a session of its own, out of reach of the kill that ends a node when
// the process that started it dies: a node runs the scripts beside the
// wrapper, as that process's own user, with its files in Dir.
type scripts struct{ server, ctl string }

func findScripts() (scripts, error) {
	p, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		p = "/usr/sbin/rabbitmq-server"
		if _, err := os.Stat(p); err != nil {
			return scripts{}, ErrNoRabbitMQ
		}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return scripts{}, fmt.Errorf("%w: %s: %w", ErrNoRabbitMQ, p, err)
	}
	dir := filepath.Dir(real)
	s := scripts{server: filepath.Join(dir, "rabbitmq-server"), ctl: filepath.Join(dir, "rabbitmqctl")}
	for _, f := range []string{s.server, s.ctl} {
		if _, err := os.Stat(f); err != nil {
			return scripts{}, fmt.Errorf("%w: %s has no %s beside it", ErrNoRabbitMQ, real, filepath.Base(f))
		}
	}
	return s, nil
}

// startTimeout bounds a node's boot, which a loaded machine slows down.
const startTimeout = 2 * time.Minute

// Start starts a node and returns it once it has booted (5-11 s), again
// with other ports when one it picked was taken meanwhile. Without
// rabbitmq-server it returns ErrNoRabbitMQ. The caller stops it (Stop).
func Start(opts Options) (*Node, error) {
	if (opts.ExpiredCert || opts.RequireClientCert) && !opts.TLS {
		return nil, errors.New("node options: ExpiredCert and RequireClientCert need TLS")
	}
	if opts.NoPlain && !opts.TLS {
		return nil, errors.New("node options: NoPlain needs TLS (a node without listeners serves nobody)")
	}
	s, err := findScripts()
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		n, err := startOnce(s, opts)
		if errors.Is(err, errPortTaken) && attempt < 3 {
			continue
		}
		return n, err
	}
}

var errPortTaken = errors.New("a port of the node was taken")

func startOnce(s scripts, opts Options) (*Node, error) {
	dir, err := os.MkdirTemp("", "tether-rabbitmq-")
	if err != nil {
		return nil, err
	}
	n, err := prepare(s, opts, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := n.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := n.awaitStartup(ctx); err != nil {
		log := n.consoleTail()
		if stopErr := n.Stop(); stopErr != nil {
			err = fmt.Errorf("%w (and stopping it: %v)", err, stopErr)
		}
		if strings.Contains(log, "eaddrinuse") {
			return nil, fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return nil, fmt.Errorf("start RabbitMQ node: %w\n%s", err, log)
	}
	return n, nil
}

// prepare writes the node's files and picks its ports.
func prepare(s scripts, opts Options, dir string) (*Node, error) {
	id := make([]byte, 6)
	pw := make([]byte, 16)
	cookie := make([]byte, 16)
	for _, b := range [][]byte{id, pw, cookie} {
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
	}
	n := &Node{
		Host:          "127.0.0.1",
		AdminUser:     "tether-admin",
		AdminPassword: hex.EncodeToString(pw),
		Dir:           dir,
		Name:          "tethertest-" + hex.EncodeToString(id) + "@localhost",
		scripts:       s,
		exited:        make(chan struct{}),
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	n.DistPort = ports[0]
	if !opts.NoPlain {
		n.Port = ports[1]
		n.URL = fmt.Sprintf("amqp://%s:%s@%s:%d/", n.AdminUser, n.AdminPassword, n.Host, n.Port)
	}
	if opts.TLS {
		n.TLSPort = ports[2]
		n.TLSURL = fmt.Sprintf("amqps://%s:%s@localhost:%d/", n.AdminUser, n.AdminPassword, n.TLSPort)
	}
	if opts.Management {
		n.ManagementPort = ports[3]
		n.ManagementURL = fmt.Sprintf("http://%s:%s@%s:%d", n.AdminUser, n.AdminPassword, n.Host, n.ManagementPort)
	}
	for _, d := range []string{"mnesia", "log", "tls"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if opts.TLS {
		if err := n.writeCertificates(opts); err != nil {
			return nil, fmt.Errorf("certificates of the node: %w", err)
		}
	}
	var plugins []string
	if opts.AuthHTTP != "" {
		plugins = append(plugins, "rabbitmq_auth_backend_cache", "rabbitmq_auth_backend_http")
	}
	if opts.Management {
		plugins = append(plugins, "rabbitmq_management")
	}
	files := map[string]string{
		"rabbitmq.conf":     n.config(opts),
		"enabled_plugins":   "[" + strings.Join(plugins, ",") + "].\n",
		"advanced.config":   "[].\n",
		"rabbitmq-env.conf": "# empty: the node's settings are in its environment, not in /etc/rabbitmq/rabbitmq-env.conf\n",
		// The node and rabbitmqctl read the cookie from $HOME (Dir);
		// written before either starts so that both read the same one.
		".erlang.cookie": strings.ToUpper(hex.EncodeToString(cookie)),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o400); err != nil {
			return nil, err
		}
	}
	n.env = nodeEnv(dir, n.Name, n.DistPort)
	return n, nil
}

// config is the node's rabbitmq.conf.
func (n *Node) config(opts Options) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	if opts.NoPlain {
		line("listeners.tcp = none")
	} else {
		line("listeners.tcp.1 = %s:%d", n.Host, n.Port)
	}
	if opts.TLS {
		line("listeners.ssl.1 = %s:%d", n.Host, n.TLSPort)
		line("ssl_options.cacertfile = %s", n.CAFile)
		line("ssl_options.certfile = %s", filepath.Join(n.Dir, "tls", "server.pem"))
		line("ssl_options.keyfile = %s", filepath.Join(n.Dir, "tls", "server-key.pem"))
		line("ssl_options.verify = verify_peer")
		line("ssl_options.fail_if_no_peer_cert = %t", opts.RequireClientCert)
	}
	line("default_vhost = /")
	line("default_user = %s", n.AdminUser)
	line("default_pass = %s", n.AdminPassword)
	line("default_user_tags.administrator = true")
	line("default_permissions.configure = .*")
	line("default_permissions.read = .*")
	line("default_permissions.write = .*")
	// Temporary directories are often on small file systems: the default
	// 50 MB free-disk alarm would block publishers.
	line("disk_free_limit.absolute = 8MB")
	// The bound operations.md gives production brokers: every client of
	// every test and benchmark stays within it.
	channels := ChannelMax
	if opts.ChannelMax > 0 {
		channels = opts.ChannelMax
	}
	line("channel_max = %d", channels)
	line("log.console = false")
	line("log.file.level = info")
	if opts.AuthHTTP != "" {
		ttl := opts.CacheTTL
		if ttl <= 0 {
			ttl = 2 * time.Second
		}
		base := strings.TrimSuffix(opts.AuthHTTP, "/")
		line("auth_backends.1 = internal")
		line("auth_backends.2 = cache")
		line("auth_cache.cached_backend = http")
		line("auth_cache.cache_ttl = %d", ttl.Milliseconds())
		line("auth_http.http_method = post")
		line("auth_http.user_path = %s/user", base)
		line("auth_http.vhost_path = %s/vhost", base)
		line("auth_http.resource_path = %s/resource", base)
		line("auth_http.topic_path = %s/topic", base)
	}
	if opts.Management {
		line("management.tcp.ip = %s", n.Host)
		line("management.tcp.port = %d", n.ManagementPort)
	}
	return b.String()
}

func (n *Node) writeCertificates(opts Options) error {
	tlsDir := filepath.Join(n.Dir, "tls")
	ca, err := newAuthority("Tether test CA " + n.Name)
	if err != nil {
		return err
	}
	other, err := newAuthority("Tether other test CA " + n.Name)
	if err != nil {
		return err
	}
	now := time.Now()
	var ips []net.IP
	for _, h := range opts.CertIPs {
		ip := net.ParseIP(h)
		if ip == nil {
			return fmt.Errorf("certificate IP %q is not an IP address", h)
		}
		ips = append(ips, ip)
	}
	server := leaf{name: "localhost", dnsNames: []string{"localhost"}, ips: ips, usage: x509.ExtKeyUsageServerAuth,
		notBefore: now.Add(-time.Hour), notAfter: now.Add(30 * 24 * time.Hour)}
	if opts.ExpiredCert {
		server.notBefore, server.notAfter = now.Add(-30*24*time.Hour), now.Add(-24*time.Hour)
	}
	client := leaf{name: "tether-test-client", usage: x509.ExtKeyUsageClientAuth,
		notBefore: now.Add(-time.Hour), notAfter: now.Add(30 * 24 * time.Hour)}
	n.CAFile = filepath.Join(tlsDir, "ca.pem")
	n.OtherCAFile = filepath.Join(tlsDir, "other-ca.pem")
	n.ClientCertFile, n.ClientKeyFile = filepath.Join(tlsDir, "client.pem"), filepath.Join(tlsDir, "client-key.pem")
	n.OtherClientCertFile, n.OtherClientKeyFile = filepath.Join(tlsDir, "other-client.pem"), filepath.Join(tlsDir, "other-client-key.pem")
	for _, step := range []func() error{
		func() error { return ca.writeCA(n.CAFile) },
		func() error { return other.writeCA(n.OtherCAFile) },
		func() error {
			return ca.issue(server, filepath.Join(tlsDir, "server.pem"), filepath.Join(tlsDir, "server-key.pem"))
		},
		func() error { return ca.issue(client, n.ClientCertFile, n.ClientKeyFile) },
		func() error { return other.issue(client, n.OtherClientCertFile, n.OtherClientKeyFile) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// nodeEnv is the environment of the node and of rabbitmqctl: the
// caller's, without what would point RabbitMQ or Erlang elsewhere, and
// everything the node owns in dir.
func nodeEnv(dir, name string, distPort int) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "RABBITMQ_") || strings.HasPrefix(k, "ERL_") || k == "HOME" || k == "NOTIFY_SOCKET" {
			continue
		}
		env = append(env, kv)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	return append(env,
		"HOME="+dir,
		"RABBITMQ_NODENAME="+name,
		"RABBITMQ_CONF_ENV_FILE="+f("rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE="+f("rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+f("advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+f("enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+f("mnesia"),
		"RABBITMQ_LOG_BASE="+f("log"),
		"RABBITMQ_PID_FILE="+f("rabbitmq.pid"),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		// Distribution and epmd on the loopback interface only.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
}

// freePorts picks n ports nobody listens on now (held open together, so
// they differ). Another process may take one before the node does: start
// then tries again.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// reaperScript ends the node's process group and removes its directory
// when its stdin closes: at Stop, which first writes "stopped", or when
// the process that started the node dies without stopping it (panic,
// timeout, SIGKILL), which closes the pipe. It ignores the signals of a
// terminal, so ^C reaches it only through that process's death.
const reaperScript = `trap '' INT HUP QUIT TERM
read -r word
if [ "$word" != stopped ]; then
	kill -TERM -"$1" 2>/dev/null
	i=0
	while kill -0 -"$1" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.2; i=$((i+1)); done
	kill -KILL -"$1" 2>/dev/null
fi
rm -rf -- "$2"
`

// launch starts the node's process, in a process group of its own, and
// its reaper.
func (n *Node) launch() error {
	console, err := os.Create(filepath.Join(n.Dir, "log", "console.log"))
	if err != nil {
		return err
	}
	defer console.Close()
	n.cmd = exec.Command(n.scripts.server)
	n.cmd.Dir, n.cmd.Env = n.Dir, n.env
	n.cmd.Stdout, n.cmd.Stderr = console, console
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n.scripts.server, err)
	}
	go func() {
		_ = n.cmd.Wait()
		close(n.exited)
	}()
	n.reaper = exec.Command("/bin/sh", "-c", reaperScript, "reaper", strconv.Itoa(n.cmd.Process.Pid), n.Dir)
	n.reaper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if n.lifeIn, err = n.reaper.StdinPipe(); err == nil {
		err = n.reaper.Start()
	}
	if err != nil {
		n.kill()
		return fmt.Errorf("start the node's reaper: %w", err)
	}
	return nil
}

// awaitStartup waits for the node's distribution port (so that
// rabbitmqctl finds the node at its first try), then for the node to
// finish booting (rabbitmqctl await_startup). A node that exits meanwhile
// (a bad configuration, a port taken) ends the wait at once.
func (n *Node) awaitStartup(ctx context.Context) error {
	addr := net.JoinHostPort(n.Host, strconv.Itoa(n.DistPort))
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-n.exited:
			return errors.New("the node exited while booting")
		case <-ctx.Done():
			return fmt.Errorf("the node did not open its distribution port %s in %v", addr, startTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := n.Ctl(ctx, "await_startup", "--timeout", strconv.Itoa(int(startTimeout.Seconds())))
		done <- result{out, err}
	}()
	select {
	case <-n.exited:
		<-done // the node is gone: rabbitmqctl returns at once
		return errors.New("the node exited while booting")
	case r := <-done:
		if r.err != nil {
			return fmt.Errorf("rabbitmqctl await_startup: %w\n%s", r.err, r.out)
		}
		return nil
	}
}

// CPUTime is the processor time (user and system) the node's processes
// have used so far: what a benchmark puts beside its own. It reads /proc
// (Linux), at 100 clock ticks a second (USER_HZ on every Linux
// architecture Go supports).
func (n *Node) CPUTime() (time.Duration, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	pgid := n.cmd.Process.Pid
	var ticks int64
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp session tty tpgid flags minflt
		// cminflt majflt cmajflt utime stime …; comm may hold spaces.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += utime + stime
	}
	return time.Duration(ticks) * (time.Second / 100), nil
}

// Ctl runs rabbitmqctl against the node (rabbitmqctl -n Name args…) and
// returns what it printed.
func (n *Node) Ctl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, n.scripts.ctl, append([]string{"-n", n.Name}, args...)...)
	cmd.Dir, cmd.Env = n.Dir, n.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Stop stops the node (rabbitmqctl stop; its process group is killed
// when that does not end it) and removes its directory. It is safe to
// call more than once.
func (n *Node) Stop() error {
	n.stopped.Do(func() { n.stopErr = n.stop() })
	return n.stopErr
}

func (n *Node) stop() error {
	var errs []error
	if !n.hasExited() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := n.Ctl(ctx, "stop")
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("rabbitmqctl stop: %w: %s", err, bytes.TrimSpace(out)))
		}
		select {
		case <-n.exited:
		case <-time.After(20 * time.Second):
			errs = append(errs, errors.New("the node did not stop in 20s: killed"))
			n.kill()
		}
	}
	// Stragglers of the group (a port program of the VM) go with it.
	if n.cmd.Process != nil {
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	}
	if n.reaper != nil {
		_, _ = io.WriteString(n.lifeIn, "stopped\n")
		n.lifeIn.Close()
		if err := n.reaper.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("reaper: %w", err))
		}
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// kill ends the node's process group: TERM (the node stops cleanly),
// then KILL after 10 s.
func (n *Node) kill() {
	pgid := n.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-n.exited
	}
}

func (n *Node) hasExited() bool {
	select {
	case <-n.exited:
		return true
	default:
		return false
	}
}

// consoleTail is the end of what the node printed: where RabbitMQ says
// why it did not boot.
func (n *Node) consoleTail() string {
	b, err := os.ReadFile(filepath.Join(n.Dir, "log", "console.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
