package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrDenied is wrapped by what the destination policy refuses: an
// address a webhook may not reach (a *DeniedError says which and why).
var ErrDenied = errors.New("webhook destination not allowed")

// Policy says which addresses webhook deliveries may connect to. A
// webhook's URL is set by an environment's admin, who need not be the
// server's operator: without a policy, any admin could make the server
// post to its own loopback services, to the cloud's metadata service
// (169.254.169.254, which hands out credentials) or to any host of its
// private network.
//
// The zero Policy refuses the networks of DefaultDeny and the addresses
// of the server's own host (ServerAddrs). Deny adds
// networks to them; Allow and AllowHosts open exceptions, and win over
// every deny: an operator whose receivers live at 10.1.2.0/24 allows
// that network and the rest of 10.0.0.0/8 stays refused.
//
// The policy is checked on the address actually dialed, once the host
// name is resolved (Dial), so a name that resolves to a refused address,
// or that changes what it resolves to between a check and the delivery
// (DNS rebinding), is caught. CheckURL checks a URL ahead of time, for a
// clear answer when a webhook is set; it is a courtesy, not the guard.
type Policy struct {
	// Allow lists networks webhooks may reach even though they are in
	// DefaultDeny or Deny.
	Allow []netip.Prefix
	// AllowHosts lists host names webhooks may reach whatever they
	// resolve to: "hooks.internal", or "*.internal" for every name under
	// internal. Their addresses are not checked: allow a name only when
	// whoever controls its DNS is trusted as much as the operator.
	AllowHosts []string
	// Deny lists networks refused besides DefaultDeny.
	Deny []netip.Prefix
	// ServerAddrs returns the addresses of the server's own host, refused
	// like loopback unless allowed (nil: InterfaceAddrs, the addresses of its
	// network interfaces, read at every check, so an address the host
	// gains later is refused too). An address the host is reached at
	// through NAT (a cloud's public address) is no interface's: deny it
	// with Deny.
	ServerAddrs func() ([]netip.Addr, error)
}

// deniedByDefault are the networks a webhook may not reach unless
// allowed: the server itself, link-local (which holds the clouds'
// metadata services), the private networks a server usually sits in, and
// every other range IANA's special-purpose registries mark as not
// globally reachable (documentation, benchmarking, protocol assignments,
// multicast, reserved). docs/server.md lists the same networks, one
// table row per line here (TestDefaultDenyIsDocumented compares them).
var deniedByDefault = []struct {
	network netip.Prefix
	what    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address (this host)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address (RFC 1918)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address (RFC 1918)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared address (RFC 6598, carrier and cloud internal networks)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address (where cloud metadata services answer)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol assignment (RFC 6890)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address (RFC 5737)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address (RFC 5737)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address (RFC 5737)"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a 6to4 relay address (RFC 7526, deprecated)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address (RFC 2544)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved or broadcast address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address (this host)"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible address (RFC 4291, deprecated)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address (RFC 8215)"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address (RFC 6666)"},
	{netip.MustParsePrefix("2001::/23"), "an IETF protocol assignment (RFC 2928; Teredo, benchmarking)"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address (RFC 3849)"},
	{netip.MustParsePrefix("3fff::/20"), "a documentation address (RFC 9637)"},
	{netip.MustParsePrefix("2002::/16"), "a 6to4 address (RFC 7526, deprecated)"},
	{netip.MustParsePrefix("5f00::/16"), "a segment routing address (RFC 9602)"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local address (a private IPv6 network)"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address (a private IPv6 network)"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// nat64 is the well-known NAT64 prefix (RFC 6052): its addresses carry
// an IPv4 address in their last 32 bits, which a NAT64 gateway connects
// to, so they are checked as that IPv4 address.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// DefaultDeny returns the networks refused unless allowed: unspecified,
// loopback, RFC 1918 and RFC 6598 private, link-local (the clouds'
// metadata services), unique and site local, documentation,
// benchmarking, protocol assignments, 6to4, multicast and reserved.
func DefaultDeny() []netip.Prefix {
	out := make([]netip.Prefix, len(deniedByDefault))
	for i, d := range deniedByDefault {
		out[i] = d.network
	}
	return out
}

// InterfaceAddrs returns the addresses of this host's network
// interfaces, as the kernel lists them now.
func InterfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch a := a.(type) {
		case *net.IPNet:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		}
		if addr, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, addr.Unmap())
		}
	}
	return out, nil
}

// DeniedError is a destination the policy refuses.
type DeniedError struct {
	// Host is the URL's host when it is a name ("" for an address).
	Host string
	// Addr is the address refused.
	Addr netip.Addr
	// Why says what the address is ("a loopback address").
	Why string
}

func (e *DeniedError) Error() string {
	if !e.Addr.IsValid() {
		return fmt.Sprintf("%s, which webhooks may not reach", e.Why)
	}
	bits := 32
	if e.Addr.Is6() {
		bits = 128
	}
	allow := fmt.Sprintf("--webhook-allow %s/%d", e.Addr, bits)
	if e.Host != "" {
		return fmt.Sprintf("%s resolves to %s, %s, which webhooks may not reach; the server's operator may allow it with %s (or --webhook-allow %s)", e.Host, e.Addr, e.Why, allow, e.Host)
	}
	return fmt.Sprintf("%s is %s, which webhooks may not reach; the server's operator may allow it with %s", e.Addr, e.Why, allow)
}

// Unwrap makes a DeniedError match ErrDenied.
func (e *DeniedError) Unwrap() error { return ErrDenied }

// Validate checks the host names of AllowHosts.
func (p Policy) Validate() error {
	for _, h := range p.AllowHosts {
		name := strings.TrimPrefix(h, "*.")
		if name == "" || strings.ContainsAny(name, "/:*[] ") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") {
			return fmt.Errorf("--webhook-allow %q: want a network (10.0.0.0/8), an address, a host name (hooks.internal) or *. and a domain (*.internal)", h)
		}
	}
	return nil
}

// CheckAddr returns nil when a webhook may connect to a, or a
// *DeniedError. An IPv4-mapped IPv6 address, or one of the NAT64 prefix
// 64:ff9b::/96, is checked as the IPv4 address it carries, and an
// address's IPv6 zone is ignored.
func (p Policy) CheckAddr(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return &DeniedError{Why: "no address"}
	}
	for _, n := range p.Allow {
		if n.Contains(a) {
			return nil
		}
	}
	if nat64.Contains(a) {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte(b[12:16]))
		if err := p.CheckAddr(v4); err != nil {
			var d *DeniedError
			if errors.As(err, &d) && d.Addr.IsValid() {
				return &DeniedError{Addr: a, Why: fmt.Sprintf("a NAT64 address leading to %s, %s", v4, d.Why)}
			}
			return err
		}
		return nil
	}
	for _, d := range deniedByDefault {
		if d.network.Contains(a) {
			return &DeniedError{Addr: a, Why: d.what}
		}
	}
	for _, n := range p.Deny {
		if n.Contains(a) {
			return &DeniedError{Addr: a, Why: fmt.Sprintf("in %s, denied by --webhook-deny", n)}
		}
	}
	list := p.ServerAddrs
	if list == nil {
		list = InterfaceAddrs
	}
	own, err := list()
	if err != nil {
		// Without the list, any address might be the server's own.
		return &DeniedError{Addr: a, Why: fmt.Sprintf("not checked against the server's own addresses (%v)", err)}
	}
	for _, o := range own {
		if o.Unmap().WithZone("") == a {
			return &DeniedError{Addr: a, Why: "an address of the server's own host"}
		}
	}
	return nil
}

// hostAllowed reports whether host is named by AllowHosts.
func (p Policy) hostAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.AllowHosts {
		h = strings.ToLower(h)
		if domain, ok := strings.CutPrefix(h, "*."); ok {
			if strings.HasSuffix(host, "."+domain) {
				return true
			}
		} else if host == h {
			return true
		}
	}
	return false
}

// resolveTimeout bounds CheckURL's look-up of a host name.
const resolveTimeout = 5 * time.Second

// CheckURL returns a *DeniedError when raw's host is an address the
// policy refuses, or a name that resolves to one (any of its addresses:
// a delivery might dial it). A URL that does not parse, or a name that
// does not resolve, passes: validation refuses the first, and the
// delivery, checked when it connects, fails on the second.
func (p Policy) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		return p.CheckAddr(a)
	}
	if p.hostAllowed(host) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if err := p.CheckAddr(a); err != nil {
			var d *DeniedError
			if errors.As(err, &d) {
				d.Host = host
			}
			return err
		}
	}
	return nil
}

// Dial returns a DialContext for an http.Transport that connects only
// where the policy allows. The check runs on each address the dialer
// tries, after resolution (by d.Resolver) and just before the connection
// is made (the dialer's Control), so what is checked is what is dialed.
// A Control or ControlContext of d runs after the check, on the
// addresses it lets through.
func (p Policy) Dial(d net.Dialer) func(ctx context.Context, network, address string) (net.Conn, error) {
	open := d
	guarded := d
	then := d.ControlContext
	if then == nil && d.Control != nil {
		then = func(_ context.Context, network, address string, c syscall.RawConn) error {
			return d.Control(network, address, c)
		}
	}
	guarded.Control = nil
	guarded.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &DeniedError{Why: fmt.Sprintf("%q, not an address", address)}
		}
		if err := p.CheckAddr(ap.Addr()); err != nil {
			return err
		}
		if then != nil {
			return then(ctx, network, address, c)
		}
		return nil
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		if _, err := netip.ParseAddr(host); err != nil && p.hostAllowed(host) {
			return open.DialContext(ctx, network, address)
		}
		conn, err := guarded.DialContext(ctx, network, address)
		var de *DeniedError
		if errors.As(err, &de) {
			if _, perr := netip.ParseAddr(host); perr != nil {
				de.Host = host
			}
			return nil, de
		}
		return conn, err
	}
}
