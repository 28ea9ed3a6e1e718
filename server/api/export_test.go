package api

import "time"

// SetClock makes the API read the time from now (tests of expiry and
// throttling move it instead of waiting).
func (a *API) SetClock(now func() time.Time) { a.now = now }

// UploadMemoryHeld is the memory the version uploads in progress hold,
// as taken from the budget (Config.UploadMemory).
func (a *API) UploadMemoryHeld() int64 {
	a.uploadMemory.mu.Lock()
	defer a.uploadMemory.mu.Unlock()
	return a.uploadMemory.used
}
