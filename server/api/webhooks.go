package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/tetherhq/tether/server/record"
)

// Webhooks keeps the environments' webhooks: where their events are
// posted, signed, from a durable outbox.
type Webhooks interface {
	CreateWebhook(ctx context.Context, env string, req record.WebhookRequest, by string) (record.Webhook, error)
	UpdateWebhook(ctx context.Context, env string, id int64, req record.WebhookRequest) (record.Webhook, error)
	GetWebhook(ctx context.Context, env string, id int64) (record.Webhook, error)
	ListWebhooks(ctx context.Context, env string) ([]record.Webhook, error)
	DeleteWebhook(ctx context.Context, env string, id int64) error
	WebhookDeliveries(ctx context.Context, env string, id int64, limit int) ([]record.Delivery, error)
	TestWebhook(ctx context.Context, env string, id int64) (record.Delivery, error)
}

// webhookRoutes are the routes of webhooks: reads and tests for
// operators, changes (which say where events go) for admins.
func (a *API) webhookRoutes() []route {
	id := []param{pHook}
	return []route{
		{method: "GET", path: "/envs/:env/webhooks", role: record.RoleOperator, summary: "List the environment's webhooks (never their secrets)", out: of[[]record.Webhook](), serve: a.listWebhooks},
		{method: "POST", path: "/envs/:env/webhooks", role: record.RoleAdmin, action: "webhook.create", summary: "Create a webhook: the environment's events of the kinds named (default: the alerts) are posted to its URL, signed with its secret (made by the server unless given; shown once)", in: of[record.WebhookRequest](), out: of[record.Webhook](), ok: []int{http.StatusCreated}, serve: a.createWebhook},
		{method: "GET", path: "/envs/:env/webhooks/:id", role: record.RoleOperator, summary: "Show a webhook (never its secret)", pathParams: id, out: of[record.Webhook](), serve: a.getWebhook},
		{method: "PATCH", path: "/envs/:env/webhooks/:id", role: record.RoleAdmin, action: "webhook.update", summary: "Change a webhook: the fields given (rotate_secret: true makes a new secret, shown once)", pathParams: id, in: of[record.WebhookRequest](), out: of[record.Webhook](), serve: a.updateWebhook},
		{method: "DELETE", path: "/envs/:env/webhooks/:id", role: record.RoleAdmin, action: "webhook.delete", summary: "Delete a webhook and its deliveries (those not sent yet are not sent)", pathParams: id, serve: a.deleteWebhook},
		{method: "GET", path: "/envs/:env/webhooks/:id/deliveries", role: record.RoleOperator, summary: "A webhook's deliveries, newest first: state (pending, delivered, failed), attempts, the receiver's status code, error and latency", pathParams: id, query: []param{pLimit}, out: of[[]record.Delivery](), serve: a.webhookDeliveries},
		{method: "POST", path: "/envs/:env/webhooks/:id/test", role: record.RoleOperator, action: "webhook.test", summary: "Queue a test delivery (kind webhook.test) to a webhook; follow it in its deliveries", pathParams: id, out: of[record.Delivery](), ok: []int{http.StatusAccepted}, serve: a.testWebhook},
	}
}

// webhook is the :id parameter of a webhook's route.
func (in *input) webhook() int64 { return take(in, in.r.webhookID) }

// webhookID parses the :id parameter.
func (r *request) webhookID() (int64, error) {
	id, err := strconv.ParseInt(r.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, newError("bad_request", "tether webhook list shows the IDs", "webhook %q: want its ID, a positive number", clip(r.Param("id")))
	}
	return id, nil
}

// webhookOf reads the :env and :id parameters of a webhook's route, and
// the server's webhooks.
func (in *input) webhookOf() (env string, id int64, wh Webhooks) {
	return in.env(), in.webhook(), take(in, in.r.api.webhooks)
}

func (a *API) webhooks() (Webhooks, error) {
	return present(a.svc.Webhooks, newError("conflict", "", "this server has no webhooks"))
}

func (a *API) listWebhooks(r *request) (int, any, error) {
	in := r.input()
	env, wh := in.env(), take(in, a.webhooks)
	return listing(in, func() ([]record.Webhook, error) { return wh.ListWebhooks(r.ctx(), env) })
}

func (a *API) createWebhook(r *request) (int, any, error) {
	in := r.input()
	env, wh := in.env(), take(in, a.webhooks)
	var req record.WebhookRequest
	in.body(&req)
	if in.err != nil {
		return 0, nil, in.err
	}
	if req.Name == "" || req.URL == nil {
		return 0, nil, newError("invalid", "", "name and url are required: a webhook posts to url, and name tells it from the others")
	}
	if req.RotateSecret {
		return 0, nil, newError("invalid", "", "rotate_secret: a new webhook gets a new secret anyway")
	}
	w, err := wh.CreateWebhook(r.ctx(), env, req, r.who.Name)
	if err != nil {
		return 0, nil, err
	}
	r.naming("env", env, "id", strconv.FormatInt(w.ID, 10))
	r.detail = fmt.Sprintf("%s → %s", w.Name, w.URL)
	return http.StatusCreated, w, nil
}

func (a *API) getWebhook(r *request) (int, any, error) {
	in := r.input()
	env, id, wh := in.webhookOf()
	return answer(in, func() (record.Webhook, error) { return wh.GetWebhook(r.ctx(), env, id) })
}

func (a *API) updateWebhook(r *request) (int, any, error) {
	in := r.input()
	env, id, wh := in.webhookOf()
	var req record.WebhookRequest
	in.body(&req)
	if in.err != nil {
		return 0, nil, in.err
	}
	w, err := wh.UpdateWebhook(r.ctx(), env, id, req)
	if err != nil {
		return 0, nil, err
	}
	r.detail = fmt.Sprintf("%s → %s, enabled %v", w.Name, w.URL, w.Enabled)
	return http.StatusOK, w, nil
}

func (a *API) deleteWebhook(r *request) (int, any, error) {
	in := r.input()
	env, id, wh := in.webhookOf()
	return removed(in, func() error { return wh.DeleteWebhook(r.ctx(), env, id) })
}

func (a *API) webhookDeliveries(r *request) (int, any, error) {
	in := r.input()
	env, id, wh := in.webhookOf()
	limit := in.limit()
	return listing(in, func() ([]record.Delivery, error) {
		// A webhook of another environment is not found, rather than
		// listed as having no deliveries.
		if _, err := wh.GetWebhook(r.ctx(), env, id); err != nil {
			return nil, err
		}
		return wh.WebhookDeliveries(r.ctx(), env, id, limit)
	})
}

func (a *API) testWebhook(r *request) (int, any, error) {
	in := r.input()
	env, id, wh := in.webhookOf()
	if in.err != nil {
		return 0, nil, in.err
	}
	d, err := wh.TestWebhook(r.ctx(), env, id)
	return http.StatusAccepted, d, err
}
