// Package repository is the handler for `repository` resources: a package
// repository of the host's package manager, as one file the manager reads.
//
//   - apt: /etc/apt/sources.list.d/<name>.sources in deb822 format, trusted
//     by its own key only (Signed-By: /etc/apt/keyrings/<name>.asc) when a
//     key is given. After a change the source's package lists are fetched
//     (apt-get update of that source alone), so packages that require the
//     repository find its versions.
//   - dnf: /etc/yum.repos.d/<name>.repo with gpgcheck, and the key in
//     /etc/pki/rpm-gpg/RPM-GPG-KEY-<name>.
//
// Files are rendered whole and replaced atomically; reading parses them
// back, so a dry run and a drift report name the attribute that differs.
package repository

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// Kind is the resource type this package handles.
const Kind = "repository"

// Handler enforces repository resources.
type Handler struct {
	handler.Declared
	rt   handler.Runtime
	host func() string // the host's package manager
}

var _ handler.Handler = (*Handler)(nil)

// New returns the repository handler for rt.
func New(rt handler.Runtime) *Handler {
	return &Handler{Declared: handler.Declare(Kind), rt: rt.WithFS(), host: handler.HostProvider(rt.PackageManager, providers)}
}

var providers = [][2]string{{"apt", "apt-get"}, {"dnf", "dnf"}}

// Files are the resource paths of a repository's source and key files.
func Files(provider, name string) (source, key string) {
	if provider == "dnf" {
		return "/etc/yum.repos.d/" + name + ".repo", "/etc/pki/rpm-gpg/RPM-GPG-KEY-" + name
	}
	return "/etc/apt/sources.list.d/" + name + ".sources", "/etc/apt/keyrings/" + name + ".asc"
}

// Validate implements handler.Handler: apt needs a suite.
func (h *Handler) Validate(res *model.Resource) error {
	if err := h.Declared.Validate(res); err != nil {
		return err
	}
	if res.Purged {
		return nil
	}
	p, err := h.provider(res)
	if err != nil {
		return fmt.Errorf("%w %s: %w", handler.ErrInvalid, res.ID, err)
	}
	if _, ok := res.Attributes["suite"]; p == "apt" && !ok {
		return fmt.Errorf("%w %s: an apt repository needs a suite (bookworm, or a path ending in / for a flat repository)", handler.ErrInvalid, res.ID)
	}
	return nil
}

// Render returns the content of the source file for provider.
func Render(provider string, res *model.Resource) string {
	a := res.Attributes
	name := res.ID.Value
	_, keyPath := Files(provider, name)
	_, hasKey := a["key"]
	url, _ := a.String("url")
	suite, _ := a.String("suite")
	enabled, set := a.Bool("enabled")
	enabled = enabled || !set // default true
	var b strings.Builder
	if provider == "dnf" {
		fmt.Fprintf(&b, "# Managed by Tether (%s): changes made here are undone.\n", res.ID)
		fmt.Fprintf(&b, "[%s]\nname=%s\nbaseurl=%s\nenabled=%d\ngpgcheck=1\n", name, name, url, btoi(enabled))
		if hasKey {
			fmt.Fprintf(&b, "gpgkey=file://%s\n", keyPath)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "# Managed by Tether (%s): changes made here are undone.\n", res.ID)
	fmt.Fprintf(&b, "Types: deb\nURIs: %s\nSuites: %s\n", url, suite)
	comps := components(a)
	if len(comps) > 0 {
		fmt.Fprintf(&b, "Components: %s\n", strings.Join(comps, " "))
	}
	if hasKey {
		fmt.Fprintf(&b, "Signed-By: %s\n", keyPath)
	}
	fmt.Fprintf(&b, "Enabled: %s\n", map[bool]string{true: "yes", false: "no"}[enabled])
	return b.String()
}

// components are the apt components: as given, else main (none for a flat
// repository, whose suite ends in '/').
func components(a model.Attributes) []string {
	if c, ok := a.StringList("components"); ok {
		return c
	}
	if s, _ := a.String("suite"); strings.HasSuffix(s, "/") {
		return nil
	}
	return []string{"main"}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Read implements handler.Handler.
func (h *Handler) Read(_ context.Context, res *model.Resource) (model.Attributes, bool, error) {
	provider, err := h.provider(res)
	if err != nil {
		return nil, false, err
	}
	src, key := Files(provider, res.ID.Value)
	_, data, exists, err := h.rt.ReadFile(src)
	if err != nil || !exists {
		return nil, false, err
	}
	cur := model.Attributes{"name": res.ID.Value}
	if res.Purged {
		return cur, true, nil
	}
	if _, ok := res.Attributes["provider"]; ok {
		cur["provider"] = provider
	}
	if string(data) == Render(provider, res) {
		for k, v := range res.Attributes {
			if k != "key" {
				cur[k] = v
			}
		}
	} else {
		parse(provider, string(data), res, cur)
	}
	if want, ok := res.Attributes.String("key"); ok {
		_, k, kexists, err := h.rt.ReadFile(key)
		if err != nil {
			return nil, false, err
		}
		switch {
		case !kexists:
			cur["key"] = "(no key file " + key + ")"
		case string(k) == want:
			cur["key"] = want
		default:
			cur["key"] = "(another key in " + key + ")"
		}
	}
	return cur, true, nil
}

// parse reads a source file that differs from the rendered one back into
// the attributes the resource sets.
func parse(provider, data string, res *model.Resource, cur model.Attributes) {
	fields := map[string]string{}
	for _, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		sep := ":"
		if provider == "dnf" {
			sep = "="
		}
		if k, v, ok := strings.Cut(line, sep); ok {
			fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	a := res.Attributes
	if provider == "dnf" {
		cur["url"] = fields["baseurl"]
		if _, ok := a["enabled"]; ok {
			cur["enabled"] = fields["enabled"] != "0"
		}
	} else {
		cur["url"] = fields["uris"]
		if _, ok := a["suite"]; ok {
			cur["suite"] = fields["suites"]
		}
		if _, ok := a["components"]; ok {
			cur["components"] = strings.Fields(fields["components"])
		}
		if _, ok := a["enabled"]; ok {
			cur["enabled"] = fields["enabled"] != "no"
		}
	}
	if handler.ComputeChanges(res, cur, true) == nil {
		// Equal in what the attributes say, different in the rest: the
		// next apply rewrites the file.
		cur["url"] = "(the file has other lines: " + strings.Join(slices.Sorted(maps.Keys(fields)), ", ") + ")"
	}
}

// Apply implements handler.Handler.
func (h *Handler) Apply(ctx context.Context, res *model.Resource, _ model.Attributes, changes handler.Changes) error {
	provider, err := h.provider(res)
	if err != nil {
		return err
	}
	srcPath, keyPath := Files(provider, res.ID.Value)
	src, err := h.rt.HostPath(srcPath)
	if err != nil {
		return err
	}
	key, err := h.rt.HostPath(keyPath)
	if err != nil {
		return err
	}
	if changes.Removed() {
		for _, p := range []string{src, key} {
			if err := h.rt.FS.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	if k, ok := res.Attributes.String("key"); ok {
		if err := h.rt.FS.MkdirAll(filepath.Dir(key), 0o755); err != nil {
			return err
		}
		if err := h.rt.WriteFile(key, []byte(k), 0o644); err != nil {
			return err
		}
	}
	if err := h.rt.WriteFile(src, []byte(Render(provider, res)), 0o644); err != nil {
		return err
	}
	if enabled, set := res.Attributes.Bool("enabled"); provider == "apt" && h.onHost() && (enabled || !set) {
		// Fetch this source's lists only: the rest of the host's sources
		// are none of this resource's business.
		_, err := h.rt.Output(ctx, nil, "apt-get", "update", "-q",
			"-o", "Dir::Etc::SourceList="+src, "-o", "Dir::Etc::SourceParts=-", "-o", "APT::Get::List-Cleanup=0")
		if err != nil {
			return fmt.Errorf("the source is written, but fetching its package lists failed: %w", err)
		}
	}
	return nil
}

func (h *Handler) provider(res *model.Resource) (string, error) {
	want, _ := res.Attributes.String("provider")
	return handler.PickProvider(want, h.host(), providers)
}

// onHost reports whether the agent works on the host's own root, where the
// package manager reads the files written.
func (h *Handler) onHost() bool { return h.rt.Root == "" || h.rt.Root == "/" }

// WatchPaths implements handler.Watcher: the source and the key file.
func (h *Handler) WatchPaths(res *model.Resource) ([]string, bool) {
	provider, err := h.provider(res)
	if err != nil {
		return nil, false
	}
	src, key := Files(provider, res.ID.Value)
	return append(h.rt.WatchPath(src), h.rt.WatchPath(key)...), false
}
