package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/rabbitnode"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/brokerauth"
)

// authCacheTTL is how long the broker keeps the server's answers: the
// value docs/operations.md gives for production (auth_cache.cache_ttl).
const authCacheTTL = 10 * time.Second

// authBroker is a private RabbitMQ node (package rabbitnode) set up as
// docs/operations.md sets up a broker for agents that log in as
// themselves: a TLS listener, the broker's own users first (the
// server), then every other login through rabbitmq_auth_backend_cache to
// rabbitmq_auth_backend_http, whose questions a server of the scenario
// answers (serveBrokerAuth). The node keeps a plaintext listener too, for
// the plain side of a comparison.
type authBroker struct {
	node *rabbitnode.Node
	// authLn is where the node asks its questions (authAddr): opened
	// before the node, whose configuration names it, and handed to the
	// first serveBrokerAuth; the next ones listen on authAddr again.
	authLn   net.Listener
	authAddr string
}

// startAuthBroker starts the node (5-11 s), or says what is missing.
func startAuthBroker() (*authBroker, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	node, err := rabbitnode.Start(rabbitnode.Options{TLS: true, AuthHTTP: "http://" + ln.Addr().String(), CacheTTL: authCacheTTL})
	if err != nil {
		ln.Close()
		if errors.Is(err, rabbitnode.ErrNoRabbitMQ) {
			return nil, fmt.Errorf("this scenario runs a RabbitMQ node of its own: %w", err)
		}
		return nil, err
	}
	return &authBroker{node: node, authLn: ln, authAddr: ln.Addr().String()}, nil
}

// stop stops the node and closes the listener if nothing served it.
func (ab *authBroker) stop() {
	if ab.authLn != nil {
		ab.authLn.Close()
	}
	_ = ab.node.Stop()
}

// serverConfig is the bus configuration of a server on the node, in a
// namespace of its own: the node's administrator (a user of the broker's
// own database) over amqps://, or over amqp:// when plain.
func (ab *authBroker) serverConfig(plain bool) amqp.Config {
	cfg := amqp.Default()
	cfg.QueueType = amqp.QueueClassic
	cfg.Namespace = "tetherbench." + uuid.NewString()[:8]
	cfg.ConnectionName = "tether bench server"
	if plain {
		cfg.URL = ab.node.URL
	} else {
		cfg.URL, cfg.CAFile = ab.node.TLSURL, ab.node.CAFile
	}
	return cfg
}

// agentConfig is the bus configuration of an agent of the server whose
// configuration is srv: with a login of its own when login is not nil (as
// bus.LoginCredentials makes it), else with the server's user, as agents
// share one on a trusted network; over amqps:// when tls, else amqp://.
func (ab *authBroker) agentConfig(srv amqp.Config, name string, tls bool, login func() (string, string, error)) amqp.Config {
	cfg := srv
	cfg.Agent = true
	cfg.ConnectionName = "tether bench agent " + name
	cfg.Login = login
	switch {
	case !tls:
		cfg.URL, cfg.CAFile = ab.node.URL, ""
	case login != nil:
		cfg.URL, cfg.CAFile = "amqps://localhost:"+strconv.Itoa(ab.node.TLSPort)+"/", ab.node.CAFile
	default:
		cfg.URL, cfg.CAFile = ab.node.TLSURL, ab.node.CAFile
	}
	return cfg
}

// serveBrokerAuth answers the node's questions about srv's agents (in
// the namespace ns) on the node's listener, with the server's own HTTP
// stack (as `tether server --broker-auth-listen` serves them), until ctx
// ends; wait returns once it has stopped. It serves the API too, on a
// loopback port nothing calls. One server at a time answers.
func (ab *authBroker) serveBrokerAuth(ctx context.Context, srv *server.Server, ns string) (q *questions, wait func() error, err error) {
	b, err := srv.BrokerAuth(brokerauth.Config{Namespace: ns, VHost: "/"})
	if err != nil {
		return nil, nil, err
	}
	ln := ab.authLn
	ab.authLn = nil
	if ln == nil {
		// The last server's Serve closed it.
		if ln, err = net.Listen("tcp", ab.authAddr); err != nil {
			return nil, nil, fmt.Errorf("listen again where the node asks its questions: %w", err)
		}
	}
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	q = &questions{backend: b}
	h := server.NewHTTP(server.DefaultHTTP(), srv, zerolog.Nop()).ServeBrokerAuth(ln, q)
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, api, nil) }()
	return q, func() error { return <-done }, nil
}

// questions counts the broker's questions to backend by kind (the last
// element of the path: user, vhost, resource, topic) as it answers them.
type questions struct {
	backend *brokerauth.Backend
	mu      sync.Mutex
	asked   map[string]int64
}

func (q *questions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q.backend.ServeHTTP(w, r)
	q.mu.Lock()
	if q.asked == nil {
		q.asked = map[string]int64{}
	}
	q.asked[path.Base(r.URL.Path)]++
	q.mu.Unlock()
}

// count returns the questions answered so far by kind, and those refused
// (none when q is nil: no backend).
func (q *questions) count() (map[string]int64, int64) {
	if q == nil {
		return nil, 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.asked), q.backend.Counts().Refused
}

var _ http.Handler = (*questions)(nil)

// raiseFileLimit raises this process's limit of open files to its hard
// limit, which the broker node started after inherits, and fails when
// that is under need.
func raiseFileLimit(need uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Max < need {
		return lim.Max, fmt.Errorf("this scenario needs about %d open files in this process and as many in the broker node, and `ulimit -Hn` is %d: raise it (e.g. `ulimit -n %d` as root) or run fewer agents", need, lim.Max, need)
	}
	// Set even when Go has raised it already: Go raises it for this
	// process only and gives child processes (the node) the limit it
	// started with, unless the program sets one itself.
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("raise the limit of open files to %d: %w", lim.Max, err)
	}
	return lim.Cur, nil
}

// raiseHardFileLimit lifts the hard limit on open files of this process,
// and so of the processes it starts, to want, where it may (root may; a
// failure leaves the limit as it was).
func raiseHardFileLimit(want uint64) {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil || lim.Max >= want {
		return
	}
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want})
}

// cpu returns the processor time the node and this process have used so
// far (0 for the node when /proc cannot say).
func (ab *authBroker) cpu() (node, self time.Duration) {
	node, _ = ab.node.CPUTime()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return node, self
}

// openFiles counts this process's open files.
func openFiles() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(fds)
}
