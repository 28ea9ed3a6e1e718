package cli

import (
	"bufio"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// yesFlag skips the confirmation of a command that destroys something.
func yesFlag() ucli.Flag {
	return &ucli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do it without asking (needed when stdin is not a terminal)"}
}

// errNotConfirmed: the person asked did not confirm; nothing was done.
var errNotConfirmed = fmt.Errorf("not confirmed: nothing was deleted")

// confirm asks a person to type name before what (a sentence saying what
// happens) is done. --yes skips it; without a terminal to ask on, and
// without --yes, it refuses (a script says --yes on purpose).
func confirm(c *ucli.Context, term *terminal, what, name string) error {
	if c.Bool("yes") {
		return nil
	}
	if !term.interactive {
		return usageError("%s; stdin is not a terminal to confirm it on: pass --yes to do it", what)
	}
	fmt.Fprintf(term.stderr, "%s.\nType %s to confirm: ", what, name)
	line, err := bufio.NewReader(term.stdin).ReadString('\n')
	if strings.TrimSpace(line) != name {
		if err != nil && line == "" {
			fmt.Fprintln(term.stderr)
		}
		return &exitError{code: exitFailed, err: errNotConfirmed}
	}
	return nil
}
