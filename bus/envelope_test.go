package bus

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
)

func sealed(t *testing.T) (*Envelope, *Signer) {
	t.Helper()
	_, key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s := NewSigner(key, 41)
	e, err := s.Seal(KindDesiredFull, "prod", "web-1", DesiredFull{
		Generation: 3,
		Resources: []model.Resource{{
			ID:         model.MustParseID("file[web-1,path=/etc/motd]"),
			Attributes: model.Attributes{"path": "/etc/motd", "content": "hi", "size": 12345678901234567},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, s
}

func TestSealEncodeDecodeVerify(t *testing.T) {
	e, s := sealed(t)
	if e.Seq != 42 || e.V != ProtocolVersion || e.TS.IsZero() {
		t.Fatalf("sealed envelope %+v", e)
	}
	b, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(got, s.PublicKey()); err != nil {
		t.Fatalf("decoded envelope does not verify: %v", err)
	}
	var body DesiredFull
	if err := got.DecodeBody(&body); err != nil {
		t.Fatal(err)
	}
	if n := body.Resources[0].Attributes["size"]; n != json.Number("12345678901234567") {
		t.Fatalf("large number came back as %#v", n)
	}
	e2, _ := s.Seal(KindHeartbeat, "prod", "web-1", Empty{})
	if e2.Seq != 43 || e2.ID == e.ID {
		t.Fatalf("second seal: seq %d id %s", e2.Seq, e2.ID)
	}
}

func TestVerifyRejectsTampering(t *testing.T) {
	_, other, _ := GenerateKey()
	tests := map[string]func(e *Envelope){
		"body":   func(e *Envelope) { e.Body = json.RawMessage(`{"generation":4}`) },
		"agent":  func(e *Envelope) { e.Agent = "web-2" },
		"env":    func(e *Envelope) { e.Env = "dev" },
		"kind":   func(e *Envelope) { e.Kind = KindDesiredDiff },
		"seq":    func(e *Envelope) { e.Seq++ },
		"ts":     func(e *Envelope) { e.TS = e.TS.Add(time.Nanosecond) },
		"id":     func(e *Envelope) { e.ID = "00000000-0000-4000-8000-000000000000" },
		"no sig": func(e *Envelope) { e.Sig = nil },
		"other key": func(e *Envelope) {
			Sign(e, other)
		},
	}
	for name, tamper := range tests {
		t.Run(name, func(t *testing.T) {
			e, s := sealed(t)
			tamper(e)
			if err := Verify(e, s.PublicKey()); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("got %v, want ErrBadSignature", err)
			}
		})
	}
	e, _ := sealed(t)
	if err := Verify(e, nil); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("verify without a key: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	e, _ := sealed(t)
	good, _ := Encode(e)
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		_ = json.Unmarshal(good, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	tests := map[string][]byte{
		"not json":     []byte("{"),
		"empty":        nil,
		"array":        []byte("[]"),
		"version":      mutate(func(m map[string]any) { m["v"] = 2 }),
		"unknown kind": mutate(func(m map[string]any) { m["kind"] = "launch.missiles" }),
		"bad id":       mutate(func(m map[string]any) { m["id"] = "1234" }),
		"bad env":      mutate(func(m map[string]any) { m["env"] = "Prod.X" }),
		"bad agent":    mutate(func(m map[string]any) { m["agent"] = "" }),
		"body not obj": mutate(func(m map[string]any) { m["body"] = "x" }),
		"no timestamp": mutate(func(m map[string]any) { delete(m, "ts") }),
		"huge":         []byte(`{"pad":"` + strings.Repeat("x", MaxEnvelopeSize) + `"}`),
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	pub, _, _ := GenerateKey()
	fp := Fingerprint(pub)
	if !strings.HasPrefix(fp, "SHA256:") || len(fp) != 7+43 {
		t.Fatalf("fingerprint %q", fp)
	}
}

func TestDedup(t *testing.T) {
	d := NewDedup(2)
	if d.Has("a") {
		t.Fatal("an unrecorded id reported as seen")
	}
	d.Add("a")
	d.Add("b")
	d.Add("a") // no effect: already there
	if !d.Has("a") || !d.Has("b") {
		t.Fatal("recorded ids forgotten")
	}
	d.Add("c") // evicts the oldest entry
	if d.Has("a") || !d.Has("c") {
		t.Fatal("capacity not bounded: a still remembered after two newer ids")
	}
}

func TestKinds(t *testing.T) {
	if !KindDeploy.Command() || KindDeploy.Event() || !KindHello.Event() || Kind("x").Known() {
		t.Fatal("kind directions wrong")
	}
	if QueueFor(KindCompliance) != QueueCompliance || QueueFor(KindResourceStatus) != QueueEvents {
		t.Fatal("routing wrong")
	}
	if InboxName("prod", "web-1") != "tether.agent.prod.web-1" {
		t.Fatal("inbox name")
	}
}

func TestParseEventKey(t *testing.T) {
	for _, k := range EventKinds() {
		for _, agent := range []string{"web", "web.example.com", "a.key", "x.server"} {
			env, a, kind, ok := ParseEventKey(EventKey("prod", agent, k))
			if !ok || env != "prod" || a != agent || kind != k {
				t.Errorf("ParseEventKey(%q) = %q, %q, %q, %v; want prod, %s, %s", EventKey("prod", agent, k), env, a, kind, ok, agent, k)
			}
		}
	}
	for _, key := range []string{"", "prod", "prod.web", "prod.web.pause", "Prod.web.hello", "prod..hello", "prod.-web.hello"} {
		if env, a, k, ok := ParseEventKey(key); ok {
			t.Errorf("ParseEventKey(%q) = %q, %q, %q: want it refused", key, env, a, k)
		}
	}
}
