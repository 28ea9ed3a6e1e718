package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// The versions of an environment: their list and releases, one version
// with its diff, releasing it (after a confirmation) and planning it.

type versionsData struct {
	Versions []model.Version
	Released int64
	Releases []record.Release
}

func versions(v *visit) {
	v.Title, v.Live = "Versions of "+v.Env, true
	var d versionsData
	if !v.get(v.envPath()+"/versions", &d.Versions) {
		return
	}
	d.Released = releasedOf(d.Versions)
	if !v.get(v.envPath()+"/releases?limit=5", &d.Releases) {
		return
	}
	v.render("versions", http.StatusOK, d)
}

// releasedOf is the number of the released version of vs (0: none).
func releasedOf(vs []model.Version) int64 {
	var n int64
	for _, v := range vs {
		if v.State == model.VersionReleased {
			n = v.Number
		}
	}
	return n
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

// versionPath is the API's path of the page's version.
func versionPath(v *visit) string {
	return v.envPath() + "/versions/" + url.PathEscape(v.r.PathValue("n"))
}

// loadVersion gets what the version page shows of every version; a
// failure is the error page, and it reports false.
func loadVersion(v *visit) (versionData, bool) {
	var d versionData
	v.Title = "Version " + v.r.PathValue("n") + " of " + v.Env
	if !v.get(versionPath(v), &d.Version) {
		return d, false
	}
	var vs []model.Version
	if !v.get(v.envPath()+"/versions", &vs) {
		return d, false
	}
	d.Released = releasedOf(vs)
	dq := ""
	if from := v.query("from"); from != "" {
		dq = "?from=" + url.QueryEscape(from)
	}
	if !v.get(versionPath(v)+"/diff"+dq, &d.Diff) {
		return d, false
	}
	d.Rollback = d.Released > 0 && d.Version.Number < d.Released
	return d, true
}

func version(v *visit) {
	if d, ok := loadVersion(v); ok {
		v.render("version", http.StatusOK, d)
	}
}

// confirmRelease asks to confirm a release, saying what the release
// would take away from each agent.
func confirmRelease(v *visit) {
	d, ok := loadVersion(v)
	if !ok {
		return
	}
	d.Confirm = true
	var pv record.ReleasePreview
	if !v.get(versionPath(v)+"/release-preview", &pv) {
		return
	}
	d.Preview = &pv
	v.render("version", http.StatusOK, d)
}

func release(v *visit) {
	n := v.r.PathValue("n")
	if v.form("confirm") != "yes" {
		v.Error = badRequest("the release was not confirmed: nothing was released", "confirm it on the release page")
		v.render("error", http.StatusBadRequest, nil)
		return
	}
	var rel struct {
		Number    int64             `json:"number"`
		ReleaseID string            `json:"release_id"`
		Meta      model.VersionMeta `json:"meta"`
	}
	if err := v.call(http.MethodPost, versionPath(v)+"/release", nil, &rel); err != nil {
		v.fail(err)
		return
	}
	msg := fmt.Sprintf("version %s released", n)
	if rel.Number > 0 && strconv.FormatInt(rel.Number, 10) != n {
		msg = fmt.Sprintf("version %s released again as version %d (rollback)", n, rel.Number)
	}
	v.done(v.envPath()+"/versions", msg+": its fan-out to agents runs now")
}

// plan asks the agents what the version would change, and shows their
// answers (or the API's refusal) on the version's page.
func plan(v *visit) {
	d, ok := loadVersion(v)
	if !ok {
		return
	}
	var pl record.Plan
	if err := v.call(http.MethodPost, versionPath(v)+"/plan", map[string]string{"timeout": "20s"}, &pl); err != nil {
		if v.refused(err) == nil {
			return
		}
	} else {
		d.Plan = &pl
	}
	v.render("version", http.StatusOK, d)
}
