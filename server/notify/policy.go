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
// The zero Policy refuses the networks of DefaultDeny. Deny adds
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
}

// deniedByDefault are the networks a webhook may not reach unless
// allowed: the server itself, link-local (which holds the clouds'
// metadata services), and the private networks a server usually sits in.
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
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved or broadcast address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address (this host)"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local address (a private IPv6 network)"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address (a private IPv6 network)"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// DefaultDeny returns the networks refused unless allowed: unspecified,
// loopback, RFC 1918 and RFC 6598 private, link-local (the clouds'
// metadata services), unique and site local, multicast and reserved.
func DefaultDeny() []netip.Prefix {
	out := make([]netip.Prefix, len(deniedByDefault))
	for i, d := range deniedByDefault {
		out[i] = d.network
	}
	return out
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
// *DeniedError. An IPv4-mapped IPv6 address is checked as the IPv4
// address it is, and an address's IPv6 zone is ignored.
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
// tries, after resolution and just before the connection is made (the
// dialer's Control), so what is checked is what is dialed.
func (p Policy) Dial(d net.Dialer) func(ctx context.Context, network, address string) (net.Conn, error) {
	open := d
	guarded := d
	guarded.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &DeniedError{Why: fmt.Sprintf("%q, not an address", address)}
		}
		return p.CheckAddr(ap.Addr())
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
