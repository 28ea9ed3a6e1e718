package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// distributionCommand is `tether distribution`: what is installed on an
// environment's machines.
func distributionCommand(term *terminal) *ucli.Command {
	flags := func(add bool) []ucli.Flag {
		kind := &ucli.StringFlag{Name: "kind", Usage: "`KIND`: netboot (a kernel, an initrd and an install template) or image (a gold image per platform; cloud-init user-data for its first boot)"}
		if add {
			kind.Value = record.DistNetboot
		}
		return []ucli.Flag{kind,
			&ucli.StringFlag{Name: "kernel", Usage: "the netboot kernel: a `PATH` (or URL) the platform's agent reads"},
			&ucli.StringFlag{Name: "initrd", Usage: "the netboot initrd: a `PATH` (or URL) the platform's agent reads"},
			&ucli.StringFlag{Name: "cmdline", Usage: "the kernel's command `LINE`, a template (console=ttyS0 hostname={{.Host}})"},
			&ucli.StringFlag{Name: "install-format", Usage: "the install template's `FORMAT`: cloud-init, preseed, kickstart, or none (the initrd brings the agent itself)"},
			&ucli.StringFlag{Name: "install", Usage: "the install template, as @`FILE` (or the text itself), rendered for each host with its context and enrollment token"},
			repeatedFlag("image", "the gold image of an image distribution on a platform: `PLATFORM=VOLUME` (repeatable)"),
			repeatedFlag("param", "declare a parameter hosts may set: `NAME:TYPE[=DEFAULT]`, TYPE string, int, bool or secret (repeatable)"),
			setFlag("distribution (its parameters' values)"),
		}
	}
	return describe(&ucli.Command{
		Name:  "distribution",
		Usage: "distributions: what is installed on an environment's machines (a netboot installer, a gold image), with typed parameters",
		Description: "A distribution is an operating system to install on a host's machine, one of two kinds:\n" +
			"netboot boots a kernel and an initrd with a command line and an install template (cloud-init\n" +
			"user-data, a preseed, a kickstart) rendered for each host: its name, its settings, its labels and\n" +
			"the one-time token its machine's agent enrolls with; image starts from a gold image, one per\n" +
			"platform, with cloud-init user-data if it has an install template (a libvirt machine gets its\n" +
			"user-data on a NoCloud seed: a read-only cdrom labelled cidata). Templates are Go templates: .Host .Env .Token .Settings.NAME .Labels.NAME .Applications.\n" +
			"A distribution declares the parameters its templates use (--param), which hosts may set;\n" +
			"a secret parameter is never shown (\"(secret)\"), and keeps its value when the distribution is\n" +
			"updated. Reading needs the viewer role, changes the operator role.\n\n" +
			"   tether distribution add debian --kernel /srv/debian/vmlinuz --initrd /srv/debian/initrd.gz \\\n" +
			"       --cmdline 'console=ttyS0 auto=true' --install-format cloud-init --install @user-data.tmpl \\\n" +
			"       --param motd:string=hello --param root_password:secret --env prod\n" +
			"   tether distribution add gold --kind image --image kvm=debian-12.qcow2 --env prod\n" +
			"   tether distribution update debian --set motd=welcome --env prod\n" +
			"   tether distribution show debian --env prod",
		Subcommands: []*ucli.Command{
			distributionMakeInitrdCommand(term),
			remoteCommand(term, "list", "list the environment's distributions", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/distributions")
				if err != nil {
					return err
				}
				var ds []record.Distribution
				if err := cl.call(c.Context, "GET", p, nil, &ds); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, ds)
				}
				t := newTable(term, "NAME", "KIND", "BOOTS", "INSTALL", "PARAMETERS", "UPDATED")
				for _, d := range ds {
					names := make([]string, len(d.Params))
					for i, p := range d.Params {
						names[i] = p.Name
					}
					t.row(d.Name, d.Kind, distributionBoots(d), dash(d.InstallFormat), dash(strings.Join(names, ",")), d.UpdatedAt.Local().Format(time.DateTime))
				}
				return t.flush()
			}),
			machineShowCommand(term, "distribution", "distributions", "show a distribution: what it boots, its templates, its parameters and their values", showDistribution),
			remoteCommand(term, "add", "add a distribution", "NAME", flags(true), func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := newMachinePath(c, cl, "distribution", "distributions")
				if err != nil {
					return err
				}
				req := api.DistributionRequest{Kind: c.String("kind")}
				if err := distributionChanges(c, &req); err != nil {
					return err
				}
				return putDistribution(c, cl, term, p, req, asJSON)
			}),
			remoteCommand(term, "update", "change a distribution: the flags given (a --param replaces the parameter of its name; settings not named keep their value)", "NAME", append(flags(false),
				repeatedFlag("unset", "reset the setting `KEY` to its parameter's default (repeatable)"),
				repeatedFlag("drop-param", "remove the parameter `NAME` (repeatable)"),
				repeatedFlag("drop-image", "remove the image of `PLATFORM` (repeatable)"),
			), func(c *ucli.Context, cl *client, asJSON bool) error {
				d, err := getDistribution(c, cl)
				if err != nil {
					return err
				}
				req := api.DistributionRequest{Kind: d.Kind, Kernel: d.Kernel, Initrd: d.Initrd, Cmdline: d.Cmdline, InstallFormat: d.InstallFormat,
					Install: d.Install, Images: d.Images, Params: d.Params, Settings: d.Settings}
				if c.IsSet("kind") {
					req.Kind = c.String("kind")
				}
				for _, k := range repeatedValues(c, "unset") {
					delete(req.Settings, k)
				}
				for _, k := range repeatedValues(c, "drop-image") {
					delete(req.Images, k)
				}
				for _, k := range repeatedValues(c, "drop-param") {
					req.Params = slices.DeleteFunc(req.Params, func(p record.Param) bool { return p.Name == k })
					delete(req.Settings, k)
				}
				if err := distributionChanges(c, &req); err != nil {
					return err
				}
				p, _ := machinePath(cl, "distributions", d.Name)
				return putDistribution(c, cl, term, p, req, asJSON)
			}),
			machineDeleteCommand(term, "distribution", "distributions", "delete a distribution no host uses"),
		},
	}, map[string]string{
		"list": "Each distribution with its kind, what it boots, its install format and its parameters.\n\n" +
			"   tether distribution list --env prod",
		"show": "What the distribution boots, its templates, and each parameter with its type, default and value\n" +
			"(secrets shown as (secret)); -o json shows the install template itself.\n\n" +
			"   tether distribution show debian --env prod",
		"add": "--param declares what hosts may set (and the templates may use as .Settings.NAME); --set gives a\n" +
			"parameter the distribution's own value. The server checks that the templates parse and name only\n" +
			"variables and settings there are.\n\n" +
			"   tether distribution add debian --kernel /srv/debian/vmlinuz --initrd /srv/debian/initrd.gz \\\n" +
			"       --install-format cloud-init --install @user-data.tmpl --param motd:string=hello --env prod\n" +
			"   tether distribution add gold --kind image --image kvm=debian-12.qcow2 --env prod",
		"update": "Reads the distribution, changes what the flags say, and saves it; its secrets keep their values.\n\n" +
			"   tether distribution update debian --install @user-data.tmpl --set motd=welcome --env prod\n" +
			"   tether distribution update gold --image lab=debian-12.qcow2 --drop-image kvm --env prod",
		"delete": "A distribution a host uses is not deleted: delete its hosts first.\n\n" +
			"   tether distribution delete debian --env prod",
	})
}

// distributionChanges applies the flags given to req.
func distributionChanges(c *ucli.Context, req *api.DistributionRequest) error {
	for _, f := range []struct {
		flag string
		to   *string
	}{{"kernel", &req.Kernel}, {"initrd", &req.Initrd}, {"cmdline", &req.Cmdline}, {"install-format", &req.InstallFormat}} {
		if c.IsSet(f.flag) {
			*f.to = c.String(f.flag)
		}
	}
	if c.IsSet("install") {
		text, err := textArg("install", c.String("install"))
		if err != nil {
			return err
		}
		req.Install = text
	}
	images, err := keyValues("image", repeatedValues(c, "image"))
	if err != nil {
		return err
	}
	if len(images) > 0 && req.Images == nil {
		req.Images = map[string]string{}
	}
	maps.Copy(req.Images, images)
	for _, spec := range repeatedValues(c, "param") {
		p, err := parseParam(spec)
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(req.Params, func(q record.Param) bool { return q.Name == p.Name }); i >= 0 {
			req.Params[i] = p
		} else {
			req.Params = append(req.Params, p)
		}
	}
	settings, err := parseSettings(repeatedValues(c, "set"), paramTypes(req.Params))
	if err != nil {
		return err
	}
	if len(settings) > 0 && req.Settings == nil {
		req.Settings = map[string]any{}
	}
	maps.Copy(req.Settings, settings)
	return nil
}

// parseParam reads --param NAME:TYPE[=DEFAULT].
func parseParam(spec string) (record.Param, error) {
	decl, def, hasDefault := strings.Cut(spec, "=")
	name, typ, ok := strings.Cut(decl, ":")
	if !ok || name == "" {
		return record.Param{}, usageError("--param %q: want NAME:TYPE or NAME:TYPE=DEFAULT, TYPE string, int, bool or secret", spec)
	}
	p := record.Param{Name: name, Type: record.ParamType(typ)}
	switch p.Type {
	case record.ParamString, record.ParamInt, record.ParamBool, record.ParamSecret:
	default:
		return p, usageError("--param %s: type %q: want string, int, bool or secret", spec, typ)
	}
	if hasDefault {
		v, err := typedValue(p.Type, def)
		if err != nil {
			return p, usageError("--param %s: the default: %v", spec, err)
		}
		p.Default = v
	}
	return p, nil
}

func getDistribution(c *ucli.Context, cl *client) (record.Distribution, error) {
	return getMachineRecord[record.Distribution](c, cl, "distribution", "distributions", c.Args().First())
}

func putDistribution(c *ucli.Context, cl *client, term *terminal, p string, req api.DistributionRequest, asJSON bool) error {
	return putMachineRecord(c, cl, term, p, req, asJSON, showDistribution)
}

// distributionBoots says what a distribution boots: its kernel, or its
// images by platform.
func distributionBoots(d record.Distribution) string {
	if d.Kind == record.DistImage {
		return joinPairs(d.Images)
	}
	return d.Kernel
}

func showDistribution(term *terminal, d record.Distribution) error {
	t := newTable(term, "FIELD", "VALUE")
	t.row("name", d.Name)
	t.row("environment", d.Env)
	t.row("kind", d.Kind)
	if d.Kind == record.DistImage {
		t.row("images", joinPairs(d.Images))
	} else {
		t.row("kernel", d.Kernel)
		t.row("initrd", d.Initrd)
		t.row("cmdline", dash(d.Cmdline))
		t.row("install format", dash(d.InstallFormat))
		if d.Install != "" {
			t.row("install template", fmt.Sprintf("%d lines (-o json shows it)", strings.Count(strings.TrimRight(d.Install, "\n"), "\n")+1))
		}
	}
	t.row("updated", d.UpdatedAt.Local().Format(time.DateTime))
	if err := t.flush(); err != nil {
		return err
	}
	if len(d.Params) > 0 {
		fmt.Fprintln(term.stdout)
		pt := newTable(term, "PARAMETER", "TYPE", "DEFAULT", "VALUE", "DOC")
		for _, p := range d.Params {
			def, val := "-", "-"
			if p.Default != nil {
				def = fmt.Sprint(p.Default)
			}
			if v, ok := d.Settings[p.Name]; ok {
				val = fmt.Sprint(v)
			}
			pt.row(p.Name, string(p.Type), def, val, p.Doc)
		}
		return pt.flush()
	}
	return nil
}
