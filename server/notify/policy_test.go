package notify_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/server/notify"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/sqlite"
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// TestPolicyCheckAddr: the default policy refuses the server's own,
// link-local, private and special addresses in IPv4 and IPv6 (mapped
// and zoned forms included) and lets public ones through; an allowed
// network wins over the defaults and over --webhook-deny.
func TestPolicyCheckAddr(t *testing.T) {
	zero := notify.Policy{}
	private := notify.Policy{Allow: prefixes("10.1.0.0/16", "fd12::/16")}
	extra := notify.Policy{Deny: prefixes("203.0.113.0/24"), Allow: prefixes("203.0.113.7/32")}
	everything := notify.Policy{Allow: prefixes("0.0.0.0/0", "::/0")}
	for _, tt := range []struct {
		policy notify.Policy
		addr   string
		denied bool
	}{
		{zero, "127.0.0.1", true},
		{zero, "127.1.2.3", true},
		{zero, "169.254.169.254", true}, // AWS, GCP, Azure metadata
		{zero, "100.100.100.200", true}, // Alibaba metadata
		{zero, "10.0.0.5", true},
		{zero, "172.16.0.1", true},
		{zero, "172.31.255.255", true},
		{zero, "172.32.0.1", false},
		{zero, "192.168.1.1", true},
		{zero, "0.0.0.0", true},
		{zero, "224.0.0.1", true},
		{zero, "255.255.255.255", true},
		{zero, "8.8.8.8", false},
		{zero, "93.184.215.14", false},
		{zero, "::1", true},
		{zero, "::", true},
		{zero, "::ffff:127.0.0.1", true},
		{zero, "::ffff:169.254.169.254", true},
		{zero, "::ffff:8.8.8.8", false},
		{zero, "fe80::1", true},
		{zero, "fe80::1%eth0", true},
		{zero, "fd00:ec2::254", true}, // AWS metadata over IPv6
		{zero, "ff02::1", true},
		{zero, "2001:4860:4860::8888", false},
		{private, "10.1.2.3", false},
		{private, "::ffff:10.1.2.3", false},
		{private, "10.2.0.1", true},
		{private, "fd12::1", false},
		{private, "fd13::1", true},
		{private, "127.0.0.1", true},
		{extra, "203.0.113.5", true},
		{extra, "203.0.113.7", false},
		{extra, "198.51.100.1", false},
		{everything, "127.0.0.1", false},
		{everything, "::1", false},
	} {
		t.Run(tt.addr, func(t *testing.T) {
			err := tt.policy.CheckAddr(netip.MustParseAddr(tt.addr))
			if got := err != nil; got != tt.denied {
				t.Fatalf("%+v: CheckAddr(%s) = %v, want denied %v", tt.policy, tt.addr, err, tt.denied)
			}
			if err != nil && (!errors.Is(err, notify.ErrDenied) || !strings.Contains(err.Error(), "--webhook-allow")) {
				t.Fatalf("CheckAddr(%s) = %v, want ErrDenied naming --webhook-allow", tt.addr, err)
			}
		})
	}
}

// TestPolicyCheckURL: literal addresses and names resolving to refused
// addresses are refused, with the name said; allowed names pass
// whatever they resolve to.
func TestPolicyCheckURL(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		policy notify.Policy
		url    string
		want   string // in the error; "" for none
	}{
		{notify.Policy{}, "http://127.0.0.1:9/hook", "127.0.0.1 is a loopback address"},
		{notify.Policy{}, "http://169.254.169.254/latest/meta-data/", "--webhook-allow 169.254.169.254/32"},
		{notify.Policy{}, "https://[::1]:8443/", "--webhook-allow ::1/128"},
		{notify.Policy{}, "http://[::ffff:7f00:1]/", "127.0.0.1 is a loopback address"},
		{notify.Policy{}, "http://localhost:8080/", "localhost resolves to"},
		{notify.Policy{AllowHosts: []string{"localhost"}}, "http://localhost:8080/", ""},
		{notify.Policy{Allow: prefixes("127.0.0.1/32", "::1/128")}, "http://localhost:8080/", ""},
		{notify.Policy{}, "https://8.8.8.8/hook", ""},
		{notify.Policy{}, "not a url at all \x00", ""}, // refused by validation, not here
	} {
		t.Run(tt.url, func(t *testing.T) {
			err := tt.policy.CheckURL(ctx, tt.url)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("CheckURL(%q) = %v, want nil", tt.url, err)
			case tt.want != "" && (err == nil || !errors.Is(err, notify.ErrDenied) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("CheckURL(%q) = %v, want ErrDenied saying %q", tt.url, err, tt.want)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tt := range []struct {
		host string
		ok   bool
	}{{"hooks.internal", true}, {"*.internal", true}, {"*", false}, {"a*.internal", false}, {"", false}, {".internal", false}, {"http://x", false}} {
		err := notify.Policy{AllowHosts: []string{tt.host}}.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("Validate(%q) = %v, want ok %v", tt.host, err, tt.ok)
		}
	}
}

// TestPolicyDial: the dialer refuses a name that resolves to a refused
// address when it connects (what CheckURL saw ahead of time does not
// matter), and lets an allowed name or wildcard through.
func TestPolicyDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // owned by the test: ends when l is closed
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	ctx := context.Background()
	for _, tt := range []struct {
		policy notify.Policy
		addr   string
		denied bool
	}{
		{notify.Policy{}, "localhost:" + port, true},
		{notify.Policy{}, "127.0.0.1:" + port, true},
		{notify.Policy{AllowHosts: []string{"localhost"}}, "localhost:" + port, false},
		{notify.Policy{AllowHosts: []string{"*.localhost"}}, "localhost:" + port, true}, // a wildcard names subdomains only
		{notify.Policy{AllowHosts: []string{"localhost"}}, "127.0.0.1:" + port, true},   // an address is no name
		{notify.Policy{Allow: prefixes("127.0.0.1/32")}, "127.0.0.1:" + port, false},
	} {
		t.Run(tt.addr, func(t *testing.T) {
			dial := tt.policy.Dial(net.Dialer{Timeout: 5 * time.Second})
			c, err := dial(ctx, "tcp4", tt.addr)
			if c != nil {
				c.Close()
			}
			if got := errors.Is(err, notify.ErrDenied); got != tt.denied {
				t.Fatalf("%+v: dial %s: %v, want denied %v", tt.policy, tt.addr, err, tt.denied)
			}
			if !tt.denied && err != nil {
				t.Fatalf("dial %s: %v", tt.addr, err)
			}
		})
	}
}

// TestSenderRefusesDeniedDestinations: webhooks to a name resolving to
// 127.0.0.1, to 127.0.0.1 itself and to the metadata address get nothing
// delivered under the default policy: each delivery is kept pending with
// the policy's refusal as its error, and the receiver sees no request.
// The same receiver, allowed by name, gets its delivery.
func TestSenderRefusesDeniedDestinations(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	mustEnv(t, st, "prod")
	secret, _ := notify.NewSecret()
	rcv := newReceiver(t, secret, http.StatusOK)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rcv.URL, "http://"))
	hooks := map[string]record.Webhook{
		"byname":   hook(t, st, "prod", "byname", "http://localhost:"+port+"/hook", secret),
		"loopback": hook(t, st, "prod", "loopback", rcv.URL+"/hook", secret),
		"metadata": hook(t, st, "prod", "metadata", "http://169.254.169.254/latest/meta-data/iam/", secret),
	}
	sender := notify.NewSender(st, notify.SenderConfig{Timeout: 5 * time.Second, Poll: 50 * time.Millisecond, FirstRetry: time.Hour}, zerolog.Nop())
	s := notify.NewStream(st, notify.StreamConfig{}, sender.Wake, zerolog.Nop())
	run(t, s.Run)
	stopSender := run(t, sender.Run)
	s.Append(event("prod", 1))
	for name, h := range hooks {
		deadline := time.After(60 * time.Second)
		for {
			log, err := st.Deliveries(ctx, "prod", h.ID, 10)
			if err != nil {
				t.Fatal(err)
			}
			// Attempts counts from the claim; the outcome comes after.
			if len(log) == 1 && log[0].Attempts > 0 && (log[0].Error != "" || log[0].State != record.DeliveryPending) {
				d := log[0]
				if d.State != record.DeliveryPending || d.StatusCode != 0 || !strings.Contains(d.Error, "refused by the server's webhook policy") || !strings.Contains(d.Error, "--webhook-allow") {
					t.Fatalf("%s: delivery %+v, want pending, refused by the policy naming --webhook-allow", name, d)
				}
				break
			}
			select {
			case <-deadline:
				t.Fatalf("%s: deliveries %+v, want one attempted", name, log)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	rcv.mu.Lock()
	n, bad := len(rcv.ids), rcv.bad
	rcv.mu.Unlock()
	if n != 0 || bad != 0 {
		t.Fatalf("the receiver got %d deliveries and %d unverified requests, want none", n, bad)
	}

	// Allowed by name, the same receiver gets its event.
	stopSender()
	allowed := hook(t, st, "prod", "allowed", "http://localhost:"+port+"/hook", secret)
	sender2 := notify.NewSender(st, notify.SenderConfig{Poll: 50 * time.Millisecond, Policy: notify.Policy{AllowHosts: []string{"localhost"}}}, zerolog.Nop())
	run(t, sender2.Run)
	s.Append(event("prod", 2))
	select {
	case <-rcv.got:
	case <-time.After(60 * time.Second):
		log, _ := st.Deliveries(ctx, "prod", allowed.ID, 10)
		t.Fatalf("the allowed webhook's delivery did not arrive: %+v", log)
	}
}
