package cli

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

func orgFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "org", Usage: "act in organization `ORG` (server admins; default: your own)"}
}

// orgQuery is the ?org= of a users route.
func orgQuery(c *ucli.Context) string {
	if org := c.String("org"); org != "" {
		return "?org=" + url.QueryEscape(org)
	}
	return ""
}

func userPath(c *ucli.Context, name string) string {
	return "/users/" + url.PathEscape(name) + orgQuery(c)
}

// password reads a password from stdin (--password-stdin, first line), or
// makes a random one, which the command prints once.
func password(c *ucli.Context) (pw string, made bool, err error) {
	if c.Bool("password-stdin") {
		line, err := bufio.NewReader(io.LimitReader(c.App.Reader, record.MaxPasswordLen+2)).ReadString('\n')
		if err != nil && err != io.EOF {
			return "", false, fmt.Errorf("read the password from stdin: %w", err)
		}
		pw = strings.TrimRight(line, "\r\n")
		if err := record.ValidatePassword(pw); err != nil {
			return "", false, usageError("--password-stdin: %v", err)
		}
		return pw, false, nil
	}
	secret, err := record.NewSessionSecret()
	if err != nil {
		return "", false, err
	}
	return secret[:24], true, nil
}

// roleList shows a user's roles: the organization-wide one, then env=role.
func roleList(u record.User) string {
	var parts []string
	if u.Role != "" {
		parts = append(parts, "*="+string(u.Role))
	}
	envs := make([]string, 0, len(u.Roles))
	for env := range u.Roles {
		envs = append(envs, env)
	}
	sort.Strings(envs)
	for _, env := range envs {
		parts = append(parts, env+"="+string(u.Roles[env]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// userWithPassword is what user add and passwd answer in JSON: the user,
// and the password when tether made it up.
type userWithPassword struct {
	record.User
	Password string `json:"password,omitempty"`
}

func userCommand(term *terminal) *ucli.Command {
	pwFlag := &ucli.BoolFlag{Name: "password-stdin", Usage: "read the password from the first line of stdin (default: make up a random one and print it once)"}
	return &ucli.Command{
		Name:  "user",
		Usage: "manage the people who log in (organization admins)",
		Description: "Users log in to the server with a name and a password (the web console, POST /api/v1/session).\n" +
			"A user has a role in every environment of the organization (grant NAME ROLE) and/or roles in\n" +
			"single environments (grant NAME ROLE --in ENV): admin, operator or viewer.\n" +
			"Admins of the default organization administer the server (tether org).",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "add", "create a user; without --password-stdin a random password is made and printed once", "NAME", []ucli.Flag{
				orgFlag(), pwFlag,
				&ucli.StringFlag{Name: "role", Usage: "role in every environment of the organization: admin, operator or viewer (default: none)"},
				&ucli.StringSliceFlag{Name: "env-role", Usage: "role in one environment, `ENV=ROLE` (repeat for more)"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				req := api.UserRequest{Name: c.Args().First(), Role: record.Role(c.String("role"))}
				for _, kv := range c.StringSlice("env-role") {
					env, role, ok := strings.Cut(kv, "=")
					if !ok || env == "" {
						return usageError("--env-role %q: want ENV=ROLE, e.g. prod=operator", kv)
					}
					if req.Roles == nil {
						req.Roles = map[string]record.Role{}
					}
					req.Roles[env] = record.Role(role)
				}
				pw, made, err := password(c)
				if err != nil {
					return err
				}
				req.Password = pw
				var u record.User
				if err := cl.call(c.Context, "POST", "/users"+orgQuery(c), req, &u); err != nil {
					return err
				}
				return showPassword(term, asJSON, u, pw, made, "created;")
			}),
			remoteCommand(term, "list", "list the organization's users with their roles (*=ROLE: every environment)", "", []ucli.Flag{orgFlag()}, func(c *ucli.Context, cl *client, asJSON bool) error {
				var us []record.User
				if err := cl.call(c.Context, "GET", "/users"+orgQuery(c), nil, &us); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, us)
				}
				t := newTable(term, "NAME", "ROLES", "CREATED", "BY")
				for _, u := range us {
					t.row(u.Name, roleList(u), u.CreatedAt.Local().Format(time.DateTime), u.CreatedBy)
				}
				return t.flush()
			}),
			remoteCommand(term, "show", "show a user with its roles", "NAME", []ucli.Flag{orgFlag()}, func(c *ucli.Context, cl *client, asJSON bool) error {
				var u record.User
				if err := cl.call(c.Context, "GET", userPath(c, c.Args().First()), nil, &u); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, u)
				}
				fmt.Fprintf(term.stdout, "user %s (%s) of organization %s\nroles: %s\ncreated %s by %s; password set %s\n", u.Name, u.ID, u.Org, roleList(u),
					u.CreatedAt.Local().Format(time.DateTime), u.CreatedBy, u.PasswordChangedAt.Local().Format(time.DateTime))
				return nil
			}),
			remoteCommand(term, "passwd", "set a user's password (ends the user's sessions); without --password-stdin a random one is made and printed once", "NAME", []ucli.Flag{orgFlag(), pwFlag}, func(c *ucli.Context, cl *client, asJSON bool) error {
				pw, made, err := password(c)
				if err != nil {
					return err
				}
				var u record.User
				if err := cl.call(c.Context, "PATCH", userPath(c, c.Args().First()), api.UserUpdate{Password: pw}, &u); err != nil {
					return err
				}
				return showPassword(term, asJSON, u, pw, made, "has a new password;")
			}),
			remoteCommand(term, "delete", "delete a user with its sessions and the tokens it owns", "NAME", []ucli.Flag{orgFlag()}, func(c *ucli.Context, cl *client, asJSON bool) error {
				name := c.Args().First()
				if err := cl.call(c.Context, "DELETE", userPath(c, name), nil, nil); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, map[string]string{"deleted": name})
				}
				fmt.Fprintf(term.stdout, "user %s deleted\n", name)
				return nil
			}),
			remoteCommand(term, "grant", "give a user ROLE (admin, operator, viewer) in every environment, or in one with --in", "NAME ROLE", []ucli.Flag{
				orgFlag(), &ucli.StringFlag{Name: "in", Usage: "the role is in environment `ENV` only"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				role := record.Role(c.Args().Get(1))
				if !role.Valid() {
					return usageError("role %q: want admin, operator or viewer", c.Args().Get(1))
				}
				return changeRole(c, cl, term, asJSON, role)
			}),
			remoteCommand(term, "revoke", "take a user's role in every environment away, or its role in one with --in", "NAME", []ucli.Flag{
				orgFlag(), &ucli.StringFlag{Name: "in", Usage: "take the role in environment `ENV` away"},
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				return changeRole(c, cl, term, asJSON, "")
			}),
		},
	}
}

func changeRole(c *ucli.Context, cl *client, term *terminal, asJSON bool, role record.Role) error {
	var req api.UserUpdate
	if env := c.String("in"); env != "" {
		req.Roles = map[string]record.Role{env: role}
	} else {
		r := role
		if r == "" {
			r = "none"
		}
		req.Role = &r
	}
	var u record.User
	if err := cl.call(c.Context, "PATCH", userPath(c, c.Args().First()), req, &u); err != nil {
		return err
	}
	if asJSON {
		return writeJSON(term.stdout, u)
	}
	fmt.Fprintf(term.stdout, "user %s: roles %s\n", u.Name, roleList(u))
	return nil
}

func showPassword(term *terminal, asJSON bool, u record.User, pw string, made bool, what string) error {
	if asJSON {
		out := userWithPassword{User: u}
		if made {
			out.Password = pw
		}
		return writeJSON(term.stdout, out)
	}
	fmt.Fprintf(term.stdout, "user %s of organization %s %s roles %s\n", u.Name, u.Org, what, roleList(u))
	if made {
		fmt.Fprintf(term.stdout, "password (shown once; pass it on safely):\n\n    %s\n", pw)
	}
	return nil
}

func orgCommand(term *terminal) *ucli.Command {
	return &ucli.Command{
		Name:  "org",
		Usage: "manage organizations (server admins)",
		Description: "Organizations group environments, users and API tokens, and see nothing of each other.\n" +
			"Everything made before organizations is in the organization \"default\", whose admins\n" +
			"administer the server. Give a new organization its first admin with\n" +
			"tether user add NAME --org ORG --role admin.",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "add", "create an organization", "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				var o record.Org
				if err := cl.call(c.Context, "POST", "/orgs", api.OrgRequest{Name: c.Args().First()}, &o); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, o)
				}
				fmt.Fprintf(term.stdout, "organization %s created; give it an admin: tether user add NAME --org %s --role admin\n", o.Name, o.Name)
				return nil
			}),
			remoteCommand(term, "list", "list organizations", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				var os []record.Org
				if err := cl.call(c.Context, "GET", "/orgs", nil, &os); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, os)
				}
				t := newTable(term, "NAME", "CREATED")
				for _, o := range os {
					t.row(o.Name, o.CreatedAt.Local().Format(time.DateTime))
				}
				return t.flush()
			}),
			remoteCommand(term, "delete", "delete an organization that has no environments left, with its users and tokens", "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				name := c.Args().First()
				if err := cl.call(c.Context, "DELETE", "/orgs/"+url.PathEscape(name), nil, nil); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, map[string]string{"deleted": name})
				}
				fmt.Fprintf(term.stdout, "organization %s deleted\n", name)
				return nil
			}),
		},
	}
}
