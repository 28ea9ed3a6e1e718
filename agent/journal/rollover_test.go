package journal

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustOpen(t *testing.T, dir string) *Journal {
	t.Helper()
	j, err := Open(dir, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// A rollover survives a restart at each of its steps, and the agent always
// comes back with a key the server takes: its old one until the switch,
// the new one after.
func TestRolloverAcrossRestarts(t *testing.T) {
	t.Run("begun, then restarted", func(t *testing.T) {
		dir := t.TempDir()
		j := mustOpen(t, dir)
		old := pubOf(j.Key())
		next, started, err := j.BeginRollover()
		if err != nil || !started {
			t.Fatalf("begin: started %v, %v; want a new rollover", started, err)
		}
		again, started, err := j.BeginRollover()
		if err != nil || started || !pubOf(again).Equal(pubOf(next)) {
			t.Fatalf("begin again: started %v, %v; want the rollover under way, same key", started, err)
		}
		j.Close()

		j = mustOpen(t, dir)
		if !pubOf(j.Key()).Equal(old) {
			t.Fatal("the key changed before the server accepted the new one")
		}
		if n := j.NextKey(); n == nil || !pubOf(n).Equal(pubOf(next)) {
			t.Fatalf("next key after a restart: got %v, want the one proposed", n)
		}
		if err := j.CompleteRollover(pubOf(next)); err != nil {
			t.Fatal(err)
		}
		j.Close()

		j = mustOpen(t, dir)
		defer j.Close()
		if !pubOf(j.Key()).Equal(pubOf(next)) || j.NextKey() != nil {
			t.Fatal("after the switch and a restart: want the new key and no rollover under way")
		}
		if _, err := os.Stat(filepath.Join(dir, nextKeyFile)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left behind: %v", nextKeyFile, err)
		}
	})

	t.Run("crash after the next key was written, before it was recorded", func(t *testing.T) {
		dir := t.TempDir()
		j := mustOpen(t, dir)
		old := pubOf(j.Key())
		j.Close()
		_, stray, _ := ed25519.GenerateKey(nil)
		b, _ := privateKeyPEM(stray)
		if err := os.WriteFile(filepath.Join(dir, nextKeyFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		j = mustOpen(t, dir)
		defer j.Close()
		if !pubOf(j.Key()).Equal(old) || j.NextKey() != nil {
			t.Fatal("a next key never announced: want the old key and no rollover under way")
		}
		if _, err := os.Stat(filepath.Join(dir, nextKeyFile)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stray %s not removed: %v", nextKeyFile, err)
		}
		if !strings.Contains(strings.Join(j.Repairs(), "\n"), "before it was announced") {
			t.Fatalf("repairs %q: want the stray next key named", j.Repairs())
		}
	})

	t.Run("crash after the key file was replaced, before the identity", func(t *testing.T) {
		dir := t.TempDir()
		j := mustOpen(t, dir)
		next, _, err := j.BeginRollover()
		if err != nil {
			t.Fatal(err)
		}
		j.Close()
		b, _ := privateKeyPEM(next)
		if err := os.WriteFile(filepath.Join(dir, keyFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		j = mustOpen(t, dir)
		defer j.Close()
		if !pubOf(j.Key()).Equal(pubOf(next)) || j.NextKey() != nil {
			t.Fatal("want the switch finished: the new key, no rollover under way")
		}
		if !strings.Contains(strings.Join(j.Repairs(), "\n"), "finished a key rollover") {
			t.Fatalf("repairs %q: want the finished rollover named", j.Repairs())
		}
	})

	t.Run("next key lost", func(t *testing.T) {
		dir := t.TempDir()
		j := mustOpen(t, dir)
		old := pubOf(j.Key())
		if _, _, err := j.BeginRollover(); err != nil {
			t.Fatal(err)
		}
		j.Close()
		if err := os.Remove(filepath.Join(dir, nextKeyFile)); err != nil {
			t.Fatal(err)
		}
		j = mustOpen(t, dir)
		defer j.Close()
		if !pubOf(j.Key()).Equal(old) || j.NextKey() != nil {
			t.Fatal("want the old key kept and the rollover given up")
		}
		if _, started, err := j.BeginRollover(); err != nil || !started {
			t.Fatalf("a new rollover after one given up: started %v, %v", started, err)
		}
	})
}

func TestCompleteRolloverRefusesAnotherKey(t *testing.T) {
	for _, f := range flavours {
		t.Run(f.name, func(t *testing.T) {
			j, err := Open(f.dir(t), "a", Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			old := pubOf(j.Key())
			other, _, _ := ed25519.GenerateKey(nil)
			if err := j.CompleteRollover(other); !errors.Is(err, ErrNoRollover) {
				t.Fatalf("complete with no rollover under way: got %v, want ErrNoRollover", err)
			}
			if _, _, err := j.BeginRollover(); err != nil {
				t.Fatal(err)
			}
			if err := j.CompleteRollover(other); !errors.Is(err, ErrNoRollover) {
				t.Fatalf("complete with a key not proposed: got %v, want ErrNoRollover", err)
			}
			if !pubOf(j.Key()).Equal(old) {
				t.Fatal("the key changed on a refused completion")
			}
		})
	}
}
