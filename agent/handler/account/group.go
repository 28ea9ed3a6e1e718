package account

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// GroupKind is the resource type of local groups.
const GroupKind = "group"

// Group enforces group resources.
type Group struct {
	handler.Declared
	rt handler.Runtime
}

var _ handler.Handler = (*Group)(nil)

// NewGroup returns the group handler for rt.
func NewGroup(rt handler.Runtime) *Group {
	return &Group{Declared: handler.Declare(GroupKind), rt: rt.WithFS()}
}

// Read implements handler.Handler.
func (h *Group) Read(_ context.Context, res *model.Resource) (model.Attributes, bool, error) {
	groups, err := readGroups(h.rt)
	if err != nil {
		return nil, false, err
	}
	for _, g := range groups {
		if g.name != res.ID.Value {
			continue
		}
		cur := model.Attributes{"name": g.name}
		if _, ok := res.Attributes["gid"]; ok {
			cur["gid"] = json.Number(strconv.FormatUint(g.gid, 10))
		}
		if v, ok := res.Attributes["system"]; ok {
			cur["system"] = v // chosen at creation only (the gid range)
		}
		if want, ok := res.Attributes.StringList("members"); ok {
			switch {
			case sameSet(want, g.members):
				cur["members"] = want
			case g.members == nil:
				cur["members"] = []string{}
			default:
				cur["members"] = g.members
			}
		}
		return cur, true, nil
	}
	return nil, false, nil
}

// Apply implements handler.Handler.
func (h *Group) Apply(ctx context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	name := res.ID.Value
	want := res.Attributes
	args := prefixArgs(h.rt)
	switch {
	case changes.Removed():
		args = append([]string{"groupdel"}, args...)
	case changes.Created():
		args = append([]string{"groupadd"}, args...)
		if _, ok := want["gid"]; ok {
			args = append(args, "--gid", integer(want, "gid"))
		}
		if system, _ := want.Bool("system"); system {
			args = append(args, "--system")
		}
		if members, ok := want.StringList("members"); ok {
			args = append(args, "--users", strings.Join(members, ","))
		}
	default:
		args = append([]string{"groupmod"}, args...)
		if changes.Has("gid") {
			args = append(args, "--gid", integer(want, "gid"))
		}
		if changes.Has("members") {
			members, _ := want.StringList("members")
			args = append(args, "--users", strings.Join(members, ","))
		}
	}
	_, err := h.rt.Output(ctx, nil, append(args, name)...)
	return err
}
