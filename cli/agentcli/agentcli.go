// Package agentcli is the agent's command line: `tether agent run` and
// `tether agent reset-journal` of the full binary, and the whole of the
// agent-only tether-agent binary. What it imports is all an agent needs:
// the dependency rules prove it never reaches the server, its stores, the
// compiler or their drivers, so tether-agent stays small.
package agentcli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/tetherhq/tether/bus/amqp"
)

// version is set at build time (-ldflags "-X
// github.com/tetherhq/tether/cli/agentcli.version=v1.2.3"); otherwise it
// comes from the module's build information.
var version = ""

// BuildInfo says which build this binary is.
type BuildInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// ReadBuildInfo returns this binary's build: the version given at build
// time, else the module's version, else "dev", and the commit Go recorded.
func ReadBuildInfo() BuildInfo {
	out := BuildInfo{Version: version, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		out.Go = bi.GoVersion
		if out.Version == "" {
			out.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				out.Commit = s.Value
			case "vcs.modified":
				out.Modified = s.Value == "true"
			}
		}
	}
	if out.Version == "" || out.Version == "(devel)" {
		out.Version = "dev"
	}
	return out
}

// Exit statuses shared by tether and tether-agent.
const (
	ExitFailed = 1
	// ExitUsage: bad flags, arguments or configuration.
	ExitUsage = 2
)

// ExitError carries an exit status; the message of Err is printed to
// stderr.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// UsageError is an error of the command line (exit status 2).
func UsageError(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// ExitCode is the exit status of a command that returned err (non-nil).
func ExitCode(err error) int {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ExitFailed
}

// LogFlags are the global flags of the logger.
func LogFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "log-level", Value: "warn", EnvVars: []string{"TETHER_LOG_LEVEL"},
			Usage: "how much to log to stderr: debug, info, warn, error"},
		&ucli.StringFlag{Name: "log-format", Value: "auto", EnvVars: []string{"TETHER_LOG_FORMAT"},
			Usage: "log format: auto (text on a terminal, JSON otherwise), text, json"},
	}
}

// Logger builds the process's logger from the global flags; terminal says
// stderr is a terminal, color that colour is allowed (NO_COLOR unset).
func Logger(c *ucli.Context, stderr io.Writer, terminal, color bool) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(c.String("log-level")))
	if err != nil || level == zerolog.NoLevel {
		return zerolog.Nop(), UsageError("--log-level %q: use debug, info, warn or error", c.String("log-level"))
	}
	var w io.Writer = stderr
	switch c.String("log-format") {
	case "json":
	case "text":
		w = zerolog.ConsoleWriter{Out: stderr, NoColor: !terminal || !color}
	case "auto":
		if terminal {
			w = zerolog.ConsoleWriter{Out: stderr, NoColor: !color}
		}
	default:
		return zerolog.Nop(), UsageError("--log-format %q: use auto, text or json", c.String("log-format"))
	}
	return zerolog.New(Serialized(w)).Level(level).With().Timestamp().Logger(), nil
}

// Serialized returns w made safe for the goroutines that write to it at
// once (the server, the agent and the progress of one process): a file
// takes each write whole, any other writer (a buffer) gets a lock.
func Serialized(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return zerolog.SyncWriter(w)
}

// BrokerFlags are the flags naming the broker, shared by the server and
// the agent; queueTypeUsage says what --queue-type means to each.
func BrokerFlags(queueTypeUsage string) []ucli.Flag {
	return []ucli.Flag{
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "amqp", Value: "amqp://guest:guest@127.0.0.1:5672/", EnvVars: []string{"TETHER_AMQP"},
			Usage: "RabbitMQ `URL` (amqps:// for TLS)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "amqp-namespace", Value: "tether", EnvVars: []string{"TETHER_AMQP_NAMESPACE"},
			Usage: "`PREFIX` of every exchange and queue on the broker (the same for the server and its agents)"}),
		altsrc.NewStringFlag(&ucli.StringFlag{Name: "queue-type", Value: amqp.QueueQuorum, EnvVars: []string{"TETHER_QUEUE_TYPE"},
			Usage: queueTypeUsage}),
	}
}

// ConfigFileSource reads the TOML config file under the flags: from
// --config when given (it must exist), else from the default path if
// present. Its errors are usage errors, said plainly.
func ConfigFileSource(flags []ucli.Flag) ucli.BeforeFunc {
	return func(c *ucli.Context) error {
		path := c.String("config")
		if _, err := os.Stat(path); err != nil {
			if c.IsSet("config") {
				return UsageError("--config %s: %v", path, err)
			}
			return nil
		}
		src, err := altsrc.NewTomlSourceFromFile(path)
		if err != nil {
			return UsageError("config file %s: %v", path, err)
		}
		if err := altsrc.ApplyInputSourceValues(c, listOrOne{src}, flags); err != nil {
			return UsageError("config file %s: %v", path, err)
		}
		return nil
	}
}

// listOrOne is a config file where a key that takes a list (name, label)
// may also be given one string: name = "web-1" as name = ["web-1"].
type listOrOne struct{ altsrc.InputSourceContext }

func (s listOrOne) StringSlice(name string) ([]string, error) {
	v, err := s.InputSourceContext.StringSlice(name)
	if err != nil {
		if one, oneErr := s.InputSourceContext.String(name); oneErr == nil {
			return []string{one}, nil
		}
		return nil, UsageError("config key %s: want a string or a list of strings", name)
	}
	return v, nil
}

// RedactURL hides a URL's credentials.
func RedactURL(u string) string {
	at, scheme := strings.LastIndex(u, "@"), strings.Index(u, "://")
	if at > 0 && scheme >= 0 && scheme < at {
		return u[:scheme+3] + "…" + u[at:]
	}
	return u
}

// FactsDirFlag is where an agent (or tether deploy) reads custom facts.
func FactsDirFlag() ucli.Flag {
	return altsrc.NewStringFlag(&ucli.StringFlag{Name: "facts-dir", Value: "/etc/tether/facts.d", EnvVars: []string{"TETHER_FACTS_DIR"},
		Usage: "`DIR` of custom facts: each *.json file is an object whose keys become facts (host.facts.KEY); built-in facts win a name both have"})
}
