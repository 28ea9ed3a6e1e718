// Package cli is the `tether` command: flags, environment variables and
// config files are read here and nowhere else, and turned into the Config
// structs of the packages that do the work. It also builds the one logger
// the rest of the program uses.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/cli/agentcli"
)

// Exit statuses.
const (
	exitOK = 0
	// exitFailed: the command ran and something failed (a resource, the store).
	exitFailed = 1
	// exitUsage: bad flags or arguments, or a model that does not compile.
	exitUsage = 2
	// exitInterrupted: stopped by SIGINT/SIGTERM.
	exitInterrupted = 130
)

// exitError carries an exit status; message (if any) is printed to stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// errPrinted is an error whose message was already shown to the user.
var errPrinted = errors.New("failed")

// Run runs the tether command line and returns the process exit status.
func Run(args []string) int {
	return run(context.Background(), args, os.Stdin, os.Stdout, os.Stderr)
}

// terminal is where a command writes; tests substitute buffers.
type terminal struct {
	stdout, stderr io.Writer
	// color: stdout is a terminal and NO_COLOR is not set (tables and
	// outcomes get colour).
	color bool
	// progress: stderr is a terminal (progress lines are drawn).
	progress bool
	// stderrColor: stderr is a terminal and NO_COLOR is not set (compile
	// diagnostics get colour).
	stderrColor bool
	// stdin is where a confirmation is read; interactive: it is a
	// terminal (a person can be asked).
	stdin       io.Reader
	interactive bool
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	term := &terminal{stdout: stdout, stderr: stderr,
		color: isTerminal(stdout) && colorAllowed(), progress: isTerminal(stderr), stderrColor: isTerminal(stderr) && colorAllowed(),
		stdin: stdin, interactive: isTerminalIn(stdin)}
	term.stdout, term.stderr = agentcli.Serialized(stdout), agentcli.Serialized(stderr)
	app := newApp(term)
	app.Reader = stdin
	args, err := helpArgs(app, args)
	if err == nil {
		err = app.RunContext(ctx, reorderFlags(app, args))
	}
	if err == nil {
		return exitOK
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "tether: interrupted")
		return exitInterrupted
	}
	code := exitFailed
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	} else if errors.As(err, new(*agentcli.ExitError)) {
		code = agentcli.ExitCode(err)
	}
	if !errors.Is(err, errPrinted) {
		fmt.Fprintf(stderr, "tether: %v\n", err)
	}
	return code
}

// isTerminal reports whether w is a terminal. A variable, so that tests can
// stand a buffer in for a terminal.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// isTerminalIn reports whether r is a terminal; a variable for tests, as
// isTerminal.
var isTerminalIn = func(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func newApp(term *terminal) *ucli.App {
	return &ucli.App{
		Name:  "tether",
		Usage: "intent-based orchestration for fleets behind NAT and firewalls",
		Description: "Describe the desired state of your hosts in a model (HCL), and Tether makes them so and keeps them so.\n\n" +
			"First steps:\n" +
			"   tether deploy examples/quickstart     compile a model and deploy it on this machine\n" +
			"   tether compile examples/quickstart    show the resources a model compiles to\n\n" +
			"Every command has --help (or: tether help COMMAND...); most take -o json for scripts.",
		Writer:          term.stdout,
		ErrWriter:       term.stderr,
		HideHelpCommand: true,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "log-level", Value: "warn", EnvVars: []string{"TETHER_LOG_LEVEL"},
				Usage: "how much to log to stderr: debug, info, warn, error"},
			&ucli.StringFlag{Name: "log-format", Value: "auto", EnvVars: []string{"TETHER_LOG_FORMAT"},
				Usage: "log format: auto (text on a terminal, JSON otherwise), text, json"},
			&ucli.StringFlag{Name: "cpu-profile", Hidden: true, Usage: "write a CPU profile of the command to `FILE` (for developers)"},
			&ucli.StringFlag{Name: "mem-profile", Hidden: true, Usage: "write an allocation profile of the command to `FILE` (for developers)"},
		},
		Before: startProfile,
		After:  stopProfile,
		Commands: withUsageErrors(
			deployCommand(term),
			compileCommand(term),
			compilesCommand(term),
			serverCommand(term),
			exportCommand(term),
			envCommand(term),
			resourceCommand(term),
			agentCommand(term),
			alertCommand(term),
			tokenCommand(term),
			webhookCommand(term),
			platformCommand(term),
			distributionCommand(term),
			hostCommand(term),
			instanceCommand(term),
			userCommand(term),
			orgCommand(term),
			watchCommand(term),
			benchCommand(term),
			versionCommand(term),
			releaseCommand(term),
			completionCommand(term),
			manCommand(term),
		),
		Action: func(c *ucli.Context) error {
			if c.NArg() == 0 {
				return ucli.ShowAppHelp(c)
			}
			return unknownCommand(c)
		},
		OnUsageError: onUsageError,
		// Errors are printed once, by run, with their exit status.
		ExitErrHandler: func(*ucli.Context, error) {},
	}
}

// helpArgs turns `tether help CMD...` into `tether CMD... --help`, so that
// help for a nested command (tether help agent accept) is that command's
// own --help. A name that is no command is a usage error; flags are left
// out. (A command named help would take the --help flag away from the
// app: urfave/cli adds it only where no such command exists.)
func helpArgs(app *ucli.App, args []string) ([]string, error) {
	if len(args) < 2 || args[1] != "help" {
		return args, nil
	}
	var path []string
	for _, a := range args[2:] {
		if !strings.HasPrefix(a, "-") {
			path = append(path, a)
		}
	}
	cmds := app.Commands
	for i, name := range path {
		var found *ucli.Command
		for _, c := range cmds {
			if c.HasName(name) {
				found = c
			}
		}
		if found == nil {
			parent := strings.Join(append([]string{"tether"}, path[:i]...), " ")
			return nil, usageError("no command %q in %s: see '%s --help'", name, parent, parent)
		}
		cmds = found.Subcommands
	}
	return append(append([]string{args[0]}, path...), "--help"), nil
}

// withUsageErrors gives every command the app's usage-error handling: a
// short message and exit status 2 instead of a help dump.
// A command that only groups others shows its help alone, and takes a word
// that is none of its commands as a usage error.
func withUsageErrors(cmds ...*ucli.Command) []*ucli.Command {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		c.HideHelpCommand = true
		if c.Action == nil && len(c.Subcommands) > 0 {
			c.Action = func(c *ucli.Context) error {
				if c.NArg() == 0 {
					return ucli.ShowSubcommandHelp(c)
				}
				return unknownCommand(c)
			}
		}
		withUsageErrors(c.Subcommands...)
	}
	return cmds
}

// unknownCommand is the usage error for a word that names no command.
func unknownCommand(c *ucli.Context) error {
	return usageError("unknown command %q: see '%s --help'", c.Args().First(), commandPath(c))
}

// startProfile starts the CPU profile asked for with --cpu-profile.
func startProfile(c *ucli.Context) error {
	if c.String("mem-profile") != "" {
		runtime.MemProfileRate = 4096
	}
	path := c.String("cpu-profile")
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--cpu-profile: %w", err)
	}
	// A command lasts a fraction of a second: sample at 1 kHz, not 100 Hz.
	runtime.SetCPUProfileRate(1000)
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--cpu-profile: %w", err)
	}
	c.App.Metadata = map[string]any{"profile": f}
	return nil
}

func stopProfile(c *ucli.Context) error {
	if path := c.String("mem-profile"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("--mem-profile: %w", err)
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			f.Close()
			return fmt.Errorf("--mem-profile: %w", err)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	f, ok := c.App.Metadata["profile"].(*os.File)
	if !ok {
		return nil
	}
	pprof.StopCPUProfile()
	return f.Close()
}

func onUsageError(c *ucli.Context, err error, _ bool) error {
	return usageError("%v: see '%s --help'", err, commandPath(c))
}

// commandPath is the full command line name of the running command:
// "tether resource list", or "tether" itself.
func commandPath(c *ucli.Context) string {
	if c.Command == nil || c.Command.HelpName == "" {
		return "tether"
	}
	return c.Command.HelpName
}

// logger builds the process's logger from the global flags.
func logger(c *ucli.Context, stderr io.Writer) (zerolog.Logger, error) {
	return agentcli.Logger(c, stderr, isTerminal(stderr), colorAllowed())
}

// reorderFlags lets flags follow positional arguments (`tether deploy DIR
// --dry-run`), which urfave/cli v2 would otherwise take as arguments: after
// the command name, the command's flags and their values move before the
// positionals, and global flags (--log-level) move before the command.
// Everything after "--" stays as it is.
func reorderFlags(app *ucli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	// Find the command (descending into subcommands) and where its
	// arguments start.
	var cmd *ucli.Command
	start, first := 1, 0
	commands := app.Commands
	for i := 1; i < len(args); i++ {
		if strings.HasPrefix(args[i], "-") {
			if cmd == nil && takesValue(app.Flags, args[i]) && !strings.Contains(args[i], "=") {
				i++
			}
			if cmd != nil {
				break // the command's own flags start here
			}
			continue
		}
		var sub *ucli.Command
		for _, c := range commands {
			if c.HasName(args[i]) {
				sub = c
			}
		}
		if sub == nil {
			break
		}
		if cmd == nil {
			first = i
		}
		cmd, start, commands = sub, i+1, sub.Subcommands
	}
	if cmd == nil {
		return args
	}
	var global, flags, positional []string
	for i := start; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			dest, set := &flags, cmd.Flags
			if !isFlag(cmd.Flags, a) && isFlag(app.Flags, a) {
				dest, set = &global, app.Flags
			}
			*dest = append(*dest, a)
			if takesValue(set, a) && !strings.Contains(a, "=") && i+1 < len(args) {
				i++
				*dest = append(*dest, args[i])
			}
		default:
			positional = append(positional, a)
		}
	}
	out := append([]string{}, args[:first]...)
	out = append(out, global...)
	out = append(out, args[first:start]...)
	out = append(out, flags...)
	return append(out, positional...)
}

// isFlag reports whether arg names one of flags.
func isFlag(flags []ucli.Flag, arg string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// takesValue reports whether arg names a flag that takes a value.
func takesValue(flags []ucli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	name, _, _ = strings.Cut(name, "=")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				// altsrc wraps the flags a configuration file may
				// set: ask the flag, not its type.
				if v, ok := f.(interface{ TakesValue() bool }); ok {
					return v.TakesValue()
				}
				_, isBool := f.(*ucli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}
