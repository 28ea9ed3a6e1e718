package cli

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/record"
)

// What the machine nouns (platform, distribution, host, instance) share:
// typed --set settings, texts read from files, the colours of states, and
// the hint a lookup that found nothing gets.

// repeated is a flag given any number of times, each value whole: unlike
// a string slice flag, a comma stays in its value (a message of the day,
// a kernel command line in a template).
type repeated []string

func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }
func (r *repeated) String() string     { return strings.Join(*r, " ") }

// repeatedFlag is a flag of repeated values.
func repeatedFlag(name, usage string) *ucli.GenericFlag {
	return &ucli.GenericFlag{Name: name, Value: &repeated{}, Usage: usage}
}

// repeatedValues returns the values given to a repeated flag.
func repeatedValues(c *ucli.Context, name string) []string {
	if r, ok := c.Generic(name).(*repeated); ok {
		return *r
	}
	return nil
}

// setFlag is --set key=value.
func setFlag(what string) *ucli.GenericFlag {
	return repeatedFlag("set", "set the setting `KEY=VALUE` of the "+what+" (repeatable): a whole number or true/false is sent as one, "+
		"unless the setting is known to be a string")
}

// keyValues reads KEY=VALUE pairs (of flag) into a map.
func keyValues(flag string, in []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range in {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("--%s %q: want KEY=VALUE", flag, kv)
		}
		out[k] = v
	}
	return out, nil
}

// parseSettings reads --set KEY=VALUE pairs into settings. A value is of
// the type of the parameter it sets when types knows it (a string stays
// a string even when it looks like a number); otherwise a whole number
// or true/false is taken as one, anything else as a string.
func parseSettings(in []string, types map[string]record.ParamType) (map[string]any, error) {
	kvs, err := keyValues("set", in)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(kvs))
	for k, v := range kvs {
		typ, known := types[k]
		if !known {
			out[k] = guessValue(v)
			continue
		}
		if out[k], err = typedValue(typ, v); err != nil {
			return nil, usageError("--set %s=%s: %v", k, v, err)
		}
	}
	return out, nil
}

// guessValue is a value of unknown type as typed on the command line.
func guessValue(v string) any {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	if b, err := strconv.ParseBool(v); err == nil && (v == "true" || v == "false") {
		return b
	}
	return v
}

// typedValue reads v as a parameter of type typ.
func typedValue(typ record.ParamType, v string) (any, error) {
	switch typ {
	case record.ParamInt:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("want a whole number")
		}
		return n, nil
	case record.ParamBool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("want true or false")
		}
		return b, nil
	case record.ParamString, record.ParamSecret:
		return v, nil
	}
	return nil, fmt.Errorf("unknown type %q: want string, int, bool or secret", typ)
}

// paramTypes are the types of params, by name, over those of more.
func paramTypes(params ...[]record.Param) map[string]record.ParamType {
	out := map[string]record.ParamType{}
	for _, ps := range params {
		for _, p := range ps {
			out[p.Name] = p.Type
		}
	}
	return out
}

// textArg reads a flag's text: @FILE is the file's content, anything
// else the text itself.
func textArg(flag, v string) (string, error) {
	name, ok := strings.CutPrefix(v, "@")
	if !ok {
		return v, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return "", usageError("--%s: %v", flag, err)
	}
	return string(b), nil
}

// settingsTable writes settings as a table, sorted by name.
func settingsTable(term *terminal, settings map[string]any) error {
	if len(settings) == 0 {
		return nil
	}
	fmt.Fprintln(term.stdout)
	t := newTable(term, "SETTING", "VALUE")
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		t.row(k, fmt.Sprint(settings[k]))
	}
	return t.flush()
}

// joinPairs writes a map as k=v,… sorted.
func joinPairs[V any](m map[string]V) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return strings.Join(out, ",")
}

// hostStateColour is the colour of a host's state.
func hostStateColour(s record.HostState) colour {
	switch s {
	case record.HostProvisioned:
		return green
	case record.HostFailed:
		return red
	case record.HostProvisioning, record.HostDeprovisioning:
		return yellow
	}
	return none
}

// powerColour is the colour of an instance's power state.
func powerColour(p record.PowerState) colour {
	switch p {
	case record.PowerRunning:
		return green
	case record.PowerCrashed:
		return red
	case record.PowerPaused, record.PowerStarting, record.PowerUnknown:
		return yellow
	}
	return none
}

// notFound reports whether err is the server's answer that it found
// nothing.
func notFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.status == http.StatusNotFound
}

// orNotFound adds what to do next to an answer that found nothing.
func orNotFound(err error, next string) error {
	if notFound(err) {
		return fmt.Errorf("%w: %s", err, next)
	}
	return err
}

// mustNotExist refuses to add what the API path p names when it exists
// (what to do instead: next).
func mustNotExist(c *ucli.Context, cl *client, p, exists string) error {
	switch err := cl.call(c.Context, "GET", p, nil, nil); {
	case err == nil:
		return usageError("%s", exists)
	case !notFound(err):
		return err
	}
	return nil
}

// machinePath is the API path of a machine noun's item: /envs/ENV/NOUN/NAME.
func machinePath(cl *client, noun, name string) (string, error) {
	return envPath(cl, "/"+noun+"/"+url.PathEscape(name))
}

// dash writes an empty text as -.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// describe gives cmd's subcommands their descriptions, by name: what
// --help shows above the flags.
func describe(cmd *ucli.Command, texts map[string]string) *ucli.Command {
	for _, sub := range cmd.Subcommands {
		if d, ok := texts[sub.Name]; ok {
			sub.Description = d
		}
	}
	return cmd
}

// getMachineRecord reads one platform, distribution or host (plural
// names the collection, noun the command) into a T.
func getMachineRecord[T any](c *ucli.Context, cl *client, noun, plural, name string) (T, error) {
	var v T
	p, err := machinePath(cl, plural, name)
	if err != nil {
		return v, err
	}
	return v, orNotFound(cl.call(c.Context, "GET", p, nil, &v), fmt.Sprintf("tether %s list shows the %s", noun, plural))
}

// putMachineRecord creates or replaces one at p and shows the answer.
func putMachineRecord[T any](c *ucli.Context, cl *client, term *terminal, p string, req any, asJSON bool, show func(*terminal, T) error) error {
	var v T
	if err := cl.call(c.Context, "PUT", p, req, &v); err != nil {
		return err
	}
	if asJSON {
		return writeJSON(term.stdout, v)
	}
	return show(term, v)
}

// machineDeleteCommand is `tether NOUN delete NAME`.
func machineDeleteCommand(term *terminal, noun, plural, usage string) *ucli.Command {
	return remoteCommand(term, "delete", usage, "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
		name := c.Args().First()
		p, err := machinePath(cl, plural, name)
		if err != nil {
			return err
		}
		if err := cl.call(c.Context, "DELETE", p, nil, nil); err != nil {
			return orNotFound(err, fmt.Sprintf("tether %s list shows the %s", noun, plural))
		}
		if asJSON {
			return writeJSON(term.stdout, map[string]string{"deleted": name})
		}
		fmt.Fprintf(term.stdout, "%s %s deleted\n", noun, name)
		return nil
	})
}

// machineShowCommand is `tether NOUN show NAME`.
func machineShowCommand[T any](term *terminal, noun, plural, usage string, show func(*terminal, T) error) *ucli.Command {
	return remoteCommand(term, "show", usage, "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
		v, err := getMachineRecord[T](c, cl, noun, plural, c.Args().First())
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(term.stdout, v)
		}
		return show(term, v)
	})
}

// newMachinePath is the path of a platform, distribution or host to add,
// refused when one of its name exists.
func newMachinePath(c *ucli.Context, cl *client, noun, plural string) (string, error) {
	name := c.Args().First()
	p, err := machinePath(cl, plural, name)
	if err != nil {
		return "", err
	}
	return p, mustNotExist(c, cl, p, fmt.Sprintf("%s %s exists in environment %s: tether %s update %s changes it", noun, name, cl.env, noun, name))
}
