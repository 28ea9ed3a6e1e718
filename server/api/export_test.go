package api

import "time"

// SetClock makes the API read the time from now (tests of expiry and
// throttling move it instead of waiting).
func (a *API) SetClock(now func() time.Time) { a.now = now }
