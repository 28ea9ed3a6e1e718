package notify_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
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

// noServerAddrs stands for a host whose interfaces hold loopback
// addresses only, so that a test's answers do not depend on the machine.
func noServerAddrs() ([]netip.Addr, error) { return nil, nil }

// TestPolicyCheckAddr: the default policy refuses the server's own,
// link-local, private and special addresses in IPv4 and IPv6 (mapped,
// NAT64 and zoned forms included) and lets public ones through; an
// allowed network wins over the defaults and over --webhook-deny.
func TestPolicyCheckAddr(t *testing.T) {
	zero := notify.Policy{ServerAddrs: noServerAddrs}
	private := notify.Policy{Allow: prefixes("10.1.0.0/16", "fd12::/16"), ServerAddrs: noServerAddrs}
	extra := notify.Policy{Deny: prefixes("8.8.0.0/16"), Allow: prefixes("8.8.4.4/32"), ServerAddrs: noServerAddrs}
	everything := notify.Policy{Allow: prefixes("0.0.0.0/0", "::/0"), ServerAddrs: noServerAddrs}
	own := func() ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c")}, nil
	}
	self := notify.Policy{ServerAddrs: own}
	selfAllowed := notify.Policy{ServerAddrs: own, Allow: prefixes("93.184.215.14/32")}
	unknownSelf := notify.Policy{ServerAddrs: func() ([]netip.Addr, error) { return nil, errors.New("netlink: permission denied") }}
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
		{zero, "192.0.0.8", true},      // IETF protocol assignments
		{zero, "192.0.2.2", true},      // TEST-NET-1
		{zero, "198.51.100.1", true},   // TEST-NET-2
		{zero, "203.0.113.5", true},    // TEST-NET-3
		{zero, "192.88.99.1", true},    // 6to4 relays
		{zero, "198.18.0.1", true},     // benchmarking
		{zero, "198.19.255.255", true}, // benchmarking
		{zero, "198.20.0.1", false},
		{zero, "8.8.8.8", false},
		{zero, "93.184.215.14", false},
		{zero, "::1", true},
		{zero, "::", true},
		{zero, "::ffff:127.0.0.1", true},
		{zero, "::ffff:169.254.169.254", true},
		{zero, "::ffff:8.8.8.8", false},
		{zero, "::7f00:1", true},           // IPv4-compatible 127.0.0.1
		{zero, "64:ff9b::7f00:1", true},    // NAT64 to 127.0.0.1
		{zero, "64:ff9b::a9fe:a9fe", true}, // NAT64 to the metadata service
		{zero, "64:ff9b::808:808", false},  // NAT64 to 8.8.8.8
		{zero, "64:ff9b:1::1", true},       // local-use NAT64
		{zero, "100::1", true},             // discard-only
		{zero, "2001::1", true},            // Teredo
		{zero, "2001:2::1", true},          // benchmarking
		{zero, "2001:db8::1", true},        // documentation
		{zero, "3fff::1", true},            // documentation
		{zero, "2002:c000:201::1", true},   // 6to4 of 192.0.2.1
		{zero, "5f00::1", true},            // segment routing
		{zero, "fe80::1", true},
		{zero, "fe80::1%eth0", true},
		{zero, "fd00:ec2::254", true}, // AWS metadata over IPv6
		{zero, "fd00::2", true},
		{zero, "ff02::1", true},
		{zero, "2001:4860:4860::8888", false},
		{private, "10.1.2.3", false},
		{private, "::ffff:10.1.2.3", false},
		{private, "64:ff9b::a01:203", false}, // NAT64 to 10.1.2.3
		{private, "10.2.0.1", true},
		{private, "fd12::1", false},
		{private, "fd13::1", true},
		{private, "127.0.0.1", true},
		{extra, "8.8.8.8", true},
		{extra, "8.8.4.4", false},
		{extra, "1.1.1.1", false},
		{everything, "127.0.0.1", false},
		{everything, "::1", false},
		{everything, "192.0.2.2", false},
		{self, "93.184.215.14", true}, // the server's own public address
		{self, "::ffff:93.184.215.14", true},
		{self, "2606:2800:21f:cb07:6820:80da:af6b:8b2c", true},
		{self, "93.184.215.15", false},
		{selfAllowed, "93.184.215.14", false},
		{unknownSelf, "8.8.8.8", true}, // its own addresses unknown, the server refuses
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
	if err := self.CheckAddr(netip.MustParseAddr("93.184.215.14")); err == nil || !strings.Contains(err.Error(), "the server's own host") {
		t.Fatalf("the server's own address: %v, want a refusal saying it is the server's own", err)
	}
}

// TestPolicyRefusesTheServersOwnAddresses: under the default policy,
// every address of this machine's network interfaces is refused (here,
// whatever range it is in: the check reads the interfaces).
func TestPolicyRefusesTheServersOwnAddresses(t *testing.T) {
	addrs, err := notify.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) == 0 {
		t.Fatal("no interface addresses: want at least loopback's")
	}
	for _, a := range addrs {
		if err := (notify.Policy{}).CheckAddr(a); !errors.Is(err, notify.ErrDenied) {
			t.Errorf("CheckAddr(%s), an address of this host: %v, want refused", a, err)
		}
	}
}

// TestDefaultDenyIsDocumented: the table of docs/server.md that tells
// operators which networks webhooks may not reach lists exactly the
// networks the policy refuses.
func TestDefaultDenyIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "server.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### Where webhooks may post\n")
	if !ok {
		t.Fatal("docs/server.md has no section \"Where webhooks may post\"")
	}
	section, _, _ = strings.Cut(section, "\n### ")
	documented := map[netip.Prefix]bool{}
	inTable := false
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break // the first table only
			}
			continue
		}
		inTable = true
		cells := strings.Split(line, "|")
		if len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "Networks" {
			continue
		}
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cells[1], -1) {
			p, err := netip.ParsePrefix(m[1])
			if err != nil {
				a, aerr := netip.ParseAddr(m[1])
				if aerr != nil {
					t.Fatalf("docs/server.md lists %q: not a network or an address", m[1])
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			documented[p] = true
		}
	}
	for _, p := range notify.DefaultDeny() {
		if !documented[p] {
			t.Errorf("%s is refused by default but not in docs/server.md's table", p)
		}
		delete(documented, p)
	}
	for p := range documented {
		t.Errorf("docs/server.md's table lists %s, which the policy does not refuse", p)
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

// fakeDNS is a DNS server the test controls, reached through a
// *net.Resolver's Dial (no packet leaves the process): each A query for
// a name is answered with the IPv4 addresses answer gives for it (the
// nth query of that name, from 0), AAAA queries with none.
type fakeDNS struct {
	answer func(name string, n int) []netip.Addr
	mu     sync.Mutex
	asked  map[string]int
}

func (f *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go f.serve(server) // owned by the pipe: ends when the resolver closes its end
		return client, nil
	}}
}

// serve answers queries in DNS's stream framing (a length, then the
// message), as the resolver speaks over a connection that is not a
// packet connection.
func (f *fakeDNS) serve(c net.Conn) {
	defer c.Close()
	for {
		var n uint16
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return
		}
		q := make([]byte, n)
		if _, err := io.ReadFull(c, q); err != nil || len(q) < 12 {
			return
		}
		// The question: labels up to a zero byte, then type and class.
		end, name := 12, ""
		for end < len(q) && q[end] != 0 {
			l := int(q[end])
			if end+1+l > len(q) {
				return
			}
			name += string(q[end+1:end+1+l]) + "."
			end += 1 + l
		}
		end += 5
		if end > len(q) {
			return
		}
		qtype := binary.BigEndian.Uint16(q[end-4:])
		var addrs []netip.Addr
		if qtype == 1 { // A
			f.mu.Lock()
			nth := f.asked[name]
			f.asked[name]++
			f.mu.Unlock()
			addrs = f.answer(strings.TrimSuffix(name, "."), nth)
		}
		resp := append([]byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, byte(len(addrs)), 0, 0, 0, 0}, q[12:end]...)
		for _, a := range addrs {
			b := a.As4()
			resp = append(resp, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4)
			resp = append(resp, b[:]...)
		}
		if err := binary.Write(c, binary.BigEndian, uint16(len(resp))); err != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// errLeaves is the test dialer's refusal of an address outside the
// loopback network: no test sends a packet off the machine.
var errLeaves = errors.New("the test's dialer connects to loopback addresses only")

// TestPolicyDialChecksWhatIsDialed: with a resolver and a dialer the test
// controls, the policy is checked on each address the name resolves to
// when the connection is made, not on an earlier answer: a name
// resolving to the server's own address, to the metadata service, to a
// documentation range, or answering a public address first and loopback
// next (DNS rebinding) is refused before the connection is made, and
// the refusal names the host. An allowed address is dialed through the
// same resolver.
func TestPolicyDialChecksWhatIsDialed(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
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
	own := netip.MustParseAddr("93.184.215.14")
	dns := &fakeDNS{asked: map[string]int{}, answer: func(name string, n int) []netip.Addr {
		switch name {
		case "self.test":
			return []netip.Addr{own}
		case "meta.test":
			return []netip.Addr{netip.MustParseAddr("169.254.169.254")}
		case "docs.test":
			return []netip.Addr{netip.MustParseAddr("192.0.2.2")}
		case "mixed.test":
			return []netip.Addr{own, netip.MustParseAddr("127.0.0.1")}
		case "rebind.test":
			if n == 0 {
				return []netip.Addr{netip.MustParseAddr("93.184.215.20")}
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		case "ok.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		}
		return nil
	}}
	var mu sync.Mutex
	var dialed []string
	d := net.Dialer{Timeout: 5 * time.Second, Resolver: dns.resolver(), Control: func(_, address string, _ syscall.RawConn) error {
		mu.Lock()
		dialed = append(dialed, address)
		mu.Unlock()
		if ap, err := netip.ParseAddrPort(address); err != nil || !ap.Addr().IsLoopback() {
			return errLeaves
		}
		return nil
	}}
	policy := notify.Policy{ServerAddrs: func() ([]netip.Addr, error) { return []netip.Addr{own}, nil }}
	allowLoopback := policy
	allowLoopback.Allow = prefixes("127.0.0.1/32")
	ctx := context.Background()
	for _, tt := range []struct {
		policy notify.Policy
		host   string
		want   string // in the refusal; "" for a connection
		leaves bool   // the policy lets it through, to the test's dialer
	}{
		{policy, "self.test", "self.test resolves to 93.184.215.14, an address of the server's own host", false},
		{policy, "meta.test", "meta.test resolves to 169.254.169.254, a link-local address", false},
		{policy, "docs.test", "docs.test resolves to 192.0.2.2, a documentation address", false},
		{policy, "mixed.test", "mixed.test resolves to", false},
		{policy, "rebind.test", "", true},                                   // first answer: a public address
		{policy, "rebind.test", "rebind.test resolves to 127.0.0.1", false}, // then loopback
		{allowLoopback, "ok.test", "", false},
	} {
		t.Run(tt.host, func(t *testing.T) {
			mu.Lock()
			dialed = nil
			mu.Unlock()
			c, err := tt.policy.Dial(d)(ctx, "tcp4", net.JoinHostPort(tt.host, port))
			if c != nil {
				c.Close()
			}
			mu.Lock()
			tried := append([]string(nil), dialed...)
			mu.Unlock()
			switch {
			case tt.leaves:
				if !errors.Is(err, errLeaves) {
					t.Fatalf("dial %s: %v, want it through the policy to the test's dialer", tt.host, err)
				}
			case tt.want == "":
				if err != nil {
					t.Fatalf("dial %s: %v, want connected", tt.host, err)
				}
			default:
				if !errors.Is(err, notify.ErrDenied) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "--webhook-allow") {
					t.Fatalf("dial %s: %v, want ErrDenied saying %q", tt.host, err, tt.want)
				}
				if len(tried) != 0 {
					t.Fatalf("dial %s: the test's dialer was asked for %v, want nothing: refused before connecting", tt.host, tried)
				}
			}
		})
	}
}

// TestSenderFollowsNoRedirect: a receiver answering a redirect, here to
// another receiver the policy allows, gets a failed attempt recorded
// with its 3xx; the place it points to gets nothing.
func TestSenderFollowsNoRedirect(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	mustEnv(t, st, "prod")
	secret, _ := notify.NewSecret()
	target := newReceiver(t, secret, http.StatusOK)
	redirect := httptest.NewServer(http.RedirectHandler(target.URL+"/hook", http.StatusTemporaryRedirect))
	defer redirect.Close()
	h := hook(t, st, "prod", "redirects", redirect.URL+"/hook", secret)
	sender := notify.NewSender(st, notify.SenderConfig{Timeout: 5 * time.Second, Poll: 50 * time.Millisecond, FirstRetry: time.Hour, Policy: loopback}, zerolog.Nop())
	s := notify.NewStream(st, notify.StreamConfig{}, sender.Wake, zerolog.Nop())
	run(t, s.Run)
	run(t, sender.Run)
	s.Append(event("prod", 1))
	for deadline := time.After(60 * time.Second); ; {
		log, err := st.Deliveries(ctx, "prod", h.ID, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(log) == 1 && log[0].StatusCode != 0 {
			if d := log[0]; d.State != record.DeliveryPending || d.StatusCode != http.StatusTemporaryRedirect {
				t.Fatalf("delivery %+v, want pending with status 307", d)
			}
			break
		}
		select {
		case <-deadline:
			t.Fatalf("deliveries %+v, want one attempted", log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	if len(target.ids) != 0 || target.bad != 0 {
		t.Fatalf("the redirect's target got %d deliveries and %d other requests, want none", len(target.ids), target.bad)
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
