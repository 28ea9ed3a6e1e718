package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

func (c *Console) routes(static http.Handler) {
	m := c.mux
	m.Handle("GET /static/", static)
	m.HandleFunc("GET /login", c.loginPage)
	m.HandleFunc("POST /login", c.login)
	m.HandleFunc("POST /logout", c.logout)
	m.HandleFunc("GET /{$}", c.home)
	m.HandleFunc("GET /envs/{env}", c.overview)
	m.HandleFunc("GET /envs/{env}/agents", c.agents)
	m.HandleFunc("POST /envs/{env}/agents", c.agentAction)
	m.HandleFunc("GET /envs/{env}/agents/{name}", c.agent)
	m.HandleFunc("GET /envs/{env}/resources", c.resources)
	m.HandleFunc("GET /envs/{env}/resources/{id}", c.resource)
	m.HandleFunc("GET /envs/{env}/versions", c.versions)
	m.HandleFunc("GET /envs/{env}/versions/{n}", c.version)
	m.HandleFunc("GET /envs/{env}/versions/{n}/release", c.confirmRelease)
	m.HandleFunc("POST /envs/{env}/versions/{n}/release", c.release)
	m.HandleFunc("POST /envs/{env}/versions/{n}/plan", c.plan)
	m.HandleFunc("GET /envs/{env}/compiles", c.compiles)
	m.HandleFunc("GET /envs/{env}/deploys", c.deploys)
	m.HandleFunc("GET /envs/{env}/deploys/{id}", c.deploy)
	m.HandleFunc("GET /envs/{env}/alerts", c.alerts)
	m.HandleFunc("GET /envs/{env}/webhooks", c.webhooks)
	m.HandleFunc("POST /envs/{env}/webhooks", c.webhookAction)
	m.HandleFunc("GET /envs/{env}/enrollment-tokens", c.enrollTokens)
	m.HandleFunc("POST /envs/{env}/enrollment-tokens", c.enrollTokenAction)
	m.HandleFunc("GET /audit", c.audit)
	m.HandleFunc("GET /admin/users", c.users)
	m.HandleFunc("POST /admin/users", c.userAction)
	m.HandleFunc("GET /admin/tokens", c.tokens)
	m.HandleFunc("POST /admin/tokens", c.tokenAction)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, "error", http.StatusNotFound, &page{Title: "Not found", Error: &apiError{Status: http.StatusNotFound, Code: "not_found",
			Message: "there is no page " + r.URL.Path, Hint: "start from the home page"}})
	})
}

// --- login

type loginForm struct {
	Org, Name, Next string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login", http.StatusOK, &page{Title: "Log in", Data: loginForm{Org: r.URL.Query().Get("org"), Next: localPath(r.URL.Query().Get("next"))}})
}

// localPath keeps a redirect on this site: a path of its own, else /.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		return "/"
	}
	return p
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	f := loginForm{Org: strings.TrimSpace(r.PostFormValue("org")), Name: strings.TrimSpace(r.PostFormValue("name")), Next: localPath(r.PostFormValue("next"))}
	body := map[string]string{"org": f.Org, "name": f.Name, "password": r.PostFormValue("password")}
	h, err := c.call(r, http.MethodPost, "/session", body, nil)
	if err != nil {
		p := &page{Title: "Log in", Data: f}
		var ae *apiError
		if !errors.As(err, &ae) {
			c.fail(w, r, p, err)
			return
		}
		if ae.Status == http.StatusTooManyRequests {
			ae.Message = "Too many failed logins: " + ae.Message + "."
			if ae.RetryAfter != "" {
				ae.Message = fmt.Sprintf("Too many failed logins for this user or from this address: try again in %s seconds.", ae.RetryAfter)
			}
		}
		p.Error = ae
		c.render(w, r, "login", ae.Status, p)
		return
	}
	for _, ck := range h.Values("Set-Cookie") {
		w.Header().Add("Set-Cookie", ck)
	}
	http.Redirect(w, r, f.Next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	h, err := c.call(r, http.MethodDelete, "/session", nil, nil)
	for _, ck := range h.Values("Set-Cookie") {
		w.Header().Add("Set-Cookie", ck)
	}
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			c.fail(w, r, &page{Title: "Log out"}, err)
			return
		}
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// --- environments

func (c *Console) home(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "home")
	if p == nil {
		return
	}
	if len(p.Envs) == 1 {
		http.Redirect(w, r, "/envs/"+url.PathEscape(p.Envs[0].Name), http.StatusSeeOther)
		return
	}
	p.Title = "Environments"
	c.render(w, r, "home", http.StatusOK, p)
}

// summary is the API's count of an environment's agents and resources.
type summary struct {
	Agents struct {
		Online, Offline, Pending, Rejected, Paused int
	} `json:"agents"`
	Resources struct {
		Total        int                         `json:"total"`
		ByState      map[model.ResourceState]int `json:"by_state"`
		ByCompliance map[model.Compliance]int    `json:"by_compliance"`
	} `json:"resources"`
}

// count is one labelled number of a summary.
type count struct {
	Label, Link string
	N           int
}

type overviewData struct {
	Summary     summary
	States      []count
	Compliance  []count
	Failed      []record.ResourceStatus
	FailedTotal int
	Drifted     []record.ResourceStatus
	DriftTotal  int
	Release     *record.Release
	Compile     *record.Compile
	Alerts      []record.Alert
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "overview")
	if p == nil {
		return
	}
	p.Title, p.Live = "Overview of "+p.Env, true
	e := "/envs/" + url.PathEscape(p.Env)
	var d overviewData
	if _, err := c.call(r, "GET", e+"/summary", nil, &d.Summary); err != nil {
		c.fail(w, r, p, err)
		return
	}
	for _, s := range []model.ResourceState{model.StateDeployed, model.StateDeploying, model.StateAvailable, model.StateFailed, model.StateSkipped,
		model.StateUndefined, model.StateSkippedForUndefined, model.StateUnavailable, model.StateCancelled, model.StateOrphaned} {
		if n := d.Summary.Resources.ByState[s]; n > 0 {
			d.States = append(d.States, count{Label: string(s), N: n, Link: e + "/resources?state=" + string(s)})
		}
	}
	for _, s := range []model.Compliance{model.Compliant, model.NonCompliant, model.ComplianceUnknown} {
		d.Compliance = append(d.Compliance, count{Label: string(s), N: d.Summary.Resources.ByCompliance[s], Link: e + "/resources?compliance=" + string(s)})
	}
	h, err := c.call(r, "GET", e+"/resources?state=failed&limit=10", nil, &d.Failed)
	if err != nil {
		c.fail(w, r, p, err)
		return
	}
	d.FailedTotal, _ = strconv.Atoi(h.Get("X-Total-Count"))
	if h, err = c.call(r, "GET", e+"/resources?compliance=non_compliant&limit=10", nil, &d.Drifted); err != nil {
		c.fail(w, r, p, err)
		return
	}
	d.DriftTotal, _ = strconv.Atoi(h.Get("X-Total-Count"))
	var rels []record.Release
	if _, err := c.call(r, "GET", e+"/releases?limit=1", nil, &rels); err == nil && len(rels) > 0 {
		d.Release = &rels[0]
	}
	var comps []record.Compile
	if _, err := c.call(r, "GET", e+"/compiles?limit=1", nil, &comps); err == nil && len(comps) > 0 {
		d.Compile = &comps[0]
	}
	if _, err := c.call(r, "GET", e+"/alerts?limit=10", nil, &d.Alerts); err != nil {
		c.fail(w, r, p, err)
		return
	}
	p.Data = d
	c.render(w, r, "overview", http.StatusOK, p)
}

// --- agents

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

func (c *Console) agents(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "agents")
	if p == nil {
		return
	}
	c.showAgents(w, r, p, http.StatusOK)
}

func (c *Console) showAgents(w http.ResponseWriter, r *http.Request, p *page, status int) {
	p.Title, p.Live = "Agents of "+p.Env, true
	q := query(r, "q", "state", "label", "online")
	q.Set("limit", strconv.Itoa(PageSize))
	q.Set("offset", strconv.Itoa(offset(r)))
	d := agentsData{Q: r.URL.Query().Get("q"), State: r.URL.Query().Get("state"), Label: r.URL.Query().Get("label"), Online: r.URL.Query().Get("online"),
		States: []string{"pending", "accepted", "rejected"}, Selected: r.PostForm["agent"]}
	h, err := c.call(r, "GET", "/envs/"+url.PathEscape(p.Env)+"/agents?"+q.Encode(), nil, &d.Agents)
	if err != nil {
		c.fail(w, r, p, err)
		return
	}
	d.Pager = newPager(r, h, len(d.Agents))
	p.Data = d
	c.render(w, r, "agents", status, p)
}

// agentActions are what the agents page does to the agents checked.
var agentActions = map[string]string{"accept": "accepted", "reject": "rejected", "pause": "paused", "resume": "resumed"}

func (c *Console) agentAction(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "agents")
	if p == nil {
		return
	}
	action := r.PostFormValue("action")
	names := r.PostForm["agent"]
	past, ok := agentActions[action]
	switch {
	case !ok:
		p.Error = &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf("unknown action %q", action), Hint: "use a button of the page"}
	case len(names) == 0:
		p.Error = &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: "no agent checked: nothing was " + past, Hint: "check the agents to " + action + " first"}
	}
	if p.Error != nil {
		c.showAgents(w, r, p, p.Error.Status)
		return
	}
	var did []string
	var failed []string
	for _, n := range names {
		if _, err := c.call(r, http.MethodPost, "/envs/"+url.PathEscape(p.Env)+"/agents/"+url.PathEscape(n)+"/"+action, nil, nil); err != nil {
			var ae *apiError
			if errors.As(err, &ae) && p.Error == nil {
				p.Error = ae
			} else if !errors.As(err, &ae) {
				c.fail(w, r, p, err)
				return
			}
			failed = append(failed, n)
			continue
		}
		did = append(did, n)
	}
	if p.Error != nil {
		if len(did) > 0 {
			p.Flash = past + ": " + strings.Join(did, ", ")
		}
		p.Error.Message = fmt.Sprintf("not %s: %s (%s)", past, strings.Join(failed, ", "), p.Error.Message)
		c.showAgents(w, r, p, p.Error.Status)
		return
	}
	done(w, r, r.URL.Path+"?"+r.URL.RawQuery, fmt.Sprintf("%s %d agent(s): %s", past, len(did), strings.Join(did, ", ")))
}

type agentData struct {
	Agent agentView
	Facts []fact
	Kinds []string
}

// fact is one reported fact, its value as JSON for the nested ones.
type fact struct {
	Name, Value string
}

func (c *Console) agent(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "agents")
	if p == nil {
		return
	}
	name := r.PathValue("name")
	p.Title, p.Live = "Agent "+name, true
	var d agentData
	if _, err := c.call(r, "GET", "/envs/"+url.PathEscape(p.Env)+"/agents/"+url.PathEscape(name), nil, &d.Agent); err != nil {
		c.fail(w, r, p, err)
		return
	}
	for k, v := range d.Agent.Facts {
		d.Facts = append(d.Facts, fact{Name: k, Value: show(v)})
	}
	slices.SortFunc(d.Facts, func(a, b fact) int { return strings.Compare(a.Name, b.Name) })
	p.Data = d
	c.render(w, r, "agent", http.StatusOK, p)
}

// --- resources

type resourcesData struct {
	Resources                         []record.ResourceStatus
	Pager                             pager
	Q, State, Compliance, Type, Agent string
	States, Compliances               []string
}

func (c *Console) resources(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "resources")
	if p == nil {
		return
	}
	p.Title, p.Live = "Resources of "+p.Env, true
	q := query(r, "q", "state", "compliance", "type", "agent")
	q.Set("limit", strconv.Itoa(PageSize))
	q.Set("offset", strconv.Itoa(offset(r)))
	uq := r.URL.Query()
	d := resourcesData{Q: uq.Get("q"), State: uq.Get("state"), Compliance: uq.Get("compliance"), Type: uq.Get("type"), Agent: uq.Get("agent"),
		Compliances: []string{string(model.Compliant), string(model.NonCompliant), string(model.ComplianceUnknown)}}
	for _, s := range []model.ResourceState{model.StateAvailable, model.StateDeploying, model.StateDeployed, model.StateFailed, model.StateSkipped,
		model.StateUndefined, model.StateSkippedForUndefined, model.StateUnavailable, model.StateCancelled, model.StateOrphaned} {
		d.States = append(d.States, string(s))
	}
	h, err := c.call(r, "GET", "/envs/"+url.PathEscape(p.Env)+"/resources?"+q.Encode(), nil, &d.Resources)
	if err != nil {
		c.fail(w, r, p, err)
		return
	}
	d.Pager = newPager(r, h, len(d.Resources))
	p.Data = d
	c.render(w, r, "resources", http.StatusOK, p)
}

type resourceData struct {
	Status     record.ResourceStatus
	Attributes []fact
	Drift      []driftRow
	DriftAt    *time.Time
	Log        []record.Action
}

// driftRow is one drifted attribute: what the host holds, and what the
// version wants.
type driftRow struct {
	Name, Current, Desired string
}

func (c *Console) resource(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "resources")
	if p == nil {
		return
	}
	raw := r.PathValue("id")
	p.Title, p.Live = "Resource "+raw, true
	id, err := model.ParseID(raw)
	if err != nil {
		c.fail(w, r, p, &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf("resource ID %q: %v", raw, err)})
		return
	}
	e := "/envs/" + url.PathEscape(p.Env)
	path := e + "/resources/" + url.PathEscape(raw)
	var view struct {
		record.ResourceStatus
		Resource *model.Resource `json:"resource"`
	}
	if _, err := c.call(r, "GET", path, nil, &view); err != nil {
		c.fail(w, r, p, err)
		return
	}
	d := resourceData{Status: view.ResourceStatus}
	if view.Resource != nil {
		for k, v := range view.Resource.Attributes {
			d.Attributes = append(d.Attributes, fact{Name: k, Value: show(v)})
		}
		slices.SortFunc(d.Attributes, func(a, b fact) int { return strings.Compare(a.Name, b.Name) })
	}
	if d.Status.Compliance == model.NonCompliant {
		var als []record.Alert
		if _, err := c.call(r, "GET", e+"/alerts?kind=drift&limit=500&agent="+url.QueryEscape(id.Agent), nil, &als); err != nil {
			c.fail(w, r, p, err)
			return
		}
		for _, a := range als {
			if a.ID != nil && *a.ID == id && a.Compliance != model.Compliant {
				for k, ch := range a.Changes {
					d.Drift = append(d.Drift, driftRow{Name: k, Current: show(ch.Current), Desired: show(ch.Desired)})
				}
				at := a.At
				d.DriftAt = &at
				break
			}
		}
		slices.SortFunc(d.Drift, func(a, b driftRow) int { return strings.Compare(a.Name, b.Name) })
	}
	if _, err := c.call(r, "GET", path+"/log?limit=50", nil, &d.Log); err != nil {
		c.fail(w, r, p, err)
		return
	}
	p.Data = d
	c.render(w, r, "resource", http.StatusOK, p)
}

// --- versions

type versionsData struct {
	Versions []model.Version
	Released int64
	Releases []record.Release
}

func (c *Console) versions(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "versions")
	if p == nil {
		return
	}
	p.Title, p.Live = "Versions of "+p.Env, true
	var d versionsData
	e := "/envs/" + url.PathEscape(p.Env)
	if _, err := c.call(r, "GET", e+"/versions", nil, &d.Versions); err != nil {
		c.fail(w, r, p, err)
		return
	}
	for _, v := range d.Versions {
		if v.State == model.VersionReleased {
			d.Released = v.Number
		}
	}
	if _, err := c.call(r, "GET", e+"/releases?limit=5", nil, &d.Releases); err != nil {
		c.fail(w, r, p, err)
		return
	}
	p.Data = d
	c.render(w, r, "versions", http.StatusOK, p)
}

// diff is what the API says changes between two versions.
type diff struct {
	From      int64 `json:"from"`
	To        int64 `json:"to"`
	Resources []struct {
		ID         model.ID `json:"id"`
		Change     string   `json:"change"`
		Attributes []struct {
			Name      string `json:"name"`
			Old       any    `json:"old"`
			New       any    `json:"new"`
			Sensitive bool   `json:"sensitive"`
		} `json:"attributes"`
	} `json:"resources"`
	Added   []model.ID `json:"added"`
	Removed []model.ID `json:"removed"`
	Changed []model.ID `json:"changed"`
}

type versionData struct {
	Version  model.Version
	Released int64
	Diff     diff
	Plan     *record.Plan
	// Confirm: the page asks to confirm a release (Rollback: of an
	// older version than the released one), saying what it would take
	// away from each agent (Preview).
	Confirm, Rollback bool
	Preview           *record.ReleasePreview
}

func (c *Console) loadVersion(w http.ResponseWriter, r *http.Request, p *page) (versionData, bool) {
	var d versionData
	e := "/envs/" + url.PathEscape(p.Env)
	n := r.PathValue("n")
	p.Title = "Version " + n + " of " + p.Env
	if _, err := c.call(r, "GET", e+"/versions/"+url.PathEscape(n), nil, &d.Version); err != nil {
		c.fail(w, r, p, err)
		return d, false
	}
	var vs []model.Version
	if _, err := c.call(r, "GET", e+"/versions", nil, &vs); err != nil {
		c.fail(w, r, p, err)
		return d, false
	}
	for _, v := range vs {
		if v.State == model.VersionReleased {
			d.Released = v.Number
		}
	}
	dq := ""
	if from := r.URL.Query().Get("from"); from != "" {
		dq = "?from=" + url.QueryEscape(from)
	}
	if _, err := c.call(r, "GET", e+"/versions/"+url.PathEscape(n)+"/diff"+dq, nil, &d.Diff); err != nil {
		c.fail(w, r, p, err)
		return d, false
	}
	d.Rollback = d.Released > 0 && d.Version.Number < d.Released
	return d, true
}

func (c *Console) version(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "versions")
	if p == nil {
		return
	}
	d, ok := c.loadVersion(w, r, p)
	if !ok {
		return
	}
	p.Data = d
	c.render(w, r, "version", http.StatusOK, p)
}

func (c *Console) confirmRelease(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "versions")
	if p == nil {
		return
	}
	d, ok := c.loadVersion(w, r, p)
	if !ok {
		return
	}
	d.Confirm = true
	// What the release would take away from each agent, asked to be
	// confirmed with the rest.
	var pv record.ReleasePreview
	if _, err := c.call(r, "GET", "/envs/"+url.PathEscape(p.Env)+"/versions/"+url.PathEscape(r.PathValue("n"))+"/release-preview", nil, &pv); err != nil {
		c.fail(w, r, p, err)
		return
	}
	d.Preview = &pv
	p.Data = d
	c.render(w, r, "version", http.StatusOK, p)
}

func (c *Console) release(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "versions")
	if p == nil {
		return
	}
	n := r.PathValue("n")
	e := "/envs/" + url.PathEscape(p.Env)
	if r.PostFormValue("confirm") != "yes" {
		p.Error = &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: "the release was not confirmed: nothing was released", Hint: "confirm it on the release page"}
		c.render(w, r, "error", http.StatusBadRequest, p)
		return
	}
	var rel struct {
		Number    int64             `json:"number"`
		ReleaseID string            `json:"release_id"`
		Meta      model.VersionMeta `json:"meta"`
	}
	if _, err := c.call(r, http.MethodPost, e+"/versions/"+url.PathEscape(n)+"/release", nil, &rel); err != nil {
		c.fail(w, r, p, err)
		return
	}
	msg := fmt.Sprintf("version %s released", n)
	if rel.Number > 0 && strconv.FormatInt(rel.Number, 10) != n {
		msg = fmt.Sprintf("version %s released again as version %d (rollback)", n, rel.Number)
	}
	done(w, r, e+"/versions", msg+": its fan-out to agents runs now")
}

func (c *Console) plan(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "versions")
	if p == nil {
		return
	}
	d, ok := c.loadVersion(w, r, p)
	if !ok {
		return
	}
	var pl record.Plan
	if _, err := c.call(r, http.MethodPost, "/envs/"+url.PathEscape(p.Env)+"/versions/"+url.PathEscape(r.PathValue("n"))+"/plan",
		map[string]string{"timeout": "20s"}, &pl); err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			c.fail(w, r, p, err)
			return
		}
		p.Error = ae
	} else {
		d.Plan = &pl
	}
	p.Data = d
	c.render(w, r, "version", http.StatusOK, p)
}

// --- compiles, deploys, alerts, audit

func (c *Console) compiles(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "compiles")
	if p == nil {
		return
	}
	p.Title, p.Live = "Compiles of "+p.Env, true
	var cs []record.Compile
	if _, err := c.call(r, "GET", "/envs/"+url.PathEscape(p.Env)+"/compiles?limit=50", nil, &cs); err != nil {
		c.fail(w, r, p, err)
		return
	}
	p.Data = cs
	c.render(w, r, "compiles", http.StatusOK, p)
}

func (c *Console) deploys(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "deploys")
	if p == nil {
		return
	}
	p.Title, p.Live = "Deploys of "+p.Env, true
	q := query(r, "kind", "agent")
	q.Set("limit", "100")
	var ds []record.Deploy
	if _, err := c.call(r, "GET", "/envs/"+url.PathEscape(p.Env)+"/deploys?"+q.Encode(), nil, &ds); err != nil {
		c.fail(w, r, p, err)
		return
	}
	p.Data = struct {
		Deploys     []record.Deploy
		Kind, Agent string
	}{ds, r.URL.Query().Get("kind"), r.URL.Query().Get("agent")}
	c.render(w, r, "deploys", http.StatusOK, p)
}

func (c *Console) deploy(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "deploys")
	if p == nil {
		return
	}
	id := r.PathValue("id")
	p.Title, p.Live = "Deploy "+id, true
	var rep struct {
		ID      string          `json:"id"`
		Deploy  *record.Deploy  `json:"deploy"`
		Waiting []string        `json:"waiting"`
		Actions []record.Action `json:"actions"`
	}
	if _, err := c.call(r, "GET", "/envs/"+url.PathEscape(p.Env)+"/deploys/"+url.PathEscape(id), nil, &rep); err != nil {
		c.fail(w, r, p, err)
		return
	}
	p.Data = rep
	c.render(w, r, "deploy", http.StatusOK, p)
}

func (c *Console) alerts(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "alerts")
	if p == nil {
		return
	}
	p.Title, p.Live = "Alerts of "+p.Env, true
	q := query(r, "kind", "agent")
	q.Set("limit", "200")
	var als []record.Alert
	if _, err := c.call(r, "GET", "/envs/"+url.PathEscape(p.Env)+"/alerts?"+q.Encode(), nil, &als); err != nil {
		c.fail(w, r, p, err)
		return
	}
	p.Data = struct {
		Alerts      []record.Alert
		Kind, Agent string
	}{als, r.URL.Query().Get("kind"), r.URL.Query().Get("agent")}
	c.render(w, r, "alerts", http.StatusOK, p)
}

func (c *Console) audit(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "audit")
	if p == nil {
		return
	}
	p.Title = "Audit log"
	q := query(r, "env")
	q.Set("limit", "200")
	var es []record.AuditEntry
	if _, err := c.call(r, "GET", "/audit?"+q.Encode(), nil, &es); err != nil {
		c.fail(w, r, p, err)
		return
	}
	p.Data = struct {
		Entries []record.AuditEntry
		Env     string
	}{es, r.URL.Query().Get("env")}
	c.render(w, r, "audit", http.StatusOK, p)
}

// --- administration

type usersData struct {
	Users []record.User
	Form  struct{ Name, Role string }
}

func (c *Console) users(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "users")
	if p == nil {
		return
	}
	c.showUsers(w, r, p, http.StatusOK)
}

func (c *Console) showUsers(w http.ResponseWriter, r *http.Request, p *page, status int) {
	p.Title = "Users"
	var d usersData
	if _, err := c.call(r, "GET", "/users", nil, &d.Users); err != nil {
		c.fail(w, r, p, err)
		return
	}
	d.Form.Name, d.Form.Role = r.PostFormValue("name"), r.PostFormValue("role")
	p.Data = d
	c.render(w, r, "users", status, p)
}

func (c *Console) userAction(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "users")
	if p == nil {
		return
	}
	name := strings.TrimSpace(r.PostFormValue("name"))
	var err error
	var msg string
	switch r.PostFormValue("action") {
	case "create":
		body := map[string]string{"name": name, "password": r.PostFormValue("password"), "role": r.PostFormValue("role")}
		_, err = c.call(r, http.MethodPost, "/users", body, nil)
		msg = "user " + name + " created"
	case "delete":
		_, err = c.call(r, http.MethodDelete, "/users/"+url.PathEscape(name), nil, nil)
		msg = "user " + name + " deleted"
	default:
		err = &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: "unknown action", Hint: "use a button of the page"}
	}
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			c.fail(w, r, p, err)
			return
		}
		p.Error = ae
		c.showUsers(w, r, p, ae.Status)
		return
	}
	done(w, r, "/admin/users", msg)
}

type tokensData struct {
	Tokens []record.Token
	// Secret is a token just made, shown once.
	Secret string
	Form   struct{ Name, Role, Env, ExpiresIn string }
}

func (c *Console) tokens(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "tokens")
	if p == nil {
		return
	}
	c.showTokens(w, r, p, http.StatusOK, "")
}

func (c *Console) showTokens(w http.ResponseWriter, r *http.Request, p *page, status int, secret string) {
	p.Title = "API tokens"
	d := tokensData{Secret: secret}
	if _, err := c.call(r, "GET", "/tokens", nil, &d.Tokens); err != nil {
		c.fail(w, r, p, err)
		return
	}
	if secret == "" {
		d.Form.Name, d.Form.Role, d.Form.Env, d.Form.ExpiresIn = r.PostFormValue("name"), r.PostFormValue("role"), r.PostFormValue("env"), r.PostFormValue("expires_in")
	}
	p.Data = d
	c.render(w, r, "tokens", status, p)
}

func (c *Console) tokenAction(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "tokens")
	if p == nil {
		return
	}
	var err error
	switch r.PostFormValue("action") {
	case "create":
		body := map[string]string{"name": strings.TrimSpace(r.PostFormValue("name")), "role": r.PostFormValue("role"), "env": r.PostFormValue("env"),
			"expires_in": strings.TrimSpace(r.PostFormValue("expires_in"))}
		var nt struct {
			Secret string `json:"secret"`
		}
		if _, err = c.call(r, http.MethodPost, "/tokens", body, &nt); err == nil {
			p.Flash = "token " + body["name"] + " created: copy its secret now, it is not shown again"
			c.showTokens(w, r, p, http.StatusCreated, nt.Secret)
			return
		}
	case "revoke":
		id := r.PostFormValue("id")
		if _, err = c.call(r, http.MethodDelete, "/tokens/"+url.PathEscape(id), nil, nil); err == nil {
			done(w, r, "/admin/tokens", "token revoked")
			return
		}
	default:
		err = &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: "unknown action", Hint: "use a button of the page"}
	}
	ae := c.formError(w, r, p, err)
	if ae == nil {
		return
	}
	c.showTokens(w, r, p, ae.Status, "")
}

type enrollData struct {
	Tokens []record.EnrollmentToken
	Secret string
	Form   struct{ Name, MaxUses, ExpiresIn string }
}

func (c *Console) enrollTokens(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "enrollment")
	if p == nil {
		return
	}
	c.showEnroll(w, r, p, http.StatusOK, "")
}

func (c *Console) showEnroll(w http.ResponseWriter, r *http.Request, p *page, status int, secret string) {
	p.Title = "Enrollment tokens of " + p.Env
	d := enrollData{Secret: secret}
	if _, err := c.call(r, "GET", "/envs/"+url.PathEscape(p.Env)+"/enrollment-tokens", nil, &d.Tokens); err != nil {
		c.fail(w, r, p, err)
		return
	}
	if secret == "" {
		d.Form.Name, d.Form.MaxUses, d.Form.ExpiresIn = r.PostFormValue("name"), r.PostFormValue("max_uses"), r.PostFormValue("expires_in")
	}
	p.Data = d
	c.render(w, r, "enrollment", status, p)
}

func (c *Console) enrollTokenAction(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "enrollment")
	if p == nil {
		return
	}
	e := "/envs/" + url.PathEscape(p.Env)
	var err error
	switch r.PostFormValue("action") {
	case "create":
		body := map[string]any{"name": strings.TrimSpace(r.PostFormValue("name"))}
		if s := strings.TrimSpace(r.PostFormValue("max_uses")); s != "" {
			n, cerr := strconv.Atoi(s)
			if cerr != nil || n < 0 {
				err = &apiError{Status: http.StatusBadRequest, Code: "invalid", Message: fmt.Sprintf("max uses %q: want a whole number of 0 or more (0: no bound)", s)}
				break
			}
			body["max_uses"] = n
		}
		if s := strings.TrimSpace(r.PostFormValue("expires_in")); s != "" {
			body["expires_in"] = s
		}
		var nt struct {
			Token string `json:"token"`
		}
		if _, err = c.call(r, http.MethodPost, e+"/enrollment-tokens", body, &nt); err == nil {
			p.Flash = "enrollment token created: copy it now, it is not shown again"
			c.showEnroll(w, r, p, http.StatusCreated, nt.Token)
			return
		}
	case "revoke":
		if _, err = c.call(r, http.MethodDelete, e+"/enrollment-tokens/"+url.PathEscape(r.PostFormValue("id")), nil, nil); err == nil {
			done(w, r, e+"/enrollment-tokens", "enrollment token revoked")
			return
		}
	default:
		err = &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: "unknown action", Hint: "use a button of the page"}
	}
	ae := c.formError(w, r, p, err)
	if ae == nil {
		return
	}
	c.showEnroll(w, r, p, ae.Status, "")
}

// --- webhooks

type webhookRow struct {
	record.Webhook
	Deliveries []record.Delivery
}

type webhooksData struct {
	Webhooks []webhookRow
	Secret   string
	Form     struct{ Name, URL, Kinds string }
}

func (c *Console) webhooks(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "webhooks")
	if p == nil {
		return
	}
	c.showWebhooks(w, r, p, http.StatusOK, "")
}

func (c *Console) showWebhooks(w http.ResponseWriter, r *http.Request, p *page, status int, secret string) {
	p.Title, p.Live = "Webhooks of "+p.Env, true
	e := "/envs/" + url.PathEscape(p.Env)
	var hooks []record.Webhook
	if _, err := c.call(r, "GET", e+"/webhooks", nil, &hooks); err != nil {
		c.fail(w, r, p, err)
		return
	}
	d := webhooksData{Secret: secret}
	for _, h := range hooks {
		row := webhookRow{Webhook: h}
		if _, err := c.call(r, "GET", fmt.Sprintf("%s/webhooks/%d/deliveries?limit=5", e, h.ID), nil, &row.Deliveries); err != nil {
			c.fail(w, r, p, err)
			return
		}
		d.Webhooks = append(d.Webhooks, row)
	}
	if secret == "" {
		d.Form.Name, d.Form.URL, d.Form.Kinds = r.PostFormValue("name"), r.PostFormValue("url"), r.PostFormValue("kinds")
	}
	p.Data = d
	c.render(w, r, "webhooks", status, p)
}

func (c *Console) webhookAction(w http.ResponseWriter, r *http.Request) {
	p := c.begin(w, r, "webhooks")
	if p == nil {
		return
	}
	e := "/envs/" + url.PathEscape(p.Env)
	id := url.PathEscape(r.PostFormValue("id"))
	var err error
	switch r.PostFormValue("action") {
	case "create":
		u := strings.TrimSpace(r.PostFormValue("url"))
		body := record.WebhookRequest{Name: strings.TrimSpace(r.PostFormValue("name")), URL: &u}
		if k := strings.Fields(strings.ReplaceAll(r.PostFormValue("kinds"), ",", " ")); len(k) > 0 {
			body.Kinds = &k
		}
		var made record.Webhook
		if _, err = c.call(r, http.MethodPost, e+"/webhooks", body, &made); err == nil {
			p.Flash = "webhook created: copy its secret now, it is not shown again"
			c.showWebhooks(w, r, p, http.StatusCreated, made.Secret)
			return
		}
	case "test":
		if _, err = c.call(r, http.MethodPost, e+"/webhooks/"+id+"/test", nil, nil); err == nil {
			done(w, r, e+"/webhooks", "test delivery queued: it shows below once tried")
			return
		}
	case "enable", "disable":
		on := r.PostFormValue("action") == "enable"
		if _, err = c.call(r, http.MethodPatch, e+"/webhooks/"+id, record.WebhookRequest{Enabled: &on}, nil); err == nil {
			done(w, r, e+"/webhooks", "webhook "+r.PostFormValue("action")+"d")
			return
		}
	case "delete":
		if _, err = c.call(r, http.MethodDelete, e+"/webhooks/"+id, nil, nil); err == nil {
			done(w, r, e+"/webhooks", "webhook deleted")
			return
		}
	default:
		err = &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: "unknown action", Hint: "use a button of the page"}
	}
	ae := c.formError(w, r, p, err)
	if ae == nil {
		return
	}
	c.showWebhooks(w, r, p, ae.Status, "")
}

// formError puts the API's refusal err on the page's form and returns it;
// any other error renders the error page, and it returns nil.
func (c *Console) formError(w http.ResponseWriter, r *http.Request, p *page, err error) *apiError {
	var ae *apiError
	if !errors.As(err, &ae) {
		c.fail(w, r, p, err)
		return nil
	}
	p.Error = ae
	return ae
}
