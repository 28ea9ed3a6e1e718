// Package ssh is the SSH target: a host without an agent, reached by an
// agent elsewhere (a proxy agent inside the host's network) over one SSH
// connection. Its file system is SFTP on that connection (handler.FS) and
// its commands are SSH sessions (handler.Runner), so the path-based and
// command-based kinds run on it unchanged.
//
// The SSH and SFTP libraries stay inside this package: callers see Config,
// Target, the standard errors and this package's sentinels.
package ssh

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	cryptossh "golang.org/x/crypto/ssh"
)

// Config says how to reach a host over SSH. Keys and passwords arrive as
// plain values: sealing them (to the agent that uses them) is the caller's
// work.
type Config struct {
	// Address is the host's address, host:port (port 22 when omitted).
	Address string
	// User is the account the target acts as; root for handlers that
	// own system files.
	User string
	// Password authenticates the user when set.
	Password string
	// PrivateKey is a private key in PEM (OpenSSH or PKCS#8) that
	// authenticates the user when set; Passphrase decrypts it if it is
	// encrypted. With both a key and a password, the key is tried first.
	PrivateKey []byte
	Passphrase []byte
	// HostKey pins the host's key: a public key in authorized_keys format
	// ("ssh-ed25519 AAAA… comment") or its SHA-256 fingerprint
	// ("SHA256:…", as ssh-keygen -lf prints it). A host offering another
	// key is refused with ErrHostKeyChanged. With a full key the host is
	// asked for a key of that type; a fingerprint matches whichever key
	// the host offers first.
	HostKey string
	// TrustOnFirstUse, when HostKey is empty, is called with the key the
	// host offers on the first connection (authorized_keys format) and
	// its fingerprint; returning nil trusts it, for the life of the
	// Target: a later connection must offer the same key. It is where the
	// caller records the key, to pin it next time.
	TrustOnFirstUse func(host, authorizedKey, fingerprint string) error
	// DialTimeout bounds connecting: TCP, the SSH handshake and
	// authentication; and a keepalive answer on an idle connection.
	DialTimeout time.Duration
	// CommandTimeout bounds a command whose own Timeout is unset.
	CommandTimeout time.Duration
	// KeepAlive is how often an open connection is probed; one that does
	// not answer within DialTimeout is closed, so that an operation on a
	// host gone silent fails rather than waits forever. 0: never.
	KeepAlive time.Duration
}

// Default returns the settings a Config starts from: the timeouts and the
// keepalive interval, nothing to reach.
func Default() Config {
	return Config{DialTimeout: 15 * time.Second, CommandTimeout: 10 * time.Minute, KeepAlive: 30 * time.Second}
}

// Validate reports what is missing or malformed in c, naming the setting.
func (c Config) Validate() error {
	var errs []error
	if c.Address == "" {
		errs = append(errs, errors.New("address: empty; give the host as host:port"))
	}
	if c.User == "" {
		errs = append(errs, errors.New("user: empty; give the account to log in as"))
	}
	if c.Password == "" && len(c.PrivateKey) == 0 {
		errs = append(errs, errors.New("auth: neither a password nor a private key; give one"))
	}
	if len(c.PrivateKey) > 0 {
		if _, err := c.signer(); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case c.HostKey == "" && c.TrustOnFirstUse == nil:
		errs = append(errs, errors.New("host key: neither pinned nor trusted on first use; pin the host's key (ssh-keyscan, or ssh-keygen -lf on the host) or set TrustOnFirstUse"))
	case c.HostKey != "":
		if _, _, err := parsePin(c.HostKey); err != nil {
			errs = append(errs, err)
		}
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("dial timeout: %s; give a positive duration", c.DialTimeout))
	}
	if c.CommandTimeout < 0 || c.KeepAlive < 0 {
		errs = append(errs, errors.New("command timeout and keepalive: negative; give 0 or a positive duration"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("ssh target: %w", errors.Join(errs...))
	}
	return nil
}

func (c Config) signer() (cryptossh.Signer, error) {
	var s cryptossh.Signer
	var err error
	if len(c.Passphrase) > 0 {
		s, err = cryptossh.ParsePrivateKeyWithPassphrase(c.PrivateKey, c.Passphrase)
	} else {
		s, err = cryptossh.ParsePrivateKey(c.PrivateKey)
	}
	if err != nil {
		var missing *cryptossh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, errors.New("private key: encrypted; give its passphrase")
		}
		return nil, fmt.Errorf("private key: %v; give an unencrypted PEM key or its passphrase", err)
	}
	return s, nil
}

// parsePin reads a pinned host key: the key itself, or only its
// fingerprint.
func parsePin(pin string) (key cryptossh.PublicKey, fingerprint string, err error) {
	pin = strings.TrimSpace(pin)
	if strings.HasPrefix(pin, "SHA256:") {
		return nil, pin, nil
	}
	key, _, _, _, err = cryptossh.ParseAuthorizedKey([]byte(pin))
	if err != nil {
		return nil, "", fmt.Errorf("host key: %q is neither a public key in authorized_keys format nor a SHA256: fingerprint", pin)
	}
	return key, cryptossh.FingerprintSHA256(key), nil
}

// ErrHostKeyChanged is returned (as a *HostKeyChangedError) when the host
// offers a key other than the one pinned or trusted: it was reinstalled,
// or someone is in the way. Nothing is sent to such a host.
var ErrHostKeyChanged = errors.New("host key changed")

// HostKeyChangedError names the host and both keys' fingerprints.
type HostKeyChangedError struct {
	Host, Want, Got string
}

func (e *HostKeyChangedError) Error() string {
	return fmt.Sprintf("%v: %s offered the key %s, but %s is pinned; nothing was sent to it. "+
		"If the host was reinstalled, check the new key on the host itself (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) and pin it; "+
		"otherwise someone may be intercepting the connection", ErrHostKeyChanged, e.Host, e.Got, e.Want)
}

// Is makes errors.Is(err, ErrHostKeyChanged) hold.
func (e *HostKeyChangedError) Is(target error) bool { return target == ErrHostKeyChanged }

// ErrAuth is returned when the host refused the user's password or key.
var ErrAuth = errors.New("authentication refused")

// ErrConnectionLost is returned by an operation that failed because the
// connection died under it (the host rebooted, sshd restarted, the network
// dropped). The operation may or may not have taken effect; the next one
// connects again.
var ErrConnectionLost = errors.New("connection lost")

// ErrClosed is returned by operations on a closed Target.
var ErrClosed = errors.New("ssh target closed")

// Target is one host reached over SSH. It holds one connection, shared by
// every operation (each command a session on it, every file operation an
// SFTP request on one SFTP session), and connects again on the first
// operation after the connection died. It is safe for concurrent use.
type Target struct {
	cfg  Config
	name string // user@address, in errors
	auth []cryptossh.AuthMethod

	mu      sync.Mutex // guards cur, trusted and closed; held while dialling
	cur     *conn
	trusted cryptossh.PublicKey // the key trusted on first use
	closed  bool

	wg sync.WaitGroup // the connections' watchers; Close waits for them
}

// conn is one SSH connection and the SFTP session on it.
type conn struct {
	ssh   *cryptossh.Client
	sftp  *sftp.Client
	fsync bool          // the server has fsync@openssh.com
	done  chan struct{} // closed when the connection ended
}

func (c *conn) ended() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Dial checks cfg and connects to the host, so that a wrong address, key
// or password shows at once; later operations reuse the connection, or
// connect again when it died.
func Dial(ctx context.Context, cfg Config) (*Target, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(cfg.Address); err != nil {
		cfg.Address = net.JoinHostPort(cfg.Address, "22")
	}
	t := &Target{cfg: cfg, name: cfg.User + "@" + cfg.Address}
	if len(cfg.PrivateKey) > 0 {
		s, _ := cfg.signer() // Validate parsed it
		t.auth = append(t.auth, cryptossh.PublicKeys(s))
	}
	if cfg.Password != "" {
		t.auth = append(t.auth, cryptossh.Password(cfg.Password))
	}
	if _, err := t.get(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// String names the target: user@host:port.
func (t *Target) String() string { return t.name }

// Close closes the connection and waits for its watchers; operations after
// it fail with ErrClosed.
func (t *Target) Close() error {
	t.mu.Lock()
	t.closed = true
	c := t.cur
	t.cur = nil
	t.mu.Unlock()
	var err error
	if c != nil {
		_ = c.sftp.Close()
		err = c.ssh.Close()
	}
	t.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// get returns the live connection, connecting when there is none.
func (t *Target) get(ctx context.Context) (*conn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("%s: %w", t.name, ErrClosed)
	}
	if t.cur != nil && !t.cur.ended() {
		return t.cur, nil
	}
	t.cur = nil
	c, err := t.dial(ctx)
	if err != nil {
		return nil, err
	}
	t.cur = c
	return c, nil
}

// drop closes c after an operation found it dead, so that the next
// operation connects again.
func (t *Target) drop(c *conn) {
	t.mu.Lock()
	if t.cur == c {
		t.cur = nil
	}
	t.mu.Unlock()
	_ = c.ssh.Close()
}

// dial connects, checks the host key, authenticates and opens the SFTP
// session. t.mu is held.
func (t *Target) dial(ctx context.Context) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	// The host key is checked before authentication starts: a handshake
	// that fails after the key was accepted failed authenticating.
	var keyErr error
	keyChecked := false
	cc := &cryptossh.ClientConfig{
		User: t.cfg.User,
		Auth: t.auth,
		HostKeyCallback: func(_ string, _ net.Addr, key cryptossh.PublicKey) error {
			keyChecked, keyErr = true, t.checkHostKey(key)
			return keyErr
		},
		Timeout: t.cfg.DialTimeout,
	}
	if pinned, _, _ := parsePin(t.cfg.HostKey); pinned != nil {
		cc.HostKeyAlgorithms = algorithmsFor(pinned.Type())
	} else if t.trusted != nil {
		cc.HostKeyAlgorithms = algorithmsFor(t.trusted.Type())
	}
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", t.cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w; check the address and that sshd runs there", t.name, err)
	}
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) }) // a cancelled ctx ends the handshake
	sc, chans, reqs, err := cryptossh.NewClientConn(nc, t.cfg.Address, cc)
	stop()
	if err != nil {
		_ = nc.Close()
		switch {
		case keyErr != nil:
			return nil, keyErr
		case ctx.Err() != nil:
			return nil, fmt.Errorf("connect to %s: no SSH handshake within %s: %w", t.name, t.cfg.DialTimeout, ctx.Err())
		case keyChecked:
			return nil, fmt.Errorf("%s: %w (%v): check the user, its password or key, and that the host allows this way of logging in", t.name, ErrAuth, err)
		}
		return nil, fmt.Errorf("connect to %s: %w", t.name, err)
	}
	_ = nc.SetDeadline(time.Time{})
	client := cryptossh.NewClient(sc, chans, reqs)
	sc2, err := sftp.NewClient(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("%s: start SFTP: %w; the host's sshd needs an sftp subsystem (Subsystem sftp internal-sftp)", t.name, err)
	}
	c := &conn{ssh: client, sftp: sc2, done: make(chan struct{})}
	if v, ok := sc2.HasExtension("fsync@openssh.com"); ok && v == "1" {
		c.fsync = true
	}
	if v, ok := sc2.HasExtension("posix-rename@openssh.com"); !ok || v != "1" {
		_ = client.Close()
		return nil, fmt.Errorf("%s: the SFTP server lacks posix-rename@openssh.com, without which files cannot be replaced atomically; use OpenSSH's sftp-server", t.name)
	}
	t.watch(c)
	return c, nil
}

// checkHostKey accepts the pinned key, or the one trusted on first use,
// and refuses any other with a *HostKeyChangedError.
func (t *Target) checkHostKey(key cryptossh.PublicKey) error {
	got := cryptossh.FingerprintSHA256(key)
	if t.cfg.HostKey != "" {
		pinned, want, _ := parsePin(t.cfg.HostKey)
		if pinned != nil && bytes.Equal(pinned.Marshal(), key.Marshal()) {
			return nil
		}
		if pinned == nil && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1 {
			return nil
		}
		return &HostKeyChangedError{Host: t.cfg.Address, Want: want, Got: got}
	}
	if t.trusted != nil {
		if bytes.Equal(t.trusted.Marshal(), key.Marshal()) {
			return nil
		}
		return &HostKeyChangedError{Host: t.cfg.Address, Want: cryptossh.FingerprintSHA256(t.trusted), Got: got}
	}
	authorized := strings.TrimSpace(string(cryptossh.MarshalAuthorizedKey(key)))
	if err := t.cfg.TrustOnFirstUse(t.cfg.Address, authorized, got); err != nil {
		return fmt.Errorf("%s offered the key %s, which was not trusted: %w", t.cfg.Address, got, err)
	}
	t.trusted = key
	return nil
}

// algorithmsFor lists the host key algorithms that a key of type keyType
// answers, so that the host offers the key pinned rather than another.
func algorithmsFor(keyType string) []string {
	if keyType == cryptossh.KeyAlgoRSA {
		return []string{cryptossh.KeyAlgoRSASHA512, cryptossh.KeyAlgoRSASHA256, cryptossh.KeyAlgoRSA}
	}
	return []string{keyType}
}

// watch closes c.done when the connection ends, and probes it every
// KeepAlive, closing it when the host does not answer within DialTimeout.
func (t *Target) watch(c *conn) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		_ = c.ssh.Wait()
		close(c.done)
	}()
	if t.cfg.KeepAlive <= 0 {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		tick := time.NewTicker(t.cfg.KeepAlive)
		defer tick.Stop()
		for {
			select {
			case <-c.done:
				return
			case <-tick.C:
			}
			answered := make(chan struct{})
			t.wg.Add(1)
			go func() { // ends when the request is answered or the connection closed
				defer t.wg.Done()
				_, _, _ = c.ssh.SendRequest("keepalive@openssh.com", true, nil)
				close(answered)
			}()
			select {
			case <-answered:
			case <-c.done:
				return
			case <-time.After(t.cfg.DialTimeout):
				_ = c.ssh.Close()
				return
			}
		}
	}()
}

// lost reports whether err says the connection died under an operation
// (rather than the host refusing it).
func lost(c *conn, err error) bool {
	return c.ended() ||
		errors.Is(err, sftp.ErrSSHFxConnectionLost) || errors.Is(err, sftp.ErrSSHFxNoConnection) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// lostError is what an operation returns when the connection died under
// it; the connection is dropped so the next operation dials again.
func (t *Target) lostError(c *conn, err error) error {
	t.drop(c)
	return fmt.Errorf("%w to %s (%v): the operation may not have completed; the next one reconnects", ErrConnectionLost, t.name, err)
}
