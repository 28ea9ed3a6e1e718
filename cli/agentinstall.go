package cli

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
)

// installFlags are the flags of agent install-script and agent cloud-init.
func installFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "package", Usage: "the tether-agent .deb the host installs: an http(s):// `URL` it downloads, or a path on the host (required)"},
		&ucli.StringFlag{Name: "amqp", Usage: "the broker `URL` the agent connects to, as the host reaches it (required; no user: the agent logs in as itself)"},
		&ucli.StringFlag{Name: "amqp-namespace", Usage: "the broker's `PREFIX`, when the server's --amqp-namespace is not the default"},
		&ucli.StringFlag{Name: "tls-ca", Usage: "CA certificate `FILE` (PEM) the agent trusts for amqps://, copied into the output"},
		&ucli.StringSliceFlag{Name: "label", Usage: "a label `KEY=VALUE` the agent announces (repeatable)"},
		&ucli.DurationFlag{Name: "token-ttl", Value: time.Hour, Usage: "how long the enrollment token made for it enrolls agents (every host started from the output within it)"},
		&ucli.IntFlag{Name: "max-uses", Usage: "how many agents the token may enroll (default: no bound, for an image many hosts start from)"},
	}
}

// agentInstall is what an install script or user-data says.
type agentInstall struct {
	Env       string    `json:"env"`
	TokenID   string    `json:"token_id"`
	ExpiresAt time.Time `json:"expires_at"`
	ServerKey string    `json:"server_key"`
	Package   string    `json:"package"`
	config    string    // agent.toml
	caPEM     string    // the broker's CA, "" for none
}

// agentConfigTOML is the agent.toml an install writes.
type agentConfigTOML struct {
	Env       string   `toml:"env"`
	AMQP      string   `toml:"amqp"`
	Namespace string   `toml:"amqp-namespace,omitempty"`
	TLSCA     string   `toml:"tls-ca,omitempty"`
	Token     string   `toml:"token"`
	ServerKey string   `toml:"server-key"`
	Labels    []string `toml:"label,omitempty"`
	StateDir  string   `toml:"state-dir"`
}

const installCAPath = "/etc/tether/broker-ca.pem"

// newAgentInstall checks the flags and makes the enrollment token.
func newAgentInstall(c *ucli.Context, cl *client, what string) (agentInstall, error) {
	pkg, broker := c.String("package"), c.String("amqp")
	if pkg == "" {
		return agentInstall{}, usageError("--package: name the tether-agent .deb the host installs (an https:// URL, or a path on the host)")
	}
	if broker == "" {
		return agentInstall{}, usageError("--amqp: name the broker URL the agent connects to (amqps://broker.example.com/)")
	}
	if strings.ContainsAny(pkg, "'\n") {
		return agentInstall{}, usageError("--package %q: a URL or path without quotes or newlines", pkg)
	}
	for _, l := range c.StringSlice("label") {
		if k, _, ok := strings.Cut(l, "="); !ok || k == "" {
			return agentInstall{}, usageError("--label %q: want KEY=VALUE", l)
		}
	}
	if c.Duration("token-ttl") <= 0 {
		return agentInstall{}, usageError("--token-ttl %s: give a lifetime, e.g. 1h", c.Duration("token-ttl"))
	}
	var ca []byte
	if f := c.String("tls-ca"); f != "" {
		var err error
		if ca, err = os.ReadFile(f); err != nil {
			return agentInstall{}, usageError("--tls-ca: %v", err)
		}
		if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
			return agentInstall{}, usageError("--tls-ca %s: not a PEM certificate", f)
		}
	}
	p, err := envPath(cl, "/enrollment-tokens")
	if err != nil {
		return agentInstall{}, err
	}
	var nt api.NewEnrollmentToken
	req := api.EnrollmentTokenRequest{Name: what + " " + time.Now().UTC().Format("2006-01-02T15:04:05Z"), MaxUses: c.Int("max-uses"),
		ExpiresIn: c.Duration("token-ttl").String()}
	if err := cl.call(c.Context, "POST", p, req, &nt); err != nil {
		return agentInstall{}, err
	}
	fp, err := model.TokenFingerprint(nt.Token)
	if err != nil {
		return agentInstall{}, fmt.Errorf("the server's enrollment token: %w", err)
	}
	conf := agentConfigTOML{Env: nt.Env, AMQP: broker, Namespace: c.String("amqp-namespace"), Token: nt.Token, ServerKey: fp,
		Labels: c.StringSlice("label"), StateDir: "/var/lib/tether"}
	if len(ca) > 0 {
		conf.TLSCA = installCAPath
	}
	var b bytes.Buffer
	b.WriteString("# /etc/tether/agent.toml, written by tether " + what + ": the keys are the flags of tether-agent run.\n")
	if err := toml.NewEncoder(&b).Encode(conf); err != nil {
		return agentInstall{}, err
	}
	in := agentInstall{Env: nt.Env, TokenID: nt.ID, ServerKey: fp, Package: pkg, config: b.String(), caPEM: string(ca)}
	if nt.ExpiresAt != nil {
		in.ExpiresAt = *nt.ExpiresAt
	}
	return in, nil
}

// installSteps is the shell that installs the package and starts the
// agent, once the configuration is in place: it downloads a URL, keeps
// the configuration written before (--force-confold), and starts the agent
// with systemd, or in the background where systemd does not run.
func installSteps(pkg string) string {
	return `set -eu
PACKAGE='` + pkg + `'
case "$PACKAGE" in
http://*|https://*)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	if command -v curl >/dev/null 2>&1; then curl -fsSL -o "$tmp/tether-agent.deb" "$PACKAGE"; else wget -qO "$tmp/tether-agent.deb" "$PACKAGE"; fi
	deb="$tmp/tether-agent.deb" ;;
*) deb="$PACKAGE" ;;
esac
# Another install may hold dpkg's lock (unattended upgrades at a first
# boot): wait for it, up to 10 minutes; any other failure stops here.
tries=0
until out=$(DEBIAN_FRONTEND=noninteractive dpkg --force-confold -i "$deb" 2>&1); do
	echo "$out" >&2
	case "$out" in *lock*) ;; *) exit 1 ;; esac
	tries=$((tries + 1))
	[ "$tries" -lt 120 ] || exit 1
	echo "tether-agent: dpkg is busy with another install; trying again in 5 s" >&2
	sleep 5
done
echo "$out"
if [ -d /run/systemd/system ]; then
	systemctl enable tether-agent.service
	systemctl restart tether-agent.service
	echo "tether-agent: installed and started (journalctl -u tether-agent)"
else
	# No systemd (a container): the agent runs in the background.
	nohup setsid /usr/bin/tether-agent run --config /etc/tether/agent.toml --log-level info --log-format json \
		>>/var/log/tether-agent.log 2>&1 </dev/null &
	echo $! >/run/tether-agent.pid
	echo "tether-agent: installed and started without systemd (pid $(cat /run/tether-agent.pid), log /var/log/tether-agent.log)"
fi
`
}

// writeFileShell is shell writing content to path with mode, root's.
func writeFileShell(path, mode, content string) string {
	const end = "TETHER_EOF"
	return fmt.Sprintf("install -d -m 0755 %s\n(umask 077; cat >%s <<'%s'\n%s%s\n)\nchmod %s %s\n",
		path[:strings.LastIndex(path, "/")], path, end, content, end, mode, path)
}

func agentInstallScriptCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "install-script", "print a shell script that installs, configures and starts an agent on a host, with a new enrollment token", "",
		installFlags(), func(c *ucli.Context, cl *client, asJSON bool) error {
			in, err := newAgentInstall(c, cl, "agent install-script")
			if err != nil {
				return err
			}
			var b strings.Builder
			b.WriteString("#!/bin/sh\n")
			fmt.Fprintf(&b, "# Installs the Tether agent and enrolls it in environment %s (made by tether agent install-script).\n", in.Env)
			fmt.Fprintf(&b, "# Its enrollment token (%s) enrolls agents until %s: keep this script as secret as the token.\n", in.TokenID, expiry(in.ExpiresAt))
			fmt.Fprintf(&b, "# The agent trusts only the server whose key is %s.\n", in.ServerKey)
			b.WriteString("# Run it as root: sh install-tether-agent.sh\n")
			b.WriteString(writeFileShell("/etc/tether/agent.toml", "0600", in.config))
			if in.caPEM != "" {
				b.WriteString(writeFileShell(installCAPath, "0644", strings.TrimRight(in.caPEM, "\n")+"\n"))
			}
			b.WriteString(installSteps(in.Package))
			if asJSON {
				return writeJSON(term.stdout, struct {
					agentInstall
					Script string `json:"script"`
				}{in, b.String()})
			}
			_, err = fmt.Fprint(term.stdout, b.String())
			return err
		})
	cmd.Description = "The script writes /etc/tether/agent.toml (the environment, the broker, a new enrollment token and the\n" +
		"server key's fingerprint), installs the tether-agent package from --package and starts the agent: with\n" +
		"systemd where it runs, else in the background. The token enrolls every host the script runs on within\n" +
		"--token-ttl (the environment's enrollment must be token). Run it on the host as root:\n\n" +
		"   tether agent install-script -e prod --package https://example.com/tether-agent_1.4.0_amd64.deb \\\n" +
		"     --amqp amqps://broker.example.com/ --label role=web > install.sh\n" +
		"   scp install.sh web-1: && ssh web-1 sudo sh install.sh\n\n" +
		"With -o json: the script and the token's id, expiry and server key, for scripts."
	return cmd
}

func agentCloudInitCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "cloud-init", "print cloud-init user-data that installs, configures and starts an agent on a new host, with a new enrollment token", "",
		installFlags(), func(c *ucli.Context, cl *client, asJSON bool) error {
			in, err := newAgentInstall(c, cl, "agent cloud-init")
			if err != nil {
				return err
			}
			var b strings.Builder
			b.WriteString("#cloud-config\n")
			fmt.Fprintf(&b, "# Installs the Tether agent and enrolls it in environment %s (made by tether agent cloud-init).\n", in.Env)
			fmt.Fprintf(&b, "# Its enrollment token (%s) enrolls agents until %s: keep this user-data as secret as the token.\n", in.TokenID, expiry(in.ExpiresAt))
			fmt.Fprintf(&b, "# The agent trusts only the server whose key is %s.\n", in.ServerKey)
			b.WriteString("write_files:\n")
			file := func(path, mode, content string) {
				fmt.Fprintf(&b, "  - path: %s\n    owner: root:root\n    permissions: '%s'\n    content: |\n", path, mode)
				for _, line := range strings.Split(strings.TrimRight(content, "\n"), "\n") {
					b.WriteString("      " + line + "\n")
				}
			}
			file("/etc/tether/agent.toml", "0600", in.config)
			if in.caPEM != "" {
				file(installCAPath, "0644", in.caPEM)
			}
			b.WriteString("runcmd:\n  - - sh\n    - -c\n    - |\n")
			for _, line := range strings.Split(strings.TrimRight(installSteps(in.Package), "\n"), "\n") {
				b.WriteString("      " + line + "\n")
			}
			if asJSON {
				return writeJSON(term.stdout, struct {
					agentInstall
					UserData string `json:"user_data"`
				}{in, b.String()})
			}
			_, err = fmt.Fprint(term.stdout, b.String())
			return err
		})
	cmd.Description = "The user-data writes /etc/tether/agent.toml (the environment, the broker, a new enrollment token and\n" +
		"the server key's fingerprint), then installs the tether-agent package from --package and starts the agent.\n" +
		"Every host started from it within --token-ttl enrolls (the environment's enrollment must be token):\n\n" +
		"   tether agent cloud-init -e prod --token-ttl 1h --package https://example.com/tether-agent_1.4.0_amd64.deb \\\n" +
		"     --amqp amqps://broker.example.com/ --label role=web > user-data.yaml\n\n" +
		"With -o json: the user-data and the token's id, expiry and server key, for scripts."
	return cmd
}

func expiry(t time.Time) string {
	if t.IsZero() {
		return "it is revoked (tether agent token revoke)"
	}
	return t.UTC().Format(time.RFC3339)
}
