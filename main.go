// Command tether is the Tether orchestrator: one binary for the embedded
// mode, the server, the agent and the operator's command line.
package main

import (
	"os"

	"github.com/tetherhq/tether/cli"
)

func main() {
	os.Exit(cli.Run(os.Args))
}
