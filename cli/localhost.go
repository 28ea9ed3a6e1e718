package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
)

// localHost is this machine as the embedded mode shows it to the model: a
// host of the inventory with the facts gathered here and the labels given
// with --label, on top of the inventory --inventory names, if any.
type localHost struct {
	labels map[string]string
	facts  map[string]any
	// base is the --inventory file's inventory, or nil.
	base *model.Inventory
}

// localLabels parses the repeatable --label key=value.
func localLabels(c *ucli.Context) (map[string]string, error) {
	labels := map[string]string{}
	for _, kv := range c.StringSlice("label") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("--label %q: want key=value, like --label role=web", kv)
		}
		labels[k] = v
	}
	if err := model.ValidateLabels(labels); err != nil {
		return nil, usageError("--label: %v", err)
	}
	return labels, nil
}

// inventory is the inventory the model is compiled against when this
// machine is host name: the base inventory's agents, with name's entry
// replaced by this machine's facts and its labels over the base's.
func (h localHost) inventory(name string) *model.Inventory {
	me := model.InventoryAgent{Name: name, Labels: map[string]string{}, Facts: h.facts}
	inv := &model.Inventory{}
	if h.base != nil {
		for _, a := range h.base.Agents {
			if a.Name == name {
				for k, v := range a.Labels {
					me.Labels[k] = v
				}
				continue
			}
			inv.Agents = append(inv.Agents, a)
		}
	}
	for k, v := range h.labels {
		me.Labels[k] = v
	}
	inv.Agents = append(inv.Agents, me)
	return inv
}

// hostCandidates are the host names this machine may have in the model, in
// order: the one --host names, or this machine's hostname (its first label)
// and then "local".
func hostCandidates(c *ucli.Context) ([]string, error) {
	if name := c.String("host"); name != "" {
		if err := model.ValidateAgentName(name); err != nil {
			return nil, usageError("--host %q: %v", name, err)
		}
		return []string{name}, nil
	}
	var out []string
	if hn, err := os.Hostname(); err == nil {
		hn, _, _ = strings.Cut(hn, ".")
		if model.ValidateAgentName(hn) == nil && hn != "local" {
			out = append(out, hn)
		}
	}
	return append(out, "local"), nil
}

// likelyFirst puts first the candidates that a host block of the model in
// dir seems to name (a cheap look at its files' text), so the usual case
// compiles once; the compile itself then decides (declares).
func likelyFirst(dir string, candidates []string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.hcl"))
	var text []byte
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			text = append(text, b...)
			text = append(text, '\n')
		}
	}
	var likely, rest []string
	for _, name := range candidates {
		if regexp.MustCompile(`(?m)^[ \t]*host[ \t]+"` + regexp.QuoteMeta(name) + `"`).Match(text) {
			likely = append(likely, name)
		} else {
			rest = append(rest, name)
		}
	}
	return append(likely, rest...)
}

// compileForHost compiles the model in dir with this machine as host name
// and keeps only that host's resources: the embedded mode deploys one
// machine, this one, never every host of a fleet model at once. A resource
// of the host that requires or subscribes to another host's is an error: a
// dependency across hosts needs a server.
func compileForHost(ctx context.Context, term *terminal, dir string, opts lang.Options, h localHost, name string) (*lang.Result, error) {
	opts.Inventory = h.inventory(name)
	res, err := compileDir(ctx, term, dir, opts)
	if err != nil {
		return nil, err
	}
	return onlyHost(res, name)
}

// onlyHost narrows a compile result to host name's resources.
func onlyHost(res *lang.Result, name string) (*lang.Result, error) {
	out := *res
	out.Resources = nil
	for _, r := range res.Resources {
		if r.ID.Agent == name {
			out.Resources = append(out.Resources, r)
		}
	}
	for _, r := range out.Resources {
		for _, ref := range slices.Concat(r.Requires, r.Subscribes) {
			if ref.Agent != name {
				return nil, &exitError{code: exitUsage, err: fmt.Errorf("%s depends on %s of host %s, which tether deploy does not deploy on this machine (it deploys host %s only): run the fleet through a server (tether server, tether export)", r.ID, ref, ref.Agent, name)}
			}
		}
	}
	out.Hosts = nil
	for _, hs := range res.Hosts {
		if hs.Name == name {
			out.Hosts = append(out.Hosts, hs)
		}
	}
	out.Undefined = nil
	for _, u := range res.Undefined {
		if u.Agent == name {
			out.Undefined = append(out.Undefined, u)
		}
	}
	return &out, nil
}

// declares reports whether the compile has a host block named name.
func declares(res *lang.Result, name string) bool {
	for _, h := range res.Hosts {
		if h.Name == name && h.Declared {
			return true
		}
	}
	return false
}

// declaredHosts lists the compile's host blocks.
func declaredHosts(res *lang.Result) []string {
	var out []string
	for _, h := range res.Hosts {
		if h.Declared {
			out = append(out, h.Name)
		}
	}
	return out
}
