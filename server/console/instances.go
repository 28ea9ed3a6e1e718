package console

import (
	"net/http"
	"time"

	"github.com/tetherhq/tether/server/record"
)

// The instances of an environment: the machines its platforms' agents
// reported, and those of agents no host claims (discovered).

type instanceRow struct {
	record.Instance
	// Uptime is how long it has run ("" when it does not).
	Uptime string
}

// Discovered says whether no host claims the instance.
func (i instanceRow) Discovered() bool { return i.Host == "" }

func instances(v *visit) {
	v.Title, v.Live = "Instances of "+v.Env, true
	var list []record.Instance
	if !v.get(v.envPath()+"/instances", &list) {
		return
	}
	now := time.Now()
	rows := make([]instanceRow, 0, len(list))
	for _, i := range list {
		row := instanceRow{Instance: i}
		if up := i.Uptime(now); up > 0 {
			row.Uptime = duration(up)
		}
		rows = append(rows, row)
	}
	v.render("instances", http.StatusOK, rows)
}
