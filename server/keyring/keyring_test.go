package keyring_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/server/keyring"
)

func mustRing(t *testing.T, keys ...[]byte) *keyring.Ring {
	t.Helper()
	r, err := keyring.New(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSealOpen(t *testing.T) {
	a, b := keyring.NewKey(), keyring.NewKey()
	onlyA, onlyB, ba := mustRing(t, a), mustRing(t, b), mustRing(t, b, a)
	aad := []byte("tether/secrets/server-signing-key")
	sealed, err := onlyA.Seal([]byte("the key"), aad)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("the key")) {
		t.Fatal("the plaintext shows in the sealed value")
	}
	if got := onlyA.SealedWith(sealed); got != keyring.KeyID(a) {
		t.Fatalf("SealedWith = %q, want %q", got, keyring.KeyID(a))
	}
	again, _ := onlyA.Seal([]byte("the key"), aad)
	if bytes.Equal(sealed, again) {
		t.Fatal("sealing twice gave the same bytes: the nonce is not random")
	}

	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	relabelled := bytes.Clone(sealed)
	bid := keyring.KeyID(b)
	idBytes, _ := hex.DecodeString(bid)
	copy(relabelled[4:8], idBytes)

	tests := []struct {
		name    string
		ring    *keyring.Ring
		value   []byte
		aad     []byte
		want    error
		mention []string
	}{
		{"the sealing key", onlyA, sealed, aad, nil, nil},
		{"an older key of the ring", ba, sealed, aad, nil, nil},
		{"a ring without the key", onlyB, sealed, aad, keyring.ErrUnknownKey, []string{keyring.KeyID(a), keyring.KeyID(b), "the key file that holds key " + keyring.KeyID(a)}},
		{"another row's aad", onlyA, sealed, []byte("tether/secrets/other"), keyring.ErrTampered, []string{keyring.KeyID(a), "restore"}},
		{"no aad", onlyA, sealed, nil, keyring.ErrTampered, []string{keyring.KeyID(a)}},
		{"a flipped bit", onlyA, tampered, aad, keyring.ErrTampered, []string{keyring.KeyID(a)}},
		{"another key's id on it", ba, relabelled, aad, keyring.ErrTampered, []string{bid}},
		{"clear bytes", onlyA, bytes.Repeat([]byte{7}, 64), aad, keyring.ErrNotSealed, []string{"64 bytes"}},
		{"a future format", onlyA, append([]byte("tkr\x02"), sealed[4:]...), aad, keyring.ErrNotSealed, []string{"upgrade tether"}},
		{"cut short", onlyA, sealed[:20], aad, keyring.ErrNotSealed, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.ring.Open(tt.value, tt.aad)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %q, %v; want error %v", got, err, tt.want)
			}
			if tt.want == nil && string(got) != "the key" {
				t.Fatalf("got %q, want %q", got, "the key")
			}
			for _, m := range tt.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

// TestFormatIsStable: values sealed by earlier releases open for good. The
// key is 0x00…0x1f; changing the format or the key id breaks this test.
func TestFormatIsStable(t *testing.T) {
	key := make([]byte, keyring.KeySize)
	for i := range key {
		key[i] = byte(i)
	}
	if got := keyring.KeyID(key); got != "ebd57ddb" {
		t.Fatalf("key id %s, want ebd57ddb: ids of existing keys would change", got)
	}
	sealed, _ := hex.DecodeString("746b7201ebd57ddb92b1f6ce7593661571c245c8cdd830a989ba313229ba7ef64021b86a9408dcce6f687b5ad61088bcf1547d")
	got, err := mustRing(t, key).Open(sealed, []byte("tether/secrets/x"))
	if err != nil || string(got) != "the signing key" {
		t.Fatalf("got %q, %v; want the value sealed by format 1", got, err)
	}
}

func TestSealsWithTheFirstKey(t *testing.T) {
	a, b := keyring.NewKey(), keyring.NewKey()
	r := mustRing(t, b, a)
	if r.KeyID() != keyring.KeyID(b) {
		t.Fatalf("KeyID %s, want the first key's %s", r.KeyID(), keyring.KeyID(b))
	}
	if got := r.KeyIDs(); len(got) != 2 || got[0] != keyring.KeyID(b) || got[1] != keyring.KeyID(a) {
		t.Fatalf("KeyIDs %v, want [%s %s]", got, keyring.KeyID(b), keyring.KeyID(a))
	}
	sealed, _ := r.Seal([]byte("x"), nil)
	if got := r.SealedWith(sealed); got != keyring.KeyID(b) {
		t.Fatalf("sealed with %s, want %s", got, keyring.KeyID(b))
	}
}

func TestNeverPrintsKeys(t *testing.T) {
	key := keyring.NewKey()
	r := mustRing(t, key)
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(format, r)
		if strings.Contains(out, keyring.EncodeKey(key)) || strings.Contains(out, hex.EncodeToString(key)) || !strings.Contains(out, r.KeyID()) {
			t.Errorf("%s of a ring: %q; want its key id and not its key", format, out)
		}
	}
}

func TestParse(t *testing.T) {
	a, b := keyring.EncodeKey(keyring.NewKey()), keyring.EncodeKey(keyring.NewKey())
	short := keyring.EncodeKey(make([]byte, 16))
	tests := []struct {
		name string
		text string
		want int    // keys; 0: an error
		err  string // in the error
	}{
		{"one", a + "\n", 1, ""},
		{"no newline", a, 1, ""},
		{"comments and blank lines", "# header\n\n  " + a + "  # the new one\n\r\n" + b + "\r\n", 2, ""},
		{"commas", a + "," + b, 2, ""},
		{"empty", "", 0, "no key"},
		{"comments only", "# nothing\n", 0, "no key"},
		{"not base64", "# x\nnot a key!\n", 0, "line 2"},
		{"too short", a + "\n" + short, 0, "line 2"},
		{"twice", a + "\n" + b + "\n" + a, 0, "lines 1 and 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := keyring.Parse([]byte(tt.text))
			if tt.want == 0 {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, %v; want an error naming %q", r, err, tt.err)
				}
				if strings.Contains(err.Error(), a) || strings.Contains(err.Error(), "not a key!") {
					t.Fatalf("error %q quotes the file", err)
				}
				return
			}
			if err != nil || len(r.KeyIDs()) != tt.want {
				t.Fatalf("got %v, %v; want %d keys", r, err, tt.want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	k := keyring.NewKey()
	for _, tt := range []struct {
		name string
		keys [][]byte
		want string
	}{
		{"none", nil, "no key"},
		{"short", [][]byte{k[:16]}, "16 bytes"},
		{"twice", [][]byte{k, k}, "same key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := keyring.New(tt.keys...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

func TestCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.key")
	id, err := keyring.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	r, err := keyring.Load(path)
	if err != nil || r.KeyID() != id || len(r.KeyIDs()) != 1 {
		t.Fatalf("Load: %v, %v; want one key, %s", r, err, id)
	}
	before, _ := os.ReadFile(path)
	if _, err := keyring.Create(path); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over an existing file: %v, want fs.ErrExist", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("Create changed an existing key file")
	}
	if _, err := keyring.Create(filepath.Join(t.TempDir(), "missing", "server.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Create in a missing directory: %v, want fs.ErrNotExist", err)
	}
}

func TestAddKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.key")
	old, err := keyring.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	sealed, _ := mustLoad(t, path).Seal([]byte("v"), nil)
	added, err := keyring.AddKey(path)
	if err != nil {
		t.Fatal(err)
	}
	r := mustLoad(t, path)
	if got := r.KeyIDs(); len(got) != 2 || got[0] != added || got[1] != old {
		t.Fatalf("keys %v, want [%s %s]", got, added, old)
	}
	if v, err := r.Open(sealed, nil); err != nil || string(v) != "v" {
		t.Fatalf("a value sealed before: %q, %v", v, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v after AddKey, want 0600", fi.Mode().Perm())
	}
	text, _ := os.ReadFile(path)
	// The header stays on top, each key under its own comment.
	if !strings.HasPrefix(string(text), "# Tether key file") ||
		strings.Index(string(text), "# key "+added) > strings.Index(string(text), "# key "+old) {
		t.Fatalf("key file after AddKey:\n%s", text)
	}

	bad := filepath.Join(t.TempDir(), "bad.key")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := keyring.AddKey(bad); err == nil || !strings.Contains(err.Error(), "not changed") {
		t.Fatalf("AddKey to a file that is no key file: %v, want it refused", err)
	}
	if got, _ := os.ReadFile(bad); string(got) != "not a key\n" {
		t.Fatalf("the file was changed: %q", got)
	}
	if _, err := keyring.AddKey(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("AddKey to a missing file: %v, want fs.ErrNotExist", err)
	}
}

// A key file written by hand, keys without comments, takes the new key on
// its first line.
func TestAddKeyToAHandWrittenFile(t *testing.T) {
	a := keyring.NewKey()
	path := filepath.Join(t.TempDir(), "server.key")
	if err := os.WriteFile(path, []byte(keyring.EncodeKey(a)), 0o600); err != nil {
		t.Fatal(err)
	}
	added, err := keyring.AddKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, path).KeyIDs(); len(got) != 2 || got[0] != added || got[1] != keyring.KeyID(a) {
		t.Fatalf("keys %v, want [%s %s]", got, added, keyring.KeyID(a))
	}
}

func TestLoadRefusesLargeFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, bytes.Repeat([]byte("#"), 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := keyring.Load(path); err == nil || !strings.Contains(err.Error(), "not a key file") {
		t.Fatalf("got %v, want a large file refused", err)
	}
}

func mustLoad(t *testing.T, path string) *keyring.Ring {
	t.Helper()
	r, err := keyring.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
