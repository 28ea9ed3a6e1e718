package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tetherhq/tether/server/record"
)

// The machines of an environment: its hosts (the blueprints) with where
// their provisioning stands and their instance's power, the controls
// that fit each host's state, one host with its blueprint, context and
// instance, and destroying a host's machine after typing its name.

// hostView is a host as the API shows it: with its context and the
// instance it became (InstanceState; the host's Instance is its ID).
type hostView struct {
	record.Host
	Context       []record.ContextValue `json:"context"`
	Machine       string                `json:"machine"`
	InstanceState *record.Instance      `json:"instance_state"`
}

// hostRow is a host of the machines page, with its instance.
type hostRow struct {
	record.Host
	Inst *record.Instance
	// Uptime is how long its instance has run ("" when it does not).
	Uptime string
}

// Adopted says whether the host's machine was adopted: known by its
// agent, which its platform did not make and cannot control.
func (h hostRow) Adopted() bool { return strings.HasPrefix(h.Host.Instance, "agent:") }

// Power is its instance's power state ("" without one).
func (h hostRow) Power() record.PowerState {
	if h.Inst == nil {
		return ""
	}
	return h.Inst.Power
}

// CanProvision, CanDestroy and CanControl say which actions fit the
// host's state: a machine is made from a defined or failed host, and
// destroyed while there is one (or may be); start, stop and reboot are
// for a provisioned host's machine its platform made.
func (h hostRow) CanProvision() bool {
	return h.State == record.HostDefined || h.State == record.HostFailed
}

func (h hostRow) CanDestroy() bool {
	return h.State == record.HostProvisioned || h.State == record.HostProvisioning || h.State == record.HostFailed
}

func (h hostRow) CanControl() bool { return h.State == record.HostProvisioned && !h.Adopted() }

// CanStart, CanStop: a machine that runs is not started, one stopped is
// not stopped (or rebooted); one whose power is unknown may be either.
func (h hostRow) CanStart() bool { return h.CanControl() && h.Power() != record.PowerRunning }
func (h hostRow) CanStop() bool  { return h.CanControl() && h.Power() != record.PowerStopped }

// newHostRow puts a host with its instance (nil: none), at now.
func newHostRow(h record.Host, inst *record.Instance, now time.Time) hostRow {
	row := hostRow{Host: h, Inst: inst}
	if inst != nil {
		if up := inst.Uptime(now); up > 0 {
			row.Uptime = duration(up)
		}
	}
	return row
}

type hostsData struct {
	Hosts []hostRow
	// Halted: the environment is halted, and the room refuses every
	// action (the page says so).
	Halted bool
}

// hosts is the machines page; its buttons (and those of a host's page)
// post its actions. Destroying has a confirmation of its own
// (confirmDestroy).
var hosts = formPage{render: showHosts, actions: map[string]action{"provision": hostAction, "start": hostAction, "stop": hostAction, "reboot": hostAction}}

func showHosts(v *visit, status int, _ string) {
	v.Title, v.Live = "Machines of "+v.Env, true
	var (
		list      []record.Host
		instances []record.Instance
		e         record.Environment
	)
	if !v.get(v.envPath()+"/hosts", &list) || !v.get(v.envPath()+"/instances", &instances) || !v.get(v.envPath(), &e) {
		return
	}
	byHost := map[string]*record.Instance{}
	for i := range instances {
		if h := instances[i].Host; h != "" {
			byHost[h] = &instances[i]
		}
	}
	now := time.Now()
	d := hostsData{Halted: e.Settings.Halted}
	for _, h := range list {
		d.Hosts = append(d.Hosts, newHostRow(h, byHost[h.Name], now))
	}
	v.render("hosts", status, d)
}

// hostActions is what the buttons of a host's actions are drawn from:
// the page (its user's role, its CSRF token), the host, and the page the
// actions come back to ("": the machines page).
type hostActions struct {
	P    *page
	Row  hostRow
	From string
}

func actionsOf(p *page, row hostRow, from string) hostActions {
	return hostActions{P: p, Row: row, From: from}
}

// hostPath is the API's path of host name.
func hostPath(v *visit, name string) string { return v.envPath() + "/hosts/" + url.PathEscape(name) }

// hostAction provisions a host, or starts, stops or reboots its machine,
// through the API (which audits it and refuses it while the environment
// is halted). It answers once the platform's agent was told; the page
// shows what becomes of it as the events come.
func hostAction(v *visit) (change, error) {
	name, op := v.field("host"), v.form("action")
	if name == "" {
		return change{}, badRequest("no host named: nothing was done", "use a host's button")
	}
	var h record.Host
	if err := v.call(http.MethodPost, hostPath(v, name)+"/"+op, nil, &h); err != nil {
		return change{}, err
	}
	msg := fmt.Sprintf("%s: %s sent to its platform's agent", name, op)
	if op == "provision" {
		msg = fmt.Sprintf("%s: provisioning; the host is provisioned once its machine's agent enrolls", name)
	}
	return change{Flash: msg, To: backTo(v)}, nil
}

// backTo is the page an action goes back to: the host's page it came
// from, or the machines page.
func backTo(v *visit) string {
	hosts := "/envs/" + url.PathEscape(v.Env) + "/hosts"
	if from := v.form("from"); from != "" && strings.HasPrefix(from, hosts+"/") && !strings.ContainsAny(from, "?#\\") {
		return from
	}
	return hosts
}

type hostData struct {
	Host     hostView
	Row      hostRow
	Hardware []fact
	// History is what the audit log says of the host, when the user may
	// read it (HistoryShown).
	History      []record.AuditEntry
	HistoryShown bool
	// From is the page's own path, where its actions come back to.
	From string
	// Confirm: the page asks to type the host's name to destroy its
	// machine; Typed is what was typed last.
	Confirm bool
	Typed   string
}

// historyLen bounds the entries of a host's history the page shows.
const historyLen = 20

// loadHost gets what a host's page shows; a failure is the error page,
// and it reports false.
func loadHost(v *visit) (hostData, bool) {
	name := v.r.PathValue("name")
	v.Title = "Host " + name
	d := hostData{From: "/envs/" + url.PathEscape(v.Env) + "/hosts/" + url.PathEscape(name)}
	if !v.get(hostPath(v, name), &d.Host) {
		return d, false
	}
	d.Row = newHostRow(d.Host.Host, d.Host.InstanceState, time.Now())
	if i := d.Host.InstanceState; i != nil {
		d.Hardware = factsOf(i.Hardware)
	}
	for i := range d.Host.Context {
		if d.Host.Context[i].Secret {
			d.Host.Context[i].Value = "(secret)"
		}
	}
	// Its moves, from the audit log: only an admin reads it, and the
	// page goes without it for anyone else.
	if v.CanAdmin() {
		var entries []record.AuditEntry
		if err := v.call(http.MethodGet, "/audit?limit=500&env="+url.QueryEscape(v.Env), nil, &entries); err == nil {
			d.HistoryShown = true
			for _, e := range entries {
				if e.Target == name && (strings.HasPrefix(e.Action, "host.") || strings.HasPrefix(e.Action, "instance.")) {
					d.History = append(d.History, e)
				}
			}
			d.History = d.History[:min(len(d.History), historyLen)]
		}
	}
	return d, true
}

func host(v *visit) {
	if d, ok := loadHost(v); ok {
		v.Live = true
		v.render("host", http.StatusOK, d)
	}
}

// confirmDestroy asks to type the host's name before its machine is
// destroyed.
func confirmDestroy(v *visit) {
	if d, ok := loadHost(v); ok {
		d.Confirm = true
		v.render("host", http.StatusOK, d)
	}
}

// destroy destroys a host's machine (and its disk) once its name was
// typed; a wrong name destroys nothing, and the confirmation says so.
func destroy(v *visit) {
	name := v.r.PathValue("name")
	if typed := v.field("confirm"); typed != name {
		d, ok := loadHost(v)
		if !ok {
			return
		}
		d.Confirm, d.Typed = true, typed
		v.Error = badRequest(fmt.Sprintf("you typed %q, not the host's name %s: nothing was destroyed", typed, name), "type the host's name to destroy its machine")
		v.render("host", http.StatusBadRequest, d)
		return
	}
	var h record.Host
	if err := v.call(http.MethodPost, hostPath(v, name)+"/destroy", nil, &h); err != nil {
		if v.refused(err) == nil {
			return
		}
		d, ok := loadHost(v)
		if !ok {
			return
		}
		d.Confirm, d.Typed = true, name
		v.render("host", v.Error.Status, d)
		return
	}
	v.done("/envs/"+url.PathEscape(v.Env)+"/hosts", fmt.Sprintf("%s: destroying its machine; the host is defined again once its platform's agent says it is gone", name))
}

// duration says how long d is, roughly, in its two largest units.
func duration(d time.Duration) string {
	d = d.Round(time.Second)
	days, h, m, s := int(d/(24*time.Hour)), int(d/time.Hour)%24, int(d/time.Minute)%60, int(d/time.Second)%60
	switch {
	case days > 0:
		return fmt.Sprintf("%dd %dh", days, h)
	case h > 0:
		return fmt.Sprintf("%dh %dm", h, m)
	case m > 0:
		return fmt.Sprintf("%dm %ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}
