package console

import (
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/tetherhq/tether/server/record"
)

// The platforms of an environment (where machines are made) and its
// distributions (what is installed on them), as they are: operators and
// models declare them, hypervisors' agents report platforms.

type distributionRow struct {
	record.Distribution
	// Boot says what its machines boot: a kernel and initrd, or the
	// image of each platform.
	Boot []fact
}

type platformsData struct {
	Platforms     []record.Platform
	Distributions []distributionRow
}

func platforms(v *visit) {
	v.Title = "Platforms and distributions of " + v.Env
	var d platformsData
	var dists []record.Distribution
	if !v.get(v.envPath()+"/platforms", &d.Platforms) || !v.get(v.envPath()+"/distributions", &dists) {
		return
	}
	for _, dist := range dists {
		row := distributionRow{Distribution: dist}
		if dist.Kind == record.DistImage {
			for _, p := range slices.Sorted(maps.Keys(dist.Images)) {
				row.Boot = append(row.Boot, fact{Name: "image on " + p, Value: dist.Images[p]})
			}
		} else {
			row.Boot = []fact{{Name: "kernel", Value: dist.Kernel}, {Name: "initrd", Value: dist.Initrd}}
		}
		row.Settings = hideSecrets(dist.Params, dist.Settings)
		d.Distributions = append(d.Distributions, row)
	}
	v.render("platforms", http.StatusOK, d)
}

// hideSecrets returns settings with the values of secret parameters
// shown as "(secret)" (the API hides them already; the page never shows
// one whatever it is given).
func hideSecrets(params []record.Param, settings map[string]any) map[string]any {
	out := make(map[string]any, len(settings))
	for k, v := range settings {
		out[k] = v
	}
	for _, p := range params {
		if _, ok := out[p.Name]; ok && p.Type == record.ParamSecret {
			out[p.Name] = "(secret)"
		}
	}
	return out
}

// settingsLine writes settings as name=value, by name, each kept whole
// where a table cell wraps.
func settingsLine(m map[string]any) template.HTML {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(`<code class="kv">` + template.HTMLEscapeString(k+"="+show(m[k])) + `</code>`)
	}
	return template.HTML(b.String())
}
