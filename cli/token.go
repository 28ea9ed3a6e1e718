package cli

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

func tokenCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:  "token",
		Usage: "manage API tokens (admin)",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "create", "create a token; its secret is printed once", "NAME", []ucli.Flag{
				&ucli.StringFlag{Name: "role", Value: "viewer", Usage: "admin, operator or viewer"},
				&ucli.StringFlag{Name: "for-env", Usage: "scope the token to this environment (default: every one)"},
				&ucli.StringFlag{Name: "expires-in", Usage: "lifetime, e.g. 720h (default: never expires)"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				var nt api.NewToken
				req := api.TokenRequest{Name: c.Args().First(), Role: record.Role(c.String("role")), Env: c.String("for-env"), ExpiresIn: c.String("expires-in")}
				if err := cl.call(c.Context, "POST", "/tokens", req, &nt); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, nt)
				}
				fmt.Fprintf(term.stdout, "token %s (%s, role %s): shown once, store it now:\n\n    %s\n", nt.Name, nt.ID, nt.Role, nt.Secret)
				return nil
			}),
			remoteCommand(term, "list", "list tokens (never their secrets)", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				var ts []record.Token
				if err := cl.call(c.Context, "GET", "/tokens", nil, &ts); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, ts)
				}
				t := newTable(term, "ID", "NAME", "ROLE", "ENV", "CREATED", "EXPIRES")
				for _, tok := range ts {
					exp := "never"
					if tok.ExpiresAt != nil {
						exp = tok.ExpiresAt.Local().Format(time.DateTime)
					}
					env := tok.Env
					if env == "" {
						env = "*"
					}
					t.row(tok.ID, tok.Name, string(tok.Role), env, tok.CreatedAt.Local().Format(time.DateTime), exp)
				}
				return t.flush()
			}),
			remoteCommand(term, "revoke", "revoke a token, by ID or NAME", "ID|NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				var ts []record.Token
				if err := cl.call(c.Context, "GET", "/tokens", nil, &ts); err != nil {
					return err
				}
				tok, err := pickToken(c.Args().First(), ts, func(t record.Token) (string, string) { return t.ID, t.Name }, "tether token list")
				if err != nil {
					return err
				}
				if err := cl.call(c.Context, "DELETE", "/tokens/"+url.PathEscape(tok.ID), nil, nil); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, tok)
				}
				fmt.Fprintf(term.stdout, "token %s (%s, role %s) revoked\n", tok.Name, tok.ID, tok.Role)
				return nil
			}),
		},
	}
}

// pickToken finds the token arg names among ts: the one with that ID, else
// the one with that name. A name several tokens share is a usage error
// listing their IDs; list is the command that lists them.
func pickToken[T any](arg string, ts []T, key func(T) (id, name string), list string) (T, error) {
	var named []T
	var ids []string
	for _, t := range ts {
		id, name := key(t)
		if id == arg {
			return t, nil
		}
		if name == arg {
			named = append(named, t)
			ids = append(ids, id)
		}
	}
	var zero T
	switch len(named) {
	case 1:
		return named[0], nil
	case 0:
		return zero, &exitError{code: exitFailed, err: fmt.Errorf("no token with ID or name %q (%s lists them)", arg, list)}
	}
	return zero, usageError("%d tokens are named %q: revoke one by its ID (%s)", len(named), arg, strings.Join(ids, ", "))
}
