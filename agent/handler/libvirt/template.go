package libvirt

import (
	_ "embed"
	"encoding/xml"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"

	"libvirt.org/go/libvirtxml"
)

//go:embed domain.xml.tmpl
var defaultTemplate string

// DefaultTemplate is the driver's own template of a domain's XML, the one
// a MachineSpec without a Template of its own is made from.
func DefaultTemplate() string { return defaultTemplate }

// TemplateData is what a domain template is rendered with. Render hands
// every string to the template XML-escaped, so a value goes as it is into
// an element or an attribute.
type TemplateData struct {
	// Name is the domain's name; Host the blueprint it is made from.
	Name string
	Host string
	// MemoryMiB and CPUs size the machine.
	MemoryMiB int64
	CPUs      int64
	// DomainType is libvirt's domain type: qemu (software emulation) or
	// kvm.
	DomainType string
	// Kernel, Initrd and Cmdline boot the machine directly (a netboot
	// installer); all empty when it boots from its disk or the network.
	Kernel  string
	Initrd  string
	Cmdline string
	// DiskPath is the machine's disk, a volume the driver made in the
	// platform's pool, of format DiskFormat (qcow2).
	DiskPath   string
	DiskFormat string
	// SeedPath is the machine's cloud-init NoCloud seed, an ISO 9660
	// image labelled cidata that the driver made in the same pool, for a
	// read-only cdrom; "" when the machine has no seed.
	SeedPath string
	// Network is "user" (QEMU's user-mode network: 10.0.2.2 is the
	// host's loopback) or the name of a libvirt network.
	Network string
	// NetworkBoot: the machine boots from the network (PXE), through
	// QEMU's own TFTP server serving TFTPRoot, the machine's directory of
	// boot files (its bootfile is boot.ipxe).
	NetworkBoot bool
	TFTPRoot    string
	// SerialLog is the file the machine's serial console is written to.
	SerialLog string
}

// TemplateFields lists the fields a domain template may use (.Name,
// .Host, …), without their dots, in the order of TemplateData.
func TemplateFields() []string {
	t := reflect.TypeFor[TemplateData]()
	names := make([]string, t.NumField())
	for i := range names {
		names[i] = t.Field(i).Name
	}
	return names
}

// Render renders a domain template (text/template) with data. A template
// that uses a field TemplateFields does not list is refused naming the
// field, even where it would not be evaluated.
func Render(tmpl string, data TemplateData) (string, error) {
	t, err := template.New("domain").Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return "", fmt.Errorf("domain template: %w", err)
	}
	if err := checkFields(t); err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Execute(&b, data.values()); err != nil {
		return "", fmt.Errorf("domain template: %w", err)
	}
	return b.String(), nil
}

// values is data as the template sees it: a map, so that a missing key is
// an error (missingkey=error), with every string XML-escaped.
func (data TemplateData) values() map[string]any {
	v := reflect.ValueOf(data)
	out := make(map[string]any, v.NumField())
	for i := range v.NumField() {
		f := v.Field(i)
		if s, ok := f.Interface().(string); ok {
			out[v.Type().Field(i).Name] = escape(s)
			continue
		}
		out[v.Type().Field(i).Name] = f.Interface()
	}
	return out
}

func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}

// checkFields finds the fields t uses where dot is the data (not within
// with or range) and $.Field anywhere, and refuses those TemplateData does
// not have.
func checkFields(t *template.Template) error {
	known := TemplateFields()
	for _, tt := range t.Templates() {
		if tt.Tree == nil {
			continue
		}
		var bad error
		walk(tt.Tree.Root, true, func(n parse.Node, field string) {
			if bad == nil && !slices.Contains(known, field) {
				loc, _ := tt.Tree.ErrorContext(n)
				bad = fmt.Errorf("domain template: %s: unknown field .%s: a template may use .%s", loc, field, strings.Join(known, ", ."))
			}
		})
		if bad != nil {
			return bad
		}
	}
	return nil
}

// walk calls use for each field of the data that n refers to; root says
// whether dot is the data itself.
func walk(n parse.Node, root bool, use func(parse.Node, string)) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			walk(c, root, use)
		}
	case *parse.ActionNode:
		walk(n.Pipe, root, use)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			walk(c, root, use)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			walk(a, root, use)
		}
	case *parse.ChainNode:
		walk(n.Node, root, use)
	case *parse.FieldNode:
		if root {
			use(n, n.Ident[0])
		}
	case *parse.VariableNode:
		if len(n.Ident) > 1 && n.Ident[0] == "$" {
			use(n, n.Ident[1])
		}
	case *parse.IfNode:
		walk(n.Pipe, root, use)
		walk(n.List, root, use)
		walk(n.ElseList, root, use)
	case *parse.WithNode:
		walk(n.Pipe, root, use)
		walk(n.List, false, use)
		walk(n.ElseList, root, use)
	case *parse.RangeNode:
		walk(n.Pipe, root, use)
		walk(n.List, false, use)
		walk(n.ElseList, root, use)
	case *parse.TemplateNode:
		walk(n.Pipe, root, use)
	}
}

// checkDomain parses a rendered domain: libvirt's domain XML, of the
// machine's name.
func checkDomain(doc, name string) (*libvirtxml.Domain, error) {
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(doc); err != nil {
		return nil, fmt.Errorf("domain template: the rendered XML is not a libvirt domain: %w", err)
	}
	switch {
	case dom.Name != name:
		return nil, fmt.Errorf("domain template: the domain is named %q, want the machine's name %q (use {{.Name}})", dom.Name, name)
	case dom.Type == "":
		return nil, fmt.Errorf("domain template: the domain has no type (use <domain type='{{.DomainType}}'>)")
	}
	return &dom, nil
}
