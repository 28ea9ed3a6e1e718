package account

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// UserKind is the resource type of local user accounts.
const UserKind = "user"

// User enforces user resources.
type User struct {
	handler.Declared
	rt handler.Runtime
}

var _ handler.Handler = (*User)(nil)

// NewUser returns the user handler for rt.
func NewUser(rt handler.Runtime) *User {
	return &User{Declared: handler.Declare(UserKind), rt: rt.WithFS()}
}

// Read implements handler.Handler.
func (h *User) Read(_ context.Context, res *model.Resource) (model.Attributes, bool, error) {
	name := res.ID.Value
	u, ok, err := lookupUser(h.rt, name)
	if err != nil || !ok {
		return nil, false, err
	}
	cur := model.Attributes{"name": name}
	want := res.Attributes
	if _, ok := want["uid"]; ok {
		cur["uid"] = json.Number(strconv.FormatUint(u.uid, 10))
	}
	var groups []groupEntry
	if want["group"] != nil || want["groups"] != nil {
		if groups, err = readGroups(h.rt); err != nil {
			return nil, false, err
		}
	}
	if g, ok := want.String("group"); ok {
		cur["group"] = groupName(groups, g, u.gid)
	}
	if w, ok := want.StringList("groups"); ok {
		cur["groups"] = supplementary(groups, name, w)
	}
	for k, v := range map[string]string{"home": u.home, "shell": u.shell, "comment": u.comment} {
		if _, ok := want[k]; ok {
			cur[k] = v
		}
	}
	if v, ok := want["system"]; ok {
		cur["system"] = v // chosen at creation only (the uid range)
	}
	if _, ok := want["password"]; ok {
		if cur["password"], err = shadowHash(h.rt, name); err != nil {
			return nil, false, err
		}
	}
	return cur, true, nil
}

// supplementary lists the groups that name is a member of, as the desired
// list when it is the same set (names or gids), else as sorted names.
func supplementary(groups []groupEntry, name string, want []string) []string {
	var have []string
	for _, g := range groups {
		for _, m := range g.members {
			if m == name {
				have = append(have, g.name)
				break
			}
		}
	}
	resolved := make([]string, len(want))
	for i, w := range want {
		resolved[i] = w
		if gid, err := strconv.ParseUint(w, 10, 32); err == nil {
			for _, g := range groups {
				if g.gid == gid {
					resolved[i] = g.name
				}
			}
		}
	}
	if sameSet(resolved, have) {
		return want
	}
	if have == nil {
		have = []string{}
	}
	return have
}

// Apply implements handler.Handler.
func (h *User) Apply(ctx context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	name := res.ID.Value
	want := res.Attributes
	args := prefixArgs(h.rt)
	switch {
	case changes.Removed():
		// The home directory stays: it may hold data nobody asked to lose.
		return h.run(ctx, append(append([]string{"userdel"}, args...), name))
	case changes.Created():
		// The account starts locked ("!") and gets its password after.
		args = append([]string{"useradd"}, append(args, userFlags(want, changes, true)...)...)
		if err := h.run(ctx, append(args, name)); err != nil {
			return err
		}
	default:
		if flags := userFlags(want, changes, false); len(flags) > 0 {
			args = append([]string{"usermod"}, append(args, flags...)...)
			if err := h.run(ctx, append(args, name)); err != nil {
				return err
			}
		}
	}
	if hash, ok := want.String("password"); ok && (changes.Created() || changes.Has("password")) {
		return h.setPassword(ctx, res, hash)
	}
	return nil
}

// userFlags turns desired attributes into useradd/usermod flags: every set
// attribute at creation, the changed ones afterwards. The password is not
// one of them (setPassword).
func userFlags(want model.Attributes, changes handler.Changes, create bool) []string {
	var out []string
	set := func(attr string) bool {
		_, ok := want[attr]
		return ok && (create || changes.Has(attr))
	}
	str := func(attr string) string { s, _ := want.String(attr); return s }
	if set("uid") {
		out = append(out, "--uid", integer(want, "uid"))
	}
	if set("group") {
		out = append(out, "--gid", str("group"))
	}
	if set("groups") {
		groups, _ := want.StringList("groups")
		out = append(out, "--groups", strings.Join(groups, ","))
	}
	if set("home") {
		out = append(out, "--home-dir", str("home"))
		if create {
			out = append(out, "--create-home")
		}
	}
	if set("shell") {
		out = append(out, "--shell", str("shell"))
	}
	if set("comment") {
		out = append(out, "--comment", str("comment"))
	}
	if system, _ := want.Bool("system"); create && system {
		out = append(out, "--system")
	}
	return out
}

// setPassword sets the password hash of name with chpasswd, which reads
// "name:hash" on its standard input. useradd and usermod take it only as an
// argument (--password), where every local user would read it in the
// process list. chpasswd has --root (a chroot) where the other tools have
// --prefix; both edit the account files below the agent's root.
func (h *User) setPassword(ctx context.Context, res *model.Resource, hash string) error {
	name := res.ID.Value
	args := []string{"chpasswd", "--encrypted"}
	if h.rt.Root != "" && h.rt.Root != "/" {
		root, err := filepath.Abs(h.rt.Root)
		if err != nil {
			return fmt.Errorf("set the password of %s: %w", name, err)
		}
		args = append(args, "--root", root)
	}
	_, err := h.rt.OutputOf(ctx, handler.Command{Args: args, Stdin: []byte(name + ":" + hash + "\n"), Secrets: handler.SensitiveValues(res)})
	if err != nil {
		return fmt.Errorf("set the password of %s: %w", name, err)
	}
	return nil
}

func (h *User) run(ctx context.Context, args []string) error {
	_, err := h.rt.Output(ctx, nil, args...)
	return err
}
