package ssh_test

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/agent/target/ssh"
)

// TestConfigValidate needs no server: each broken setting is named.
func TestConfigValidate(t *testing.T) {
	good := func() ssh.Config {
		c := ssh.Default()
		c.Address, c.User, c.Password = "db1:22", "root", "pw"
		c.HostKey = "SHA256:F8uf9ceNOx4W3zkmC11m3IVdpY1xPL8E+Io0NgFp/Y8"
		return c
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("a complete config: %v", err)
	}
	tests := []struct {
		name  string
		spoil func(*ssh.Config)
		want  string
	}{
		{"no address", func(c *ssh.Config) { c.Address = "" }, "address"},
		{"no user", func(c *ssh.Config) { c.User = "" }, "user"},
		{"no credentials", func(c *ssh.Config) { c.Password = "" }, "neither a password nor a private key"},
		{"a bad key", func(c *ssh.Config) { c.PrivateKey = []byte("-----BEGIN NOTHING-----") }, "private key"},
		{"no host key", func(c *ssh.Config) { c.HostKey = "" }, "neither pinned nor trusted on first use"},
		{"a bad host key", func(c *ssh.Config) { c.HostKey = "ssh-ed25519 garbage" }, "authorized_keys format"},
		{"no dial timeout", func(c *ssh.Config) { c.DialTimeout = 0 }, "dial timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good()
			tt.spoil(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
