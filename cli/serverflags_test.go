package cli

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1048576", 1 << 20, true},
		{"64MiB", 64 << 20, true},
		{"512KiB", 512 << 10, true},
		{"1GiB", 1 << 30, true},
		{"100B", 100, true},
		{"64MB", 0, false},
		{"-1MiB", 0, false},
		{"lots", 0, false},
		{"99999999999GiB", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSize(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("got %d, %v; want %d, ok %v", got, err, tt.want, tt.ok)
			}
			if tt.ok {
				if back, _ := parseSize(formatSize(got)); back != got {
					t.Fatalf("formatSize(%d) = %q reads back as %d", got, formatSize(got), back)
				}
			}
		})
	}
}

// TETHER_OWN_AGENTS names the server's own agents, separated by commas.
func TestServerOwnAgentsFromTheEnvironment(t *testing.T) {
	t.Setenv("TETHER_OWN_AGENTS", "prod/hv1,prod/hv1")
	config := filepath.Join(t.TempDir(), "server.toml")
	if err := os.WriteFile(config, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := invoke(t, "server", "--config", config, "--postgres", "postgres://nobody@127.0.0.1:1/x")
	if code != exitUsage || !strings.Contains(errs, "--own-agent prod/hv1 given twice") {
		t.Fatalf("got exit %d, %q; want exit %d naming the agent given twice", code, errs, exitUsage)
	}
}

// Bad HTTP settings are usage errors naming the setting, found before the
// server connects to anything.
func TestServerHTTPFlagErrors(t *testing.T) {
	tests := []struct {
		name   string
		config string
		args   []string
		want   string
	}{
		{"size", "", []string{"--max-upload", "lots"}, "--max-upload"},
		{"per client above total", "", []string{"--max-conns", "10", "--max-conns-per-client", "20"}, "max-conns-per-client"},
		{"anonymous above total", "", []string{"--max-conns", "10", "--max-conns-per-client", "5", "--max-anonymous-conns", "20"}, "max-anonymous-conns"},
		{"handler timeout too long", "", []string{"--handler-timeout", "5m", "--write-timeout", "1m"}, "handler-timeout"},
		{"upload below body", "", []string{"--max-body", "2MiB", "--max-upload", "1MiB"}, "max-upload"},
		{"upload below body, from the config file", "max-body = \"2MiB\"\nmax-upload = \"1MiB\"\n", nil, "max-upload"},
		{"bad proxy", "", []string{"--trusted-proxy", "the load balancer"}, "--trusted-proxy"},
		{"bad webhook allow", "", []string{"--webhook-allow", "10.0.0.0/33"}, `--webhook-allow "10.0.0.0/33"`},
		{"bad webhook allow, second of a list in the config file", "webhook-allow = [\"10.0.0.0/8\", \"hooks.internal/x\"]\n", nil, `--webhook-allow "hooks.internal/x"`},
		{"bad webhook wildcard", "webhook-allow = \"*\"\n", nil, `--webhook-allow "*"`},
		{"webhook deny takes no name", "", []string{"--webhook-deny", "evil.example.com"}, `--webhook-deny "evil.example.com"`},
		{"state directory not a directory", "", []string{"--state-dir", "/dev/null"}, "--state-dir /dev/null"},
		{"state directory not a directory, from the config file", "state-dir = \"/dev/null\"\n", nil, "--state-dir /dev/null"},
		{"own agent without its environment", "", []string{"--own-agent", "hv1"}, `--own-agent "hv1": want ENV/NAME`},
		{"own agent from the config file", "own-agent = \"hv1\"\n", nil, `--own-agent "hv1": want ENV/NAME`},
		{"own agents from the config file", "own-agent = [\"prod/hv1\", \"prod/hv1\"]\n", nil, "--own-agent prod/hv1 given twice"},
		{"own agent's platform of another agent", "", []string{"--own-agent", "prod/hv1", "--own-agent-platform", "prod/hv2=libvirt"}, "add --own-agent prod/hv2"},
		{"own agent without a state directory", "", []string{"--own-agent", "prod/hv1", "--state-dir", ""}, "--own-agent needs --state-dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "server.toml")
			if err := os.WriteFile(config, []byte(tt.config), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"server", "--config", config, "--postgres", "postgres://nobody@127.0.0.1:1/x"}, tt.args...)
			code, _, errs := invoke(t, args...)
			if code != exitUsage || !strings.Contains(errs, tt.want) {
				t.Fatalf("got exit %d, %q; want exit %d naming %s", code, errs, exitUsage, tt.want)
			}
		})
	}
}

// --webhook-allow takes networks, addresses and host names, repeated or
// separated by commas; --webhook-deny networks and addresses.
func TestParseWebhookPolicy(t *testing.T) {
	p, err := parseWebhookPolicy([]string{"10.20.0.0/16, hooks.internal", "192.168.1.7", "*.svc.cluster.local", "::1"}, []string{"203.0.113.0/24,198.51.100.9"})
	if err != nil {
		t.Fatal(err)
	}
	wantAllow := []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("::1/128")}
	wantDeny := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.9/32")}
	if !slices.Equal(p.Allow, wantAllow) || !slices.Equal(p.Deny, wantDeny) || !slices.Equal(p.AllowHosts, []string{"hooks.internal", "*.svc.cluster.local"}) {
		t.Fatalf("got %+v; want allow %v, hosts hooks.internal and *.svc.cluster.local, deny %v", p, wantAllow, wantDeny)
	}
	if err := p.CheckAddr(netip.MustParseAddr("10.20.3.4")); err != nil {
		t.Fatalf("10.20.3.4 allowed by --webhook-allow 10.20.0.0/16: %v", err)
	}
	if err := p.CheckAddr(netip.MustParseAddr("10.21.3.4")); err == nil {
		t.Fatal("10.21.3.4: allowed, want denied (only 10.20.0.0/16 is allowed)")
	}
}
