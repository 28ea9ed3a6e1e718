package amqp

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestDialURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"amqps://u:p%40ss@broker.example/", "amqp://u:p%40ss@broker.example:5671/"},
		{"amqps://u:p@broker.example:6000/tether", "amqp://u:p@broker.example:6000/tether"},
		{"amqps://u:p@[::1]/%2F", "amqp://u:p@[::1]:5671/%2F"},
		{"amqp://u:p@broker.example/", "amqp://u:p@broker.example/"},
	} {
		if got := dialURL(tc.in); got != tc.want {
			t.Errorf("dialURL(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A certificate not valid yet is not called expired: the message points
// at the clock.
func TestExplainNotYetValid(t *testing.T) {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "broker"}, NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)}
	cause := x509.CertificateInvalidError{Cert: cert, Reason: x509.Expired}
	err := Default().explain(cause, &wire{})
	if errors.Is(err, ErrExpiredCert) || !strings.Contains(err.Error(), "not valid yet") || !strings.Contains(err.Error(), "clock") {
		t.Fatalf("got %v, want a certificate not valid yet and a word on the clock", err)
	}
}

// fakeBroker answers every connection as told: in plaintext AMQP (the
// protocol header RabbitMQ sends to a client it does not understand), or
// with a TLS handshake of a self-signed certificate. It counts them.
type fakeBroker struct {
	ln       net.Listener
	tls      atomic.Bool
	accepted atomic.Int64
	cert     tls.Certificate
	wg       sync.WaitGroup
}

func startFakeBroker(t *testing.T) *fakeBroker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBroker{ln: ln, cert: selfSigned(t)}
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepted.Add(1)
			f.wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if f.tls.Load() {
					_ = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{f.cert}}).Handshake()
					return
				}
				_, _ = c.Write([]byte("AMQP\x00\x00\x09\x01"))
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		f.wg.Wait()
	})
	return f
}

// waitAccepts waits until the fake broker has taken n more connections.
func (f *fakeBroker) waitAccepts(t *testing.T, n int64) {
	t.Helper()
	want := f.accepted.Load() + n
	deadline := time.Now().Add(time.Minute)
	for f.accepted.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("the bus dialled %d times in a minute, want %d", f.accepted.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fake broker"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// A failure that lasts is logged once, not at every attempt, and again
// when its cause changes.
func TestDialErrorLoggedOncePerCause(t *testing.T) {
	f := startFakeBroker(t)
	cfg := Default()
	cfg.URL = "amqps://u:p@localhost:" + strings.TrimPrefix(f.ln.Addr().String(), "127.0.0.1:") + "/"
	cfg.ReconnectMin, cfg.ReconnectMax = time.Millisecond, 5*time.Millisecond
	var log lockedBuffer
	b, err := New(cfg, zerolog.New(&log))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Ready(ctx); !errors.Is(err, ErrPortNotTLS) {
		t.Fatalf("Ready: got %v, want ErrPortNotTLS", err)
	}
	f.waitAccepts(t, 5)
	f.tls.Store(true)
	f.waitAccepts(t, 5)
	if err := b.Ready(ctx); !errors.Is(err, ErrUntrustedCert) {
		t.Errorf("Ready after the change: got %v, want ErrUntrustedCert", err)
	}
	b.Close()

	for _, cause := range []error{ErrPortNotTLS, ErrUntrustedCert} {
		if got := strings.Count(log.String(), cause.Error()); got != 1 {
			t.Errorf("log says %q %d times, want once:\n%s", cause, got, log.String())
		}
	}
}

// lockedBuffer is a log destination the bus's goroutine and the test
// share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
