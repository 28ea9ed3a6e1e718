package console

import (
	"net/http"

	"github.com/tetherhq/tether/server/record"
)

// The compiles the server ran in an environment, newest first.

func compiles(v *visit) {
	v.Title, v.Live = "Compiles of "+v.Env, true
	if cs, ok := list[record.Compile](v, v.envPath()+"/compiles", 50); ok {
		v.render("compiles", http.StatusOK, cs)
	}
}
