package journal

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
)

// lived builds a journal that went through a life: enrolled, 25 commits
// of slices, results, forgotten resources, outbox events; it returns its
// directory, closed, and its summary.
func lived(t *testing.T, opts Config) (string, string) {
	t.Helper()
	dir := t.TempDir()
	j, err := Open(dir, "a", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Enroll(j.Key().Public().(ed25519.PublicKey), time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := j.ReserveSeq(1024); err != nil {
		t.Fatal(err)
	}
	for gen := int64(1); gen <= 25; gen++ {
		// Each generation holds /keep and one file of its own: the one of
		// the generation before leaves the slice and is forgotten.
		rs := []model.Resource{res("a", "/keep", fmt.Sprint(gen)), res("a", fmt.Sprintf("/g%d", gen), "x")}
		var results []Result
		for _, r := range rs {
			h, _ := r.Hash()
			results = append(results, Result{ID: r.ID, Applied: Applied{Hash: h, State: model.StateDeployed}})
		}
		s := model.SliceOf("a", gen, rs)
		if err := j.Begin().Seen(fmt.Sprint("c", gen)).SetSlice(s).Record(results).Out(uint64(gen), []byte("e")).Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := j.Forget(); err != nil {
			t.Fatal(err)
		}
	}
	sum := summary(j)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, sum
}

// TestRestartAfterForget: a journal that forgot the results of resources
// that left its slice opens again, with or without a snapshot between.
func TestRestartAfterForget(t *testing.T) {
	for _, compactAt := range []int64{0, 512} {
		t.Run(fmt.Sprintf("compact_at=%d", compactAt), func(t *testing.T) {
			dir, want := lived(t, Config{CompactAt: compactAt})
			j, err := Open(dir, "a", Config{CompactAt: compactAt})
			if err != nil {
				t.Fatalf("reopen after forget: %v", err)
			}
			defer j.Close()
			if got := summary(j); got != want {
				t.Fatalf("after reopen:\n got %s\nwant %s", got, want)
			}
			if _, ok := j.Applied(res("a", "/g24", "x").ID); ok {
				t.Fatal("the result of a resource that left the slice came back")
			}
			if _, ok := j.Applied(res("a", "/g25", "x").ID); !ok {
				t.Fatal("the result of a resource held was forgotten")
			}
		})
	}
}

// recordOffsets returns where each record of a log starts.
func recordOffsets(t *testing.T, b []byte) []int {
	t.Helper()
	var offs []int
	for at := 0; at < len(b); {
		offs = append(offs, at)
		n := int(b[at]) | int(b[at+1])<<8 | int(b[at+2])<<16 | int(b[at+3])<<24
		at += headerSize + n
	}
	return offs
}

// TestDamage: each kind of damage is either a torn tail, cut off with
// every committed record kept and the cut reported, or an error that names
// the damaged file and says what to do; never a silent loss. The key and
// the identity are never touched, and Reset starts the agent over with
// them.
func TestDamage(t *testing.T) {
	type damage struct {
		name  string
		harm  func(t *testing.T, dir string)
		torn  bool   // a torn tail: opens, keeps every committed record
		error string // else: Open fails with ErrCorrupt saying this
	}
	wal := func(dir string) string { return filepath.Join(dir, walName(1)) }
	rewrite := func(t *testing.T, dir string, f func(b []byte) []byte) {
		b, err := os.ReadFile(wal(dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(wal(dir), f(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []damage{
		{name: "a byte flipped in record 2 of 51", harm: func(t *testing.T, dir string) {
			rewrite(t, dir, func(b []byte) []byte {
				offs := recordOffsets(t, b)
				b[offs[2]+headerSize+5] ^= 0x20
				return b
			})
		}, error: "record at byte"},
		{name: "a length flipped in record 3", harm: func(t *testing.T, dir string) {
			rewrite(t, dir, func(b []byte) []byte {
				b[recordOffsets(t, b)[3]+1] ^= 0x40
				return b
			})
		}, error: "a whole record follows it"},
		{name: "the header damaged", harm: func(t *testing.T, dir string) {
			rewrite(t, dir, func(b []byte) []byte { b[headerSize+3] ^= 1; return b })
		}, error: "the record at byte 0"},
		{name: "4 KiB of zeros appended", harm: func(t *testing.T, dir string) {
			rewrite(t, dir, func(b []byte) []byte { return append(b, make([]byte, 4096)...) })
		}, torn: true},
		{name: "the last record cut short", harm: func(t *testing.T, dir string) {
			rewrite(t, dir, func(b []byte) []byte { return append(b, b[recordOffsets(t, b)[1]:][:30]...) })
		}, torn: true},
		{name: "half the log cut off", harm: func(t *testing.T, dir string) {
			rewrite(t, dir, func(b []byte) []byte { return b[:len(b)/2] })
		}, error: "the file was cut short after the fact (not by a crash)"},
		{name: "the log cut at a record's start", harm: func(t *testing.T, dir string) {
			rewrite(t, dir, func(b []byte) []byte { offs := recordOffsets(t, b); return b[:offs[len(offs)-3]] })
		}, error: "committed records are lost"},
		{name: "the log emptied", harm: func(t *testing.T, dir string) {
			rewrite(t, dir, func([]byte) []byte { return nil })
		}, error: "wal.1: the file is empty, or lost its beginning"},
		{name: "the log deleted", harm: func(t *testing.T, dir string) {
			if err := os.Remove(wal(dir)); err != nil {
				t.Fatal(err)
			}
		}, error: "wal.1: the file is missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, want := lived(t, Config{})
			key := mustRead(t, filepath.Join(dir, keyFile))
			id := mustRead(t, filepath.Join(dir, identityFile))
			c.harm(t, dir)
			j, err := Open(dir, "a", Config{})
			if c.torn {
				if err != nil {
					t.Fatalf("open after a torn tail: %v", err)
				}
				defer j.Close()
				if got := summary(j); got != want {
					t.Fatalf("after a torn tail:\n got %s\nwant %s", got, want)
				}
				if r := j.Repairs(); len(r) != 1 || !strings.Contains(r[0], "torn tail") {
					t.Fatalf("repairs %q, want the cut reported", r)
				}
				return
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.error) || !strings.Contains(err.Error(), "tether agent reset-journal "+dir) {
				t.Fatalf("open: got %v, want ErrCorrupt saying %q and how to reset", err, c.error)
			}
			if !bytes.Equal(mustRead(t, filepath.Join(dir, keyFile)), key) || !bytes.Equal(mustRead(t, filepath.Join(dir, identityFile)), id) {
				t.Fatal("the key or the identity changed with a damaged log")
			}
			aside, err := Reset(dir)
			if err != nil {
				t.Fatalf("reset: %v", err)
			}
			if c.name != "the log deleted" {
				if _, err := os.Stat(filepath.Join(aside, walName(1))); err != nil {
					t.Fatalf("the damaged log was not kept aside: %v", err)
				}
			}
			j, err = Open(dir, "a", Config{})
			if err != nil {
				t.Fatalf("open after reset: %v", err)
			}
			defer j.Close()
			if !j.Key().Equal(mustKey(t, key)) || j.ServerKey() == nil || j.SeqFloor() != 1024 {
				t.Fatalf("after reset: key kept %v, server key %x, floor %d; want the identity kept", j.Key().Equal(mustKey(t, key)), j.ServerKey(), j.SeqFloor())
			}
			if s := j.Slice(); s.Generation != 0 || len(s.Resources) != 0 || j.OutboxLen() != 0 {
				t.Fatalf("after reset: generation %d, %d resources, %d events; want an empty journal", s.Generation, len(s.Resources), j.OutboxLen())
			}
		})
	}
}

// TestSnapshotOrIdentityLost: with a snapshot, losing it, its log, or the
// identity file stops the agent with what is lost; a key deleted is
// refused rather than replaced.
func TestSnapshotOrIdentityLost(t *testing.T) {
	cases := []struct {
		name, file, want string
	}{
		{"snapshot deleted", snapshotFile, "snapshot: the file is missing"},
		{"identity deleted", identityFile, "identity file"},
		{"key deleted", keyFile, "key file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := lived(t, Config{CompactAt: 512})
			if _, err := os.Stat(filepath.Join(dir, snapshotFile)); err != nil {
				t.Fatalf("no snapshot to lose: %v", err)
			}
			if err := os.Remove(filepath.Join(dir, c.file)); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(dir, "a", Config{}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("open: got %v, want ErrCorrupt saying %q", err, c.want)
			}
			if _, err := os.Stat(filepath.Join(dir, keyFile)); c.file != keyFile && err != nil {
				t.Fatalf("the key went: %v", err)
			}
		})
	}
	t.Run("identity damaged", func(t *testing.T) {
		dir, _ := lived(t, Config{})
		p := filepath.Join(dir, identityFile)
		b := mustRead(t, p)
		b = bytes.Replace(b, []byte(`"seq": 1024`), []byte(`"seq": 1025`), 1)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, "a", Config{}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checksum") {
			t.Fatalf("open: got %v, want ErrCorrupt about the checksum", err)
		}
	})
}

// TestUpgradeFromTheOlderFormat: a journal written before the identity
// file (the server key in the log, no log header, forgets as results with
// an empty state) opens, keeps everything, moves the server key to the
// identity with a floor past the clock, and opens again after.
func TestUpgradeFromTheOlderFormat(t *testing.T) {
	dir := t.TempDir()
	_, key, _ := ed25519.GenerateKey(nil)
	kb, err := privateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyFile), kb, 0o600); err != nil {
		t.Fatal(err)
	}
	server, _, _ := ed25519.GenerateKey(nil)
	a, b := res("a", "/a", "1"), res("a", "/b", "1")
	ha, _ := a.Hash()
	s1 := model.SliceOf("a", 1, []model.Resource{a, b})
	s2 := model.SliceOf("a", 2, []model.Resource{a})
	nowSeq := uint64(time.Now().UnixNano())
	records := [][]op{
		{{Op: opServerKey, ServerKey: server}, {Op: opSeen, ID: "c1"}},
		{{Op: opSlice, Slice: &s1}, {Op: opSeen, ID: "c2"}},
		{{Op: opRecord, Results: []Result{{ID: a.ID, Applied: Applied{Hash: ha, State: model.StateDeployed}}, {ID: b.ID, Applied: Applied{State: model.StateDeployed}}}},
			{Op: opOut, Seq: nowSeq - 10, Data: []byte("e")}},
		{{Op: opSlice, Slice: &s2}},
		{{Op: opRecord, Results: []Result{{ID: b.ID}}}}, // the older forget
	}
	var log []byte
	for _, r := range records {
		rec, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, rec...)
	}
	if err := os.WriteFile(filepath.Join(dir, walName(1)), log, 0o600); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		j, err := Open(dir, "a", Config{})
		if err != nil {
			t.Fatalf("round %d: open: %v", round, err)
		}
		if !j.ServerKey().Equal(server) || !j.Key().Equal(key) || !j.Seen("c1") || j.Slice().Generation != 2 || j.OutboxLen() != 1 {
			t.Fatalf("round %d: server key %v key %v c1 %v generation %d outbox %d", round, j.ServerKey().Equal(server), j.Key().Equal(key),
				j.Seen("c1"), j.Slice().Generation, j.OutboxLen())
		}
		if _, ok := j.Applied(b.ID); ok {
			t.Fatalf("round %d: the forgotten result of /b is back", round)
		}
		if j.SeqFloor() < nowSeq {
			t.Fatalf("round %d: sequence floor %d, below the older format's clock-based numbers (%d)", round, j.SeqFloor(), nowSeq)
		}
		// The older format predates key-agreement keys: one is made too.
		if rep := strings.Join(j.Repairs(), "\n"); round == 0 && (len(j.Repairs()) != 2 || !strings.Contains(rep, "upgraded") || !strings.Contains(rep, "key-agreement key")) {
			t.Fatalf("repairs %q, want the upgrade and the new key-agreement key reported", rep)
		}
		j.Close()
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustKey(t *testing.T, pemBytes []byte) ed25519.PrivateKey {
	t.Helper()
	k, err := parseKey("key", pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestTornTailOrCutShort: a crash tears at most the record being written,
// after everything committed: the torn tail is cut, and every committed
// record stays. A log cut short after the fact (half of it gone: a disk
// that filled, a copy that stopped) lost committed records: Open says so,
// how much, and what to do. The journal tells the two apart by the
// committed length its identity file records each time it is written
// (here the sequence-number reservation); a cut past that length, in what
// was committed after it, looks like a torn tail and is taken for one.
func TestTornTailOrCutShort(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	commit := func(from, to int) {
		for i := from; i < to; i++ {
			if err := j.Begin().Seen(fmt.Sprint("c", i)).Out(uint64(i+1), []byte("e")).Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit(0, 20)
	if err := j.ReserveSeq(1024); err != nil { // records the length of 20 commits
		t.Fatal(err)
	}
	commit(20, 30)
	// The machine loses power: what is on disk is what each case starts
	// from.
	crashed := func(t *testing.T) string {
		t.Helper()
		to := t.TempDir()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() == "lock" {
				continue
			}
			if err := os.WriteFile(filepath.Join(to, e.Name()), mustRead(t, filepath.Join(dir, e.Name())), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return to
	}
	cut := func(t *testing.T, d string, f func(b []byte, offs []int) []byte) {
		t.Helper()
		p := filepath.Join(d, walName(1))
		b := mustRead(t, p)
		if err := os.WriteFile(p, f(b, recordOffsets(t, b)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("torn tail", func(t *testing.T) {
		d := crashed(t)
		cut(t, d, func(b []byte, offs []int) []byte { return append(b, b[offs[1]:offs[2]-5]...) })
		j, err := Open(d, "a", Config{})
		if err != nil {
			t.Fatalf("open after a crash that tore the last write: %v", err)
		}
		defer j.Close()
		if !j.Seen("c29") || j.OutboxLen() != 30 {
			t.Fatalf("after a torn tail: c29 seen %v, outbox %d; want every committed record", j.Seen("c29"), j.OutboxLen())
		}
		if r := j.Repairs(); len(r) != 1 || !strings.Contains(r[0], "torn tail") {
			t.Fatalf("repairs %q, want the torn tail reported", r)
		}
	})
	t.Run("half cut off", func(t *testing.T) {
		d := crashed(t)
		cut(t, d, func(b []byte, _ []int) []byte { return b[:len(b)/2] })
		_, err := Open(d, "a", Config{})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "cut short after the fact") ||
			!strings.Contains(err.Error(), "committed records are lost") || !strings.Contains(err.Error(), "tether agent reset-journal "+d) {
			t.Fatalf("open of a log cut in half: got %v, want ErrCorrupt saying committed records are lost and how to reset", err)
		}
	})
	t.Run("cut after the last mark", func(t *testing.T) {
		d := crashed(t)
		cut(t, d, func(b []byte, offs []int) []byte { return b[:offs[26]+5] }) // the header and 25 commits, then 5 bytes
		j, err := Open(d, "a", Config{})
		if err != nil {
			t.Fatalf("open of a log cut past its last recorded committed length: %v", err)
		}
		defer j.Close()
		if !j.Seen("c24") || j.Seen("c25") {
			t.Fatalf("c24 seen %v, c25 seen %v: want the log up to the cut", j.Seen("c24"), j.Seen("c25"))
		}
	})
}
