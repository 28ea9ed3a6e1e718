package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// hostCommand is `tether host`: the blueprints of an environment's
// machines, and their machines' lives.
func hostCommand(term *terminal) *ucli.Command {
	waitFlags := func(what string) []ucli.Flag {
		return []ucli.Flag{
			&ucli.BoolFlag{Name: "wait", Usage: "wait until the host is " + what + ", showing how it goes; exit 1 with the host's reason if it fails"},
			&ucli.DurationFlag{Name: "timeout", Value: 15 * time.Minute, Usage: "how long --wait waits"},
		}
	}
	return describe(&ucli.Command{
		Name:  "host",
		Usage: "hosts: blueprints of machines (platform, distribution, applications, settings) and their machines: provision, destroy, start, stop, reboot",
		Description: "A host is the blueprint of one machine: the platform it is made on (tether platform), the\n" +
			"distribution installed on it (tether distribution), the applications it runs (the model's\n" +
			"hostgroups that take it, by its labels) and settings over the platform's and the distribution's.\n" +
			"Its name is its machine's agent's name. A host is defined until it is provisioned: the agent\n" +
			"serving its platform makes its machine with a one-time enrollment token bound to the host, and\n" +
			"the host is provisioned once the machine's agent enrolls with it (failed, with the reason, if\n" +
			"the driver fails or the agent does not enroll in time: its machine is then destroyed).\n" +
			"  defined → provisioning → provisioned → deprovisioning (destroy) → defined\n" +
			"Nothing is made, started, stopped or destroyed while the environment is halted. Reading needs\n" +
			"the viewer role, changes and controls the operator role.\n\n" +
			"   tether host add web-1 --platform kvm --distribution debian --app web --set memory_mib=2048 --env prod\n" +
			"   tether host provision web-1 --wait --env prod\n" +
			"   tether host show web-1 --env prod      # its settings and where each came from\n" +
			"   tether host update web-1 --set memory_mib=4096 --label tier=gold --env prod\n" +
			"   tether host reboot web-1 --env prod\n" +
			"   tether host reprovision web-1 --wait --env prod   # destroy its machine and make it again",
		Subcommands: []*ucli.Command{
			remoteCommand(term, "list", "list the environment's hosts with their state", "", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				p, err := envPath(cl, "/hosts")
				if err != nil {
					return err
				}
				var hs []record.Host
				if err := cl.call(c.Context, "GET", p, nil, &hs); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, hs)
				}
				t := newTable(term, "NAME", "STATE", "SINCE", "PLATFORM", "DISTRIBUTION", "APPLICATIONS", "REASON")
				for _, h := range hs {
					t.paintedRow([]colour{1: hostStateColour(h.State)}, h.Name, string(h.State), h.StateSince.Local().Format(time.DateTime),
						h.Platform, h.Distribution, dash(strings.Join(h.Applications, ",")), h.Reason)
				}
				return t.flush()
			}),
			remoteCommand(term, "show", "show a host: its state, its machine, and its context (each setting, its value and where it came from)", "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
				v, err := getHost(c, cl, c.Args().First())
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, v)
				}
				return showHost(term, v)
			}),
			remoteCommand(term, "add", "add a host (defined: nothing is made until it is provisioned)", "NAME", []ucli.Flag{
				&ucli.StringFlag{Name: "platform", Required: true, Usage: "the `PLATFORM` its machine is made on (tether platform list)"},
				&ucli.StringFlag{Name: "distribution", Required: true, Usage: "the `DISTRIBUTION` installed on it (tether distribution list)"},
				&ucli.StringSliceFlag{Name: "app", Usage: "an `APPLICATION` it runs (repeatable)"},
				&ucli.StringSliceFlag{Name: "label", Usage: "a label `KEY=VALUE` (repeatable): its agent has it, the model's hostgroups select by it"},
				setFlag("host, over its platform's and its distribution's (tether host show lists them once added)"),
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				name := c.Args().First()
				labels, err := keyValues("label", c.StringSlice("label"))
				if err != nil {
					return err
				}
				types, err := hostSettingTypes(c, cl, c.String("platform"), c.String("distribution"))
				if err != nil {
					return err
				}
				settings, err := parseSettings(repeatedValues(c, "set"), types)
				if err != nil {
					return err
				}
				p, err := envPath(cl, "/hosts")
				if err != nil {
					return err
				}
				req := api.HostRequest{Name: name, Platform: c.String("platform"), Distribution: c.String("distribution"),
					Applications: c.StringSlice("app"), Labels: labels, Settings: settings}
				var h record.Host
				if err := cl.call(c.Context, "POST", p, req, &h); err != nil {
					if ae := (*apiError)(nil); errors.As(err, &ae) && ae.body.Code == "exists" {
						return fmt.Errorf("%w: tether host show %s shows it", err, name)
					}
					return err
				}
				if asJSON {
					return writeJSON(term.stdout, h)
				}
				fmt.Fprintf(term.stdout, "host %s added, defined: tether host provision %s makes its machine on platform %s\n", h.Name, h.Name, h.Platform)
				return nil
			}),
			remoteCommand(term, "update", "change a host's blueprint: the flags given (applications, labels and settings not named stay)", "NAME", []ucli.Flag{
				&ucli.StringFlag{Name: "platform", Usage: "make it on `PLATFORM` (only while it has no machine: defined or failed)"},
				&ucli.StringFlag{Name: "distribution", Usage: "install `DISTRIBUTION` on it (only while it has no machine: defined or failed)"},
				&ucli.StringSliceFlag{Name: "app", Usage: "add an `APPLICATION` it runs (repeatable)"},
				repeatedFlag("drop-app", "remove the `APPLICATION` (repeatable)"),
				&ucli.StringSliceFlag{Name: "label", Usage: "set the label `KEY=VALUE` (repeatable); its other labels stay"},
				repeatedFlag("drop-label", "remove the label `KEY` (repeatable)"),
				setFlag("host, merged into its own (tether host show lists what it may set)"),
				repeatedFlag("unset", "remove the host's own setting `KEY`: its platform's or distribution's value applies again (repeatable)"),
			}, func(c *ucli.Context, cl *client, asJSON bool) error {
				name := c.Args().First()
				changes := 0
				for _, f := range []string{"platform", "distribution", "app", "drop-app", "label", "drop-label", "set", "unset"} {
					if c.IsSet(f) {
						changes++
					}
				}
				if changes == 0 {
					return usageError("nothing to change: give --platform, --distribution, --app, --drop-app, --label, --drop-label, --set or --unset")
				}
				v, err := getHost(c, cl, name)
				if err != nil {
					return err
				}
				req, err := hostChanges(c, cl, v.Host)
				if err != nil {
					return err
				}
				p, err := machinePath(cl, "hosts", name)
				if err != nil {
					return err
				}
				var h record.Host
				if err := cl.call(c.Context, "PUT", p, req, &h); err != nil {
					return orNotFound(err, "tether host list shows the hosts")
				}
				if asJSON {
					return writeJSON(term.stdout, h)
				}
				fmt.Fprintf(term.stdout, "host %s updated: platform %s, distribution %s, applications %s, labels %s\n",
					h.Name, h.Platform, h.Distribution, dash(strings.Join(h.Applications, ",")), dash(joinPairs(h.Labels)))
				if h.State != record.HostDefined && h.State != record.HostFailed {
					fmt.Fprintf(term.stdout, "its machine (%s) stays as it was made: tether host reprovision %s makes it again with these\n", h.State, h.Name)
				}
				return nil
			}),
			machineDeleteCommand(term, "host", "hosts", "delete a host that has no machine (defined, or failed)"),
			remoteCommand(term, "provision", "make a defined (or failed) host's machine; the host is provisioned when the machine's agent enrolls", "NAME", waitFlags("provisioned"),
				func(c *ucli.Context, cl *client, asJSON bool) error {
					deadline := time.Now().Add(c.Duration("timeout"))
					h, err := hostAction(c, cl, c.Args().First(), model.MachineProvision)
					if err != nil {
						return err
					}
					return afterHostAction(c, cl, term, h, record.HostProvisioned, deadline, asJSON)
				}),
			remoteCommand(term, "destroy", "destroy a host's machine and its disk; the host is defined again once the platform's agent says it is gone", "NAME", waitFlags("defined again"),
				func(c *ucli.Context, cl *client, asJSON bool) error {
					deadline := time.Now().Add(c.Duration("timeout"))
					h, err := hostAction(c, cl, c.Args().First(), model.MachineDestroy)
					if err != nil {
						return err
					}
					return afterHostAction(c, cl, term, h, record.HostDefined, deadline, asJSON)
				}),
			remoteCommand(term, "reprovision", "destroy a host's machine, wait until it is gone, and make it again", "NAME", waitFlags("provisioned again"),
				func(c *ucli.Context, cl *client, asJSON bool) error {
					name := c.Args().First()
					deadline := time.Now().Add(c.Duration("timeout"))
					v, err := getHost(c, cl, name)
					if err != nil {
						return err
					}
					if v.State != record.HostDefined {
						if v.State != record.HostDeprovisioning {
							if _, err := hostAction(c, cl, name, model.MachineDestroy); err != nil {
								return err
							}
						}
						if _, err := waitHost(c, cl, term, name, record.HostDefined, deadline, asJSON); err != nil {
							return err
						}
					}
					h, err := hostAction(c, cl, name, model.MachineProvision)
					if err != nil {
						return err
					}
					return afterHostAction(c, cl, term, h, record.HostProvisioned, deadline, asJSON)
				}),
			hostControlCommand(term, model.MachineStart, "start a host's machine"),
			hostControlCommand(term, model.MachineStop, "stop a host's machine: the guest is asked to power off, then forced off after the server's grace period"),
			hostControlCommand(term, model.MachineReboot, "reboot a host's machine"),
			remoteCommand(term, "adopt", "adopt the machine of the agent of the host's name (a discovered instance) into the defined host", "NAME", nil,
				func(c *ucli.Context, cl *client, asJSON bool) error {
					name := c.Args().First()
					p, err := machinePath(cl, "hosts", name)
					if err != nil {
						return err
					}
					var h record.Host
					if err := cl.call(c.Context, "POST", p+"/adopt", nil, &h); err != nil {
						return orNotFound(err, "tether host list shows the hosts; tether instance list the discovered machines (agent:NAME)")
					}
					if asJSON {
						return writeJSON(term.stdout, h)
					}
					fmt.Fprintf(term.stdout, "host %s adopted agent %s's machine: %s\n", h.Name, h.Name, h.State)
					return nil
				}),
		},
	}, map[string]string{
		"list": "Each host with its state (defined, provisioning, provisioned, failed, deprovisioning), since\n" +
			"when, and why it failed.\n\n" +
			"   tether host list --env prod",
		"show": "The host, its machine as its platform's agent last reported it, and its context: every setting\n" +
			"its machine gets, its value and where it came from (environment, platform, distribution or host).\n\n" +
			"   tether host show web-1 --env prod",
		"add": "The host's platform and distribution must exist and fit each other (an image distribution needs\n" +
			"an image for the platform); its settings must be its platform driver's, its distribution's\n" +
			"parameters or provision_timeout (seconds), of their types.\n\n" +
			"   tether host add web-1 --platform kvm --distribution debian --app web --label role=web --env prod\n" +
			"   tether host add db-1 --platform kvm --distribution gold --set memory_mib=4096 --set cpus=2 --env prod",
		"update": "Reads the host, changes what the flags say, and saves it, checked as a new host is: --app\n" +
			"and --label add to what it has, --set merges into its own settings (a secret it has keeps its\n" +
			"value), --drop-app, --drop-label and --unset remove. A host with a machine (provisioning,\n" +
			"provisioned, deprovisioning) keeps its platform and distribution: destroy its machine first to\n" +
			"change them. Its machine is not changed: the next one made (tether host reprovision) gets the\n" +
			"new applications, labels and settings. A host the environment's model declares is changed in\n" +
			"the model, not here.\n\n" +
			"   tether host update web-1 --set memory_mib=4096 --unset cpus --env prod\n" +
			"   tether host update web-1 --app db --drop-app web --label role=db --env prod\n" +
			"   tether host update web-2 --platform lab --distribution gold --env prod   # defined or failed only",
		"delete": "Only a host without a machine (defined, or failed) is deleted: destroy its machine first.\n\n" +
			"   tether host delete web-1 --env prod",
		"provision": "The agent serving the host's platform is sent the machine to make, rendered from the host's\n" +
			"context with a one-time enrollment token bound to the host; the host is provisioned when the\n" +
			"machine's agent enrolls with it, failed if the driver fails or the agent does not enroll in time.\n" +
			"Refused while the environment is halted.\n\n" +
			"   tether host provision web-1 --env prod\n" +
			"   tether host provision web-1 --wait --timeout 20m --env prod",
		"destroy": "The machine and its disk are destroyed by the platform's agent and its agent forgotten; the host\n" +
			"stays, defined, to be provisioned again. Refused while the environment is halted.\n\n" +
			"   tether host destroy web-1 --wait --env prod",
		"reprovision": "Destroys the host's machine (unless it has none), waits until the host is defined again, then\n" +
			"provisions it; --wait then waits until it is provisioned. --timeout bounds it all.\n\n" +
			"   tether host reprovision web-1 --wait --env prod",
		"adopt": "A machine that runs an agent already (tether instance list shows it as agent:NAME) becomes the\n" +
			"instance of the defined host of the agent's name: the host is provisioned. Its platform did not\n" +
			"make the machine: destroying the host lets it go, and its agent stays.\n\n" +
			"   tether host add web-7 --platform lab --distribution tiny --env prod\n" +
			"   tether host adopt web-7 --env prod",
		"start":  "Answers once the platform's agent is told; tether host show shows the power it reports.\n\n   tether host start web-1 --env prod",
		"stop":   "Answers once the platform's agent is told; tether host show shows the power it reports.\n\n   tether host stop web-1 --env prod",
		"reboot": "Answers once the platform's agent is told.\n\n   tether host reboot web-1 --env prod",
	})
}

// hostControlCommand is `tether host start|stop|reboot NAME`.
func hostControlCommand(term *terminal, op model.MachineOp, usage string) *ucli.Command {
	return remoteCommand(term, string(op), usage, "NAME", nil, func(c *ucli.Context, cl *client, asJSON bool) error {
		h, err := hostAction(c, cl, c.Args().First(), op)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(term.stdout, h)
		}
		fmt.Fprintf(term.stdout, "host %s: %s sent to its platform %s's agent; tether host show %s shows its power once the agent reports\n", h.Name, op, h.Platform, h.Name)
		return nil
	})
}

// hostAction posts op to a host's route.
func hostAction(c *ucli.Context, cl *client, name string, op model.MachineOp) (record.Host, error) {
	var h record.Host
	p, err := machinePath(cl, "hosts", name)
	if err != nil {
		return h, err
	}
	return h, orNotFound(cl.call(c.Context, "POST", p+"/"+string(op), nil, &h), "tether host list shows the hosts")
}

// afterHostAction says what a provision or destroy started, or (--wait)
// waits until the host is want.
func afterHostAction(c *ucli.Context, cl *client, term *terminal, h record.Host, want record.HostState, deadline time.Time, asJSON bool) error {
	if !c.Bool("wait") {
		if asJSON {
			return writeJSON(term.stdout, h)
		}
		fmt.Fprintf(term.stdout, "host %s: %s; the agent serving platform %s acts on it (tether host show %s follows it, or --wait)\n", h.Name, h.State, h.Platform, h.Name)
		return nil
	}
	v, err := waitHost(c, cl, term, h.Name, want, deadline, asJSON)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(term.stdout, v)
	}
	fmt.Fprintf(term.stdout, "host %s %s%s\n", v.Name, v.State, instanceSummary(v.Instance))
	return nil
}

// waitHost polls a host until it is want, showing how it goes; a host
// that fails ends it with the host's reason, and so does the deadline.
func waitHost(c *ucli.Context, cl *client, term *terminal, name string, want record.HostState, deadline time.Time, quiet bool) (record.HostView, error) {
	notice := &waitNotice{term: term, quiet: quiet}
	defer notice.end()
	for {
		v, err := getHost(c, cl, name)
		if err != nil {
			return v, err
		}
		switch v.State {
		case want:
			notice.end()
			return v, nil
		case record.HostFailed:
			notice.end()
			return v, &exitError{code: exitFailed, err: fmt.Errorf("host %s failed: %s (tether host show %s; tether host provision %s tries again)", name, dash(v.Reason), name, name)}
		}
		notice.show(fmt.Sprintf("host %s: %s for %s%s", name, v.State, time.Since(v.StateSince).Round(time.Second), instanceSummary(v.Instance)))
		if time.Now().After(deadline) {
			notice.end()
			return v, &exitError{code: exitFailed, err: fmt.Errorf("timed out: host %s is still %s, not %s; the server goes on with it (tether host show %s follows it)", name, v.State, want, name)}
		}
		select {
		case <-c.Context.Done():
			return v, c.Context.Err()
		case <-time.After(time.Second):
		}
	}
}

// instanceSummary says what a host's machine is like, for a progress line.
func instanceSummary(i *record.Instance) string {
	if i == nil {
		return ""
	}
	s := "; machine " + string(i.Power)
	if len(i.Addresses) > 0 {
		s += " at " + strings.Join(i.Addresses, ", ")
	}
	return s
}

// hostChanges is the blueprint of host h changed as the flags of
// tether host update say.
func hostChanges(c *ucli.Context, cl *client, h record.Host) (api.HostUpdate, error) {
	req := api.HostUpdate{Platform: h.Platform, Distribution: h.Distribution, Applications: h.Applications, Labels: h.Labels, Settings: h.Settings}
	if c.IsSet("platform") {
		req.Platform = c.String("platform")
	}
	if c.IsSet("distribution") {
		req.Distribution = c.String("distribution")
	}
	for _, app := range c.StringSlice("app") {
		if !slices.Contains(req.Applications, app) {
			req.Applications = append(req.Applications, app)
		}
	}
	for _, app := range repeatedValues(c, "drop-app") {
		req.Applications = slices.DeleteFunc(req.Applications, func(a string) bool { return a == app })
	}
	labels, err := keyValues("label", c.StringSlice("label"))
	if err != nil {
		return req, err
	}
	if req.Labels == nil {
		req.Labels = map[string]string{}
	}
	maps.Copy(req.Labels, labels)
	for _, k := range repeatedValues(c, "drop-label") {
		delete(req.Labels, k)
	}
	types, err := hostSettingTypes(c, cl, req.Platform, req.Distribution)
	if err != nil {
		return req, err
	}
	settings, err := parseSettings(repeatedValues(c, "set"), types)
	if err != nil {
		return req, err
	}
	if req.Settings == nil {
		req.Settings = map[string]any{}
	}
	maps.Copy(req.Settings, settings)
	for _, k := range repeatedValues(c, "unset") {
		delete(req.Settings, k)
	}
	return req, nil
}

// hostSettingTypes are the types of the settings a host on platform with
// distribution may set: its platform driver's, its distribution's and
// every host's. A platform or distribution that cannot be found adds
// none: the server says what is wrong with it.
func hostSettingTypes(c *ucli.Context, cl *client, platform, distribution string) (map[string]record.ParamType, error) {
	var pl record.Platform
	var d record.Distribution
	for _, x := range []struct {
		noun, name string
		out        any
	}{{"platforms", platform, &pl}, {"distributions", distribution, &d}} {
		p, err := machinePath(cl, x.noun, x.name)
		if err != nil {
			return nil, err
		}
		if err := cl.call(c.Context, "GET", p, nil, x.out); err != nil && !notFound(err) {
			return nil, err
		}
	}
	return paramTypes(record.DriverParams[pl.Driver], d.Params, record.HostParams), nil
}

func getHost(c *ucli.Context, cl *client, name string) (record.HostView, error) {
	return getMachineRecord[record.HostView](c, cl, "host", "hosts", name)
}

func showHost(term *terminal, v record.HostView) error {
	t := newTable(term, "FIELD", "VALUE")
	t.row("name", v.Name)
	t.row("environment", v.Env)
	t.paintedRow([]colour{1: hostStateColour(v.State)}, "state", string(v.State))
	t.row("since", v.StateSince.Local().Format(time.DateTime))
	if v.Reason != "" {
		t.row("reason", v.Reason)
	}
	t.row("platform", v.Platform)
	t.row("distribution", v.Distribution)
	t.row("applications", dash(strings.Join(v.Applications, ",")))
	t.row("labels", dash(joinPairs(v.Labels)))
	t.row("machine", v.Machine)
	if i := v.Instance; i != nil {
		t.row("instance", i.ID)
		t.paintedRow([]colour{1: powerColour(i.Power)}, "power", string(i.Power))
		if up := i.Uptime(time.Now()); up > 0 {
			t.row("uptime", up.Round(time.Second).String())
		}
		t.row("addresses", dash(strings.Join(i.Addresses, ", ")))
		t.row("agent", dash(i.Agent))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(v.Context) == 0 {
		return nil
	}
	fmt.Fprintln(term.stdout, "\nContext (environment < platform < distribution < application < host):")
	ct := newTable(term, "NAME", "VALUE", "FROM")
	for _, cv := range v.Context {
		ct.row(cv.Name, fmt.Sprint(cv.Value), cv.From)
	}
	return ct.flush()
}
