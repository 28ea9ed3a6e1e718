package cli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server/record"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

type syncBuffer = testenv.SyncBuffer

// TestServerAndOperatorCommands runs `tether server` on the real
// PostgreSQL and RabbitMQ, then drives it with the operator commands.
func TestServerAndOperatorCommands(t *testing.T) {
	pg := pgtest.Fresh(t)
	amqpURL := os.Getenv("TETHER_TEST_AMQP")
	if amqpURL == "" {
		amqpURL = "amqp://guest:guest@127.0.0.1:5672/"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	ns := "clitest" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	keyFile := newKeyFile(t)
	go func() {
		done <- run(ctx, []string{"tether", "server", "--listen", addr, "--postgres", pg, "--amqp", amqpURL, "--amqp-namespace", ns, "--queue-type", "classic", "--key-file", keyFile},
			strings.NewReader(""), &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("server exited %d: %s", code, errb.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("server did not stop within 30s of cancel")
		}
	})
	tokenRE := regexp.MustCompile(`tether_[A-Za-z0-9_-]{20,}`)
	var token string
	for deadline := time.Now().Add(30 * time.Second); token == ""; {
		token = tokenRE.FindString(out.String())
		select {
		case code := <-done:
			t.Fatalf("server exited %d before printing a token: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no bootstrap token within 30s; stdout %q stderr %q", out.String(), errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Setenv("TETHER_SERVER", "http://"+addr)
	t.Setenv("TETHER_TOKEN", token)
	t.Setenv("TETHER_ENV", "prod")
	for deadline := time.Now().Add(30 * time.Second); ; {
		if code, _, _ := invoke(t, "env", "list"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("API not answering within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	dir, _ := quickstart(t)
	steps := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"env", "create", "prod", "--set", "drift_policy=heal"}, 0, "heal"},
		{[]string{"env", "create", "prod"}, 1, "already exists"},
		{[]string{"export", "--release", dir}, 0, "new version 1"},
		{[]string{"export", dir}, 0, "unchanged; version 1"},
		{[]string{"version", "list"}, 0, "released"},
		// Releasing the released version changes nothing; a version
		// that does not exist is refused.
		{[]string{"version", "release", "1"}, 0, "version 1 is the released version already: nothing changed"},
		{[]string{"version", "release", "7"}, 1, "no version 7 in prod"},
		{[]string{"export", "--release", "--var", "site_title=Two", dir}, 0, "new version 2"},
		// A rollback to version 1 releases it again as version 3; with
		// no agent running, --wait times out naming the agents.
		{[]string{"version", "release", "1", "--wait", "--timeout", "2s"}, 1, "1 of 1 agents have not reported version 3 deployed: local (never seen)"},
		{[]string{"version", "releases"}, 0, "UP TO DATE"},
		{[]string{"version", "diff", "0", "1"}, 0, "added"},
		{[]string{"resource", "list", "--type", "file"}, 0, "available"},
		{[]string{"resource", "show", "not-an-id"}, 1, "invalid resource id"},
		{[]string{"env", "settings", "set", "deploy_interval", "5m"}, 0, "5m0s"},
		{[]string{"env", "settings", "set", "drift_policy", "ignore"}, 1, "drift_policy"},
		{[]string{"env", "deploy"}, 1, "no accepted agent"},
		{[]string{"env", "halt"}, 0, "halted=true"},
		{[]string{"env", "resume"}, 0, "halted=false"},
		{[]string{"agent", "accept", "ghost"}, 1, "not found"},
		{[]string{"token", "create", "ci", "--role", "viewer", "--for-env", "prod"}, 0, "shown once"},
		{[]string{"token", "list"}, 0, "bootstrap"},
		{[]string{"version"}, 0, "tether "},
	}
	for _, s := range steps {
		code, stdout, stderr := invoke(t, s.args...)
		if code != s.code || !strings.Contains(stdout+stderr, s.want) {
			t.Fatalf("tether %s: exit %d (want %d), output %q / %q, want it to contain %q", strings.Join(s.args, " "), code, s.code, stdout, stderr, s.want)
		}
	}
	code, stdout, _ := invoke(t, "version", "releases", "-o", "json")
	var rels []record.Release
	if code != 0 || json.Unmarshal([]byte(stdout), &rels) != nil || len(rels) != 3 {
		t.Fatalf("version releases -o json: exit %d, %q; want the three releases", code, stdout)
	}
	if code, stdout, _ = invoke(t, "version", "releases", rels[2].ID); code != 0 || !strings.Contains(stdout, "release "+rels[2].ID+" of version 1: done") {
		t.Fatalf("version releases ID: exit %d, %q; want the first release, done", code, stdout)
	}
	// A release prints its id, which -o json carries too.
	code, stdout, _ = invoke(t, "version", "release", "2")
	if m := regexp.MustCompile(`version 2 released again as version 4 \(rollback[^\n]*\nrelease ([0-9a-f-]{36}): sending`).FindStringSubmatch(stdout); code != 0 || m == nil {
		t.Fatalf("version release 2: exit %d, %q; want version 2 released again as 4, with its release id", code, stdout)
	} else if code, out, _ := invoke(t, "version", "releases", m[1]); code != 0 || !strings.Contains(out, "of version 4") {
		t.Fatalf("version releases %s: exit %d, %q; want the release of version 4", m[1], code, out)
	}
	code, stdout, _ = invoke(t, "export", "--release", "--var", "site_title=Three", dir, "-o", "json")
	var exp struct {
		Version   struct{ Number int64 }
		ReleaseID string `json:"release_id"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &exp) != nil || exp.Version.Number != 5 || exp.ReleaseID == "" {
		t.Fatalf("export --release -o json: exit %d, %q; want version 5 with its release id", code, stdout)
	}
	code, stdout, _ = invoke(t, "version", "release", "5", "-o", "json")
	var again record.Released
	if code != 0 || json.Unmarshal([]byte(stdout), &again) != nil || !again.AlreadyReleased || again.ReleaseID != "" {
		t.Fatalf("version release 5 (the released one) -o json: exit %d, %q; want already_released, no release", code, stdout)
	}
	code, stdout, _ = invoke(t, "resource", "list", "-o", "json")
	var sts []record.ResourceStatus
	if code != 0 || json.Unmarshal([]byte(stdout), &sts) != nil || len(sts) == 0 {
		t.Fatalf("resource list -o json: exit %d, %q", code, stdout)
	}
	// A viewer token cannot release.
	code, stdout, _ = invoke(t, "token", "create", "dash", "--role", "viewer", "-o", "json")
	var nt struct{ Secret string }
	if code != 0 || json.Unmarshal([]byte(stdout), &nt) != nil {
		t.Fatalf("token create -o json: %d %q", code, stdout)
	}
	t.Setenv("TETHER_TOKEN", nt.Secret)
	if code, _, stderr := invoke(t, "version", "release", "1"); code != 1 || !strings.Contains(stderr, "needs operator") {
		t.Fatalf("viewer release: exit %d, %q", code, stderr)
	}
}

// `tether server` reaches a TLS-only broker with --amqp-tls-ca; given a
// CA that did not sign the broker's certificate it says so, naming the
// flag, in its log and on /readyz.
func TestServerBrokerTLS(t *testing.T) {
	pg := pgtest.Fresh(t)
	n := amqptest.StartNode(t, amqptest.NodeOptions{TLS: true, NoPlain: true})
	keyFile := newKeyFile(t)
	for _, tc := range []struct {
		name, ca, want string
	}{
		{"wrong CA", n.OtherCAFile, "not signed by a CA we trust"},
		{"right CA", n.CAFile, `"broker":"ok"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := freeAddr(t)
			ctx, cancel := context.WithCancel(context.Background())
			var out, errb syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, []string{"tether", "server", "--listen", freeAddr(t), "--ops-listen", ops, "--postgres", pg,
					"--amqp", n.TLSURL, "--amqp-tls-ca", tc.ca, "--amqp-namespace", "clitest", "--queue-type", "classic", "--key-file", keyFile},
					strings.NewReader(""), &out, &errb)
			}()
			defer func() {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("server exited %d: %s", code, errb.String())
				}
			}()
			var body string
			for deadline := time.Now().Add(time.Minute); !strings.Contains(body, tc.want); {
				if time.Now().After(deadline) {
					t.Fatalf("/readyz: got %q, want it to say %q; stderr %s", body, tc.want, errb.String())
				}
				time.Sleep(100 * time.Millisecond)
				if resp, err := http.Get("http://" + ops + "/readyz"); err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					body = string(b)
				}
			}
			if tc.ca == n.OtherCAFile && !strings.Contains(errb.String(), "--amqp-tls-ca") {
				t.Errorf("the server's log does not name --amqp-tls-ca:\n%s", errb.String())
			}
		})
	}
}

// freeAddr is a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
