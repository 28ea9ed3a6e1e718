package console

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/tetherhq/tether/server/record"
)

// The agents of an environment: their list, with actions on those
// checked, and one agent.

// agentView is an agent as the API shows it.
type agentView struct {
	record.Agent
	Online bool `json:"online"`
	Halted bool `json:"halted"`
}

type agentsData struct {
	Agents                  []agentView
	Pager                   pager
	Q, State, Label, Online string
	States                  []string
	Selected                []string
}

func agents(v *visit) { showAgents(v, http.StatusOK) }

func showAgents(v *visit, status int) {
	v.Title, v.Live = "Agents of "+v.Env, true
	d := agentsData{Q: v.query("q"), State: v.query("state"), Label: v.query("label"), Online: v.query("online"),
		States: []string{"pending", "accepted", "rejected"}, Selected: v.r.PostForm["agent"]}
	var ok bool
	if d.Agents, d.Pager, ok = listPage[agentView](v, v.envPath()+"/agents", "q", "state", "label", "online"); ok {
		v.render("agents", status, d)
	}
}

// agentActions are what the agents page does to the agents checked.
var agentActions = map[string]string{"accept": "accepted", "reject": "rejected", "pause": "paused", "resume": "resumed"}

// agentAction does an action to each agent checked: it goes on past an
// agent the API refuses, and says which it did and which not.
func agentAction(v *visit) {
	action := v.form("action")
	names := v.r.PostForm["agent"]
	past, ok := agentActions[action]
	switch {
	case !ok:
		v.Error = badRequest(fmt.Sprintf("unknown action %q", action), "use a button of the page")
	case len(names) == 0:
		v.Error = badRequest("no agent checked: nothing was "+past, "check the agents to "+action+" first")
	}
	if v.Error != nil {
		showAgents(v, v.Error.Status)
		return
	}
	var did, failed []string
	for _, n := range names {
		err := v.call(http.MethodPost, v.envPath()+"/agents/"+url.PathEscape(n)+"/"+action, nil, nil)
		if err == nil {
			did = append(did, n)
			continue
		}
		var ae *apiError
		if !errors.As(err, &ae) {
			v.fail(err)
			return
		}
		if v.Error == nil {
			v.Error = ae
		}
		failed = append(failed, n)
	}
	if v.Error != nil {
		if len(did) > 0 {
			v.Flash = past + ": " + strings.Join(did, ", ")
		}
		v.Error.Message = fmt.Sprintf("not %s: %s (%s)", past, strings.Join(failed, ", "), v.Error.Message)
		showAgents(v, v.Error.Status)
		return
	}
	v.done(v.r.URL.Path+"?"+v.r.URL.RawQuery, fmt.Sprintf("%s %d agent(s): %s", past, len(did), strings.Join(did, ", ")))
}

type agentData struct {
	Agent agentView
	Facts []fact
	Kinds []string
}

// fact is one reported fact (or attribute), its value as JSON for the
// nested ones.
type fact struct {
	Name, Value string
}

// factsOf lists m's values as facts, by name.
func factsOf(m map[string]any) []fact {
	var out []fact
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fact{Name: k, Value: show(m[k])})
	}
	return out
}

func agent(v *visit) {
	name := v.r.PathValue("name")
	v.Title, v.Live = "Agent "+name, true
	var d agentData
	if !v.get(v.envPath()+"/agents/"+url.PathEscape(name), &d.Agent) {
		return
	}
	d.Facts = factsOf(d.Agent.Facts)
	v.render("agent", http.StatusOK, d)
}
