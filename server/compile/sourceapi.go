package compile

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/compile/source"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/webhook"
)

// The sources operators set through the API: a git repository or an
// uploaded archive per environment, kept in the store with their
// credentials (write-only: no answer and no log carries them).

// WebhookPath is where the push webhook of env is received.
func WebhookPath(env string) string { return "/api/v1/envs/" + env + "/compile/hook" }

// SetSource makes a git repository env's source (see
// record.SourceRequest), and asks for a compile of it on behalf of by.
// The answer shows the webhook secret when this call made it.
func (cc *Compiler) SetSource(ctx context.Context, env string, req record.SourceRequest, by string) (record.SourceView, error) {
	if _, err := cc.store.GetEnv(ctx, env); err != nil {
		return record.SourceView{}, err
	}
	poll, err := parsePoll(req.PollInterval)
	if err != nil {
		return record.SourceView{}, err
	}
	old, err := cc.store.GetSource(ctx, env, false)
	if err != nil && !errors.Is(err, model.ErrNotFound) {
		return record.SourceView{}, err
	}
	g := &source.GitSpec{URL: req.URL, Ref: req.Ref, Subdir: req.Subdir, Username: req.Username, Token: source.NewSecret(req.Token),
		SSHKey: source.NewSecret(req.SSHKey), KnownHosts: req.KnownHosts, CABundle: req.CABundle}
	if old.Kind == record.SourceGit && !req.NoCredentials {
		if prev, err := source.Decode(old.Kind, old.Spec, nil); err == nil && prev.Git.URL == g.URL {
			keepCredentials(g, prev.Git)
		}
	}
	if req.NoCredentials && (req.Token != "" || req.SSHKey != "") {
		return record.SourceView{}, fmt.Errorf("%w: no_credentials with a token or an SSH key: drop the one or the other", record.ErrInvalidSource)
	}
	spec := source.Spec{Git: g}
	kind, desc, _, err := spec.Encode()
	if err != nil {
		return record.SourceView{}, sourceError(err)
	}
	if c, ok := cc.cfg.Sources.(checker); ok {
		if err := c.check(spec); err != nil {
			return record.SourceView{}, err
		}
	}
	secret, shown := old.WebhookSecret, ""
	switch {
	case req.WebhookSecret != "":
		if len(req.WebhookSecret) < 16 || len(req.WebhookSecret) > 256 {
			return record.SourceView{}, fmt.Errorf("%w: a webhook secret has 16 to 256 characters; leave it out and the server makes one", record.ErrInvalidSource)
		}
		secret = req.WebhookSecret
	case secret == "" || req.RotateWebhookSecret:
		if secret, err = webhook.NewSecret(); err != nil {
			return record.SourceView{}, err
		}
		shown = secret
	}
	rec, err := cc.store.PutSource(ctx, record.Source{Env: env, Kind: kind, Spec: desc, WebhookSecret: secret, PollInterval: poll, UpdatedBy: by})
	if err != nil {
		return record.SourceView{}, err
	}
	cc.log.Info().Str("env", env).Str("by", by).Str("url", g.URL).Str("ref", g.Ref).Msg("source set")
	cc.Trigger(ctx, env, record.Trigger{Kind: record.TriggerOperator, By: by})
	v := sourceView(rec)
	v.WebhookSecret = shown
	return v, nil
}

// keepCredentials fills what g leaves empty from prev, the same URL's
// source before.
func keepCredentials(g, prev *source.GitSpec) {
	if !g.Token.IsSet() && !g.SSHKey.IsSet() {
		g.Token, g.SSHKey = prev.Token, prev.SSHKey
		if g.Username == "" {
			g.Username = prev.Username
		}
	}
	if g.KnownHosts == "" {
		g.KnownHosts = prev.KnownHosts
	}
	if g.CABundle == "" {
		g.CABundle = prev.CABundle
	}
}

// UploadSource makes an uploaded archive (tar, or tar.gz) env's source,
// its model in subdir, and asks for a compile of it on behalf of by. The
// archive is unpacked once on the way in: one that holds what the server
// would refuse to write (links out, devices, names leading out, more than
// the limits) is refused now, not at the next compile.
func (cc *Compiler) UploadSource(ctx context.Context, env string, archive []byte, subdir, by string) (record.SourceView, error) {
	if _, err := cc.store.GetEnv(ctx, env); err != nil {
		return record.SourceView{}, err
	}
	spec := source.Spec{Archive: &source.ArchiveSpec{Data: archive, Subdir: subdir}}
	kind, desc, data, err := spec.Encode()
	if err != nil {
		return record.SourceView{}, sourceError(err)
	}
	tmp, err := os.MkdirTemp("", "tether-upload-*")
	if err != nil {
		return record.SourceView{}, err
	}
	defer os.RemoveAll(tmp)
	rev, err := source.Fetch(ctx, spec, tmp, source.DefaultLimits())
	if err != nil {
		return record.SourceView{}, sourceError(err)
	}
	rec, err := cc.store.PutSource(ctx, record.Source{Env: env, Kind: kind, Spec: desc, Archive: data, ArchiveSHA256: string(rev), UpdatedBy: by})
	if err != nil {
		return record.SourceView{}, err
	}
	cc.log.Info().Str("env", env).Str("by", by).Int("bytes", len(archive)).Str("sha256", string(rev)).Msg("source archive uploaded")
	cc.Trigger(ctx, env, record.Trigger{Kind: record.TriggerOperator, By: by})
	return sourceView(rec), nil
}

// GetSource shows env's source; ErrNotFound when it has none.
func (cc *Compiler) GetSource(ctx context.Context, env string) (record.SourceView, error) {
	if _, err := cc.store.GetEnv(ctx, env); err != nil {
		return record.SourceView{}, err
	}
	rec, err := cc.store.GetSource(ctx, env, false)
	if err != nil {
		return record.SourceView{}, err
	}
	return sourceView(rec), nil
}

// DeleteSource removes env's source: the server compiles it no more, and
// what it released stays released.
func (cc *Compiler) DeleteSource(ctx context.Context, env string) error {
	if _, err := cc.store.GetEnv(ctx, env); err != nil {
		return err
	}
	if err := cc.store.DeleteSource(ctx, env); err != nil {
		return err
	}
	cc.ForgetSource(ctx, env)
	return nil
}

// ForgetSource drops what this server keeps of env's source on its disk
// (other replicas drop theirs when they next fetch another source for it).
func (cc *Compiler) ForgetSource(ctx context.Context, env string) {
	if f, ok := cc.cfg.Sources.(interface {
		forget(ctx context.Context, env string)
	}); ok {
		f.forget(ctx, env)
	}
}

// Webhook handles a push webhook for env: authenticated by the source's
// webhook secret, a push of the ref the source follows asks for a compile.
// What the push says is only a hint: the compile fetches the ref itself,
// so a replayed or reordered delivery compiles what the repository holds
// now. Every refusal to authenticate is the same ErrWebhookRefused,
// whether env, its source or its secret is missing or the signature is
// wrong.
func (cc *Compiler) Webhook(ctx context.Context, env string, h http.Header, body []byte) (record.WebhookResult, error) {
	rec, err := cc.store.GetSource(ctx, env, false)
	switch {
	case errors.Is(err, model.ErrNotFound):
		return record.WebhookResult{}, fmt.Errorf("%w: environment %s has no source with a webhook", record.ErrWebhookRefused, env)
	case err != nil:
		return record.WebhookResult{}, err
	case rec.WebhookSecret == "":
		return record.WebhookResult{}, fmt.Errorf("%w: the source of %s has no webhook secret", record.ErrWebhookRefused, env)
	}
	d, err := webhook.Verify(h, body, rec.WebhookSecret, time.Now())
	switch {
	case errors.Is(err, webhook.ErrUnauthenticated):
		return record.WebhookResult{}, fmt.Errorf("%w: %w", record.ErrWebhookRefused, err)
	case err != nil:
		return record.WebhookResult{}, refusedWebhook{err}
	}
	res := record.WebhookResult{Provider: string(d.Provider), Event: d.Event, Delivery: d.ID}
	spec, err := source.Decode(rec.Kind, rec.Spec, nil)
	if err != nil {
		return res, err
	}
	if spec.Git == nil {
		res.Why = "the source is an uploaded archive: upload a new one to change it"
		return res, nil
	}
	res.Compile, res.Why = d.Matches(spec.Git.Ref)
	log := cc.log.Info().Str("env", env).Str("provider", res.Provider).Str("event", res.Event).Str("delivery", res.Delivery).Str("auth", d.Auth)
	if !res.Compile {
		log.Str("why", res.Why).Msg("webhook: nothing to compile")
		return res, nil
	}
	by := d.Push.Repository
	if d.Push.After != "" {
		by = strings.TrimSpace(by + " " + shortCommit(d.Push.After))
	}
	log.Str("ref", d.Push.Ref).Str("after", d.Push.After).Msg("webhook: compile asked for")
	cc.Trigger(ctx, env, record.Trigger{Kind: record.TriggerWebhook, By: by})
	return res, nil
}

// refusedWebhook is a malformed webhook: record.ErrInvalidWebhook, with
// the webhook package's text alone.
type refusedWebhook struct{ err error }

func (r refusedWebhook) Error() string   { return r.err.Error() }
func (r refusedWebhook) Unwrap() []error { return []error{record.ErrInvalidWebhook, r.err} }

func shortCommit(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// sourceView is what may be shown of rec.
func sourceView(rec record.Source) record.SourceView {
	v := record.SourceView{Env: rec.Env, Kind: rec.Kind, HasWebhook: rec.WebhookSecret != "", UpdatedAt: rec.UpdatedAt, UpdatedBy: rec.UpdatedBy}
	if spec, err := source.Decode(rec.Kind, rec.Spec, nil); err == nil {
		r := spec.Redacted()
		v.URL, v.Ref, v.Subdir, v.Username = r.URL, r.Ref, r.Subdir, r.Username
		v.HasToken, v.HasSSHKey, v.HasKnownHosts, v.HasCABundle = r.HasToken, r.HasSSHKey, r.HasKnownHosts, r.HasCABundle
	}
	if rec.Kind == record.SourceArchive {
		v.ArchiveBytes, v.ArchiveSHA256 = rec.ArchiveSize, rec.ArchiveSHA256
	}
	if v.HasWebhook {
		v.WebhookPath = WebhookPath(rec.Env)
	}
	if rec.PollInterval > 0 {
		v.PollInterval = rec.PollInterval.String()
	}
	return v
}

// parsePoll reads a poll interval: "" and "0" are never.
func parsePoll(s string) (time.Duration, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < record.MinPollInterval || d > record.MaxPollInterval {
		return 0, fmt.Errorf("%w: poll interval %q: want a duration between %s and %s (e.g. 5m), or 0 for never",
			record.ErrInvalidSource, model.Clip(s, 32), record.MinPollInterval, record.MaxPollInterval)
	}
	return d, nil
}

// sourceError classes what the source package refuses as the caller's
// mistake, its text for the operator.
func sourceError(err error) error {
	for _, e := range []error{source.ErrInvalid, source.ErrUnsafe, source.ErrLimit, source.ErrRefNotFound} {
		if errors.Is(err, e) {
			return refusedSource{err}
		}
	}
	return err
}

// refusedSource is a source error that is record.ErrInvalidSource too,
// with the source package's text alone.
type refusedSource struct{ err error }

func (r refusedSource) Error() string   { return r.err.Error() }
func (r refusedSource) Unwrap() []error { return []error{record.ErrInvalidSource, r.err} }
