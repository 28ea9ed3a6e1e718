package secret

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tetherhq/tether/model"
)

const marker = "PLANTED-7f3a9c-secret"

func newSealer(t *testing.T) *Sealer {
	t.Helper()
	k, err := GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSealer(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fileWith(content string) model.Resource {
	id := model.ID{Type: "file", Agent: "web-1", Key: "path", Value: "/etc/app.conf"}
	return model.Resource{ID: id, Attributes: model.Attributes{"path": "/etc/app.conf", "content": content, "mode": "0600"}, Sensitive: []string{"content"}}
}

func hash(t *testing.T, r *model.Resource) model.Hash {
	t.Helper()
	h, err := r.Hash()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func encode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSealedRoundTrip: a value sealed at rest, then to an agent, opens
// with that agent's key to the clear value; nothing on the way holds it
// in clear; the hash is the same at rest and on the way to any agent.
func TestSealedRoundTrip(t *testing.T) {
	s := newSealer(t)
	res := fileWith(marker)
	orig := res.Attributes
	if err := s.SealAtRest(&res); err != nil {
		t.Fatal(err)
	}
	if _, ok := orig["content"]; !ok {
		t.Fatal("SealAtRest changed the attribute map it was given in place")
	}
	if _, ok := res.Attributes["content"]; ok || res.Sealed["content"].To != model.SealedToServer {
		t.Fatalf("sealed at rest: %+v", res)
	}
	if err := res.Validate(); err != nil {
		t.Fatalf("a sealed resource is valid: %v", err)
	}
	if err := model.CheckKind(&res); err != nil {
		t.Fatalf("a sealed resource passes its kind's check: %v", err)
	}
	atRest := hash(t, &res)
	if bytes.Contains(encode(t, res), []byte(marker)) {
		t.Fatal("the value at rest is in clear")
	}

	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sent, err := s.ForAgent(res, key.PublicKey().Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(encode(t, sent), []byte(marker)) {
		t.Fatal("the value sent is in clear")
	}
	if h := hash(t, &sent); h != atRest {
		t.Fatalf("hash sealed to the agent %s, at rest %s: want the same", h, atRest)
	}
	if res.Sealed["content"].To != model.SealedToServer {
		t.Fatal("ForAgent changed the resource it was given")
	}
	opened, err := Open(key, &sent)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := opened.Attributes.String("content"); got != marker || len(opened.Sealed) != 0 {
		t.Fatalf("opened: content %q, sealed %v; want the clear value back", got, opened.Sealed)
	}
	if err := model.CheckKind(&opened); err != nil {
		t.Fatalf("opened: %v", err)
	}
	if len(sent.Sealed) != 1 || len(sent.Attributes) != 2 {
		t.Fatal("Open changed the resource it was given")
	}
}

// TestDigestSemantics: an unchanged secret keeps its resource hash (and
// its stored bytes: no new body, no redeploy), a changed one changes it,
// and the digest differs by resource and by server key.
func TestDigestSemantics(t *testing.T) {
	s := newSealer(t)
	seal := func(s *Sealer, r model.Resource) model.Resource {
		if err := s.SealAtRest(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, again, changed := seal(s, fileWith("one")), seal(s, fileWith("one")), seal(s, fileWith("two"))
	if hash(t, &a) != hash(t, &again) || !bytes.Equal(a.Sealed["content"].Box, again.Sealed["content"].Box) {
		t.Fatal("an unchanged secret sealed again changes its hash or its stored bytes")
	}
	if hash(t, &a) == hash(t, &changed) {
		t.Fatal("a changed secret keeps the hash: it would not be deployed")
	}
	other := fileWith("one")
	other.ID.Value, other.Attributes["path"] = "/etc/other.conf", "/etc/other.conf"
	if other = seal(s, other); other.Sealed["content"].Digest == a.Sealed["content"].Digest {
		t.Fatal("equal values of two resources have one digest: a reader learns they are equal")
	}
	if b := seal(newSealer(t), fileWith("one")); b.Sealed["content"].Digest == a.Sealed["content"].Digest {
		t.Fatal("the digest does not depend on the server's key: a guess could be checked against it")
	}
	clear := fileWith("one")
	if hash(t, &clear) == hash(t, &a) {
		t.Fatal("the sealed hash is the hash over the clear value")
	}
}

// TestOpenRefuses: another agent's key, a box moved to another resource or
// under another digest, a damaged box, a value sealed under another server
// key: each is refused.
func TestOpenRefuses(t *testing.T) {
	s := newSealer(t)
	res := fileWith(marker)
	if err := s.SealAtRest(&res); err != nil {
		t.Fatal(err)
	}
	mine, _ := GenerateKey()
	theirs, _ := GenerateKey()
	sent, err := s.ForAgent(res, mine.PublicKey().Bytes())
	if err != nil {
		t.Fatal(err)
	}
	moved := fileWith("x")
	moved.ID.Value, moved.Attributes["path"] = "/etc/other.conf", "/etc/other.conf"
	if err := s.SealAtRest(&moved); err != nil {
		t.Fatal(err)
	}
	moved, _ = s.ForAgent(moved, mine.PublicKey().Bytes())
	movedBox := moved
	movedBox.Sealed = map[string]model.Sealed{"content": sent.Sealed["content"]}
	redigested := sent
	v := sent.Sealed["content"]
	v.Digest = moved.Sealed["content"].Digest
	redigested.Sealed = map[string]model.Sealed{"content": v}
	damaged := sent
	d := sent.Sealed["content"]
	d.Box = bytes.Clone(d.Box)
	d.Box[len(d.Box)-1] ^= 1
	damaged.Sealed = map[string]model.Sealed{"content": d}
	for name, tc := range map[string]struct {
		mk func() error
	}{
		"another agent's key":              {mk: func() error { _, err := Open(theirs, &sent); return err }},
		"moved to another resource":        {mk: func() error { _, err := Open(mine, &movedBox); return err }},
		"under another digest":             {mk: func() error { _, err := Open(mine, &redigested); return err }},
		"damaged":                          {mk: func() error { _, err := Open(mine, &damaged); return err }},
		"no key":                           {mk: func() error { _, err := Open(nil, &sent); return err }},
		"sealed at rest, not to the agent": {mk: func() error { _, err := Open(mine, &res); return err }},
		"another server key":               {mk: func() error { _, err := newSealer(t).ForAgent(res, mine.PublicKey().Bytes()); return err }},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.mk()
			if !errors.Is(err, ErrOpen) {
				t.Fatalf("got %v, want an error wrapping ErrOpen", err)
			}
			if strings.Contains(err.Error(), marker) {
				t.Fatalf("the error shows the value: %v", err)
			}
		})
	}
	if _, err := s.ForAgent(res, nil); !errors.Is(err, ErrNoKey) {
		t.Fatalf("sealing to an agent without a key: got %v, want ErrNoKey", err)
	}
	if _, err := s.ForAgent(fileWith(marker), mine.PublicKey().Bytes()); err == nil {
		t.Fatal("a resource with a sensitive value in clear was sealed for sending: want it refused")
	}
}

// TestNumbersAndMaps: values of every attribute type come back as JSON
// decodes them.
func TestNumbersAndMaps(t *testing.T) {
	s := newSealer(t)
	key, _ := GenerateKey()
	id := model.ID{Type: "vendor:thing", Agent: "a", Key: "name", Value: "x"}
	for _, v := range []any{"s", true, json.Number("42"), []any{"a", "b"}, map[string]any{"k": "v"}} {
		r := model.Resource{ID: id, Attributes: model.Attributes{"name": "x", "v": v}, Sensitive: []string{"v"}}
		if err := s.SealAtRest(&r); err != nil {
			t.Fatal(err)
		}
		sent, err := s.ForAgent(r, key.PublicKey().Bytes())
		if err != nil {
			t.Fatal(err)
		}
		opened, err := Open(key, &sent)
		if err != nil {
			t.Fatal(err)
		}
		if !model.Equal(opened.Attributes["v"], v) {
			t.Errorf("got %#v back, want %#v", opened.Attributes["v"], v)
		}
	}
}
