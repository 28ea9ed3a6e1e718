// Package builtin lists every handler that ships with Tether, in one place.
package builtin

import (
	"github.com/tetherhq/tether/agent/handler"
	"github.com/tetherhq/tether/agent/handler/account"
	"github.com/tetherhq/tether/agent/handler/cron"
	"github.com/tetherhq/tether/agent/handler/directory"
	"github.com/tetherhq/tether/agent/handler/exec"
	"github.com/tetherhq/tether/agent/handler/file"
	"github.com/tetherhq/tether/agent/handler/pkg"
	"github.com/tetherhq/tether/agent/handler/repository"
	"github.com/tetherhq/tether/agent/handler/service"
	"github.com/tetherhq/tether/agent/handler/symlink"
)

// Register adds every built-in handler, constructed for rt, to reg.
func Register(reg *handler.Registry, rt handler.Runtime) error {
	for _, h := range []handler.Handler{
		cron.New(rt),
		directory.New(rt),
		exec.New(rt),
		file.New(rt),
		account.NewGroup(rt),
		pkg.New(rt),
		repository.New(rt),
		service.New(rt),
		symlink.New(rt),
		account.NewUser(rt),
	} {
		if err := reg.Register(h); err != nil {
			return err
		}
	}
	return nil
}

// Registry returns a new registry holding every built-in handler.
func Registry(rt handler.Runtime) (*handler.Registry, error) {
	reg := handler.NewRegistry()
	if err := Register(reg, rt); err != nil {
		return nil, err
	}
	return reg, nil
}
