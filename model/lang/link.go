package lang

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/graph"
)

// nameKey indexes the resources of a host by kind and name (title, block
// name or identity) within one body instance, or host-wide (scope -1).
type nameKey struct {
	scope      int
	kind, name string
}

// link resolves references, merges equal duplicates and refuses conflicting
// ones, adds implicit edges, and refuses cycles. It returns every resource,
// sorted by ID.
func (c *compiler) link(hosts []*hostInfo) []model.Resource {
	byAgent := make(map[string]map[model.ID]*decl, len(hosts))
	var out []*decl
	for _, h := range hosts {
		byID := c.linkHost(h)
		byAgent[h.agent] = byID
		for _, d := range h.decls {
			if byID[d.res.ID] == d {
				out = append(out, d)
			}
		}
	}
	if c.diags.HasErrors() {
		return nil
	}
	// Requirements on other hosts given as strings must exist when the
	// compile manages that host.
	for _, d := range out {
		for i := range d.dynamic {
			for _, r := range d.dynamic[i] {
				if r.id.Agent == d.res.ID.Agent {
					continue
				}
				other, managed := byAgent[r.id.Agent]
				if !managed {
					c.diags = append(c.diags, &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: "Requirement outside the model",
						Detail: fmt.Sprintf("%s %ss %s, on an agent this model does not manage; it waits until that resource is deployed", d.res.ID, verb(refAttrNames[i]), r.id), Subject: r.rng.Ptr()})
					continue
				}
				if _, ok := other[r.id]; !ok {
					c.diags = append(c.diags, errorf(r.rng.Ptr(), "Reference to undeclared resource",
						"%s is not in the model (%s %ss it)", r.id, d.res.ID, verb(refAttrNames[i])))
				}
			}
		}
	}
	resources := make([]model.Resource, len(out))
	for i, d := range out {
		resources[i] = d.res
	}
	if c.diags.HasErrors() {
		return nil
	}
	if _, err := graph.FromResources(resources).Sort(); err != nil {
		var ce *graph.CycleError
		if errors.As(err, &ce) {
			var first *decl
			for _, byID := range byAgent {
				if d, ok := byID[ce.Cycle[0]]; ok {
					first = d
				}
			}
			var rng *hcl.Range
			if first != nil {
				rng = first.rb.block.DefRange.Ptr()
			}
			c.diags = append(c.diags, errorf(rng, "Requirement cycle",
				"%s (each resource requires the next)", strings.TrimPrefix(err.Error(), "dependency cycle: ")))
			return nil
		}
		c.diags = append(c.diags, errorf(nil, "Invalid requirements", "%v", err))
		return nil
	}
	model.SortResources(resources)
	return resources
}

func verb(attr string) string {
	if attr == "requires" {
		return "require"
	}
	return "subscribe"
}

// linkHost links the resources of one host and returns them by ID (the
// first declaration of each).
func (c *compiler) linkHost(h *hostInfo) map[model.ID]*decl {
	// The name index is needed only by static references and ID strings
	// naming this host.
	needed := false
	for _, d := range h.decls {
		if len(d.rb.refs[0].static)+len(d.rb.refs[1].static)+len(d.dynamic[0])+len(d.dynamic[1]) > 0 {
			needed = true
			break
		}
	}
	var idx map[nameKey][]*decl
	if needed {
		idx = make(map[nameKey][]*decl, 2*len(h.decls))
	}
	add := func(k nameKey, d *decl) { idx[k] = append(idx[k], d) }
	for _, d := range h.decls {
		if !needed {
			break
		}
		kind := d.rb.kind.Kind
		add(nameKey{d.scope, kind, d.rb.name}, d)
		add(nameKey{-1, kind, d.rb.name}, d)
		if d.res.ID.Value != d.rb.name {
			add(nameKey{d.scope, kind, d.res.ID.Value}, d)
			add(nameKey{-1, kind, d.res.ID.Value}, d)
		}
	}
	for _, d := range h.decls {
		for i := range d.rb.refs {
			var ids []model.ID
			var rngs []hcl.Range
			for _, r := range d.rb.refs[i].static {
				for _, id := range c.resolve(h, idx, d, r) {
					ids = append(ids, id)
					rngs = append(rngs, r.rng)
				}
			}
			for _, r := range d.dynamic[i] {
				if r.id.Agent == h.agent {
					if len(idx[nameKey{-1, r.id.Type, r.id.Value}]) == 0 || !hasID(idx[nameKey{-1, r.id.Type, r.id.Value}], r.id) {
						c.diags = append(c.diags, errorf(r.rng.Ptr(), "Reference to undeclared resource",
							"%s is not in the model%s", r.id, hostSuffix(h)))
						continue
					}
				}
				ids = append(ids, r.id)
				rngs = append(rngs, r.rng)
			}
			for j, id := range ids {
				if id == d.res.ID {
					c.diags = append(c.diags, errorf(rngs[j].Ptr(), "Self reference",
						"a resource cannot %s itself", verb(refAttrNames[i])))
					continue
				}
				if i == refRequires {
					d.res.Requires = appendNew(d.res.Requires, id)
				} else {
					d.res.Subscribes = appendNew(d.res.Subscribes, id)
				}
			}
		}
	}
	byID := make(map[model.ID]*decl, len(h.decls))
	for _, d := range h.decls {
		prev, dup := byID[d.res.ID]
		if !dup {
			byID[d.res.ID] = d
			continue
		}
		if diff := differences(&prev.res, &d.res); diff != "" {
			c.diags = append(c.diags, errorf(d.rb.block.DefRange.Ptr(), "Conflicting resource",
				"%s is also declared at %s with other %s", d.res.ID, where(prev.rb.block.DefRange), diff))
			continue
		}
		// The same intent twice (two applications need one package):
		// one resource with the requirements of both.
		for _, id := range d.res.Requires {
			prev.res.Requires = appendNew(prev.res.Requires, id)
		}
		for _, id := range d.res.Subscribes {
			prev.res.Subscribes = appendNew(prev.res.Subscribes, id)
		}
		for _, s := range d.res.Sensitive {
			if !slices.Contains(prev.res.Sensitive, s) {
				prev.res.Sensitive = append(prev.res.Sensitive, s)
			}
		}
	}
	c.implicitEdges(h, byID)
	for _, d := range h.decls {
		if byID[d.res.ID] == d {
			slices.Sort(d.res.Sensitive)
		}
	}
	return byID
}

func hasID(ds []*decl, id model.ID) bool {
	for _, d := range ds {
		if d.res.ID == id {
			return true
		}
	}
	return false
}

func appendNew(list []model.ID, id model.ID) []model.ID {
	if slices.Contains(list, id) {
		return list
	}
	return append(list, id)
}

// differences names what differs between two declarations of one resource.
func differences(a, b *model.Resource) string {
	var out []string
	if a.Purged != b.Purged {
		out = append(out, "purged")
	}
	if a.Undefined != b.Undefined {
		out = append(out, "known values (one depends on missing facts)")
	}
	names := map[string]bool{}
	for k := range a.Attributes {
		names[k] = true
	}
	for k := range b.Attributes {
		names[k] = true
	}
	for _, k := range sortedKeys(names) {
		va, oka := a.Attributes[k]
		vb, okb := b.Attributes[k]
		if oka != okb || !model.Equal(va, vb) {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "attributes: " + strings.Join(out, ", ")
}

// resolve finds the resources a static reference names: first among those
// declared in the same body instance, then on the whole host.
func (c *compiler) resolve(h *hostInfo, idx map[nameKey][]*decl, from *decl, r staticRef) []model.ID {
	cands := idx[nameKey{from.scope, r.kind, r.name}]
	if len(cands) == 0 {
		cands = idx[nameKey{-1, r.kind, r.name}]
	}
	if len(cands) == 0 {
		var names []string
		for k := range idx {
			if k.scope == -1 && k.kind == r.kind {
				names = append(names, k.name)
			}
		}
		c.diags = append(c.diags, errorf(r.rng.Ptr(), "Reference to undeclared resource",
			"host %q has no %s titled %q%s", h.name, r.kind, r.name, suggest(r.name, names)))
		return nil
	}
	if r.hasKey {
		var keyed []*decl
		var keys []string
		for _, d := range cands {
			if d.hasKey {
				keys = append(keys, d.key)
				if d.key == r.key {
					keyed = append(keyed, d)
				}
			}
		}
		if len(keyed) == 0 {
			if len(keys) == 0 {
				c.diags = append(c.diags, errorf(r.rng.Ptr(), "Invalid reference",
					"%s.%s has no for_each, so it has no instance %q: write %s.%s", r.kind, r.name, r.key, r.kind, r.name))
			} else {
				slices.Sort(keys)
				c.diags = append(c.diags, errorf(r.rng.Ptr(), "Reference to undeclared resource",
					"%s.%s has no instance %q%s%s", r.kind, r.name, r.key, suggest(r.key, keys), hostSuffix(h)))
			}
			return nil
		}
		cands = keyed
	}
	// Several blocks answering to one name with different identities: the
	// reference is ambiguous.
	first := cands[0]
	var ids []model.ID
	for _, d := range cands {
		ids = appendNew(ids, d.res.ID)
	}
	if len(ids) > 1 {
		for _, d := range cands[1:] {
			if d.rb != first.rb || d.scope != first.scope {
				c.diags = append(c.diags, errorf(r.rng.Ptr(), "Ambiguous reference",
					"%s names %s (%s) and %s (%s) on host %s; reference the one meant by its identity, like %s[%q]",
					r, first.res.ID, where(first.rb.block.DefRange), d.res.ID, where(d.rb.block.DefRange), h.name, r.kind, d.res.ID.Value))
				return nil
			}
		}
	}
	return ids
}

// cronDir is where the cron handler writes each entry, a file of its own.
const cronDir = "/etc/cron.d"

// implicitEdges adds the requirements an operator would otherwise write
// every time: a path (a cron entry's file too) requires its nearest
// managed parent directory; a
// service the package of its name; a user its groups; files, execs and
// crons their owner user and group; packages the host's repositories.
// Purged resources get none, and an edge whose target already requires the
// source is not added (the explicit requirement wins).
func (c *compiler) implicitEdges(h *hostInfo, byID map[model.ID]*decl) {
	var repos []model.ID
	for id, d := range byID {
		if id.Type == "repository" && !d.res.Purged {
			repos = append(repos, id)
		}
	}
	slices.SortFunc(repos, func(a, b model.ID) int { return strings.Compare(a.String(), b.String()) })
	managed := func(kind, key, value string) (model.ID, bool) {
		id := model.ID{Type: kind, Agent: h.agent, Key: key, Value: value}
		d, ok := byID[id]
		return id, ok && !d.res.Purged
	}
	for _, d := range h.decls {
		if byID[d.res.ID] != d || d.res.Purged {
			continue
		}
		var deps []model.ID
		a := d.res.Attributes
		str := func(name string) string { s, _ := a[name].(string); return s }
		parentOf := func(file string) {
			for p := path.Dir(file); p != "/" && p != "."; p = path.Dir(p) {
				if id, ok := managed("directory", "path", p); ok {
					deps = append(deps, id)
					break
				}
			}
		}
		switch d.res.ID.Type {
		case "file", "directory", "symlink":
			parentOf(d.res.ID.Value)
		case "cron":
			// The cron handler writes its entry to cronDir/<name>.
			parentOf(cronDir + "/" + d.res.ID.Value)
		case "service":
			if id, ok := managed("package", "name", strings.TrimSuffix(d.res.ID.Value, ".service")); ok {
				deps = append(deps, id)
			}
		case "package":
			deps = append(deps, repos...)
		case "user":
			if id, ok := managed("group", "name", str("group")); ok {
				deps = append(deps, id)
			}
			if groups, ok := a["groups"].([]any); ok {
				for _, g := range groups {
					s, _ := g.(string)
					if id, ok := managed("group", "name", s); ok {
						deps = append(deps, id)
					}
				}
			}
		}
		switch d.res.ID.Type {
		case "file", "directory", "symlink":
			if id, ok := managed("user", "name", str("owner")); ok {
				deps = append(deps, id)
			}
			if id, ok := managed("group", "name", str("group")); ok {
				deps = append(deps, id)
			}
		case "exec", "cron":
			if id, ok := managed("user", "name", str("user")); ok {
				deps = append(deps, id)
			}
		}
		for _, dep := range deps {
			if dep == d.res.ID || slices.Contains(byID[dep].res.Requires, d.res.ID) {
				continue
			}
			d.res.Requires = appendNew(d.res.Requires, dep)
		}
	}
}
