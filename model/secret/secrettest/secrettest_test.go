package secrettest

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

func TestCount(t *testing.T) {
	const m = "PLANTED-a1b2c3d4e5f6"
	for name, data := range map[string]string{
		"clear":     "x" + m + "y",
		"hex":       `\x` + hex.EncodeToString([]byte("{\"content\":\""+m+"\"}")),
		"HEX":       "0X" + strings.ToUpper(hex.EncodeToString([]byte(m))),
		"base64 +0": base64.StdEncoding.EncodeToString([]byte(m)),
		"base64 +1": base64.StdEncoding.EncodeToString([]byte("a" + m)),
		"base64 +2": base64.StdEncoding.EncodeToString([]byte("ab" + m + "cd")),
		"json bytes": func() string {
			b, _ := json.Marshal(struct{ Data []byte }{[]byte(`{"m":"` + m + `"}`)})
			return string(b)
		}(),
	} {
		if Count([]byte(data), m) == 0 {
			t.Errorf("%s: %q: marker not found", name, data)
		}
	}
	if n := Count([]byte("PLANTED-a1b2c3d4e5f7 nothing"), m); n != 0 {
		t.Errorf("found %d in data without the marker", n)
	}
}
