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

// platformCommand is `tether platform`: where an environment's machines
// are made.
func platformCommand(term *terminal) *ucli.Command {
	flags := func(add bool) []ucli.Flag {
		driver := &ucli.StringFlag{Name: "driver", Usage: "the `DRIVER` that makes the machines: " + strings.Join(record.Drivers(), " or ")}
		agent := &ucli.StringFlag{Name: "agent", Usage: "the `AGENT` that serves the platform: the agent on the hypervisor's host (or the PXE server's), which the server sends the platform's machines to make"}
		if add {
			driver.Value = record.DriverLibvirt
			agent.Required = true
		}
		return []ucli.Flag{driver, agent, setFlag("platform (see the driver's settings below)"),
			repeatedFlag("template", "replace the driver's template `NAME=@FILE` (libvirt: domain, the domain's XML; pxe: ipxe) with the file's content (repeatable)"),
		}
	}
	return describe(&ucli.Command{
		Name:  "platform",
		Usage: "platforms: where an environment's machines are made (a libvirt hypervisor, a PXE server), each served by an agent",
		Description: "A platform is a place machines are made: a driver (libvirt: virtual machines on a hypervisor;\n" +
			"pxe: machines booted over the network), its settings, and the agent that serves it. The server\n" +
			"sends that agent the machines to make, start, stop and destroy, as signed commands, so a\n" +
			"platform behind NAT works as any agent does. A host (tether host) is made on a platform from a\n" +
			"distribution (tether distribution). An agent that runs on a hypervisor may also report its\n" +
			"platform by itself (discovered). Reading needs the viewer role, changes the operator role.\n\n" +
			"Settings of each driver (--set KEY=VALUE; those not set take their default):\n" +
			driverSettingsHelp() + "\n" +
			"   tether platform add kvm --driver libvirt --agent hv1 --set memory_mib=2048 --env prod\n" +
			"   tether platform update kvm --set network=default --env prod\n" +
			"   tether platform inventory kvm --env prod      # the agent reports the machines it holds\n" +
			"   tether platform list --env prod",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "list", "list the environment's platforms", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/platforms")
				if err != nil {
					return err
				}
				var ps []record.Platform
				if err := cl.call(c.Context, "GET", p, nil, &ps); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, ps)
				}
				t := newTable(term, "NAME", "DRIVER", "AGENT", "WHERE", "DISCOVERED", "UPDATED")
				for _, pl := range ps {
					t.row(pl.Name, pl.Driver, pl.Agent, platformWhere(pl), yesNo(pl.Discovered), pl.UpdatedAt.Local().Format(time.DateTime))
				}
				return t.flush()
			}),
			machineShowCommand(term, "platform", "platforms", "show a platform with its settings", showPlatform),
			remoteCommand(term, "add", "add a platform: a driver, the agent that serves it, its settings", "NAME", flags(true), func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := newMachinePath(c, cl, "platform", "platforms")
				if err != nil {
					return err
				}
				req := api.PlatformRequest{Driver: c.String("driver"), Agent: c.String("agent")}
				if err := platformChanges(c, &req); err != nil {
					return err
				}
				return putPlatform(c, cl, term, p, req, asJSON)
			}),
			remoteCommand(term, "update", "change a platform: the flags given (settings not named keep their value)", "NAME", append(flags(false),
				repeatedFlag("unset", "reset the setting `KEY` to its default (repeatable)"),
				repeatedFlag("drop-template", "use the driver's own template `NAME` again (repeatable)"),
			), func(c *ucli.Context, cl *client, asJSON bool) error {
				pl, err := getPlatform(c, cl)
				if err != nil {
					return err
				}
				req := api.PlatformRequest{Driver: pl.Driver, Agent: pl.Agent, Settings: pl.Settings, Templates: pl.Templates}
				if c.IsSet("driver") && c.String("driver") != pl.Driver {
					// Another driver's settings and templates are not this one's.
					req.Driver, req.Settings, req.Templates = c.String("driver"), nil, nil
				}
				if c.IsSet("agent") {
					req.Agent = c.String("agent")
				}
				for _, k := range repeatedValues(c, "unset") {
					delete(req.Settings, k)
				}
				for _, k := range repeatedValues(c, "drop-template") {
					delete(req.Templates, k)
				}
				if err := platformChanges(c, &req); err != nil {
					return err
				}
				p, _ := machinePath(cl, "platforms", pl.Name)
				return putPlatform(c, cl, term, p, req, asJSON)
			}),
			machineDeleteCommand(term, "platform", "platforms", "delete a platform no host uses"),
			remoteCommand(term, "inventory", "ask the agent serving a platform for the machines it holds (tether instance list shows them once it answers)", "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				name := c.Args().First()
				p, err := machinePath(cl, "platforms", name)
				if err != nil {
					return err
				}
				var pl record.Platform
				if err := cl.call(c.Context, "POST", p+"/inventory", nil, &pl); err != nil {
					return orNotFound(err, "tether platform list shows the platforms")
				}
				if asJSON {
					return writeJSON(term.stdout, pl)
				}
				fmt.Fprintf(term.stdout, "asked agent %s for platform %s's machines; tether instance list shows them once it answers\n", pl.Agent, pl.Name)
				return nil
			}),
		},
	}, map[string]string{
		"list": "Each platform with its driver, the agent that serves it and where it makes machines.\n\n" +
			"   tether platform list --env prod\n   tether platform list -o json --env prod",
		"show": "The platform's driver, agent and templates, and every setting (defaults filled in).\n\n" +
			"   tether platform show kvm --env prod",
		"add": "A setting is typed as its driver declares it (tether platform --help lists them); a template\n" +
			"replaces the driver's own and may use only the driver's variables.\n\n" +
			"   tether platform add kvm --agent hv1 --env prod\n" +
			"   tether platform add kvm --driver libvirt --agent hv1 --set uri=qemu+ssh://hv1/system --set memory_mib=2048 --env prod\n" +
			"   tether platform add kvm --agent hv1 --template domain=@domain.xml.tmpl --env prod",
		"update": "Reads the platform, changes what the flags say, and saves it. A new --driver starts from its\n" +
			"defaults; a platform a host uses keeps its driver.\n\n" +
			"   tether platform update kvm --set cpus=2 --unset network --env prod",
		"delete": "A platform a host uses is not deleted: delete or move its hosts first.\n\n" +
			"   tether platform delete kvm --env prod",
		"inventory": "The agent serving the platform reports every machine it holds: the instances of hosts, and\n" +
			"machines made otherwise (discovered instances).\n\n" +
			"   tether platform inventory kvm --env prod && tether instance list --env prod",
	})
}

// driverSettingsHelp lists each driver's settings with their defaults.
func driverSettingsHelp() string {
	var b strings.Builder
	for _, d := range record.Drivers() {
		fmt.Fprintf(&b, "   %s:\n", d)
		for _, p := range record.DriverParams[d] {
			def := "required"
			if p.Default != nil {
				def = fmt.Sprintf("default %v", p.Default)
			}
			fmt.Fprintf(&b, "      %-15s %s (%s, %s)\n", p.Name, p.Doc, p.Type, def)
		}
	}
	return b.String()
}

// platformChanges applies --set and --template to req.
func platformChanges(c *ucli.Context, req *api.PlatformRequest) error {
	settings, err := parseSettings(repeatedValues(c, "set"), paramTypes(record.DriverParams[req.Driver]))
	if err != nil {
		return err
	}
	if req.Settings == nil {
		req.Settings = map[string]any{}
	}
	maps.Copy(req.Settings, settings)
	templates, err := keyValues("template", repeatedValues(c, "template"))
	if err != nil {
		return err
	}
	for name, v := range templates {
		text, err := textArg("template", v)
		if err != nil {
			return err
		}
		if req.Templates == nil {
			req.Templates = map[string]string{}
		}
		req.Templates[name] = text
	}
	return nil
}

func getPlatform(c *ucli.Context, cl *client) (record.Platform, error) {
	return getMachineRecord[record.Platform](c, cl, "platform", "platforms", c.Args().First())
}

func putPlatform(c *ucli.Context, cl *client, term *terminal, p string, req api.PlatformRequest, asJSON bool) error {
	return putMachineRecord(c, cl, term, p, req, asJSON, showPlatform)
}

// platformWhere says where a platform makes machines: its libvirt URI, or
// its PXE server's address.
func platformWhere(p record.Platform) string {
	for _, k := range []string{"uri", "server_address"} {
		if v, ok := p.Settings[k]; ok {
			return fmt.Sprint(v)
		}
	}
	return "-"
}

func showPlatform(term *terminal, p record.Platform) error {
	t := newTable(term, "FIELD", "VALUE")
	t.row("name", p.Name)
	t.row("environment", p.Env)
	t.row("driver", p.Driver)
	t.row("agent", p.Agent)
	t.row("discovered", yesNo(p.Discovered))
	if len(p.Templates) > 0 {
		t.row("templates", strings.Join(slices.Sorted(maps.Keys(p.Templates)), ","))
	}
	t.row("updated", p.UpdatedAt.Local().Format(time.DateTime))
	if err := t.flush(); err != nil {
		return err
	}
	return settingsTable(term, p.Settings)
}
