package amqp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model/testenv"
)

// node is the package's private RabbitMQ node with a TLS listener beside
// the plaintext one, started by the first test that needs it.
var node = &amqptest.Shared{Options: amqptest.NodeOptions{TLS: true}}

func TestMain(m *testing.M) {
	code := m.Run()
	node.Stop()
	os.Exit(code)
}

// tlsConfig is a bus configuration for n's TLS listener, trusting n's CA.
func tlsConfig(t *testing.T, n *amqptest.Node) amqp.Config {
	cfg := amqptest.Config(t)
	cfg.URL, cfg.CAFile = n.TLSURL, n.CAFile
	return cfg
}

// A message goes through the broker and back over amqps://, trusting the
// node's CA, with and without a client certificate; the broker sees the
// connection as TLS, with the client certificate when one is given.
func TestTLSRoundTrip(t *testing.T) {
	n := node.Node(t)
	for _, tc := range []struct {
		name       string
		clientCert bool
	}{
		{"CA only", false},
		{"client certificate", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tlsConfig(t, n)
			cfg.ConnectionName = "tls test " + tc.name
			if tc.clientCert {
				cfg.CertFile, cfg.KeyFile = n.ClientCertFile, n.ClientKeyFile
			}
			b := amqptest.Open(t, cfg)
			roundTrip(t, b)

			conn := connection(t, n, cfg.ConnectionName)
			if !conn.SSL {
				t.Errorf("the broker sees connection %q without TLS", cfg.ConnectionName)
			}
			hasCert := strings.Contains(conn.PeerCertSubject, "tether-test-client")
			if hasCert != tc.clientCert {
				t.Errorf("client certificate seen by the broker: got %q, want one: %v", conn.PeerCertSubject, tc.clientCert)
			}
		})
	}
}

// roundTrip sends a command to an inbox and receives it.
func roundTrip(t *testing.T, b bus.Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.DeclareInbox(ctx, "tls", "web-1"); err != nil {
		t.Fatal(err)
	}
	_, key, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sent, err := bus.NewSigner(key, 0).Seal(bus.KindPause, "tls", "web-1", bus.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, sent, bus.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *bus.Envelope, 1)
	consumeCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- b.ConsumeInbox(consumeCtx, "tls", "web-1", func(_ context.Context, d bus.Delivery) error {
			select {
			case got <- d.Envelope:
			default:
			}
			return nil
		})
	}()
	select {
	case e := <-got:
		if e.ID != sent.ID {
			t.Errorf("received envelope %s, want %s", e.ID, sent.ID)
		}
	case <-ctx.Done():
		t.Fatal("the command did not come back through the broker")
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("ConsumeInbox: %v", err)
	}
}

// brokerConnection is a client connection as rabbitmqctl lists it.
type brokerConnection struct {
	Name            string `json:"client_properties_connection_name"`
	SSL             bool   `json:"ssl"`
	PeerCertSubject string `json:"peer_cert_subject"`
}

// connection finds the node's connection named name.
func connection(t *testing.T, n *amqptest.Node, name string) brokerConnection {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := n.Ctl(ctx, "list_connections", "client_properties", "ssl", "peer_cert_subject", "--formatter", "json", "--silent")
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v\n%s", err, out)
	}
	var conns []struct {
		ClientProperties [][]any `json:"client_properties"`
		SSL              bool    `json:"ssl"`
		PeerCertSubject  any     `json:"peer_cert_subject"`
	}
	if err := json.Unmarshal(out, &conns); err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v\n%s", err, out)
	}
	for _, c := range conns {
		for _, p := range c.ClientProperties {
			if len(p) == 3 && p[0] == "connection_name" && p[2] == name {
				subject, _ := c.PeerCertSubject.(string)
				return brokerConnection{Name: name, SSL: c.SSL, PeerCertSubject: subject}
			}
		}
	}
	t.Fatalf("the broker lists no connection %q:\n%s", name, out)
	return brokerConnection{}
}

// refusal is a dial the bus must refuse, with the sentinel and the words
// that tell the operator what to do.
type refusal struct {
	name  string
	setup func(cfg *amqp.Config, n *amqptest.Node)
	want  error
	words []string
}

// checkRefused connects with each refusal's configuration and checks
// that Ready says why, at once, and that the log says it once.
func checkRefused(t *testing.T, n *amqptest.Node, cases []refusal) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tlsConfig(t, n)
			tc.setup(&cfg, n)
			var log syncBuffer
			b, err := amqp.New(cfg, zerolog.New(&log))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = b.Ready(ctx)
			t.Log(err)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Ready: got %v, want %v", err, tc.want)
			}
			if ctx.Err() != nil {
				t.Errorf("Ready waited for its deadline, want it to return with the first refusal")
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), n.AdminPassword) {
				t.Errorf("error %q shows the password", err)
			}
			if got := strings.Count(log.String(), tc.want.Error()); got != 1 {
				t.Errorf("log says %q %d times, want once:\n%s", tc.want, got, log.String())
			}
		})
	}
}

// Connections the broker's certificate or ports make impossible fail at
// once with an error that says what is wrong and what to do.
func TestTLSRefused(t *testing.T) {
	n := node.Node(t)
	checkRefused(t, n, []refusal{{
		name:  "wrong CA",
		setup: func(cfg *amqp.Config, n *amqptest.Node) { cfg.CAFile = n.OtherCAFile },
		want:  amqp.ErrUntrustedCert,
		words: []string{"Tether test CA", n.OtherCAFile, "--tls-ca", "--amqp-tls-ca"},
	}, {
		name:  "no CA: the system's",
		setup: func(cfg *amqp.Config, n *amqptest.Node) { cfg.CAFile = "" },
		want:  amqp.ErrUntrustedCert,
		words: []string{"system's CAs", "--tls-ca"},
	}, {
		name: "host name",
		setup: func(cfg *amqp.Config, n *amqptest.Node) {
			cfg.URL = fmt.Sprintf("amqps://%s:%s@127.0.0.1:%d/", n.AdminUser, n.AdminPassword, n.TLSPort)
		},
		want:  amqp.ErrCertName,
		words: []string{"it is for localhost, the URL names 127.0.0.1"},
	}, {
		name: "amqp:// to the TLS port",
		setup: func(cfg *amqp.Config, n *amqptest.Node) {
			cfg.URL, cfg.CAFile = fmt.Sprintf("amqp://%s:%s@127.0.0.1:%d/", n.AdminUser, n.AdminPassword, n.TLSPort), ""
		},
		want:  amqp.ErrPortWantsTLS,
		words: []string{fmt.Sprintf("port %d", n.TLSPort), "use amqps://"},
	}, {
		name: "amqps:// to the plaintext port",
		setup: func(cfg *amqp.Config, n *amqptest.Node) {
			cfg.URL = fmt.Sprintf("amqps://%s:%s@localhost:%d/", n.AdminUser, n.AdminPassword, n.Port)
		},
		want:  amqp.ErrPortNotTLS,
		words: []string{fmt.Sprintf("port %d answered in plaintext AMQP", n.Port), "use amqp://"},
	}})
}

// A node serving an expired certificate is refused, saying when it
// expired; a node without a plaintext listener has none.
func TestTLSExpiredNoPlain(t *testing.T) {
	t.Parallel()
	// The certificate expired a day before the node was made, between
	// before and after: its day is one of theirs (a run across midnight).
	before := time.Now().Add(-24 * time.Hour).UTC()
	n := amqptest.StartNode(t, amqptest.NodeOptions{TLS: true, ExpiredCert: true, NoPlain: true})
	after := time.Now().Add(-24 * time.Hour).UTC()
	expired := `"CN=localhost,O=Tether tests" expired at ` + before.Format("2006-01-02T")
	if after.Format("2006-01-02") != before.Format("2006-01-02") {
		expired = `"CN=localhost,O=Tether tests" expired at 20` // either day
	}
	checkRefused(t, n, []refusal{{
		name:  "expired certificate",
		setup: func(cfg *amqp.Config, n *amqptest.Node) {},
		want:  amqp.ErrExpiredCert,
		words: []string{expired, "renew it on the broker"},
	}})

	t.Run("no plaintext listener", func(t *testing.T) {
		if n.URL != "" || n.Port != 0 {
			t.Errorf("node without plaintext AMQP: URL %q, port %d, want none", n.URL, n.Port)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := n.Ctl(ctx, "status", "--formatter", "json", "--silent")
		if err != nil {
			t.Fatalf("rabbitmqctl status: %v\n%s", err, out)
		}
		var status struct {
			Listeners []struct {
				Protocol string `json:"protocol"`
				Port     int    `json:"port"`
			} `json:"listeners"`
		}
		if err := json.Unmarshal(out, &status); err != nil {
			t.Fatalf("rabbitmqctl status: %v\n%s", err, out)
		}
		var protocols []string
		for _, l := range status.Listeners {
			protocols = append(protocols, fmt.Sprintf("%s:%d", l.Protocol, l.Port))
		}
		got := strings.Join(protocols, " ")
		if !strings.Contains(got, fmt.Sprintf("amqp/ssl:%d", n.TLSPort)) || strings.Contains(got, "amqp:") {
			t.Errorf("listeners: got %s, want amqp/ssl:%d and no amqp", got, n.TLSPort)
		}
	})
}

// A node that requires client certificates refuses a client without one,
// or with one another CA signed, and says what to set; it accepts the
// certificate its CA signed.
func TestTLSClientCertRequired(t *testing.T) {
	t.Parallel()
	n := amqptest.StartNode(t, amqptest.NodeOptions{TLS: true, RequireClientCert: true})
	checkRefused(t, n, []refusal{{
		name:  "no client certificate",
		setup: func(cfg *amqp.Config, n *amqptest.Node) {},
		want:  amqp.ErrClientCertRefused,
		words: []string{"wants a client certificate", "--tls-cert", "--amqp-tls-cert"},
	}, {
		name: "certificate of another CA",
		setup: func(cfg *amqp.Config, n *amqptest.Node) {
			cfg.CertFile, cfg.KeyFile = n.OtherClientCertFile, n.OtherClientKeyFile
		},
		want:  amqp.ErrClientCertRefused,
		words: []string{n.OtherClientCertFile, "ssl_options.cacertfile"},
	}})
	t.Run("certificate of the node's CA", func(t *testing.T) {
		cfg := tlsConfig(t, n)
		cfg.CertFile, cfg.KeyFile = n.ClientCertFile, n.ClientKeyFile
		roundTrip(t, amqptest.Open(t, cfg))
	})
}

type syncBuffer = testenv.SyncBuffer
