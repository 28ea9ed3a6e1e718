package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// apiError is the API's answer to a request it refused.
type apiError struct {
	Status     int
	Code       string `json:"code"`
	Message    string `json:"message"`
	Hint       string `json:"hint"`
	RetryAfter string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// call makes one API request for the browser's request r: its session
// cookie and client address go along (so that login throttling and rate
// limits count the browser, as the API would for a direct call), and for
// a change the CSRF token the page's form carries. The JSON answer is
// decoded into out (when not nil). Its headers are returned.
func (c *Console) call(r *http.Request, method, path string, body, out any) (http.Header, error) {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, "/api/v1"+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.RemoteAddr, req.TLS, req.Host = r.RemoteAddr, r.TLS, r.Host
	for _, k := range []string{"X-Forwarded-For", "User-Agent"} {
		if v := r.Header.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	if ck, err := r.Cookie(sessionCookie); err == nil {
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: ck.Value})
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if method != http.MethodGet {
		req.Header.Set("X-CSRF-Token", r.PostFormValue("csrf"))
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	c.api.ServeHTTP(rec, req)
	if rec.status >= 400 {
		var b struct {
			Error *apiError `json:"error"`
		}
		if json.Unmarshal(rec.body.Bytes(), &b) != nil || b.Error == nil {
			b.Error = &apiError{Code: "internal", Message: http.StatusText(rec.status)}
		}
		b.Error.Status, b.Error.RetryAfter = rec.status, rec.header.Get("Retry-After")
		return rec.header, b.Error
	}
	if out != nil && rec.body.Len() > 0 {
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			return rec.header, fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return rec.header, nil
}

// recorder keeps an in-process API answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (w *recorder) Header() http.Header { return w.header }
func (w *recorder) Write(b []byte) (int, error) {
	w.wrote = true
	return w.body.Write(b)
}
func (w *recorder) WriteHeader(s int) {
	if !w.wrote {
		w.status, w.wrote = s, true
	}
}
