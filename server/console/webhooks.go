package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/tetherhq/tether/server/record"
)

// The webhooks of an environment, with their latest deliveries: made,
// tested, switched on and off, and deleted.

type webhookRow struct {
	record.Webhook
	Deliveries []record.Delivery
}

type webhooksData struct {
	Webhooks []webhookRow
	Secret   string
	Form     struct{ Name, URL, Kinds string }
}

var webhooks = formPage{render: showWebhooks, actions: map[string]action{"create": createWebhook, "test": testWebhook,
	"enable": switchWebhook, "disable": switchWebhook, "delete": deleteWebhook}}

func showWebhooks(v *visit, status int, secret string) {
	v.Title, v.Live = "Webhooks of "+v.Env, true
	var hooks []record.Webhook
	if !v.get(v.envPath()+"/webhooks", &hooks) {
		return
	}
	d := webhooksData{Secret: secret}
	for _, h := range hooks {
		row := webhookRow{Webhook: h}
		if !v.get(fmt.Sprintf("%s/webhooks/%d/deliveries?limit=5", v.envPath(), h.ID), &row.Deliveries) {
			return
		}
		d.Webhooks = append(d.Webhooks, row)
	}
	if secret == "" {
		d.Form.Name, d.Form.URL, d.Form.Kinds = v.form("name"), v.form("url"), v.form("kinds")
	}
	v.render("webhooks", status, d)
}

func createWebhook(v *visit) (change, error) {
	u := v.field("url")
	body := record.WebhookRequest{Name: v.field("name"), URL: &u}
	if k := strings.Fields(strings.ReplaceAll(v.form("kinds"), ",", " ")); len(k) > 0 {
		body.Kinds = &k
	}
	var made record.Webhook
	err := v.call(http.MethodPost, v.envPath()+"/webhooks", body, &made)
	return change{Flash: "webhook created: copy its secret now, it is not shown again", Secret: made.Secret}, err
}

// webhookPath is the API's path of the webhook the form names.
func webhookPath(v *visit) string {
	return v.envPath() + "/webhooks/" + url.PathEscape(v.form("id"))
}

func testWebhook(v *visit) (change, error) {
	return change{Flash: "test delivery queued: it shows below once tried", To: v.envPath() + "/webhooks"},
		v.call(http.MethodPost, webhookPath(v)+"/test", nil, nil)
}

// switchWebhook enables or disables a webhook, as the form's action says.
func switchWebhook(v *visit) (change, error) {
	on := v.form("action") == "enable"
	return change{Flash: "webhook " + v.form("action") + "d", To: v.envPath() + "/webhooks"},
		v.call(http.MethodPatch, webhookPath(v), record.WebhookRequest{Enabled: &on}, nil)
}

func deleteWebhook(v *visit) (change, error) {
	return change{Flash: "webhook deleted", To: v.envPath() + "/webhooks"}, v.call(http.MethodDelete, webhookPath(v), nil, nil)
}
