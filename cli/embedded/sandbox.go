package embedded

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/model"
)

// prepareRoot makes the sandbox root look like this machine where the model
// takes the machine for granted: it creates the root, and below it the
// parent directories of the model's paths that exist on this machine and
// that the model does not manage. A model writing /tmp/site/index.html
// manages /tmp/site and counts on /tmp, which every host has and an empty
// sandbox lacks. A parent this machine lacks is not created: the deploy
// fails on it below the root as it would on the machine.
func prepareRoot(root string, resources []model.Resource, hosts []string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create the root %s: %w", root, err)
	}
	managed := map[string]bool{}
	var paths []string
	for _, r := range resources {
		if r.Purged || r.Undefined || !slices.Contains(hosts, r.ID.Agent) {
			continue
		}
		p, ok := r.Attributes.String("path")
		if !ok || model.CheckAbsPath(p) != nil {
			continue
		}
		if r.ID.Type == "directory" {
			managed[p] = true
		}
		paths = append(paths, p)
	}
	rt := handler.Runtime{Root: root}
	for _, p := range paths {
		var parents []string
		for d := filepath.Dir(p); d != "/"; d = filepath.Dir(d) {
			parents = append(parents, d)
		}
		slices.Reverse(parents)
		for _, d := range parents {
			if managed[d] {
				break
			}
			if info, err := os.Stat(d); err != nil || !info.IsDir() {
				break
			}
			// HostPath refuses a parent that leads out of the root.
			host, err := rt.HostPath(d)
			if err != nil {
				return err
			}
			if err := os.Mkdir(host, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("create %s below the root: %w", d, err)
			}
		}
	}
	return nil
}
