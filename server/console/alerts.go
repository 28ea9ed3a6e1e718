package console

import "github.com/tetherhq/tether/server/record"

// The alerts of an environment: drift, security and compile alerts.

func alerts(v *visit) { showKindAgentList[record.Alert](v, "alerts", "Alerts", 200) }
