package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tetherhq/tether/server/api"
	"github.com/tetherhq/tether/server/record"
)

// TestConsoleMachines drives the console's machines pages in a real
// headless chromium against a real server, PostgreSQL and RabbitMQ: an
// operator provisions a host whose platform is served by an agent the
// server never heard from; the room fails the host at once, and the
// machines page another user has open shows it failed, with the reason,
// without a reload. It saves screenshots of the machines pages.
func TestConsoleMachines(t *testing.T) {
	chromium(t)
	c := newCluster(t)
	browser := newBrowser(t, "http://"+c.listen)
	const adaPW, ottoPW = "correct horse ada", "correct horse otto"
	for _, u := range []api.UserRequest{{Name: "ada", Password: adaPW, Role: record.RoleAdmin}, {Name: "otto", Password: ottoPW, Role: record.RoleOperator}} {
		b, _ := json.Marshal(u)
		req, _ := http.NewRequest("POST", "http://"+c.listen+"/api/v1/users", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+c.admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create user %s: %d", u.Name, resp.StatusCode)
		}
	}
	c.cli("platform", "add", "lab", "--driver", "libvirt", "--agent", "ghost", "--set", "memory_mib=512")
	c.cli("distribution", "add", "tiny", "--kind", "netboot", "--kernel", "/srv/tiny/vmlinuz", "--initrd", "/srv/tiny/initrd.img",
		"--cmdline", "console=ttyS0 tether.name={{.Host}} tether.token={{.Token}}")
	c.cli("host", "add", "vm1", "--platform", "lab", "--distribution", "tiny")
	c.cli("host", "add", "vm2", "--platform", "lab", "--distribution", "tiny")

	// Ada watches the machines page.
	watch := browser("ada")
	watch.login("", "ada", adaPW)
	watch.open("/envs/prod/hosts")
	watch.waitText("Machines of prod")
	watch.do("wait for the live stream", watch.poll(`document.body.getAttribute("data-live") === "open"`))
	watch.do("wait for vm1 defined", watch.poll(`document.querySelector('tr[data-host="vm1"]').dataset.state === "defined"`))
	watch.shot("machines")
	watch.eval(`window.notReloaded = "yes"`)

	// Otto provisions vm1 from his own machines page: the room cannot
	// reach the platform's agent, fails the host and says why.
	op := browser("otto")
	op.login("", "otto", ottoPW)
	op.open("/envs/prod/hosts")
	op.waitText("vm1")
	op.click(`button[aria-label="Provision vm1"]`)
	op.waitText("which the server has never heard from")
	op.shot("machines-refused")

	// Ada's page shows vm1 failed, with the reason, without a reload.
	watch.do("wait for vm1 failed on the open page", watch.poll(`document.querySelector('tr[data-host="vm1"]').dataset.state === "failed"`))
	if got := watch.eval(`String(window.notReloaded)`); got != "yes" {
		t.Fatalf("the page was reloaded to show vm1 failed (marker %q)", got)
	}
	row := watch.eval(`document.querySelector('tr[data-host="vm1"]').innerText`)
	for _, want := range []string{"failed", "platform lab is served by agent ghost, which the server has never heard from", "Provision", "Destroy…"} {
		if !strings.Contains(row, want) {
			t.Fatalf("vm1's row on the open page does not say %q:\n%s", want, row)
		}
	}
	if got := watch.eval(`getComputedStyle(document.querySelector('tr[data-host="vm1"] .state')).color`); got != "rgb(179, 38, 30)" {
		t.Fatalf("vm1's failed state is coloured %s, want the console's red rgb(179, 38, 30)", got)
	}
	if row := watch.eval(`document.querySelector('tr[data-host="vm2"]').innerText`); !strings.Contains(row, "defined") {
		t.Fatalf("vm2 was disturbed:\n%s", row)
	}
	watch.shot("machines-failed")
	h, err := c.store.GetHost(context.Background(), env, "vm1")
	if err != nil || h.State != record.HostFailed || !strings.Contains(h.Reason, "never heard from") {
		t.Fatalf("vm1 in the store: %+v %v, want failed saying why", h, err)
	}

	// The host's page: its context and history; the platforms page.
	watch.open("/envs/prod/hosts/vm1")
	watch.waitText("memory_mib")
	watch.waitText("host.provision")
	watch.shot("machine-host")
	watch.open("/envs/prod/platforms")
	watch.waitText("ghost")
	watch.shot("machine-platforms")
}
