package model

import "fmt"

// DeclaredMachines are the machines a model declares: the platforms and
// distributions of its `platform` and `distribution` blocks, and the
// hosts of its `host` blocks that name a platform (blueprints: the server
// makes their machines). The compiler finds them; the server makes its
// records of them, checked as an operator's are.
type DeclaredMachines struct {
	Platforms     []DeclaredPlatform     `json:"platforms,omitempty"`
	Distributions []DeclaredDistribution `json:"distributions,omitempty"`
	Hosts         []DeclaredHost         `json:"hosts,omitempty"`
	// Applications are the model's applications that say something of
	// the machines made to run them (machine_settings).
	Applications []DeclaredApplication `json:"applications,omitempty"`
}

// Empty reports whether the model declares no machines at all.
func (d DeclaredMachines) Empty() bool {
	return len(d.Platforms) == 0 && len(d.Distributions) == 0 && len(d.Hosts) == 0 && len(d.Applications) == 0
}

// DeclaredApplication is what an application block says of the machines
// made to run it: settings of a platform driver, a distribution or a
// host, a layer of the context of every host blueprint that lists the
// application (over its distribution's, under the host's own).
type DeclaredApplication struct {
	Name            string         `json:"name"`
	MachineSettings map[string]any `json:"machine_settings"`
	Pos             SourcePos      `json:"pos"`
}

// SourcePos is where a model declares something: a file, relative to the
// model's directory (slash-separated), and a line.
type SourcePos struct {
	File string `json:"file"`
	Line int    `json:"line"`
}

// String prints file:line.
func (p SourcePos) String() string { return fmt.Sprintf("%s:%d", p.File, p.Line) }

// DeclaredPlatform is a platform a model declares: where machines are
// made, by a driver, served by an agent.
type DeclaredPlatform struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	Agent  string `json:"agent"`
	// Settings are the driver's settings: strings, booleans, whole numbers
	// (int64) or other numbers (float64).
	Settings map[string]any `json:"settings,omitempty"`
	// Templates override the driver's own, by name.
	Templates map[string]string `json:"templates,omitempty"`
	Pos       SourcePos         `json:"pos"`
}

// DeclaredDistribution is a distribution a model declares: what is
// installed on machines.
type DeclaredDistribution struct {
	Name          string            `json:"name"`
	Kind          string            `json:"kind"`
	Kernel        string            `json:"kernel,omitempty"`
	Initrd        string            `json:"initrd,omitempty"`
	Cmdline       string            `json:"cmdline,omitempty"`
	InstallFormat string            `json:"install_format,omitempty"`
	Install       string            `json:"install,omitempty"`
	Images        map[string]string `json:"images,omitempty"`
	Params        []DeclaredParam   `json:"params,omitempty"`
	Settings      map[string]any    `json:"settings,omitempty"`
	Pos           SourcePos         `json:"pos"`
}

// DeclaredParam is a typed parameter of a declared distribution.
type DeclaredParam struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Default  any    `json:"default,omitempty"`
	Required bool   `json:"required,omitempty"`
	Doc      string `json:"doc,omitempty"`
	Min      int64  `json:"min,omitempty"`
	Max      int64  `json:"max,omitempty"`
}

// DeclaredHost is the blueprint of a machine a model declares: a host
// block naming its platform and distribution.
type DeclaredHost struct {
	Name         string            `json:"name"`
	Platform     string            `json:"platform"`
	Distribution string            `json:"distribution"`
	Applications []string          `json:"applications,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Settings     map[string]any    `json:"settings,omitempty"`
	Pos          SourcePos         `json:"pos"`
}
