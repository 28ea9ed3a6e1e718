// Package libvirt is the driver of libvirt platforms: it makes machines as
// libvirt domains from a template of their XML, with a disk in one of the
// platform's storage pools, starts, stops, reboots and destroys them, and
// reports the hypervisor and every domain on it.
//
// It speaks libvirt's own RPC protocol (go-libvirt, pure Go), so the agent
// that serves the platform stays a static binary. A domain the driver made
// carries, in its <metadata>, the blueprint's host it was made from, when
// the driver last started it, and what the driver made for it (its disk
// volume, its cloud-init seed volume, its boot files, its serial console's
// file): Inventory reads the host back, Destroy removes what the driver
// made and nothing else.
//
// A machine with a cloud-init seed (MachineSpec.Seed) gets it as cloud-init's
// NoCloud datasource reads it: an ISO 9660 image labelled cidata, written
// in memory, uploaded into the pool of the machine's disk as a raw volume
// (NAME.seed.iso) through libvirt's own stream, so the agent need not be
// on the hypervisor, and attached as a read-only cdrom (the template's
// .SeedPath).
//
// A machine's settings (MachineSpec.Settings; numbers as JSON gives them,
// or Go integers; other settings are the server's and are ignored):
//
//	uri          the platform's libvirt URI: must be the driver's own
//	network      "user" (QEMU's user-mode network, where 10.0.2.2 is the
//	             host's loopback; the default) or a libvirt network's name
//	pool         the storage pool of the machine's disk ("default")
//	domain_type  qemu (software emulation, the default) or kvm
//	memory_mib   memory in MiB (1024)
//	cpus         virtual CPUs (1)
//	disk_gib     the disk's capacity in GiB (8; a gold image's if larger)
//	tftp_root    where boot files go: each machine that boots from the
//	             network or has Files gets a directory of its own there,
//	             tftp_root/NAME, which its PXE NIC's TFTP server serves
//	             (QEMU's user network, bootfile boot.ipxe); a network
//	             boot's Kernel and Initrd are linked into it under their
//	             base names. QEMU must be able to read it
//	log_dir      where the serial console goes, as NAME-serial.log
//	             (/var/log/libvirt/qemu)
//
// Files are written on the agent's machine: boot files are for a local
// libvirt.
//
// Every call on libvirt is bounded: when the context ends or libvirt does
// not answer in time, the driver drops its connection (so a call of
// another goroutine in flight on it fails too) and dials again on the next
// call.
package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	lv "github.com/digitalocean/go-libvirt"

	"github.com/tetherhq/tether/agent/handler"
)

// Timeouts of the calls on libvirt.
const (
	// connectTimeout bounds dialling libvirt and its handshake.
	connectTimeout = 15 * time.Second
	// callTimeout bounds a call on libvirt (a few RPCs).
	callTimeout = 2 * time.Minute
	// copyTimeout bounds copying a gold image into a machine's disk.
	copyTimeout = 30 * time.Minute
)

// DefaultURI is the local system's libvirt.
const DefaultURI = "qemu:///system"

const defaultSocket = "/var/run/libvirt/libvirt-sock"

// ErrNotFound: no machine of that ID or name is on the platform.
var ErrNotFound = errors.New("no such machine")

// Driver makes and controls the machines of one libvirt platform. It is
// safe for concurrent use.
type Driver struct {
	uri string
	// remote is the URI libvirtd is asked to open once connected.
	remote lv.ConnectURI
	dial   func(ctx context.Context) (net.Conn, error)

	mu   sync.Mutex // guards conn
	conn *connection
}

// connection is one connection to libvirtd.
type connection struct {
	l *lv.Libvirt
	d *dialer
}

// New connects to the libvirt of uri ("" is qemu:///system): qemu:///system
// (the local socket), qemu+unix:///system?socket=PATH, or
// qemu+tcp://HOST:PORT/system.
func New(uri string) (*Driver, error) {
	if uri == "" {
		uri = DefaultURI
	}
	d := &Driver{uri: uri}
	var err error
	if d.remote, d.dial, err = parseURI(uri); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if _, err := d.connection(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// parseURI finds how to reach the libvirt of uri, and the URI libvirtd is
// asked to open.
func parseURI(uri string) (lv.ConnectURI, func(context.Context) (net.Conn, error), error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", nil, fmt.Errorf("libvirt uri %q: %w", uri, err)
	}
	const want = "want qemu:///system, qemu+unix:///system?socket=PATH or qemu+tcp://HOST:PORT/system"
	driver, transport, _ := strings.Cut(u.Scheme, "+")
	if driver != "qemu" {
		return "", nil, fmt.Errorf("libvirt uri %q: driver %q: only qemu is supported: %s", uri, driver, want)
	}
	var nd net.Dialer
	var dial func(context.Context) (net.Conn, error)
	switch transport {
	case "", "unix":
		if u.Host != "" {
			return "", nil, fmt.Errorf("libvirt uri %q: a host without a transport means TLS, which is not supported: %s", uri, want)
		}
		socket := defaultSocket
		if s := u.Query().Get("socket"); s != "" {
			socket = s
		}
		dial = func(ctx context.Context) (net.Conn, error) { return nd.DialContext(ctx, "unix", socket) }
	case "tcp":
		if u.Hostname() == "" {
			return "", nil, fmt.Errorf("libvirt uri %q: no host: %s", uri, want)
		}
		port := u.Port()
		if port == "" {
			port = "16509"
		}
		addr := net.JoinHostPort(u.Hostname(), port)
		dial = func(ctx context.Context) (net.Conn, error) { return nd.DialContext(ctx, "tcp", addr) }
	default:
		return "", nil, fmt.Errorf("libvirt uri %q: transport %q is not supported: %s", uri, transport, want)
	}
	return lv.RemoteURI(u), dial, nil
}

// Driver names the driver.
func (d *Driver) Driver() string { return "libvirt" }

// URI is the libvirt URI the driver was made for.
func (d *Driver) URI() string { return d.uri }

// Close drops the driver's connection.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.conn
	d.conn = nil
	if c == nil || !c.l.IsConnected() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, c.d.abort)
	err := c.l.Disconnect()
	stop()
	if err != nil && !errors.Is(err, lv.ErrInterrupted) {
		return fmt.Errorf("close libvirt at %s: %w", d.uri, err)
	}
	return nil
}

// connection returns the driver's connection, dialling libvirt if there
// is none or the last one was lost.
func (d *Driver) connection(ctx context.Context) (*connection, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil && d.conn.l.IsConnected() && !d.conn.d.closed() {
		return d.conn, nil
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	dl := &dialer{ctx: cctx, dial: d.dial}
	l := lv.NewWithDialer(dl)
	stop := context.AfterFunc(cctx, dl.abort)
	err := l.ConnectToURI(d.remote)
	stop()
	if err != nil {
		dl.abort()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case cctx.Err() != nil:
			err = fmt.Errorf("no answer within %s", connectTimeout)
		}
		return nil, fmt.Errorf("libvirt at %s is not answering: start libvirtd (as root: virtlogd -d; libvirtd -d, or systemctl start libvirtd) or check the platform's uri: %w", d.uri, err)
	}
	d.conn = &connection{l: l, d: dl}
	return d.conn, nil
}

// call runs f on the driver's connection within timeout. When ctx ends or
// the time is up first, the connection is dropped, which ends f's calls.
func (d *Driver) call(ctx context.Context, timeout time.Duration, f func(l *lv.Libvirt) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := d.connection(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(cctx, c.d.abort)
	err = f(c.l)
	if !stop() && err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("libvirt at %s did not answer within %s: %w", d.uri, timeout, err)
	}
	return err
}

// dialer dials libvirt for go-libvirt and keeps the connection so that it
// can be closed from outside (abort) when a call takes too long.
type dialer struct {
	ctx  context.Context // bounds the dial only
	dial func(context.Context) (net.Conn, error)

	mu      sync.Mutex
	conn    net.Conn
	aborted bool
}

func (d *dialer) Dial() (net.Conn, error) {
	c, err := d.dial(d.ctx)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.aborted {
		c.Close()
		return nil, context.Canceled
	}
	d.conn = c
	return c, nil
}

// abort closes the connection: go-libvirt's calls waiting on it return
// lv.ErrInterrupted.
func (d *dialer) abort() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.aborted = true
	if d.conn != nil {
		d.conn.Close()
	}
}

// closed reports whether abort closed the connection (go-libvirt notices
// it a moment later).
func (d *dialer) closed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.aborted
}

// isCode reports whether err is libvirt's error of that number.
func isCode(err error, code lv.ErrorNumber) bool {
	var e lv.Error
	return errors.As(err, &e) && e.Code == uint32(code)
}

var _ handler.MachineDriver = (*Driver)(nil)
