package console

import (
	"net/http"
	"net/url"

	"github.com/tetherhq/tether/server/record"
)

// The deploys (and repairs and dry runs) of an environment: their list,
// and one deploy with what each agent answered.

func deploys(v *visit) { showKindAgentList[record.Deploy](v, "deploys", "Deploys", 100) }

func deploy(v *visit) {
	id := v.r.PathValue("id")
	v.Title, v.Live = "Deploy "+id, true
	var rep struct {
		ID      string          `json:"id"`
		Deploy  *record.Deploy  `json:"deploy"`
		Waiting []string        `json:"waiting"`
		Actions []record.Action `json:"actions"`
	}
	if v.get(v.envPath()+"/deploys/"+url.PathEscape(id), &rep) {
		v.render("deploy", http.StatusOK, rep)
	}
}
