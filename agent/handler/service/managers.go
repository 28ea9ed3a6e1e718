package service

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tetherhq/tether/agent/handler"
)

// sysv drives Debian-style init scripts: /etc/init.d/<name>, run through
// service(8), enabled by start links in /etc/rc[2-5].d that update-rc.d
// manages.
type sysv struct{ rt handler.Runtime }

func (s sysv) exists(_ context.Context, name string) (bool, error) {
	st, err := os.Stat("/etc/init.d/" + name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return st.Mode().IsRegular() && st.Mode()&0o111 != 0, nil
}

func (s sysv) running(ctx context.Context, name string) (bool, error) {
	out, err := s.rt.Exec(ctx, "service", name, "status")
	return err == nil && out.ExitCode == 0, err
}

func (s sysv) enabled(_ context.Context, name string) (bool, error) {
	for _, level := range []string{"2", "3", "4", "5"} {
		links, err := filepath.Glob("/etc/rc" + level + ".d/S[0-9][0-9]" + name)
		if err != nil {
			return false, err
		}
		if len(links) > 0 {
			return true, nil
		}
	}
	return false, nil
}

func (s sysv) setEnabled(ctx context.Context, name string, on bool) error {
	if !on {
		_, err := s.rt.Output(ctx, nil, "update-rc.d", name, "disable")
		return err
	}
	// defaults creates the links if the package never did; enable turns
	// kill links back into start links.
	if _, err := s.rt.Output(ctx, nil, "update-rc.d", name, "defaults"); err != nil {
		return err
	}
	_, err := s.rt.Output(ctx, nil, "update-rc.d", name, "enable")
	return err
}

func (s sysv) do(ctx context.Context, name, action string) error {
	_, err := s.rt.Output(ctx, nil, "service", name, action)
	return err
}

// openrc drives OpenRC: rc-service for the state, rc-update for the
// default runlevel.
type openrc struct{ rt handler.Runtime }

func (o openrc) exists(ctx context.Context, name string) (bool, error) {
	out, err := o.rt.Exec(ctx, "rc-service", "--exists", name)
	return err == nil && out.ExitCode == 0, err
}

func (o openrc) running(ctx context.Context, name string) (bool, error) {
	out, err := o.rt.Exec(ctx, "rc-service", name, "status")
	return err == nil && out.ExitCode == 0, err
}

func (o openrc) enabled(ctx context.Context, name string) (bool, error) {
	out, err := o.rt.Output(ctx, nil, "rc-update", "show", "default")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if svc, _, ok := strings.Cut(line, "|"); ok && strings.TrimSpace(svc) == name {
			return true, nil
		}
	}
	return false, nil
}

func (o openrc) setEnabled(ctx context.Context, name string, on bool) error {
	verb := "del"
	if on {
		verb = "add"
	}
	_, err := o.rt.Output(ctx, nil, "rc-update", verb, name, "default")
	return err
}

func (o openrc) do(ctx context.Context, name, action string) error {
	_, err := o.rt.Output(ctx, nil, "rc-service", name, action)
	return err
}

// systemd drives units through systemctl. Before a restart or reload it
// reloads the manager's configuration, since the change that triggered it
// may have been to the unit file itself.
type systemd struct{ rt handler.Runtime }

func (s systemd) exists(ctx context.Context, name string) (bool, error) {
	out, err := s.rt.Output(ctx, nil, "systemctl", "show", "--property=LoadState", "--value", "--", name)
	if err != nil {
		return false, err
	}
	state := strings.TrimSpace(string(out))
	return state != "not-found" && state != "", nil
}

func (s systemd) running(ctx context.Context, name string) (bool, error) {
	out, err := s.rt.Exec(ctx, "systemctl", "is-active", "--quiet", "--", name)
	return err == nil && out.ExitCode == 0, err
}

func (s systemd) enabled(ctx context.Context, name string) (bool, error) {
	out, err := s.rt.Exec(ctx, "systemctl", "is-enabled", "--", name)
	if err != nil {
		return false, err
	}
	switch strings.TrimSpace(string(out.Stdout)) {
	case "enabled", "enabled-runtime", "alias":
		return true, nil
	}
	return false, nil
}

func (s systemd) setEnabled(ctx context.Context, name string, on bool) error {
	verb := "disable"
	if on {
		verb = "enable"
	}
	_, err := s.rt.Output(ctx, nil, "systemctl", verb, "--", name)
	return err
}

func (s systemd) do(ctx context.Context, name, action string) error {
	if action == "restart" || action == "reload" {
		if _, err := s.rt.Output(ctx, nil, "systemctl", "daemon-reload"); err != nil {
			return err
		}
	}
	_, err := s.rt.Output(ctx, nil, "systemctl", action, "--", name)
	return err
}
