// Command tether-agent is the Tether agent alone: the agent of the full
// tether binary (`tether agent run`), built without the server, its
// stores, the compiler and the operator's commands, for hosts that only
// run an agent.
package main

import (
	"context"
	"os"

	"github.com/tetherhq/tether/cli/agentcli"
)

func main() {
	os.Exit(agentcli.Main(context.Background(), os.Args, os.Stdout, os.Stderr))
}
