package guest

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultBroker is the broker a guest's agent connects to without
// Boot.Broker: the host's RabbitMQ, seen from QEMU's user-mode network.
const DefaultBroker = "amqp://guest:guest@10.0.2.2:5672/"

// Boot is what the guest's init reads from the kernel command line: the
// agent it runs and the address of eth0. Empty fields take init's
// defaults.
type Boot struct {
	// Name is the agent's name and the guest's hostname (tether.name;
	// "guest"), Env its environment (tether.env; the agent refuses to
	// start without one).
	Name, Env string
	// Token is an enrollment token (tether.token); ServerKey the
	// server's key or its fingerprint (tether.server_key), needed when the
	// token does not carry it.
	Token, ServerKey string
	// Broker is the AMQP URL (tether.broker; DefaultBroker), Namespace
	// the broker namespace (tether.namespace; the agent's default, tether).
	Broker, Namespace string
	// Labels are KEY=VALUE labels the agent announces (tether.labels).
	Labels []string
	// IP is eth0's address with its prefix (tether.ip; 10.0.2.15/24),
	// Gateway the default route (tether.gateway; 10.0.2.2).
	IP, Gateway string
	// LogLevel is the agent's --log-level (tether.log_level; info).
	LogLevel string
	// Console is the kernel's console (ttyS0: the first serial port).
	Console string
}

// ErrCmdline: a value the kernel command line cannot carry.
var ErrCmdline = errors.New("cannot go on the kernel command line")

// Cmdline returns the kernel command line: console=ttyS0 and a tether.*
// key for each field set. Values are split on blanks by the kernel and by
// init, and labels are joined with commas: a value with a blank, a quote
// or (a label) a comma is refused, naming the field.
func (b Boot) Cmdline() (string, error) {
	console := b.Console
	if console == "" {
		console = "ttyS0"
	}
	parts := []string{"console=" + console}
	add := func(key, field, v string) error {
		if v == "" {
			return nil
		}
		if strings.ContainsAny(v, " \t\n\"'") {
			return fmt.Errorf("guest boot %s %q: %w (no blanks or quotes)", field, v, ErrCmdline)
		}
		parts = append(parts, "tether."+key+"="+v)
		return nil
	}
	for _, l := range b.Labels {
		if strings.Contains(l, ",") || !strings.Contains(l, "=") {
			return "", fmt.Errorf("guest boot Labels %q: %w (want KEY=VALUE without a comma)", l, ErrCmdline)
		}
	}
	for _, kv := range [][3]string{
		{"name", "Name", b.Name}, {"env", "Env", b.Env}, {"token", "Token", b.Token}, {"server_key", "ServerKey", b.ServerKey},
		{"broker", "Broker", b.Broker}, {"namespace", "Namespace", b.Namespace}, {"labels", "Labels", strings.Join(b.Labels, ",")},
		{"ip", "IP", b.IP}, {"gateway", "Gateway", b.Gateway}, {"log_level", "LogLevel", b.LogLevel},
	} {
		if err := add(kv[0], kv[1], kv[2]); err != nil {
			return "", err
		}
	}
	return strings.Join(parts, " "), nil
}
