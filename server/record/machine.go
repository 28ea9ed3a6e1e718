package record

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
)

// Machines from blueprints: a Platform is where machines are made (a
// driver and its settings), a Distribution what is installed on them, a
// Host the blueprint of one machine (platform, distribution, applications,
// settings) with the state of its provisioning, and an Instance the real
// machine it became, or one an agent reported (a discovered instance).

// ParamType is the type of a driver's or a distribution's parameter.
type ParamType string

// Parameter types. A secret is a string never shown in clear: it is
// sealed at rest as sensitive resource attributes are.
const (
	ParamString ParamType = "string"
	ParamInt    ParamType = "int"
	ParamBool   ParamType = "bool"
	ParamSecret ParamType = "secret"
)

// Param describes one typed parameter.
type Param struct {
	Name     string    `json:"name"`
	Type     ParamType `json:"type"`
	Default  any       `json:"default,omitempty"`
	Required bool      `json:"required,omitempty"`
	// Doc says what the parameter is, for `--help` and the docs.
	Doc string `json:"doc"`
	// Min and Max bound an int (both zero: unbounded).
	Min int64 `json:"min,omitempty"`
	Max int64 `json:"max,omitempty"`
}

// check returns v as the parameter's type, or an error naming the field.
func (p Param) check(field string, v any) (any, error) {
	switch p.Type {
	case ParamString, ParamSecret:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s: want a string, got %s", field, typeName(v))
		}
		if err := model.ValidateText(field, s, 4096, false); err != nil {
			return nil, err
		}
		return s, nil
	case ParamBool:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("%s: want true or false, got %s", field, typeName(v))
		}
		return b, nil
	case ParamInt:
		n, ok := asInt(v)
		if !ok {
			return nil, fmt.Errorf("%s: want a whole number, got %s", field, typeName(v))
		}
		if (p.Min != 0 || p.Max != 0) && (n < p.Min || n > p.Max) {
			return nil, fmt.Errorf("%s: %d is out of range: want %d to %d", field, n, p.Min, p.Max)
		}
		return n, nil
	}
	return nil, fmt.Errorf("%s: parameter of unknown type %q", field, p.Type)
}

// asInt reads a whole number as JSON decoding, YAML or Go code give it.
func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), true
		}
	case interface{ Int64() (int64, error) }: // json.Number
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, int, int64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// CheckParams checks settings against params: each known, of its type,
// the required ones given; it returns the settings with the defaults of
// those not given filled in. Errors name the field as what.name.
func CheckParams(what string, params []Param, settings map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(params))
	byName := map[string]Param{}
	for _, p := range params {
		byName[p.Name] = p
	}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		p, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("%s.%s: unknown setting: want one of %s", what, name, strings.Join(paramNames(params), ", "))
		}
		v, err := p.check(what+"."+name, settings[name])
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	for _, p := range params {
		if _, ok := out[p.Name]; ok {
			continue
		}
		switch {
		case p.Default != nil:
			out[p.Name] = p.Default
		case p.Required:
			return nil, fmt.Errorf("%s.%s: required (%s)", what, p.Name, p.Doc)
		}
	}
	return out, nil
}

func paramNames(params []Param) []string {
	names := make([]string, len(params))
	for i, p := range params {
		names[i] = p.Name
	}
	return names
}

// Driver kinds of platforms.
const (
	DriverLibvirt = "libvirt"
	DriverPXE     = "pxe"
)

// DriverParams are the settings each platform driver takes, with their
// defaults: what a platform of that driver may set.
var DriverParams = map[string][]Param{
	DriverLibvirt: libvirtParams,
	// A PXE platform's machines boot from the network: an iPXE script
	// (the platform's ipxe template) fetches their kernel and initrd over
	// TFTP from a tree the platform's agent writes. Its agent makes them
	// as libvirt guests booting from that tree.
	DriverPXE: append(slices.Clone(libvirtParams),
		Param{Name: "tftp_root", Type: ParamString, Default: "/var/lib/tether/tftp", Doc: "the directory the TFTP server serves: each machine's boot script, kernel and initrd are put in a directory of it named after the machine"},
		Param{Name: "server_address", Type: ParamString, Default: "10.0.2.2", Doc: "the address a booting machine fetches its files from (10.0.2.2: the hypervisor, on QEMU's user-mode network)"},
	),
}

var libvirtParams = []Param{
	{Name: "uri", Type: ParamString, Default: "qemu:///system", Doc: "the libvirt connection URI, as the agent serving the platform reaches it"},
	{Name: "network", Type: ParamString, Default: "user", Doc: "the guests' network: user (QEMU's user-mode network) or the name of a libvirt network"},
	{Name: "pool", Type: ParamString, Default: "default", Doc: "the storage pool the guests' disks are made in"},
	{Name: "domain_type", Type: ParamString, Default: "qemu", Doc: "the domain type: qemu (software emulation) or kvm"},
	{Name: "memory_mib", Type: ParamInt, Default: int64(1024), Min: 64, Max: 1 << 20, Doc: "a guest's memory, in MiB, unless its host says otherwise"},
	{Name: "cpus", Type: ParamInt, Default: int64(1), Min: 1, Max: 256, Doc: "a guest's virtual CPUs, unless its host says otherwise"},
	{Name: "disk_gib", Type: ParamInt, Default: int64(8), Min: 1, Max: 1 << 16, Doc: "a guest's disk, in GiB, unless its host says otherwise"},
	{Name: "log_dir", Type: ParamString, Default: "/var/log/libvirt/qemu", Doc: "where each guest's serial console is written (NAME-serial.log): what a guest printed, to see why it did not call home"},
	brokerParam,
}

// Drivers lists the platform drivers, sorted.
func Drivers() []string { return slices.Sorted(maps.Keys(DriverParams)) }

// brokerParam is where the machines of a platform reach the broker: their
// agents connect outward to it.
var brokerParam = Param{Name: "broker", Type: ParamString, Default: "amqp://10.0.2.2:5672/",
	Doc: "the broker's URL as a machine of this platform reaches it (10.0.2.2 is the hypervisor's loopback on QEMU's user-mode network)"}

// HostParams are the settings every host may set besides its platform's
// and its distribution's.
var HostParams = []Param{
	{Name: "provision_timeout", Type: ParamInt, Min: 10, Max: 7 * 24 * 3600,
		Doc: "seconds a machine has to boot and enroll before its host fails and the machine is destroyed (the server's --provision-timeout when unset)"},
}

// MachineError is what the server says, for people, of a change of
// machines it refuses or cannot carry out: the field that is wrong, the
// state that does not allow it, what to do next. Kind is the error it is
// (model.ErrInvalid, ErrNotFound, ErrConflict, ErrUnavailable, or
// ErrHalted), which errors.Is finds through it; the API answers with
// Kind's status and shows Msg as it is, so Msg never carries a
// database's or a broker's words.
type MachineError struct {
	Kind error
	Msg  string
}

func (e *MachineError) Error() string { return e.Msg }
func (e *MachineError) Unwrap() error { return e.Kind }

// Refuse returns a MachineError of kind, saying what format says.
func Refuse(kind error, format string, args ...any) error {
	return &MachineError{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// SecretShown is how a secret setting is shown outside the machine it is
// for. A distribution or host saved with it as a secret's value keeps the
// value it had.
const SecretShown = "(secret)"

// ContextValue is one setting of a host's context: its value and where it
// came from (the platform, the distribution or the host).
type ContextValue struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
	From  string `json:"from"`
	// Secret: Value is shown as SecretShown outside the machine.
	Secret bool `json:"secret,omitempty"`
}

// Application is what an environment's model says of an application for
// the machines made to run it: machine settings (memory, disks, a
// distribution's parameters) that are a layer of the context of every
// host that lists it. Its records are the model's: each compile the
// server runs replaces them.
type Application struct {
	Env  string `json:"env"`
	Name string `json:"name"`
	// MachineSettings are settings of a platform driver, a distribution
	// or a host, of their types.
	MachineSettings map[string]any `json:"machine_settings,omitempty"`
	// DeclaredIn is where the model declares it (file:line).
	DeclaredIn string    `json:"declared_in,omitempty"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// Validate checks an application's name and where it is declared (its
// settings are checked by CheckSettings, against the environment's
// distributions).
func (a *Application) Validate() error {
	if err := validMachineName("application", a.Name); err != nil {
		return err
	}
	return validDeclaredIn("application "+a.Name, a.DeclaredIn)
}

// CheckSettings checks each of an application's machine settings is a
// setting some platform driver or host takes, or a parameter of one of
// dists, of its type (whole numbers made int64).
func (a *Application) CheckSettings(dists []Distribution) error {
	what := "application " + a.Name
	if a.DeclaredIn != "" {
		what += " (" + a.DeclaredIn + ")"
	}
	known := knownSettings()
	for _, d := range dists {
		for _, q := range d.Params {
			known[q.Name] = q
		}
	}
	for _, name := range slices.Sorted(maps.Keys(a.MachineSettings)) {
		q, ok := known[name]
		if !ok {
			return fmt.Errorf("%s: machine_settings.%s: unknown setting: want a setting of a platform driver, a host or a distribution: one of %s",
				what, name, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		if q.Type == ParamSecret {
			return fmt.Errorf("%s: machine_settings.%s: a secret is set on a distribution or a host, where it is sealed", what, name)
		}
		v, err := q.check(what+": machine_settings."+name, a.MachineSettings[name])
		if err != nil {
			return err
		}
		a.MachineSettings[name] = v
	}
	return nil
}

// HostContext resolves a host's settings: the environment's machine
// settings (those the platform's driver, the distribution or a host
// takes), then the platform's (its driver's defaults filled in), then its
// distribution's parameters, then its applications' machine settings (in
// the host's order, a later one over an earlier; apps holds those the
// model declares, the others have none), then the host's own, each over
// the one before. It checks the environment's, the applications' and the
// host's settings against the parameters they set (errors name env:
// machine_settings.KEY, application NAME: machine_settings.KEY and host
// NAME: settings.KEY) and returns every value with where it came from,
// sorted by name, and as a map.
func HostContext(env map[string]any, p Platform, d Distribution, apps []Application, h Host) ([]ContextValue, map[string]any, error) {
	params := map[string]Param{}
	from := map[string]string{}
	values := map[string]any{}
	for _, q := range DriverParams[p.Driver] {
		params[q.Name] = q
	}
	for _, q := range d.Params {
		params[q.Name] = q
	}
	for _, q := range HostParams {
		params[q.Name] = q
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		q, ok := params[name]
		if !ok {
			continue // another driver's: not this host's
		}
		v, err := q.check(fmt.Sprintf("env: machine_settings.%s", name), env[name])
		if err != nil {
			return nil, nil, err
		}
		values[name], from[name] = v, "environment"
	}
	for _, q := range DriverParams[p.Driver] {
		if v, ok := p.Settings[q.Name]; ok {
			if _, set := values[q.Name]; set && isDefault(q, v) {
				continue // the driver's default does not hide the environment's
			}
			values[q.Name], from[q.Name] = v, "platform "+p.Name
		}
	}
	for _, q := range d.Params {
		if v, ok := d.Settings[q.Name]; ok {
			values[q.Name], from[q.Name] = v, "distribution "+d.Name
		}
	}
	for _, name := range h.Applications {
		i := slices.IndexFunc(apps, func(a Application) bool { return a.Name == name })
		if i < 0 {
			continue // an application the model says nothing of
		}
		a := apps[i]
		for _, key := range slices.Sorted(maps.Keys(a.MachineSettings)) {
			q, ok := params[key]
			if !ok {
				continue // another platform driver's, or distribution's
			}
			v, err := q.check(fmt.Sprintf("application %s: machine_settings.%s", a.Name, key), a.MachineSettings[key])
			if err != nil {
				return nil, nil, err
			}
			values[key], from[key] = v, "application "+a.Name
		}
	}
	names := slices.Sorted(maps.Keys(params))
	for _, name := range slices.Sorted(maps.Keys(h.Settings)) {
		q, ok := params[name]
		if !ok {
			return nil, nil, fmt.Errorf("host %s: settings.%s: unknown setting: want one of %s", h.Name, name, strings.Join(names, ", "))
		}
		v, err := q.check(fmt.Sprintf("host %s: settings.%s", h.Name, name), h.Settings[name])
		if err != nil {
			return nil, nil, err
		}
		values[name], from[name] = v, "host "+h.Name
	}
	out := make([]ContextValue, 0, len(values))
	for _, name := range slices.Sorted(maps.Keys(values)) {
		out = append(out, ContextValue{Name: name, Value: values[name], From: from[name], Secret: params[name].Type == ParamSecret})
	}
	return out, values, nil
}

// isDefault says whether v is q's default: a platform's setting its
// driver filled in.
func isDefault(q Param, v any) bool {
	if q.Default == nil {
		return false
	}
	a, aok := asInt(v)
	b, bok := asInt(q.Default)
	if aok && bok {
		return a == b
	}
	return v == q.Default
}

// checkMachineSettings checks an environment's machine settings: each a
// setting some platform driver or host takes (a distribution's own
// parameters are the distribution's), of its type.
func checkMachineSettings(settings map[string]any) error {
	known := knownSettings()
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		q, ok := known[name]
		if !ok {
			return fmt.Errorf("machine_settings.%s: unknown setting: want one of %s", name, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		if q.Type == ParamSecret {
			return fmt.Errorf("machine_settings.%s: a secret is set on a distribution or a host, where it is sealed", name)
		}
		if _, err := q.check("machine_settings."+name, settings[name]); err != nil {
			return err
		}
	}
	return nil
}

// knownSettings are the settings every platform driver and every host
// takes, by name.
func knownSettings() map[string]Param {
	known := map[string]Param{}
	for _, params := range DriverParams {
		for _, q := range params {
			known[q.Name] = q
		}
	}
	for _, q := range HostParams {
		known[q.Name] = q
	}
	return known
}

// Platform is a named place machines are made: a driver, its settings,
// and the templates it renders (a libvirt domain's XML, an iPXE script),
// served by an agent (on the hypervisor's host, or one the server runs).
type Platform struct {
	Env    string `json:"env"`
	Name   string `json:"name"`
	Driver string `json:"driver"`
	// Agent is the agent that serves the platform: the driver's resources
	// run there.
	Agent    string         `json:"agent"`
	Settings map[string]any `json:"settings"`
	// Templates override the driver's own, by name.
	Templates map[string]string `json:"templates,omitempty"`
	// Discovered: an agent reported the platform (a hypervisor it runs
	// on); an operator made it otherwise.
	Discovered bool `json:"discovered,omitempty"`
	// DeclaredIn is where the environment's model declares the platform
	// (file:line), which then changes with the model only; empty when an
	// operator made it (or an agent reported it).
	DeclaredIn string    `json:"declared_in,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// Validate checks the platform and fills in its driver's defaults.
func (p *Platform) Validate() error {
	if err := validMachineName("platform", p.Name); err != nil {
		return err
	}
	params, ok := DriverParams[p.Driver]
	if !ok {
		return fmt.Errorf("platform %s: driver: unknown driver %q: want one of %s", p.Name, p.Driver, strings.Join(Drivers(), ", "))
	}
	if err := model.ValidateAgentName(p.Agent); err != nil {
		return fmt.Errorf("platform %s: agent: %w", p.Name, err)
	}
	if err := validDeclaredIn("platform "+p.Name, p.DeclaredIn); err != nil {
		return err
	}
	settings, err := CheckParams("platform "+p.Name+": settings", params, p.Settings)
	if err != nil {
		return err
	}
	p.Settings = settings
	for name, t := range p.Templates {
		if err := validMachineName("template", name); err != nil {
			return fmt.Errorf("platform %s: templates: %w", p.Name, err)
		}
		if len(t) > MaxTemplate {
			return fmt.Errorf("platform %s: templates.%s: %d bytes: at most %d", p.Name, name, len(t), MaxTemplate)
		}
	}
	return nil
}

// MaxTemplate bounds a template.
const MaxTemplate = 256 << 10

// Distribution kinds.
const (
	// DistNetboot installs from a kernel, an initrd and an install
	// template rendered with the host's settings.
	DistNetboot = "netboot"
	// DistImage starts from a gold image, one per platform.
	DistImage = "image"
)

// Install template formats of a netboot distribution.
const (
	InstallCloudInit = "cloud-init"
	InstallPreseed   = "preseed"
	InstallKickstart = "kickstart"
	InstallNone      = "none" // the initrd brings the agent itself
)

// Distribution is an operating system to install on a host.
type Distribution struct {
	Env  string `json:"env"`
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Kernel and Initrd are the netboot files (paths or URLs the
	// platform's agent reads), Cmdline the kernel's command line.
	Kernel  string `json:"kernel,omitempty"`
	Initrd  string `json:"initrd,omitempty"`
	Cmdline string `json:"cmdline,omitempty"`
	// Install is the install template, in the format InstallFormat.
	InstallFormat string `json:"install_format,omitempty"`
	Install       string `json:"install,omitempty"`
	// Images are the gold images of an image distribution, by platform.
	Images map[string]string `json:"images,omitempty"`
	// Params are the distribution's own parameters, and Settings their
	// values (defaults filled in).
	Params   []Param        `json:"params,omitempty"`
	Settings map[string]any `json:"settings,omitempty"`
	// DeclaredIn is where the environment's model declares the
	// distribution (file:line); empty when an operator made it.
	DeclaredIn string    `json:"declared_in,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// Validate checks the distribution and fills in its parameters' defaults.
func (d *Distribution) Validate() error {
	if err := validMachineName("distribution", d.Name); err != nil {
		return err
	}
	what := "distribution " + d.Name
	switch d.Kind {
	case DistNetboot:
		if d.Kernel == "" || d.Initrd == "" {
			return fmt.Errorf("%s: kernel and initrd: a netboot distribution needs both", what)
		}
		switch d.InstallFormat {
		case InstallCloudInit, InstallPreseed, InstallKickstart:
		case "", InstallNone:
			d.InstallFormat = InstallNone
		default:
			return fmt.Errorf("%s: install_format: unknown format %q: want %s, %s, %s or %s", what, d.InstallFormat, InstallCloudInit, InstallPreseed, InstallKickstart, InstallNone)
		}
		if len(d.Images) > 0 {
			return fmt.Errorf("%s: images: a netboot distribution has no images (kind image has)", what)
		}
	case DistImage:
		if len(d.Images) == 0 {
			return fmt.Errorf("%s: images: an image distribution needs an image for at least one platform", what)
		}
		if d.Kernel != "" || d.Initrd != "" {
			return fmt.Errorf("%s: kernel and initrd: an image distribution boots its image (kind netboot boots a kernel)", what)
		}
		// An image has no installer to read a preseed or a kickstart:
		// its first boot reads cloud-init's seed.
		switch d.InstallFormat {
		case InstallCloudInit:
		case "", InstallNone:
			d.InstallFormat = InstallNone
		default:
			return fmt.Errorf("%s: install_format: %q: an image distribution takes %s user-data (its image's first boot reads it) or %s", what, d.InstallFormat, InstallCloudInit, InstallNone)
		}
	default:
		return fmt.Errorf("%s: kind: unknown kind %q: want %s or %s", what, d.Kind, DistNetboot, DistImage)
	}
	switch {
	case d.InstallFormat != InstallNone && d.Install == "":
		return fmt.Errorf("%s: install: a %s distribution needs its install template", what, d.InstallFormat)
	case d.InstallFormat == InstallNone && d.Install != "":
		return fmt.Errorf("%s: install: an install template needs its format (install_format %s, %s or %s)", what, InstallCloudInit, InstallPreseed, InstallKickstart)
	}
	if len(d.Install) > MaxTemplate {
		return fmt.Errorf("%s: install: %d bytes: at most %d", what, len(d.Install), MaxTemplate)
	}
	if err := validDeclaredIn(what, d.DeclaredIn); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, p := range d.Params {
		if err := validMachineName("parameter", p.Name); err != nil {
			return fmt.Errorf("%s: params[%d]: %w", what, i, err)
		}
		if seen[p.Name] {
			return fmt.Errorf("%s: params[%d]: %s is declared twice", what, i, p.Name)
		}
		seen[p.Name] = true
		if p.Default != nil {
			v, err := p.check(fmt.Sprintf("%s: params[%d].default", what, i), p.Default)
			if err != nil {
				return err
			}
			d.Params[i].Default = v
		}
	}
	settings, err := CheckParams(what+": settings", d.Params, d.Settings)
	if err != nil {
		return err
	}
	d.Settings = settings
	return nil
}

// Fits says whether the distribution can be installed on a platform: an
// image distribution only where it has an image.
func (d Distribution) Fits(p Platform) error {
	if d.Kind == DistImage {
		if _, ok := d.Images[p.Name]; !ok {
			return fmt.Errorf("distribution %s has no image for platform %s: add one (images.%s) or choose another platform", d.Name, p.Name, p.Name)
		}
	}
	if d.Kind == DistNetboot && p.Driver != DriverLibvirt && p.Driver != DriverPXE {
		return fmt.Errorf("distribution %s boots over the network: platform %s's driver %s cannot boot it", d.Name, p.Name, p.Driver)
	}
	return nil
}

// HostState is where a host's provisioning stands.
type HostState string

// Host states.
const (
	HostDefined        HostState = "defined"
	HostProvisioning   HostState = "provisioning"
	HostProvisioned    HostState = "provisioned"
	HostFailed         HostState = "failed"
	HostDeprovisioning HostState = "deprovisioning"
)

// HostEvent is what moves a host from one state to another.
type HostEvent string

// Host events.
const (
	// HostProvision: an operator (or a compile) asks for the machine.
	HostProvision HostEvent = "provision"
	// HostEnrolled: the machine's agent enrolled with the host's token.
	HostEnrolled HostEvent = "enrolled"
	// HostFail: the driver failed, or the agent did not call home in
	// time (the host's Reason says which).
	HostFail HostEvent = "fail"
	// HostDestroy: an operator asks for the machine to be destroyed (or
	// made again: destroy, then provision).
	HostDestroy HostEvent = "destroy"
	// HostDestroyed: the driver removed the machine and its disks.
	HostDestroyed HostEvent = "destroyed"
	// HostAdopt: an operator adopts a machine that runs an agent already
	// (a discovered instance) into a defined host.
	HostAdopt HostEvent = "adopt"
)

// hostMoves is the host's state machine: state × event → state.
var hostMoves = map[HostState]map[HostEvent]HostState{
	HostDefined:        {HostProvision: HostProvisioning, HostAdopt: HostProvisioned},
	HostProvisioning:   {HostEnrolled: HostProvisioned, HostFail: HostFailed, HostDestroy: HostDeprovisioning},
	HostProvisioned:    {HostDestroy: HostDeprovisioning, HostFail: HostFailed},
	HostFailed:         {HostProvision: HostProvisioning, HostDestroy: HostDeprovisioning},
	HostDeprovisioning: {HostDestroyed: HostDefined, HostFail: HostFailed},
}

// Move returns the state event moves a host in state to, or an error
// (wrapping model.ErrConflict) saying what the host can do in that state.
func (s HostState) Move(e HostEvent) (HostState, error) {
	moves, ok := hostMoves[s]
	if !ok {
		return s, fmt.Errorf("%w: host state %q is not a state the server knows", model.ErrInvalid, s)
	}
	next, ok := moves[e]
	if !ok {
		can := make([]string, 0, len(moves))
		for _, ev := range slices.Sorted(maps.Keys(moves)) {
			can = append(can, string(ev))
		}
		return s, Refuse(model.ErrConflict, "a %s host cannot %s (it can: %s)", s, e, strings.Join(can, ", "))
	}
	return next, nil
}

// Valid reports whether s is a known state.
func (s HostState) Valid() bool { _, ok := hostMoves[s]; return ok }

// Host is the blueprint of a machine: its platform, its distribution, its
// applications (the model's hostgroups it belongs to, by label) and its
// settings, with where its provisioning stands.
type Host struct {
	Env          string            `json:"env"`
	Name         string            `json:"name"`
	Platform     string            `json:"platform"`
	Distribution string            `json:"distribution"`
	Applications []string          `json:"applications,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	// Settings override the platform's and the distribution's (memory,
	// cpus, disk; the distribution's parameters).
	Settings map[string]any `json:"settings,omitempty"`
	State    HostState      `json:"state"`
	// Reason says why a failed host failed, as the driver or the server
	// said it.
	Reason string `json:"reason,omitempty"`
	// Instance is the driver's ID of the machine the host became.
	Instance string `json:"instance,omitempty"`
	// DeclaredIn is where the environment's model declares the host
	// (file:line); empty when an operator made it.
	DeclaredIn string    `json:"declared_in,omitempty"`
	StateSince time.Time `json:"state_since"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// HostView is a host as operators see it: with its context (where each
// setting came from, secrets hidden), the name of its machine on its
// platform, and its instance.
type HostView struct {
	Host
	Context  []ContextValue `json:"context"`
	Machine  string         `json:"machine"`
	Instance *Instance      `json:"instance_state,omitempty"`
}

// Validate checks the host's own fields (its platform and distribution
// are checked against their records by the server).
func (h *Host) Validate() error {
	if err := model.ValidateAgentName(h.Name); err != nil {
		return fmt.Errorf("host: name: %w (a host's name is its agent's)", err)
	}
	if err := validMachineName("platform", h.Platform); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	if err := validMachineName("distribution", h.Distribution); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	for i, a := range h.Applications {
		if err := validMachineName("application", a); err != nil {
			return fmt.Errorf("host %s: applications[%d]: %w", h.Name, i, err)
		}
	}
	if err := model.ValidateLabels(h.Labels); err != nil {
		return fmt.Errorf("host %s: labels: %w", h.Name, err)
	}
	if err := validDeclaredIn("host "+h.Name, h.DeclaredIn); err != nil {
		return err
	}
	if h.State == "" {
		h.State = HostDefined
	}
	if !h.State.Valid() {
		return fmt.Errorf("host %s: state: unknown state %q", h.Name, h.State)
	}
	return nil
}

// PowerState is an instance's power state, as its driver reports it.
type PowerState string

// Power states.
const (
	PowerRunning  PowerState = "running"
	PowerStopped  PowerState = "stopped"
	PowerPaused   PowerState = "paused"
	PowerCrashed  PowerState = "crashed"
	PowerUnknown  PowerState = "unknown"
	PowerStarting PowerState = "starting"
)

// Instance is a real machine: made from a host's blueprint, or reported
// by an agent (a hypervisor's domain, or an agent enrolled without a
// blueprint: a discovered instance, which an operator can adopt into a
// host).
type Instance struct {
	Env string `json:"env"`
	// ID is the driver's ID of the machine (a libvirt domain's UUID), or
	// "agent:NAME" for a machine known only by its agent.
	ID       string `json:"id"`
	Platform string `json:"platform,omitempty"`
	// Host is the blueprint the instance was made from or adopted into
	// ("" for a discovered instance).
	Host string `json:"host,omitempty"`
	// Agent is the instance's own agent, once it enrolled.
	Agent     string            `json:"agent,omitempty"`
	Power     PowerState        `json:"power"`
	BootedAt  *time.Time        `json:"booted_at,omitempty"`
	Addresses []string          `json:"addresses,omitempty"`
	Hardware  map[string]any    `json:"hardware,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	SeenAt    time.Time         `json:"seen_at"`
}

// Uptime is how long the instance has run, at now (zero when it does not
// run).
func (i Instance) Uptime(now time.Time) time.Duration {
	if i.Power != PowerRunning || i.BootedAt == nil {
		return 0
	}
	return now.Sub(*i.BootedAt)
}

// validMachineName checks the name of a platform, distribution,
// application, template or parameter: what an agent's name may be.
func validMachineName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%s: a name is required", what)
	}
	if err := model.ValidateAgentName(name); err != nil {
		return fmt.Errorf("%s %q: %w", what, model.Clip(name, 64), err)
	}
	return nil
}

// validDeclaredIn checks where a model declares a record: a file:line.
func validDeclaredIn(what, at string) error {
	return model.ValidateText(what+": declared_in", at, 1024, false)
}
