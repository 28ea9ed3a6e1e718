package amqp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/bustest"
	"github.com/tetherhq/tether/model/testenv"
)

// brokerURL is the RabbitMQ the tests use: TETHER_TEST_AMQP, or the local
// one. Without a reachable broker the tests skip, loudly, unless
// tests must run (testenv.Need), where they fail.
func brokerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("TETHER_TEST_AMQP")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		testenv.Need(t, false, fmt.Sprintf("RabbitMQ at %s is not reachable (%v): start it with `rabbitmq-server -detached` or set TETHER_TEST_AMQP", redactURL(u), err))
	}
	_ = conn.Close()
	return u
}

var namespaces struct {
	sync.Mutex
	n int
}

// testConfig returns a configuration with a namespace of its own, so tests
// never see each other's messages; the caller deletes its topology.
func testConfig(t testing.TB) Config {
	namespaces.Lock()
	namespaces.n++
	n := namespaces.n
	namespaces.Unlock()
	cfg := Default()
	cfg.URL = brokerURL(t)
	cfg.Namespace = fmt.Sprintf("tethertest.%d.%d", os.Getpid(), n)
	cfg.ReconnectMin = 50 * time.Millisecond
	cfg.ReconnectMax = 2 * time.Second
	cfg.Heartbeat = 5 * time.Second
	return cfg
}

// tracked records the inboxes a test created, to delete them after.
type tracked struct {
	*Bus
	mu      sync.Mutex
	inboxes map[string]bool
}

func (t *tracked) note(env, agent string) {
	t.mu.Lock()
	t.inboxes[t.InboxQueue(env, agent)] = true
	t.mu.Unlock()
}

func (t *tracked) DeclareInbox(ctx context.Context, env, agent string) error {
	t.note(env, agent)
	return t.Bus.DeclareInbox(ctx, env, agent)
}

func (t *tracked) ConsumeInbox(ctx context.Context, env, agent string, h bus.Handler, opts ...bus.InboxOption) error {
	t.note(env, agent)
	return t.Bus.ConsumeInbox(ctx, env, agent, h, opts...)
}

// open makes a connected bus for a test and removes its topology after.
func open(t *testing.T, cfg Config) *tracked {
	t.Helper()
	b, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Ready(ctx); err != nil {
		b.Close()
		t.Fatal(err)
	}
	tb := &tracked{Bus: b, inboxes: map[string]bool{}}
	t.Cleanup(func() {
		b.Close()
		tb.mu.Lock()
		inboxes := slices.Collect(maps.Keys(tb.inboxes))
		tb.mu.Unlock()
		deleteTopology(t, cfg, inboxes)
	})
	return tb
}

// deleteTopology removes what a test's namespace declared.
func deleteTopology(tb testing.TB, cfg Config, inboxes []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := DeleteTopology(ctx, cfg, inboxes); err != nil {
		tb.Logf("cleanup: %v", err)
	}
}

// queueLength counts the ready messages of a queue.
func queueLength(ctx context.Context, cfg Config, name string) (int, error) {
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, amqp.Table{"x-queue-type": cfg.QueueType})
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

// TestContract runs the bus contract against RabbitMQ, with quorum and with
// classic queues.
func TestContract(t *testing.T) {
	for _, qt := range []string{QueueQuorum, QueueClassic} {
		t.Run(qt, func(t *testing.T) {
			bustest.Run(t, func(t *testing.T) bustest.Subject {
				cfg := testConfig(t)
				cfg.QueueType = qt
				// A deleted queue must stay missing until a consumer
				// declares it, whatever the timing.
				cfg.TopologyCheck = time.Hour
				// Short enough that the contract fills one.
				cfg.InboxMaxLength = 1000
				b := open(t, cfg)
				return bustest.Subject{
					Bus: b,
					SendRaw: func(ctx context.Context, env, agent string, data []byte) error {
						return b.publishConfirmed(ctx, b.cmdExchange(), bus.CommandKey(env, agent), amqp.Publishing{Body: data, MessageId: "raw"})
					},
					DeadLetters: func(ctx context.Context) (int, error) {
						return queueLength(ctx, cfg, b.DeadQueue())
					},
					DeleteInbox: func(ctx context.Context, env, agent string) error {
						return DeleteQueue(ctx, cfg, b.InboxQueue(env, agent))
					},
					DeleteServerQueue: func(ctx context.Context, q bus.Queue) error {
						return DeleteQueue(ctx, cfg, b.ServerQueue(q))
					},
					InboxLength: cfg.InboxMaxLength,
				}
			})
		})
	}
}

func TestConfigValidate(t *testing.T) {
	good := Default()
	if err := good.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, mutate := range map[string]func(c *Config){
		"scheme":     func(c *Config) { c.URL = "http://x" },
		"queue type": func(c *Config) { c.QueueType = "stream" },
		"heartbeat":  func(c *Config) { c.Heartbeat = 0 },
		"backoff":    func(c *Config) { c.ReconnectMax = c.ReconnectMin / 2 },
		"topology":   func(c *Config) { c.TopologyCheck = 0 },
		"half cert":  func(c *Config) { c.URL = "amqps://h/"; c.CertFile = "c.pem" },
		"tls plain":  func(c *Config) { c.CAFile = "ca.pem" },
	} {
		c := Default()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
	c := Default()
	c.URL = "amqp://user:s3cret@host/"
	c.QueueType = "x"
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error leaks the password or is missing: %v", err)
	}
}

// An envelope above the configured size is refused, naming both sizes,
// and nothing is sent.
func TestTooLarge(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxMessageSize = 2048
	b := open(t, cfg)
	ctx := context.Background()
	if err := b.DeclareInbox(ctx, "big", "a"); err != nil {
		t.Fatal(err)
	}
	_, k, _ := bus.GenerateKey()
	e, err := bus.NewSigner(k, 0).Seal(bus.KindEnrolled, "big", "a", bus.Enrolled{ServerKey: make([]byte, 4096)})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Send(ctx, e, bus.SendOptions{})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "at most 2048") {
		t.Fatalf("got %v, want ErrTooLarge naming the limit", err)
	}
	if n, err := queueLength(ctx, cfg, b.InboxQueue("big", "a")); err != nil || n != 0 {
		t.Fatalf("inbox holds %d messages (%v), want 0", n, err)
	}
}

// TLS settings are loaded when the bus is made: a missing or empty CA file
// is a clear configuration error, a good one is accepted.
func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := Default()
	cfg.URL = "amqps://broker.example:5671/"
	cfg.CAFile = filepath.Join(dir, "missing.pem")
	if _, err := New(cfg, zerolog.Nop()); !errors.Is(err, ErrConfig) {
		t.Fatalf("missing CA file: got %v", err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.CAFile = empty
	if _, err := New(cfg, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("bad CA file: got %v", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.CAFile = good
	tc, err := cfg.tlsConfig()
	if err != nil || tc == nil || tc.RootCAs == nil || tc.ServerName != "broker.example" {
		t.Fatalf("good CA: %v %+v", err, tc)
	}
}
