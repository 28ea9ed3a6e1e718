package model

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
)

// TestParseServerKey: the key in base64 and its fingerprint, as the server
// shows them and the agent logs the second, name the same key.
func TestParseServerKey(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	fp := Fingerprint(pub)
	tests := []struct {
		name, in string
		wantKey  bool
		wantErr  string
	}{
		{"base64 key", base64.StdEncoding.EncodeToString(pub), true, ""},
		{"fingerprint", fp, false, ""},
		{"fingerprint with padding and spaces", " " + fp + "= ", false, ""},
		{"short fingerprint", fp[:20], false, "is not a key fingerprint"},
		{"neither", "not a key", false, "neither the server's public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, got, err := ParseServerKey(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != fp {
				t.Fatalf("fingerprint %s, want %s", got, fp)
			}
			if (key != nil) != tt.wantKey || (key != nil && !ed25519.PublicKey(key).Equal(pub)) {
				t.Fatalf("key %x, want the key: %v", key, tt.wantKey)
			}
		})
	}
}
