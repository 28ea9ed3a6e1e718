package machines

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/tetherhq/tether/server/record"
)

// Templates are rendered with Go's text/template. What a distribution's
// templates (its kernel command line, its install template) see:
//
//	.Host .Env .Token              the host, its environment, its one-time enrollment token
//	.Settings.NAME                 the host's context (environment < platform < distribution < application < host)
//	.Labels.NAME  .Applications    the host's labels and applications
//
// A platform's templates (its driver's definition of a machine) see the
// driver's own variables (driverFields); they are rendered by the driver,
// on the platform's agent, and checked here when the platform is saved.

// installData is what a distribution's templates are rendered with.
func installData(env, token string, h record.Host, settings map[string]any) map[string]any {
	labels := map[string]any{}
	for k, v := range h.Labels {
		labels[k] = v
	}
	return map[string]any{"Host": h.Name, "Env": env, "Token": token, "Settings": settings, "Labels": labels,
		"Applications": slices.Clone(h.Applications)}
}

// installFields are the top-level variables of installData.
var installFields = []string{"Applications", "Env", "Host", "Labels", "Settings", "Token"}

// templateFields are the variables a platform's template may use, by
// template: a libvirt domain's (rendered by the driver on the platform's
// agent), an iPXE script's (rendered here; Kernel and Initrd are the
// files' names in the machine's TFTP directory).
var templateFields = map[string][]string{
	"domain": {"CPUs", "Cmdline", "DiskFormat", "DiskPath", "DomainType", "Host", "Initrd", "Kernel", "MemoryMiB", "Name", "Network", "NetworkBoot", "SeedPath", "SerialLog", "TFTPRoot"},
	"ipxe":   {"Cmdline", "Host", "Initrd", "Kernel", "Name", "ServerAddress"},
}

// defaultIPXE is the iPXE script a PXE platform's machines boot with,
// unless the platform has its own.
const defaultIPXE = `#!ipxe
kernel tftp://{{.ServerAddress}}/{{.Kernel}} {{.Cmdline}}
initrd tftp://{{.ServerAddress}}/{{.Initrd}}
boot
`

// render renders text, the template what, with data; a variable data does
// not hold is an error naming it and saying which there are.
func render(what, text string, data map[string]any, fields []string) (string, error) {
	t, err := template.New(what).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", fmt.Errorf("%s: not a valid template: %w", what, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		msg := err.Error()
		if i := strings.Index(msg, "map has no entry for key "); i >= 0 {
			key := strings.Trim(msg[i+len("map has no entry for key "):], `"`)
			return "", fmt.Errorf("%s: the template uses %s, which is not set: want one of %s (a setting as .Settings.NAME)", what, key, strings.Join(fields, ", "))
		}
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return b.String(), nil
}

// checkDriverTemplate checks a platform's template of a machine: it parses
// and uses only its driver's variables.
func checkDriverTemplate(p record.Platform, name, text string) error {
	fields := templateFields[name]
	data := map[string]any{}
	for _, f := range fields {
		data[f] = sample(f)
	}
	what := fmt.Sprintf("platform %s: templates.%s", p.Name, name)
	_, err := render(what, text, data, fields)
	return err
}

// sample is a value of a driver's variable, to try a template with.
func sample(field string) any {
	switch field {
	case "CPUs", "MemoryMiB":
		return 1
	case "NetworkBoot":
		return false
	}
	return "x"
}

// checkInstallTemplates checks a distribution's templates before any
// host uses them: each parses, and names only variables there are and
// settings the distribution, a platform driver or a host declares (a
// label is the host's to have: checked when a host is provisioned).
func checkInstallTemplates(d record.Distribution) error {
	known := map[string]bool{}
	for _, params := range record.DriverParams {
		for _, p := range params {
			known[p.Name] = true
		}
	}
	for _, p := range append(slices.Clone(d.Params), record.HostParams...) {
		known[p.Name] = true
	}
	for _, tt := range []struct{ what, text string }{{"cmdline", d.Cmdline}, {"install", d.Install}} {
		if tt.text == "" {
			continue
		}
		what := fmt.Sprintf("distribution %s: %s", d.Name, tt.what)
		t, err := template.New(what).Parse(tt.text)
		if err != nil {
			return fmt.Errorf("%s: not a valid template: %w", what, err)
		}
		for _, chain := range fieldChains(t.Root) {
			switch {
			case !slices.Contains(installFields, chain[0]):
				return fmt.Errorf("%s: the template uses .%s, which is not a variable: want one of %s", what, chain[0], strings.Join(installFields, ", "))
			case chain[0] == "Settings" && len(chain) > 1 && !known[chain[1]]:
				return fmt.Errorf("%s: the template uses .Settings.%s, which no platform driver, host or parameter of the distribution declares: declare it in params, or use one of %s",
					what, chain[1], strings.Join(slices.Sorted(maps.Keys(known)), ", "))
			}
		}
	}
	return nil
}

// fieldChains lists the field chains (.A.B) a template's tree names.
func fieldChains(n parse.Node) [][]string {
	var out [][]string
	var walk func(parse.Node)
	walkPipe := func(p *parse.PipeNode) {
		if p == nil {
			return
		}
		for _, c := range p.Cmds {
			for _, a := range c.Args {
				walk(a)
			}
		}
	}
	walk = func(n parse.Node) {
		switch n := n.(type) {
		case *parse.ListNode:
			if n != nil {
				for _, c := range n.Nodes {
					walk(c)
				}
			}
		case *parse.ActionNode:
			walkPipe(n.Pipe)
		case *parse.PipeNode:
			walkPipe(n)
		case *parse.IfNode:
			walkPipe(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.RangeNode:
			walkPipe(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.WithNode:
			walkPipe(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.FieldNode:
			out = append(out, n.Ident)
		}
	}
	walk(n)
	return out
}

// renderInstall renders a distribution's templates for a host: the kernel
// command line and the install template.
func renderInstall(d record.Distribution, data map[string]any) (cmdline, install string, err error) {
	if d.Cmdline != "" {
		if cmdline, err = render(fmt.Sprintf("distribution %s: cmdline", d.Name), d.Cmdline, data, fieldsOf(data)); err != nil {
			return "", "", err
		}
		cmdline = strings.Join(strings.Fields(cmdline), " ")
	}
	if d.Install != "" {
		if install, err = render(fmt.Sprintf("distribution %s: install", d.Name), d.Install, data, fieldsOf(data)); err != nil {
			return "", "", err
		}
	}
	return cmdline, install, nil
}

func fieldsOf(data map[string]any) []string { return slices.Sorted(maps.Keys(data)) }
