package machines

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/secret"
	"github.com/tetherhq/tether/server/record"
)

// Machines declared in an environment's model: each compile of the model
// hands its platforms, distributions and hosts made from blueprints to
// Declare, which makes the environment's records what the model says —
// through the paths an operator's changes take, so they are checked
// alike — and provisions the hosts it declares that have no machine yet.
// A record the model declares is marked with where (record.*.DeclaredIn):
// it changes with the model only, and an operator's change or deletion of
// it is refused. When the model and an operator both declare one, the
// model wins: its record replaces the operator's.

// Severities of the diagnostics Declare gives a compile's report (the
// model language's words).
const (
	severityError   = "error"
	severityWarning = "warning"
)

// Declare makes env's machines what its model declares (d, from a compile
// by by):
//
//   - platforms, distributions and hosts it declares are created, or
//     updated when they differ (a host with a machine keeps it: only its
//     applications, labels and settings change, and its platform and
//     distribution once it is made again);
//   - those it declared before and no longer does are deleted, unless
//     something depends on them (a host with a machine, a platform or
//     distribution a host uses): those stay, as an operator's, with a
//     warning saying what to do;
//   - each host it declares that is defined is provisioned, unless the
//     environment is halted (it waits, with a warning).
//
// It returns the diagnostics of the compile's report, at the model's
// file:line: an error for each declaration refused (then nothing is
// deleted nor provisioned), a warning for what could not be done. Its
// error is what kept it from reading or writing the store.
func (r *Room) Declare(ctx context.Context, env string, d model.DeclaredMachines, by string) ([]record.CompileDiagnostic, error) {
	var notes []record.CompileDiagnostic
	note := func(severity string, at model.SourcePos, format string, args ...any) {
		notes = append(notes, record.CompileDiagnostic{File: at.File, Line: at.Line, Severity: severity, Message: fmt.Sprintf(format, args...)})
	}
	refused := false
	// refuse notes a declaration the room refused; any other error is
	// the store's, returned.
	refuse := func(at model.SourcePos, what string, err error) error {
		if !errors.Is(err, model.ErrInvalid) && !errors.Is(err, model.ErrConflict) && !errors.Is(err, model.ErrNotFound) {
			return fmt.Errorf("declare %s of the model at %s: %w", what, at, err)
		}
		refused = true
		note(severityError, at, "%s refused: %v", what, err)
		return nil
	}

	list, err := r.svc.Store.ListPlatforms(ctx, env)
	if err != nil {
		return nil, err
	}
	platforms := byName(list, func(p record.Platform) string { return p.Name })
	for _, dp := range d.Platforms {
		p := record.Platform{Env: env, Name: dp.Name, Driver: dp.Driver, Agent: dp.Agent, Settings: maps.Clone(dp.Settings),
			Templates: maps.Clone(dp.Templates), DeclaredIn: dp.Pos.String()}
		was, exists := platforms[p.Name]
		if exists && samePlatform(was, p) {
			continue
		}
		if _, err := r.putPlatform(ctx, p); err != nil {
			if err := refuse(dp.Pos, "platform "+p.Name, err); err != nil {
				return notes, err
			}
			continue
		}
		r.audit(ctx, by, "platform.declared", env, p.Name, declaredDetail(p.DeclaredIn, exists, was.DeclaredIn))
	}

	distList, err := r.svc.Store.ListDistributions(ctx, env)
	if err != nil {
		return notes, err
	}
	dists := byName(distList, func(d record.Distribution) string { return d.Name })
	for _, dd := range d.Distributions {
		dist := declaredDistribution(env, dd)
		was, exists := dists[dist.Name]
		if exists && r.sameDistribution(ctx, was, dist) {
			continue
		}
		if _, err := r.putDistribution(ctx, dist); err != nil {
			if err := refuse(dd.Pos, "distribution "+dist.Name, err); err != nil {
				return notes, err
			}
			continue
		}
		r.audit(ctx, by, "distribution.declared", env, dist.Name, declaredDetail(dist.DeclaredIn, exists, was.DeclaredIn))
	}

	if err := r.declareApplications(ctx, env, d.Applications, refuse); err != nil {
		return notes, err
	}

	hostList, err := r.svc.Store.ListHosts(ctx, env)
	if err != nil {
		return notes, err
	}
	hosts := byName(hostList, func(h record.Host) string { return h.Name })
	for _, dh := range d.Hosts {
		h := record.Host{Env: env, Name: dh.Name, Platform: dh.Platform, Distribution: dh.Distribution, Applications: slices.Clone(dh.Applications),
			Labels: maps.Clone(dh.Labels), Settings: maps.Clone(dh.Settings), DeclaredIn: dh.Pos.String()}
		was, exists := hosts[h.Name]
		// A host with a machine keeps what it was made of (the store
		// sees to it): the rest of its blueprint follows the model.
		kept := exists && was.State != record.HostDefined && was.State != record.HostFailed
		if kept && (was.Platform != h.Platform || was.Distribution != h.Distribution) {
			note(severityWarning, dh.Pos, "host %s is %s: its machine was made on platform %s with distribution %s; the model's platform %s and distribution %s take effect when it is made again (tether host destroy %s: the next compile provisions it)",
				h.Name, was.State, was.Platform, was.Distribution, h.Platform, h.Distribution, h.Name)
		}
		want := h
		if kept {
			want.Platform, want.Distribution = was.Platform, was.Distribution
		}
		if exists && r.sameHost(ctx, was, want) {
			continue
		}
		var got record.Host
		if exists {
			got, err = r.updateHost(ctx, was, h)
		} else {
			got, err = r.addHost(ctx, h)
		}
		if err != nil {
			if err := refuse(dh.Pos, "host "+h.Name, err); err != nil {
				return notes, err
			}
			continue
		}
		hosts[h.Name] = got
		r.audit(ctx, by, "host.declared", env, h.Name, declaredDetail(h.DeclaredIn, exists, was.DeclaredIn))
	}
	if refused {
		return notes, nil
	}

	dropped, err := r.dropUndeclared(ctx, env, d, hosts, dists, platforms, by)
	notes = append(notes, dropped...)
	if err != nil {
		return notes, err
	}
	provisioned, err := r.provisionDeclared(ctx, env, d, by)
	return append(notes, provisioned...), err
}

// declareApplications makes env's applications those the model declares
// with machine settings, each checked against the platform drivers, hosts
// and the environment's distributions (a refusal is refuse's to note);
// unchanged, nothing is written.
func (r *Room) declareApplications(ctx context.Context, env string, declared []model.DeclaredApplication,
	refuse func(at model.SourcePos, what string, err error) error) error {
	dists, err := r.svc.Store.ListDistributions(ctx, env)
	if err != nil {
		return err
	}
	apps := make([]record.Application, 0, len(declared))
	for _, da := range declared {
		a := record.Application{Env: env, Name: da.Name, MachineSettings: maps.Clone(da.MachineSettings), DeclaredIn: da.Pos.String()}
		if err := a.Validate(); err != nil {
			return refuse(da.Pos, "application "+a.Name, fmt.Errorf("%w: %w", model.ErrInvalid, err))
		}
		if err := a.CheckSettings(dists); err != nil {
			return refuse(da.Pos, "application "+a.Name, fmt.Errorf("%w: %w", model.ErrInvalid, err))
		}
		apps = append(apps, a)
	}
	slices.SortFunc(apps, func(a, b record.Application) int { return strings.Compare(a.Name, b.Name) })
	was, err := r.svc.Store.ListApplications(ctx, env)
	if err != nil {
		return err
	}
	same := slices.EqualFunc(was, apps, func(a, b record.Application) bool {
		return a.Name == b.Name && a.DeclaredIn == b.DeclaredIn && reflect.DeepEqual(a.MachineSettings, b.MachineSettings)
	})
	if same {
		return nil
	}
	_, err = r.svc.Store.SetApplications(ctx, env, apps)
	return err
}

// dropUndeclared deletes the records env's model declared (as they were
// before this compile) and no longer does; one something depends on
// stays, no longer the model's, with a warning.
func (r *Room) dropUndeclared(ctx context.Context, env string, d model.DeclaredMachines, hosts map[string]record.Host,
	dists map[string]record.Distribution, platforms map[string]record.Platform, by string) ([]record.CompileDiagnostic, error) {
	var notes []record.CompileDiagnostic
	warn := func(format string, args ...any) {
		notes = append(notes, record.CompileDiagnostic{Severity: severityWarning, Message: fmt.Sprintf(format, args...)})
	}
	declared := func(names []string, name string) bool { return slices.Contains(names, name) }
	var hostNames, distNames, platformNames []string
	for _, h := range d.Hosts {
		hostNames = append(hostNames, h.Name)
	}
	for _, dd := range d.Distributions {
		distNames = append(distNames, dd.Name)
	}
	for _, p := range d.Platforms {
		platformNames = append(platformNames, p.Name)
	}

	for _, name := range slices.Sorted(maps.Keys(hosts)) {
		h := hosts[name]
		if h.DeclaredIn == "" || declared(hostNames, name) {
			continue
		}
		err := r.deleteHost(ctx, env, name)
		switch {
		case err == nil:
			r.audit(ctx, by, "host.undeclared", env, name, "deleted: no longer declared in the model (was at "+h.DeclaredIn+")")
		case errors.Is(err, model.ErrNotFound):
		case errors.Is(err, model.ErrConflict):
			h.DeclaredIn = ""
			if _, err := r.svc.Store.UpdateHost(ctx, h); err != nil && !errors.Is(err, model.ErrNotFound) {
				return notes, err
			}
			warn("host %s is no longer declared in the model, but it is %s: it stays, now an operator's host: destroy its machine first (tether host destroy %s), then delete it (tether host delete %s)",
				name, h.State, name, name)
		default:
			return notes, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(dists)) {
		dist := dists[name]
		if dist.DeclaredIn == "" || declared(distNames, name) {
			continue
		}
		users, err := r.usedBy(ctx, env, r.svc.Store.DeleteDistribution, name, func(h record.Host) bool { return h.Distribution == name })
		if err != nil {
			return notes, err
		}
		if users != "" {
			dist.DeclaredIn = ""
			if _, err := r.svc.Store.PutDistribution(ctx, dist); err != nil {
				return notes, err
			}
			warn("distribution %s is no longer declared in the model, but %s: it stays, now an operator's", name, users)
			continue
		}
		r.audit(ctx, by, "distribution.undeclared", env, name, "deleted: no longer declared in the model (was at "+dist.DeclaredIn+")")
	}
	for _, name := range slices.Sorted(maps.Keys(platforms)) {
		p := platforms[name]
		if p.DeclaredIn == "" || declared(platformNames, name) {
			continue
		}
		users, err := r.usedBy(ctx, env, r.svc.Store.DeletePlatform, name, func(h record.Host) bool { return h.Platform == name })
		if err != nil {
			return notes, err
		}
		if users != "" {
			p.DeclaredIn = ""
			if _, err := r.svc.Store.PutPlatform(ctx, p); err != nil {
				return notes, err
			}
			warn("platform %s is no longer declared in the model, but %s: it stays, now an operator's", name, users)
			continue
		}
		r.audit(ctx, by, "platform.undeclared", env, name, "deleted: no longer declared in the model (was at "+p.DeclaredIn+")")
	}
	return notes, nil
}

// provisionDeclared provisions the hosts the model declares that have no
// machine yet (defined), unless env is halted. What cannot be provisioned
// is a warning: the host says why (failed, with the reason).
func (r *Room) provisionDeclared(ctx context.Context, env string, d model.DeclaredMachines, by string) ([]record.CompileDiagnostic, error) {
	if len(d.Hosts) == 0 {
		return nil, nil
	}
	var notes []record.CompileDiagnostic
	e, err := r.svc.Store.GetEnv(ctx, env)
	if err != nil {
		return nil, err
	}
	for _, dh := range d.Hosts {
		h, err := r.svc.Store.GetHost(ctx, env, dh.Name)
		if err != nil {
			return notes, err
		}
		if h.State != record.HostDefined {
			continue
		}
		if e.Settings.Halted {
			notes = append(notes, record.CompileDiagnostic{File: dh.Pos.File, Line: dh.Pos.Line, Severity: severityWarning,
				Message: fmt.Sprintf("host %s is not provisioned while environment %s is halted: it is once the environment is resumed and the model compiled again", dh.Name, env)})
			continue
		}
		if _, err := r.Provision(ctx, env, dh.Name, by); err != nil {
			if ctx.Err() != nil {
				return notes, ctx.Err()
			}
			notes = append(notes, record.CompileDiagnostic{File: dh.Pos.File, Line: dh.Pos.Line, Severity: severityWarning,
				Message: fmt.Sprintf("host %s not provisioned: %v", dh.Name, err)})
		}
	}
	return notes, nil
}

// usedBy deletes the platform or distribution name with del unless hosts
// use it (uses says which), and then says which ("host vm1 uses it"); ""
// when it was deleted (or was gone).
func (r *Room) usedBy(ctx context.Context, env string, del func(ctx context.Context, env, name string) error, name string, uses func(record.Host) bool) (string, error) {
	hosts, err := r.hostsOn(ctx, env, uses)
	if err != nil {
		return "", err
	}
	switch len(hosts) {
	case 0:
	case 1:
		return fmt.Sprintf("host %s uses it", hosts[0].Name), nil
	default:
		return fmt.Sprintf("hosts %s and %d more use it", hosts[0].Name, len(hosts)-1), nil
	}
	err = del(ctx, env, name)
	switch {
	case err == nil, errors.Is(err, model.ErrNotFound):
		return "", nil
	case errors.Is(err, model.ErrConflict): // a host came meanwhile
		return "a host uses it", nil
	}
	return "", err
}

// updateHost changes an existing host's blueprint to h's, checked as a
// new host's is; a host with a machine keeps its platform and
// distribution (the store sees to it), so its settings are checked
// against those.
func (r *Room) updateHost(ctx context.Context, was, h record.Host) (record.Host, error) {
	if err := h.Validate(); err != nil {
		return h, record.Refuse(model.ErrInvalid, "%v", err)
	}
	check := h
	if hasMachine(was) {
		check.Platform, check.Distribution = was.Platform, was.Distribution
	}
	_, _, cv, err := r.blueprint(ctx, check)
	if err != nil {
		return h, err
	}
	if h.Settings, err = r.sealHostSettings(ctx, cv, h.Settings); err != nil {
		return h, err
	}
	return r.svc.Store.UpdateHost(ctx, h)
}

// operatorMay refuses an operator's change or deletion of a record
// (what: platform, distribution or host) that env's model declares, with
// model.ErrConflict naming where: it changes with the model only. A
// record that does not exist is the caller's to find.
func (r *Room) operatorMay(ctx context.Context, what, env, name string) error {
	var at string
	var err error
	switch what {
	case "platform":
		var p record.Platform
		p, err = r.svc.Store.GetPlatform(ctx, env, name)
		at = p.DeclaredIn
	case "distribution":
		var d record.Distribution
		d, err = r.svc.Store.GetDistribution(ctx, env, name)
		at = d.DeclaredIn
	default:
		var h record.Host
		h, err = r.svc.Store.GetHost(ctx, env, name)
		at = h.DeclaredIn
	}
	switch {
	case errors.Is(err, model.ErrNotFound):
		return nil
	case err != nil:
		return err
	case at != "":
		return record.Refuse(model.ErrConflict, "%s %s is declared in the model (%s): change it there", what, name, at)
	}
	return nil
}

// byName indexes a listing by the name key gives.
func byName[T any](list []T, key func(T) string) map[string]T {
	out := make(map[string]T, len(list))
	for _, x := range list {
		out[key(x)] = x
	}
	return out
}

// declaredDetail says what a declaration did, for the audit log.
func declaredDetail(at string, existed bool, wasAt string) string {
	switch {
	case !existed:
		return "created as the model declares it at " + at
	case wasAt == "":
		return "taken over from an operator: the model declares it at " + at
	}
	return "updated as the model declares it at " + at
}

// declaredDistribution is the record of a distribution the model declares.
func declaredDistribution(env string, dd model.DeclaredDistribution) record.Distribution {
	d := record.Distribution{Env: env, Name: dd.Name, Kind: dd.Kind, Kernel: dd.Kernel, Initrd: dd.Initrd, Cmdline: dd.Cmdline,
		InstallFormat: dd.InstallFormat, Install: dd.Install, Images: maps.Clone(dd.Images), Settings: maps.Clone(dd.Settings),
		DeclaredIn: dd.Pos.String()}
	for _, p := range dd.Params {
		d.Params = append(d.Params, record.Param{Name: p.Name, Type: record.ParamType(p.Type), Default: p.Default, Required: p.Required,
			Doc: p.Doc, Min: p.Min, Max: p.Max})
	}
	return d
}

// samePlatform reports whether the stored platform is the declared one
// already (its driver's defaults filled in): then nothing is written.
func samePlatform(was, p record.Platform) bool {
	p.Settings = maps.Clone(p.Settings)
	if p.Validate() != nil {
		return false
	}
	was.CreatedAt, was.UpdatedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(normalized(was), normalized(p))
}

// sameDistribution is samePlatform for a distribution, its sealed
// secrets compared in clear.
func (r *Room) sameDistribution(ctx context.Context, was, d record.Distribution) bool {
	d.Params, d.Settings = slices.Clone(d.Params), maps.Clone(d.Settings)
	if d.Validate() != nil {
		return false
	}
	was.CreatedAt, was.UpdatedAt = time.Time{}, time.Time{}
	was.Settings, was.Params = r.opened(ctx, was.Settings), slices.Clone(was.Params)
	for i, p := range was.Params {
		if s, ok := p.Default.(string); ok {
			was.Params[i].Default = r.opened(ctx, map[string]any{p.Name: s})[p.Name]
		}
	}
	return reflect.DeepEqual(normalized(was), normalized(d))
}

// sameHost reports whether a stored host has the declared blueprint, its
// sealed secrets compared in clear.
func (r *Room) sameHost(ctx context.Context, was, h record.Host) bool {
	a := record.Host{Platform: was.Platform, Distribution: was.Distribution, Applications: was.Applications, Labels: was.Labels,
		Settings: r.opened(ctx, was.Settings), DeclaredIn: was.DeclaredIn}
	b := record.Host{Platform: h.Platform, Distribution: h.Distribution, Applications: h.Applications, Labels: h.Labels,
		Settings: h.Settings, DeclaredIn: h.DeclaredIn}
	return reflect.DeepEqual(normalized(a), normalized(b))
}

// opened is settings with their sealed values opened, each for its
// name; one that does not open stays sealed (and so differs from any
// value in clear).
func (r *Room) opened(ctx context.Context, settings map[string]any) map[string]any {
	out := maps.Clone(settings)
	for name, v := range out {
		if s, ok := v.(string); ok && secret.IsSealedValue(s) && r.svc.Open != nil {
			if plain, err := r.svc.Open(ctx, name, s); err == nil {
				out[name] = plain
			}
		}
	}
	return out
}

// normalized is v (a struct) with its empty maps and slices nil, as the
// store reads them back.
func normalized[T any](v T) T {
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		if (f.Kind() == reflect.Map || f.Kind() == reflect.Slice) && f.Len() == 0 && f.CanSet() {
			f.Set(reflect.Zero(f.Type()))
		}
	}
	return v
}
