package handler

// FileLimit bounds how many files the handlers sharing it hold open at once
// while replacing files (written, then waiting for their flush): one for
// all the agents of a process (`tether bench converge` runs thousands), so
// that they stay within the process's limit on open files however many
// deploy together. Writers past the bound wait their turn.
type FileLimit struct{ slots chan struct{} }

// NewFileLimit returns a bound of n files open at once (at least 1).
func NewFileLimit(n int) *FileLimit {
	return &FileLimit{slots: make(chan struct{}, max(n, 1))}
}

// hold takes a slot and returns its release; a nil limit bounds nothing.
func (l *FileLimit) hold() func() {
	if l == nil {
		return func() {}
	}
	l.slots <- struct{}{}
	return func() { <-l.slots }
}

// HoldFile waits for a slot of the runtime's FileLimit (none: at once) and
// returns its release: handlers that replace a file call it around the
// write.
func (rt Runtime) HoldFile() func() { return rt.Files.hold() }
