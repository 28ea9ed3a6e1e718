package server_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

// selfSigned writes a certificate for 127.0.0.1 and its key under dir,
// and returns their files and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestEventStreamsOverTLSShareOneConnection checks that the API served
// over TLS speaks HTTP/2, so that a browser's console pages and tabs
// following the event stream share one connection: over HTTP/1.1 each
// stream holds a connection of its own, and a browser opens six at most
// per host. Eight streams and a request beside them go over one
// connection, and the server counts the streams open
// (tether_event_streams) until they close.
func TestEventStreamsOverTLSShareOneConnection(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "tether.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tok, secret, err := api.IssueToken("streams", record.RoleAdmin, "", "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	b := bus.NewLocal(zerolog.Nop())
	srv, err := server.New(server.Config{}, st, b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultHTTP()
	var pool *x509.CertPool
	cfg.TLSCert, cfg.TLSKey, pool = selfSigned(t, dir)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := server.NewHTTP(cfg, srv, zerolog.Nop()).Serve(ctx, ln, ops); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	})
	wg.Go(func() {
		if err := srv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		b.Close()
		st.Close()
	})
	base, opsURL := "https://"+ln.Addr().String(), "http://"+ops.Addr().String()

	// One client, as a browser: it keeps one connection per host where
	// the server speaks HTTP/2.
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	t.Cleanup(cl.CloseIdleConnections)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	const streams = 8
	for i := range streams {
		req, _ := http.NewRequestWithContext(sctx, "GET", base+"/api/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("stream %d: %s over %s, want 200 over HTTP/2", i+1, resp.Status, resp.Proto)
		}
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, ": following") {
			t.Fatalf("stream %d begins with %q (%v), want \": following …\"", i+1, line, err)
		}
	}
	req, _ := http.NewRequest("GET", base+"/api/v1/envs", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("a request beside %d streams: %v", streams, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("a request beside %d streams: %s over %s, want 200 over HTTP/2", streams, resp.Status, resp.Proto)
	}

	// waitMetric polls the operations listener's metrics until cond holds
	// (a guard against hangs, not a speed assertion).
	waitMetric := func(name, labels string, want float64) {
		t.Helper()
		var v float64
		var ok bool
		for deadline := time.Now().Add(30 * time.Second); ; {
			_, page, err := get("127.0.0.1", opsURL+"/metrics")
			if err == nil {
				if v, ok = metric(page, name, labels); ok && v == want {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s%s is %v (found: %v, %v), want %v", name, labels, v, ok, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitMetric("tether_http_connections", `{listener="api"}`, 1)
	waitMetric("tether_event_streams", "", streams)
	stop()
	waitMetric("tether_event_streams", "", 0)
}
