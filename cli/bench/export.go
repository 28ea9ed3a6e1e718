package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server"
	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// ExportOptions configure the export scenario: versions of Resources
// resources, the second with Change percent of them changed.
type ExportOptions struct {
	// Postgres is the database URL; the scenario works in a new schema,
	// dropped after.
	Postgres  string
	Resources int
	Change    float64   // percent
	Progress  io.Writer // if not nil, shows the step going (a terminal)
}

// ExportResult is what the export scenario measured.
type ExportResult struct {
	Resources    int     `json:"resources"`
	Changed      int     `json:"changed"`
	DiffChanged  int     `json:"diff_changed"`
	FirstUpload  float64 `json:"first_upload_seconds"`
	SecondUpload float64 `json:"second_upload_seconds"`
	Diff         float64 `json:"diff_seconds"`
	Command      string  `json:"command"`
}

// RunExport starts a server's REST API on PostgreSQL (in-process, on a
// loopback port), uploads a version of Resources file resources as `tether
// export` does, then a second one with Change percent of them changed, and
// asks the server for the diff between the two. Each step is timed from the
// client: JSON encoding, HTTP, validation, hashing and storing included.
func RunExport(ctx context.Context, o ExportOptions) (*ExportResult, error) {
	if o.Resources < 1 || o.Change < 0 || o.Change > 100 {
		return nil, errors.New("bench export: resources must be at least 1 and change between 0 and 100")
	}
	n, change := o.Resources, o.Change
	st, _, closeStore, err := newStore(ctx, o.Postgres)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	srv, err := server.New(server.Config{}, st, bus.NewLocal(zerolog.Nop()), zerolog.Nop())
	if err != nil {
		return nil, err
	}
	const env = "bench"
	if err := st.CreateEnv(ctx, record.Environment{Name: env, Settings: quietSettings(), CreatedAt: time.Now().UTC()}); err != nil {
		return nil, err
	}
	tok, secret, err := api.IssueToken("bench", record.RoleAdmin, "", "tether bench", time.Now())
	if err != nil {
		return nil, err
	}
	if err := st.CreateToken(ctx, tok); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: api.New(api.Config{}, server.APIServices(srv, nil), zerolog.Nop()).Handler()}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	cl := &apiClient{base: "http://" + ln.Addr().String(), token: secret, http: &http.Client{}}

	resources := func(changed int) []model.Resource {
		rs := make([]model.Resource, n)
		for i := range n {
			agent := fmt.Sprintf("host%04d", i/resourcesPerAgent)
			path := fmt.Sprintf("/etc/app/%03d.conf", i%resourcesPerAgent)
			content := "v1 " + path
			if i < changed {
				content = "v2 " + path
			}
			rs[i] = model.Resource{ID: model.ID{Type: "file", Agent: agent, Key: "path", Value: path},
				Attributes: model.Attributes{"path": path, "content": content, "mode": "0644", "owner": "root"}}
		}
		return rs
	}
	changed := int(float64(n) * change / 100)
	upload := func(rs []model.Resource) (float64, int64, error) {
		start := time.Now()
		var out api.ExportResponse
		err := cl.call(ctx, "POST", "/envs/"+env+"/versions", api.ExportRequest{Resources: rs, Meta: model.VersionMeta{Compiler: "tether bench"}}, &out)
		return time.Since(start).Seconds(), out.Version.Number, err
	}
	res := &ExportResult{Resources: n, Changed: changed,
		Command: fmt.Sprintf("tether bench export --resources %d --change %g", n, change)}
	showProgress(o.Progress, "uploading the first version")
	var first, second int64
	if res.FirstUpload, first, err = upload(resources(0)); err != nil {
		return nil, err
	}
	showProgress(o.Progress, "uploading the second version")
	if res.SecondUpload, second, err = upload(resources(changed)); err != nil {
		return nil, err
	}
	showProgress(o.Progress, "")
	start := time.Now()
	var d api.Diff
	if err := cl.call(ctx, "GET", fmt.Sprintf("/envs/%s/versions/%d/diff?from=%d", env, second, first), nil, &d); err != nil {
		return nil, err
	}
	res.Diff = time.Since(start).Seconds()
	res.DiffChanged = len(d.Changed)
	if len(d.Changed) != changed || len(d.Added)+len(d.Removed) != 0 {
		return nil, fmt.Errorf("the diff has %d changed, %d added, %d removed; want %d changed only", len(d.Changed), len(d.Added), len(d.Removed), changed)
	}
	return res, nil
}
