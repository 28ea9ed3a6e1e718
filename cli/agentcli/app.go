package agentcli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/bus"
)

// Main runs the tether-agent command line and returns the process's exit
// status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newApp(stdout, stderr).RunContext(ctx, hoistLogFlags(args))
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil:
		// SIGTERM is how the agent is stopped: a clean stop.
		return 0
	}
	fmt.Fprintf(stderr, "tether-agent: %v\n", err)
	return ExitCode(err)
}

// hoistLogFlags moves the logger's flags given after the command
// (`tether-agent run --log-level info`, as `tether agent run` takes them)
// before it, where urfave/cli looks for global flags.
func hoistLogFlags(args []string) []string {
	if len(args) < 2 {
		return args
	}
	global, rest := []string{args[0]}, []string{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, _, withValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "log-level" || name == "log-format") {
			global = append(global, a)
			if !withValue && i+1 < len(args) {
				i++
				global = append(global, args[i])
			}
			continue
		}
		rest = append(rest, a)
	}
	return append(global, rest...)
}

func newApp(stdout, stderr io.Writer) *ucli.App {
	terminal := isTerminal(stderr)
	logger := func(c *ucli.Context) (zerolog.Logger, error) {
		return Logger(c, stderr, terminal, os.Getenv("NO_COLOR") == "")
	}
	cmds := []*ucli.Command{RunCommand(stderr, logger), ResetJournalCommand(stdout), versionCommand(stdout)}
	for _, c := range cmds {
		c.OnUsageError = func(c *ucli.Context, err error, _ bool) error {
			return UsageError("%v: see 'tether-agent %s --help'", err, c.Command.Name)
		}
	}
	return &ucli.App{
		Name:  "tether-agent",
		Usage: "the Tether agent alone: keeps this host as the server's model says (the agent of the full tether binary, without the server, stores and compiler)",
		Description: "Run it as a service (the tether-agent package installs a systemd unit that does):\n\n" +
			"   tether-agent run --config /etc/tether/agent.toml\n\n" +
			"`tether-agent run` takes the same flags and config file as `tether agent run`; see its --help and docs/agents.md.",
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Flags:           LogFlags(),
		Commands:        cmds,
		OnUsageError: func(_ *ucli.Context, err error, _ bool) error {
			return UsageError("%v: see 'tether-agent --help'", err)
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() == 0 {
				return ucli.ShowAppHelp(c)
			}
			return UsageError("unknown command %q: see 'tether-agent --help'", c.Args().First())
		},
	}
}

func versionCommand(stdout io.Writer) *ucli.Command {
	return &ucli.Command{
		Name:  "version",
		Usage: "print the version of this tether-agent binary and the protocol it speaks",
		Flags: []ucli.Flag{&ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "output `FORMAT`: text or json"}},
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return UsageError("version takes no arguments")
			}
			bi := ReadBuildInfo()
			switch c.String("output") {
			case "json":
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					BuildInfo
					Protocol string `json:"protocol"`
				}{bi, protocol()})
			case "text":
				commit := ""
				if bi.Commit != "" {
					commit = " (" + bi.Commit[:min(12, len(bi.Commit))]
					if bi.Modified {
						commit += ", modified"
					}
					commit += ")"
				}
				_, err := fmt.Fprintf(stdout, "tether-agent %s%s %s %s, protocol %s\n", bi.Version, commit, bi.Go, bi.Platform, protocol())
				return err
			}
			return UsageError("-o %q: use text or json", c.String("output"))
		},
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func protocol() string { return bus.Protocol }
