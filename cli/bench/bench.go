// Package bench holds the benchmark scenarios of `tether bench`: each
// builds what it measures (a generated model run by this tether binary, a
// server on a PostgreSQL schema and a RabbitMQ namespace of its own, a fleet
// of in-process agents), times it, and returns figures for the command to
// print. The scenarios clean up what they created, even when they fail.
//
// The figures and the commands that reproduce them are recorded in
// docs/performance.md.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tetherhq/tether/server/api"
)

// showProgress redraws the progress line on w (a terminal), unless w is
// nil; an empty format clears it.
func showProgress(w io.Writer, format string, args ...any) {
	if w == nil {
		return
	}
	fmt.Fprintf(w, "\r\033[K"+format, args...)
}

// apiClient calls a server's REST API, as a script would.
type apiClient struct {
	base, token string
	http        *http.Client
}

// call sends a request to /api/v1/path and decodes the answer into out.
func (cl *apiClient) call(ctx context.Context, method, path string, body, out any) error {
	if body == nil {
		return cl.send(ctx, method, path, "", nil, out)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return cl.send(ctx, method, path, "application/json", b, out)
}

// send sends body (of contentType; nil: none) to /api/v1/path and decodes
// the answer into out.
func (cl *apiClient) send(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, cl.base+"/api/v1"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+cl.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cannot reach the server at %s: %v", cl.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		var eb api.Body
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(data, &eb) != nil || eb.Error == nil {
			return fmt.Errorf("server at %s answered %s: %s", cl.base, resp.Status, strings.TrimSpace(string(data)))
		}
		msg := eb.Error.Message
		if eb.Error.Hint != "" {
			msg += " (" + eb.Error.Hint + ")"
		}
		return errors.New(msg)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode the server's answer: %w", err)
	}
	return nil
}
