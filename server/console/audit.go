package console

import (
	"net/http"

	"github.com/tetherhq/tether/server/record"
)

// The organization's audit log.

func audit(v *visit) {
	v.Title = "Audit log"
	if es, ok := list[record.AuditEntry](v, "/audit", 200, "env"); ok {
		v.render("audit", http.StatusOK, struct {
			Entries []record.AuditEntry
			Env     string
		}{es, v.query("env")})
	}
}
