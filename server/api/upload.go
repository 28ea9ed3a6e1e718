package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/tetherhq/tether/model"
)

// decodeExport reads a version upload, {"resources": [...], "meta":
// {...}} in either order, one resource at a time, each added to up as it
// is decoded and the memory up holds then taken from the uploads' budget
// (held, what this upload took so far): the decoder buffers one
// resource, never the body, and the upload keeps each resource only as
// it is stored. It returns the upload's meta and whether it had
// "resources".
func (a *API) decodeExport(r *request, up Upload, held *int64) (meta model.VersionMeta, sawResources bool, err error) {
	dec := json.NewDecoder(r.Request().Body)
	dec.DisallowUnknownFields()
	dec.UseNumber()
	where := "request body"
	fail := func(err error) (model.VersionMeta, bool, error) {
		var e *Error
		var refused *refusedResource
		switch {
		case errors.As(err, &e):
			return meta, false, e
		case errors.As(err, &refused):
			return meta, false, refused.err
		}
		return meta, false, r.jsonError(err, where, dec.InputOffset())
	}
	if err := expectDelim(dec, '{'); err != nil {
		return fail(err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return meta, false, newError("invalid_json", "", "request body: %q appears twice", key)
		}
		seen[key] = true
		switch key {
		case "meta":
			where = "meta"
			if err := dec.Decode(&meta); err != nil {
				return fail(err)
			}
			where = "request body"
		case "resources":
			sawResources = true
			n := 0
			add := func(res *model.Resource) error {
				n++
				if err := up.Add(r.ctx(), res); err != nil {
					return &refusedResource{err}
				}
				return a.uploadMemory.grow(held, up.Size(), n)
			}
			if err := decodeResources(dec, &where, add); err != nil {
				return fail(err)
			}
		default:
			return meta, false, newError("unknown_field", "an upload is {\"resources\": [...], \"meta\": {...}}", "request body: unknown field %q", clip(key))
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return fail(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return meta, false, newError("invalid_json", "", "request body has data after the JSON value")
	}
	return meta, sawResources, nil
}

// refusedResource is a resource the upload refused (the catalogue's
// check, a bad ID, a sensitive value that is the redaction marker): its
// error is the service's, not the JSON's.
type refusedResource struct{ err error }

func (e *refusedResource) Error() string { return e.err.Error() }
func (e *refusedResource) Unwrap() error { return e.err }

// decodeResources reads a JSON array of resources, one element at a
// time, handing each to add; where follows the element being read, for
// errors.
func decodeResources(dec *json.Decoder, where *string, add func(*model.Resource) error) error {
	*where = "resources"
	if err := expectDelim(dec, '['); err != nil {
		return err
	}
	for i := 0; dec.More(); i++ {
		var res model.Resource
		if err := dec.Decode(&res); err != nil {
			*where = fmt.Sprintf("resources[%d]", i)
			return err
		}
		if err := add(&res); err != nil {
			return err
		}
	}
	if err := expectDelim(dec, ']'); err != nil {
		return err
	}
	*where = "request body"
	return nil
}

// memoryBudget is the memory the version uploads in progress may hold
// together (Config.UploadMemory).
type memoryBudget struct {
	mu          sync.Mutex
	limit, used int64
}

// grain is the step in which uploads take memory from the budget.
const grain = 1 << 20

// grow takes from the budget what an upload that took held already needs
// to hold size bytes, after n resources: too_large when size is above
// the whole budget, busy when other uploads hold the rest.
func (b *memoryBudget) grow(held *int64, need int64, n int) error {
	if need <= *held {
		return nil
	}
	if need > b.limit {
		return newError("too_large", "split the model across environments, or raise the server's upload-memory (tether server --upload-memory, TETHER_UPLOAD_MEMORY)",
			"the version upload needs more than %s, the server's upload-memory (what uploads may hold together), after %d resources: the server keeps an upload's resources, as they are stored, until it has them all", size(b.limit), n)
	}
	want := min((need+grain-1)/grain*grain, b.limit)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used-*held+want > b.limit {
		e := newError("busy", "retry in a moment",
			"the version uploads in progress hold %s of the %s they may hold together (the server's upload-memory); this one would hold %s", size(b.used-*held), size(b.limit), size(want))
		e.RetryAfter = 5 * time.Second
		return e
	}
	b.used += want - *held
	*held = want
	return nil
}

// give gives back what an upload took.
func (b *memoryBudget) give(held *int64) {
	b.mu.Lock()
	b.used -= *held
	b.mu.Unlock()
	*held = 0
}

// expectDelim reads the next token, which must be the delimiter d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return newError("invalid_json", "an upload is {\"resources\": [...], \"meta\": {...}}", "request body: want %s at byte %d, got %s", d, dec.InputOffset(), clip(fmt.Sprint(tok)))
	}
	return nil
}

// uploadSlot waits for one of the MaxUploads upload slots, for UploadWait
// at most; release gives it back.
func (a *API) uploadSlot(r *request) (release func(), err error) {
	select {
	case a.uploads <- struct{}{}:
		return func() { <-a.uploads }, nil
	default:
	}
	t := time.NewTimer(a.cfg.UploadWait)
	defer t.Stop()
	select {
	case a.uploads <- struct{}{}:
		return func() { <-a.uploads }, nil
	case <-t.C:
		e := newError("busy", "retry in a moment", "the server is taking %d version uploads at once, its max-uploads; this one waited %s", a.cfg.MaxUploads, a.cfg.UploadWait)
		e.RetryAfter = 5 * time.Second
		return nil, e
	case <-r.ctx().Done():
		return nil, r.ctx().Err()
	}
}

// uploadDeadlines gives an upload the time its size needs to be stored
// and answered: the time its size takes to arrive at MinUploadRate (the
// limit's size when the length is not announced), as long again, and
// WriteTimeout. Its arrival is paced as every body's is (bodyDeadline).
func (a *API) uploadDeadlines(r *request) {
	n := r.Request().ContentLength
	if n < 0 || n > a.cfg.MaxUpload {
		n = a.cfg.MaxUpload
	}
	transfer := time.Duration(float64(n) / float64(a.cfg.MinUploadRate) * float64(time.Second))
	rc := http.NewResponseController(r.Response().Writer)
	// Writers that cannot (a test recorder) have no deadline to move.
	_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.ReadTimeout + 2*transfer + a.cfg.WriteTimeout))
}
