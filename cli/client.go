package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/api"
)

// remoteFlags name the server, environment and token of operator commands.
// Precedence: flag > TETHER_* variable > .tether.toml file (in the current
// directory or a parent) > default.
func remoteFlags() []ucli.Flag {
	return append(connectionFlags(), outputFlag())
}

// connectionFlags name the server, the environment and the token.
func connectionFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "server", EnvVars: []string{"TETHER_SERVER"}, Usage: "server `URL` (default http://127.0.0.1:8420)"},
		&ucli.StringFlag{Name: "env", Aliases: []string{"e"}, EnvVars: []string{"TETHER_ENV"}, Usage: "`ENVIRONMENT` to act on"},
		&ucli.StringFlag{Name: "token", EnvVars: []string{"TETHER_TOKEN"}, Usage: "API `TOKEN` (prefer TETHER_TOKEN or .tether.toml: flags show in ps)"},
	}
}

// projectConfigName is a project's config file; stateDirName is the
// directory where tether keeps a project's state (its module cache, the
// embedded store of tether deploy). The config file was once named
// .tether, which a project's state directory then could not be.
const (
	projectConfigName = ".tether.toml"
	stateDirName      = ".tether"
)

// oldProjectConfig is the usage error for a project config file under its
// old name (path, a file named .tether): it says how to rename it.
func oldProjectConfig(path string) error {
	return usageError("%s is a project config file under its old name: rename it (mv %s %s); %s is now only the directory where tether keeps a project's state",
		path, path, filepath.Join(filepath.Dir(path), projectConfigName), stateDirName)
}

// checkStateDir refuses a model directory whose .tether is a file: the
// project config file under its old name, where tether keeps its state.
func checkStateDir(dir string) error {
	p := filepath.Join(dir, stateDirName)
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return oldProjectConfig(p)
	}
	return nil
}

// projectConfig is the .tether.toml file of a project.
type projectConfig struct {
	Server string `toml:"server"`
	Env    string `toml:"env"`
	Token  string `toml:"token"`
}

// findProjectConfig reads the nearest .tether.toml from dir upwards. A
// .tether file found first is one under its old name: an error says how to
// rename it.
func findProjectConfig(dir string) (projectConfig, string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if err := checkStateDir(d); err != nil {
			return projectConfig{}, "", err
		}
		p := filepath.Join(d, projectConfigName)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			var pc projectConfig
			md, err := toml.DecodeFile(p, &pc)
			if err != nil {
				return pc, p, usageError("%s: %v (want lines such as server = \"https://tether.example:8420\")", p, err)
			}
			if und := md.Undecoded(); len(und) > 0 {
				return pc, p, usageError("%s: unknown key %q (keys: server, env, token)", p, und[0].String())
			}
			return pc, p, nil
		}
		if filepath.Dir(d) == d {
			return projectConfig{}, "", nil
		}
	}
}

// client talks to the server's REST API.
type client struct {
	base, env, token string
	http             *http.Client
}

func newClient(c *ucli.Context) (*client, error) {
	wd, _ := os.Getwd()
	pc, _, err := findProjectConfig(wd)
	if err != nil {
		return nil, err
	}
	pick := func(name, file, def string) string {
		if v := c.String(name); v != "" {
			return v
		}
		if file != "" {
			return file
		}
		return def
	}
	cl := &client{
		base:  strings.TrimSuffix(pick("server", pc.Server, "http://127.0.0.1:8420"), "/"),
		env:   pick("env", pc.Env, ""),
		token: pick("token", pc.Token, ""),
		http:  &http.Client{Timeout: 10 * time.Minute},
	}
	if cl.token == "" {
		return nil, usageError("no API token: set TETHER_TOKEN, put token = \"...\" in .tether.toml, or pass --token (the server printed a bootstrap token on first start)")
	}
	return cl, nil
}

// needEnv returns the environment, or a usage error saying how to name one.
func (cl *client) needEnv() (string, error) {
	if cl.env == "" {
		return "", usageError("no environment: pass --env NAME, set TETHER_ENV, or put env = \"NAME\" in .tether.toml")
	}
	return cl.env, nil
}

// apiError is an error the server answered with.
type apiError struct {
	status int
	body   api.Error
}

func (e *apiError) Error() string {
	msg := e.body.Message
	if e.body.Hint != "" {
		msg += " (" + e.body.Hint + ")"
	}
	return msg
}

// call sends a request to /api/v1/path and decodes the answer into out.
func (cl *client) call(ctx context.Context, method, path string, body, out any) error {
	if body == nil {
		return cl.send(ctx, method, path, "", nil, out)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return cl.send(ctx, method, path, "application/json", b, out)
}

// send sends body (of contentType; nil: none) to /api/v1/path and decodes
// the answer into out.
func (cl *client) send(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, cl.base+"/api/v1"+path, rd)
	if err != nil {
		return usageError("server URL %q: %v", cl.base, err)
	}
	req.Header.Set("Authorization", "Bearer "+cl.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cannot reach the server at %s: %v (is `tether server` running? check --server / TETHER_SERVER)", cl.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		var eb api.Body
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(data, &eb) != nil || eb.Error == nil {
			return fmt.Errorf("server at %s answered %s: %s", cl.base, resp.Status, strings.TrimSpace(string(data)))
		}
		return &apiError{status: resp.StatusCode, body: *eb.Error}
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("decode the server's answer: %w", err)
	}
	return nil
}

// remoteAction runs fn with a client and the output format.
func remoteAction(args string, fn func(c *ucli.Context, cl *client, json bool) error) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		format, err := outputFormat(c)
		if err != nil {
			return err
		}
		if err := checkArgs(c, args); err != nil {
			return err
		}
		cl, err := newClient(c)
		if err != nil {
			return err
		}
		return fn(c, cl, format == "json")
	}
}

// checkArgs checks the number of arguments against args, the command's
// ArgsUsage: "NAME" is one, "[NAME]" an optional one, and "..." at the end
// takes any number more.
func checkArgs(c *ucli.Context, args string) error {
	fields := strings.Fields(args)
	required := 0
	for _, f := range fields {
		if !strings.HasPrefix(f, "[") {
			required++
		}
	}
	n, variadic := c.NArg(), strings.HasSuffix(args, "...")
	switch {
	case required == len(fields) && !variadic && n != required:
		return usageError("%s takes %d argument(s): %s (see '%s --help')", commandPath(c), required, args, commandPath(c))
	case n < required || (!variadic && n > len(fields)):
		return usageError("%s takes %s, not %d argument(s) (see '%s --help')", commandPath(c), args, n, commandPath(c))
	}
	return nil
}

func remoteCommand(term *terminal, name, usage, args string, flags []ucli.Flag, fn func(c *ucli.Context, cl *client, json bool) error) *ucli.Command {
	return &ucli.Command{
		Name: name, Usage: usage, ArgsUsage: args,
		Flags:  append(remoteFlags(), flags...),
		Action: remoteAction(args, fn),
	}
}

func envPath(cl *client, rest string) (string, error) {
	env, err := cl.needEnv()
	if err != nil {
		return "", err
	}
	return "/envs/" + url.PathEscape(env) + rest, nil
}
