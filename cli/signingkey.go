package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/record"
)

// serverSigningKeyCommand is `tether server signing-key`: the rollover of
// the key the server signs every command with, through the API.
func serverSigningKeyCommand(term *terminal) *ucli.Command {
	force := func(what string) []ucli.Flag {
		return []ucli.Flag{&ucli.BoolFlag{Name: "force", Usage: what}}
	}
	step := func(name, usage, description string, flags []ucli.Flag) *ucli.Command {
		cmd := remoteCommand(term, name, usage, "", flags, func(c *ucli.Context, cl *client, asJSON bool) error {
			var body any
			if name != "new" {
				body = map[string]bool{"force": c.Bool("force")}
			}
			var st record.SigningKeyStatus
			if err := cl.call(c.Context, "POST", "/server/signing-key/"+name, body, &st); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, st)
			}
			switch name {
			case "new":
				fmt.Fprintf(term.stdout, "next signing key %s made and announced to %d agent(s).\n\n", st.Next.Fingerprint, st.Sent)
			case "switch":
				fmt.Fprintf(term.stdout, "every server signs with %s now; %d agent(s) sent a first command signed by it.\n\n", st.Signing.Fingerprint, st.Sent)
			default:
				fmt.Fprintf(term.stdout, "old signing key retired; the servers hold one key, %s.\n\n", st.Signing.Fingerprint)
			}
			// Right after new, no agent has had time to take the key:
			// status lists them as they do.
			writeSigningKeyStatus(term.stdout, st, name != "new")
			if st.Note != "" {
				fmt.Fprintf(term.stdout, "\n%s\n", st.Note)
			}
			return nil
		})
		cmd.Description = description + "\n\nNeeds an admin token for every environment. See docs/security.md, \"The server's signing key\"."
		return cmd
	}
	return &ucli.Command{
		Name:  "signing-key",
		Usage: "roll over the key the server signs every command with: new, switch, retire (status says where it stands)",
		Description: "Agents take only commands signed by the server key they pinned. A rollover moves them to a new key\n" +
			"without enrolling them again, in three steps, each through the API of any server of the database:\n\n" +
			"   tether server signing-key new      # make the next key, announce it to every agent\n" +
			"   tether server signing-key status   # wait until every agent takes it\n" +
			"   tether server signing-key switch   # every server signs with it\n" +
			"   tether server signing-key status   # wait until every agent takes it alone\n" +
			"   tether server signing-key retire   # forget the old key\n\n" +
			"This is not `tether server rotate-key`, which replaces the key of the key file that seals the\n" +
			"signing key in the database.",
		Subcommands: []*ucli.Command{
			signingKeyStatusCommand(term),
			step("new", "make the server's next signing key and announce it to every accepted agent",
				"The next key is kept in the database, sealed with the key file as the current one is, and announced to\n"+
					"every accepted agent in server.rollover: signed by the current key, with the next key's proof made for\n"+
					"that agent. Each agent keeps it and acknowledges it; one that is away gets it at its next hello.\n"+
					"The current key still signs everything. One rollover at a time.", nil),
			step("switch", "make every server sign with the next key, once every accepted agent took it",
				"Every server of the database signs with the next key from the same instant, a few seconds after the\n"+
					"request (twice the servers' signing-key refresh); the answer comes after it, once every agent was sent\n"+
					"a first command signed by the next key, which makes that key the only one the agent takes. Refused while\n"+
					"accepted agents have not taken the next key (status lists them), unless --force: those get the\n"+
					"rollover, signed by the old key, before anything else, as long as the old key is kept.",
				force("switch though some agents have not taken the next key yet (an agent that is away, or older than signing-key rollovers)")),
			step("retire", "forget the key the servers signed with before the switch",
				"From then on the old key signs nothing. Refused while accepted agents do not take the new key (status\n"+
					"lists them: they catch up at their next hello), unless --force: those must then be enrolled again.\n"+
					"Enrollment tokens made before the switch carry the old key's fingerprint and no longer enroll agents:\n"+
					"make new ones (tether agent token create).",
				force("retire though some agents do not take the new key yet: they must then be enrolled again")),
		},
	}
}

func signingKeyStatusCommand(term *terminal) *ucli.Command {
	cmd := remoteCommand(term, "status", "say where a rollover of the server's signing key stands, and which agents are not ready for its next step", "", nil,
		func(c *ucli.Context, cl *client, asJSON bool) error {
			var st record.SigningKeyStatus
			if err := cl.call(c.Context, "GET", "/server/signing-key", nil, &st); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(term.stdout, st)
			}
			writeSigningKeyStatus(term.stdout, st, true)
			return nil
		})
	cmd.Description = "Phases: steady (one key), announced (a next key made; the current key signs), switching (every server signs\n" +
		"with the next key from the time shown), switched (the next key signs; the old one is kept for agents that missed\n" +
		"the rollover, until retired). Needs an admin token for every environment."
	return cmd
}

// writeSigningKeyStatus writes a rollover's state for people, with the
// agents not ready for its next step if waiting.
func writeSigningKeyStatus(w io.Writer, st record.SigningKeyStatus, waiting bool) {
	fmt.Fprintf(w, "phase      %s\nsigning    %s\n", st.Phase, st.Signing.Fingerprint)
	if st.Next != nil {
		fmt.Fprintf(w, "next       %s (made %s)\n", st.Next.Fingerprint, st.MadeAt.Local().Format(time.DateTime))
	}
	if st.SwitchAt != nil && st.Phase == record.SigningKeySwitching {
		fmt.Fprintf(w, "switch at  %s\n", st.SwitchAt.Local().Format(time.DateTime))
	}
	if st.Previous != nil {
		fmt.Fprintf(w, "previous   %s (kept for agents that missed the rollover, until retired)\n", st.Previous.Fingerprint)
	}
	what, step := "", ""
	switch st.Phase {
	case record.SigningKeyAnnounced:
		what, step = "take the next key", "tether server signing-key switch"
	case record.SigningKeySwitching, record.SigningKeySwitched:
		what, step = "take the new key", "tether server signing-key retire"
	default:
		what = "take the signing key"
	}
	if !waiting {
		return
	}
	fmt.Fprintf(w, "agents     %d accepted, %d %s\n", st.Agents, st.Ready, what)
	for _, a := range st.Waiting {
		conn := "offline"
		if a.Connected {
			conn = "connected"
		}
		takes := "never said which server keys it takes: older than signing-key rollovers, upgrade it"
		if len(a.ServerKeys) > 0 {
			takes = "takes " + strings.Join(a.ServerKeys, ", ")
		}
		fmt.Fprintf(w, "  waiting  %s/%s (%s; %s)\n", a.Env, a.Agent, conn, takes)
	}
	if n := st.WaitingCount - len(st.Waiting); n > 0 {
		fmt.Fprintf(w, "  and %d more\n", n)
	}
	switch {
	case step != "" && st.WaitingCount == 0 && st.Phase != record.SigningKeySwitching:
		fmt.Fprintf(w, "next step  %s\n", step)
	case step != "" && st.Phase != record.SigningKeySwitching:
		fmt.Fprintf(w, "next step  %s, once the agents waiting take it (they do at their next hello), or with --force\n", step)
	}
}
