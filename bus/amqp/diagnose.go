package amqp

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Why a connection to the broker failed, where retrying does not help
// until someone fixes the broker's certificates, its listeners or our
// settings. Dial errors wrap them, and so does Ready's error, which comes
// at once; the bus logs each once, when failures with it start.
var (
	// ErrUntrustedCert: the broker's certificate is not signed by a CA
	// the bus trusts (Config.CAFile; the system's CAs when it is empty).
	ErrUntrustedCert = errors.New("the broker's certificate is not signed by a CA we trust")
	// ErrExpiredCert: the broker's certificate, or a CA certificate of
	// its chain, has expired.
	ErrExpiredCert = errors.New("the broker's certificate has expired")
	// ErrCertName: the broker's certificate does not hold the URL's host
	// name.
	ErrCertName = errors.New("the broker's certificate is not for the URL's host")
	// ErrPortWantsTLS: an amqp:// URL names a port that speaks TLS.
	ErrPortWantsTLS = errors.New("the URL says plaintext AMQP (amqp://) but the broker's port speaks TLS")
	// ErrPortNotTLS: an amqps:// URL names a port that does not speak TLS.
	ErrPortNotTLS = errors.New("the URL says TLS (amqps://) but the broker's port does not speak it")
	// ErrClientCertRefused: the broker refused the client certificate, or
	// wanted one and got none.
	ErrClientCertRefused = errors.New("the broker refused our client certificate")
)

// dialCauses are the sentinels above.
var dialCauses = []error{ErrExpiredCert, ErrCertName, ErrUntrustedCert, ErrClientCertRefused, ErrPortWantsTLS, ErrPortNotTLS}

// dialCause is the sentinel err wraps, or nil.
func dialCause(err error) error {
	for _, c := range dialCauses {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// Flags the messages name: the agent and the server bind the bus's TLS
// settings to flags of their own (the server's --tls-* serve its API).
const (
	caFlags   = "--tls-ca (tether agent run) or --amqp-tls-ca (tether server)"
	certFlags = "--tls-cert and --tls-key (tether agent run) or --amqp-tls-cert and --amqp-tls-key (tether server)"
)

// defaultTLSPort is amqps://'s port when the URL names none.
const defaultTLSPort = "5671"

// dialURL is the URL handed to amqp091-go: amqps:// becomes amqp:// with
// the port made explicit, because the bus makes the TLS connection itself
// (wire.dial) to see what the broker sent when the handshake fails.
func dialURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "amqps" {
		return raw
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), defaultTLSPort)
	}
	u.Scheme = "amqp"
	return u.String()
}

// wire is what one dial saw of the connection under amqp091-go, which
// keeps only the text of a failed read: the first bytes the broker sent
// (below TLS) tell what its port speaks, and the first read error (above
// TLS) carries an alert the broker sent after the handshake, as a TLS 1.3
// broker does when it refuses the client's certificate.
type wire struct {
	mu      sync.Mutex
	head    []byte
	readErr error
	// live is the connection dialled, judged alive by what it reads.
	live *liveConn
}

// headSize is enough of the first bytes to tell a TLS record header and
// AMQP's protocol header apart.
const headSize = 8

// watched records reads into a wire: raw ones (the TCP connection) into
// head, top ones (what amqp091-go reads) into readErr.
type watched struct {
	net.Conn
	w   *wire
	raw bool
	top bool
}

func (c *watched) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.w.mu.Lock()
	if c.raw && len(c.w.head) < headSize {
		c.w.head = append(c.w.head, p[:min(n, headSize-len(c.w.head))]...)
	}
	if c.top && err != nil && c.w.readErr == nil {
		c.w.readErr = err
	}
	c.w.mu.Unlock()
	return n, err
}

// dial connects to addr (amqp091-go's Config.Dial) and, with tlsConf,
// makes the TLS handshake; the handshake's error is returned as it is,
// for explain.
func (w *wire) dial(tlsConf *tls.Config, timeout, heartbeat time.Duration) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		// DefaultDial sets the deadline of the handshakes (TLS and AMQP),
		// which amqp091-go clears once connected.
		conn, err := amqp.DefaultDial(timeout)(network, addr)
		if err != nil {
			return nil, err
		}
		if tlsConf == nil {
			w.live = newLiveConn(conn, heartbeat)
			return &watched{Conn: w.live, w: w, raw: true, top: true}, nil
		}
		tc := tls.Client(&watched{Conn: conn, w: w, raw: true}, tlsConf)
		if err := tc.Handshake(); err != nil {
			conn.Close()
			return nil, err
		}
		w.live = newLiveConn(tc, heartbeat)
		return &watched{Conn: w.live, w: w, top: true}, nil
	}
}

func (w *wire) seen() (head []byte, readErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.head), w.readErr
}

// explain turns a failed dial into an error that says what is wrong and
// what to do, wrapping one of the sentinels above, or returns err as it
// is when it is none of them.
func (c Config) explain(err error, w *wire) error {
	tlsURL, host, port := endpoint(c.URL)
	head, readErr := w.seen()

	var expired x509.CertificateInvalidError
	if errors.As(err, &expired) && expired.Reason == x509.Expired && expired.Cert != nil {
		return explainValidity(expired.Cert, err)
	}
	var name x509.HostnameError
	if errors.As(err, &name) && name.Certificate != nil {
		return fmt.Errorf("%w: it is for %s, the URL names %s; connect to a name the certificate holds, or reissue the certificate with %s among its subject alternative names: %w",
			ErrCertName, certNames(name.Certificate), host, host, err)
	}
	var unknown x509.UnknownAuthorityError
	if errors.As(err, &unknown) {
		signer := "an unknown CA"
		if cert := unknown.Cert; cert != nil {
			signer = fmt.Sprintf("%q", cert.Issuer.String())
			if !cert.IsCA && bytes.Equal(cert.RawIssuer, cert.RawSubject) {
				signer = fmt.Sprintf("itself (%q is self-signed)", cert.Subject.String())
			}
		}
		trusted := "the system's CAs (no CA file is set)"
		if c.CAFile != "" {
			trusted = "the CA in " + c.CAFile
		}
		return fmt.Errorf("%w: it is signed by %s, and we trust %s; give the CA that signed it with %s: %w",
			ErrUntrustedCert, signer, trusted, caFlags, err)
	}

	if alert, text, ok := remoteAlert(err, readErr); ok && clientCertAlerts[alert] {
		if c.CertFile == "" {
			return fmt.Errorf("%w: the broker wants a client certificate (TLS alert %q); set one with %s",
				ErrClientCertRefused, text, certFlags)
		}
		return fmt.Errorf("%w %s (TLS alert %q): the broker accepts only certificates signed by a CA of its ssl_options.cacertfile (and we send one only when the broker names its issuer among them); use a certificate signed by such a CA",
			ErrClientCertRefused, c.CertFile, text)
	}

	switch {
	case tlsURL && bytes.HasPrefix(head, []byte("AMQP")):
		return fmt.Errorf("%w: port %s answered in plaintext AMQP; use amqp:// for this port, or the broker's TLS port (listeners.ssl, usually 5671) with amqps://: %w",
			ErrPortNotTLS, port, err)
	case tlsURL && isRecordHeaderError(err):
		return fmt.Errorf("%w: port %s answered %q, not a TLS handshake; is it the broker's TLS port (listeners.ssl, usually 5671)?: %w",
			ErrPortNotTLS, port, head, err)
	case !tlsURL && looksLikeTLS(head):
		return fmt.Errorf("%w: port %s answered with a TLS record; use amqps:// for this port (with the CA that signed the broker's certificate: %s), or the broker's plaintext port (listeners.tcp, usually 5672): %w",
			ErrPortWantsTLS, port, caFlags, err)
	}
	return err
}

// explainValidity says which certificate is out of its validity period,
// since when or until when, and what to do.
func explainValidity(cert *x509.Certificate, err error) error {
	now := time.Now()
	which := fmt.Sprintf("%q", cert.Subject.String())
	if cert.IsCA {
		which = fmt.Sprintf("its CA %q", cert.Subject.String())
	}
	if now.Before(cert.NotBefore) {
		return fmt.Errorf("the broker's certificate is not valid yet: %s is valid from %s (in %v); check this machine's clock: %w",
			which, cert.NotBefore.UTC().Format(time.RFC3339), cert.NotBefore.Sub(now).Round(time.Second), err)
	}
	return fmt.Errorf("%w: %s expired at %s (%v ago); renew it on the broker (ssl_options.certfile), or check this machine's clock: %w",
		ErrExpiredCert, which, cert.NotAfter.UTC().Format(time.RFC3339), now.Sub(cert.NotAfter).Round(time.Second), err)
}

// certNames lists the names a certificate is valid for.
func certNames(cert *x509.Certificate) string {
	var names []string
	names = append(names, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return fmt.Sprintf("no host name (subject %q, and no subject alternative name)", cert.Subject.String())
	}
	return strings.Join(names, ", ")
}

// TLS alerts (RFC 8446 section 6) that refuse the client's certificate.
var clientCertAlerts = map[uint8]bool{
	42:  true, // bad_certificate
	43:  true, // unsupported_certificate
	44:  true, // certificate_revoked
	45:  true, // certificate_expired
	46:  true, // certificate_unknown
	48:  true, // unknown_ca
	116: true, // certificate_required
}

// remoteAlert is the first TLS alert the broker sent among errs: its
// code and text. crypto/tls reports one as a net.OpError "remote error"
// around a value of an unexported uint8 type, the code, which reflection
// reads.
func remoteAlert(errs ...error) (code uint8, text string, ok bool) {
	for _, err := range errs {
		var op *net.OpError
		if err == nil || !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
			continue
		}
		if v := reflect.ValueOf(op.Err); v.Kind() == reflect.Uint8 {
			return uint8(v.Uint()), op.Err.Error(), true
		}
	}
	return 0, "", false
}

func isRecordHeaderError(err error) bool {
	var rh tls.RecordHeaderError
	return errors.As(err, &rh)
}

// looksLikeTLS reports whether b starts with a TLS record header: an
// alert or a handshake, version 3.x.
func looksLikeTLS(b []byte) bool {
	return len(b) >= 2 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03
}

// endpoint is whether a URL asks for TLS, and the host and port it names
// (amqp's default ports when it names none).
func endpoint(raw string) (tlsURL bool, host, port string) {
	u, err := url.Parse(raw)
	if err != nil {
		return false, "?", "?"
	}
	tlsURL = u.Scheme == "amqps"
	port = u.Port()
	if port == "" {
		port = "5672"
		if tlsURL {
			port = defaultTLSPort
		}
	}
	return tlsURL, u.Hostname(), port
}
