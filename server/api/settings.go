package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// settingsRoutes are the routes of an environment's settings, the halt
// among them.
func (a *API) settingsRoutes() []route {
	return []route{
		{method: "GET", path: "/envs/:env/settings", role: record.RoleViewer, summary: "Show an environment's settings, key → value", out: of[map[string]string](), serve: a.getSettings},
		{method: "PATCH", path: "/envs/:env/settings", role: record.RoleOperator, action: "env.settings", summary: "Change settings: {key: value}; answers them all, key → value", in: of[map[string]string](), out: of[map[string]string](), serve: a.patchSettings},
		{method: "POST", path: "/envs/:env/halt", role: record.RoleOperator, action: "env.halt", summary: "Halt the environment: its agents change nothing on their hosts (no deploy, repair or heal) until resumed", out: of[record.Environment](), serve: a.halt(true)},
		{method: "POST", path: "/envs/:env/resume", role: record.RoleOperator, action: "env.resume", summary: "Resume a halted environment: what its agents missed is deployed at once", out: of[record.Environment](), serve: a.halt(false)},
	}
}

// setAll applies settings in a stable order; none is applied on error.
func setAll(s *record.EnvSettings, kv map[string]string) error {
	next := *s
	keys := make([]string, 0, len(kv))
	for k, v := range kv {
		if len(k) > model.MaxSettingLen || len(v) > model.MaxSettingLen {
			return newError("invalid", "settings: "+strings.Join(record.SettingKeys(), ", "), "setting %q: keys and values have at most %d bytes", clip(k), model.MaxSettingLen)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := next.Set(k, kv[k]); err != nil {
			return newError("invalid", "settings: "+strings.Join(record.SettingKeys(), ", "), "%v", err)
		}
	}
	*s = next
	return nil
}

// settingsView is settings as operators write them, key → value.
func settingsView(s record.EnvSettings) map[string]string {
	out := map[string]string{}
	for _, k := range record.SettingKeys() {
		out[k], _ = s.Get(k)
	}
	return out
}

func (a *API) getSettings(r *request) (int, any, error) {
	in := r.input()
	env := in.env()
	return answer(in, func() (map[string]string, error) {
		got, err := a.svc.Envs.GetEnv(r.ctx(), env)
		return settingsView(got.Settings), err
	})
}

func (a *API) patchSettings(r *request) (int, any, error) {
	in := r.input()
	env := in.env()
	var kv map[string]string
	in.body(&kv)
	if in.err != nil {
		return 0, nil, in.err
	}
	if len(kv) == 0 {
		return 0, nil, newError("bad_request", "send {\"key\": \"value\"}", "no setting to change")
	}
	got, err := a.svc.Settings.UpdateEnvSettings(r.ctx(), env, func(s *record.EnvSettings) error { return setAll(s, kv) })
	if err != nil {
		return 0, nil, err
	}
	r.detail = fmt.Sprint(kv)
	return http.StatusOK, settingsView(got.Settings), nil
}

func (a *API) halt(halted bool) func(*request) (int, any, error) {
	return func(r *request) (int, any, error) {
		in := r.input()
		env := in.env()
		return answer(in, func() (record.Environment, error) {
			return a.svc.Settings.UpdateEnvSettings(r.ctx(), env, func(s *record.EnvSettings) error {
				s.Halted = halted
				return nil
			})
		})
	}
}
