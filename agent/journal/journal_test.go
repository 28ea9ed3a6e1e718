package journal

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
)

func res(agent, path, content string) model.Resource {
	return model.Resource{
		ID:         model.ID{Type: "file", Agent: agent, Key: "path", Value: path},
		Attributes: model.Attributes{"content": content},
	}
}

// flavours are the journal on disk and its in-memory twin: every
// behaviour but reopening holds for both.
var flavours = []struct {
	name string
	dir  func(t *testing.T) string
}{
	{"disk", func(t *testing.T) string { return t.TempDir() }},
	{"memory", func(t *testing.T) string { return "" }},
}

func TestContract(t *testing.T) {
	for _, f := range flavours {
		t.Run(f.name, func(t *testing.T) {
			j, err := Open(f.dir(t), "a", Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if len(j.Key()) == 0 {
				t.Fatal("no key")
			}
			s1 := model.Slice{Agent: "a", Generation: 1, Resources: []model.Resource{res("a", "/x", "1"), res("a", "/y", "1")}}
			if err := j.Begin().Seen("c1").SetSlice(s1).Commit(); err != nil {
				t.Fatal(err)
			}
			if !j.Seen("c1") || j.Seen("c2") {
				t.Fatalf("seen c1=%v c2=%v, want true false", j.Seen("c1"), j.Seen("c2"))
			}
			// A diff from a generation not held fails and changes nothing.
			err = j.Begin().Seen("c2").ApplyDiff(model.Diff{From: 7, To: 8}).Commit()
			if !errors.Is(err, model.ErrGenerationMismatch) {
				t.Fatalf("diff from 7: got %v, want ErrGenerationMismatch", err)
			}
			if j.Seen("c2") || j.Slice().Generation != 1 {
				t.Fatalf("a failed transaction left seen=%v generation=%d", j.Seen("c2"), j.Slice().Generation)
			}
			d := model.Diff{From: 1, To: 2, Upserts: []model.Resource{res("a", "/y", "2")}, Deletes: []model.ID{s1.Resources[0].ID}}
			if err := j.Begin().Seen("c2").ApplyDiff(d).AddJob(Job{ID: "d1", Kind: "deploy", Generation: 2}).Commit(); err != nil {
				t.Fatal(err)
			}
			if s := j.Slice(); s.Generation != 2 || len(s.Resources) != 1 || s.Resources[0].Attributes["content"] != "2" {
				t.Fatalf("slice after diff: %+v", s)
			}
			h, _ := d.Upserts[0].Hash()
			if err := j.Begin().Record([]Result{{ID: d.Upserts[0].ID, Applied: Applied{Hash: h, State: model.StateDeployed}}}).
				Out(42, []byte(`{"x":1}`)).Out(43, []byte(`{"x":2}`)).JobDone("d1").Commit(); err != nil {
				t.Fatal(err)
			}
			if err := j.Sent(42); err != nil {
				t.Fatal(err)
			}
			if out := j.Outbox(); len(out) != 1 || out[0].Seq != 43 {
				t.Fatalf("outbox: %+v, want only 43", out)
			}
			if len(j.Jobs()) != 0 {
				t.Fatalf("jobs: %+v, want none", j.Jobs())
			}
			if a, ok := j.Applied(d.Upserts[0].ID); !ok || a.State != model.StateDeployed || a.Hash != h {
				t.Fatalf("applied: %+v %v", a, ok)
			}
			if j.Seq() != 43 {
				t.Fatalf("seq: got %d, want 43", j.Seq())
			}
			// Results of resources no longer held are forgotten.
			if err := j.Begin().Record([]Result{{ID: s1.Resources[0].ID, Applied: Applied{State: model.StateFailed}}}).Commit(); err != nil {
				t.Fatal(err)
			}
			if n, err := j.Forget(); err != nil || n != 1 {
				t.Fatalf("forget: got %d %v, want 1", n, err)
			}
			// An intent lasts until the resource's result is recorded.
			in := Intent{Hash: h, Changes: model.Changes{"content": {Current: "1", Desired: "2"}}}
			if err := j.Begin().Intend(d.Upserts[0].ID, in.Hash, in.Changes).Commit(); err != nil {
				t.Fatal(err)
			}
			if got, ok := j.Intent(d.Upserts[0].ID); !ok || got.Hash != h || len(got.Changes) != 1 {
				t.Fatalf("intent: %+v %v", got, ok)
			}
			if err := j.Begin().Record([]Result{{ID: d.Upserts[0].ID, Applied: Applied{Hash: h, State: model.StateDeployed}}}).Commit(); err != nil {
				t.Fatal(err)
			}
			if _, ok := j.Intent(d.Upserts[0].ID); ok {
				t.Fatal("intent kept after the result was recorded")
			}
			at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			if err := j.Begin().Pause(true, at).Commit(); err != nil {
				t.Fatal(err)
			}
			if err := j.Enroll(j.Key().Public().(ed25519.PublicKey), at); err != nil {
				t.Fatal(err)
			}
			if p, when := j.Paused(); !p || !when.Equal(at) || len(j.ServerKey()) != 32 {
				t.Fatalf("paused=%v at %v, server key %d bytes; want true at %v, 32 bytes", p, when, len(j.ServerKey()), at)
			}
			if err := j.ReserveSeq(100); err != nil || j.SeqFloor() != 100 {
				t.Fatalf("reserve 100: floor %d, %v", j.SeqFloor(), err)
			}
			if err := j.ReserveSeq(50); err != nil || j.SeqFloor() != 100 {
				t.Fatalf("reserve 50 after 100: floor %d, %v; want 100", j.SeqFloor(), err)
			}
		})
	}
}

// state sums up a journal for comparisons across a reopen.
func summary(j *Journal) string {
	var b bytes.Buffer
	s := j.Slice()
	paused, at := j.Paused()
	fmt.Fprintf(&b, "gen=%d n=%d paused=%v at=%v seq=%d floor=%d key=%x jobs=%v out=%d", s.Generation, len(s.Resources), paused, at, j.Seq(), j.SeqFloor(), j.ServerKey(), j.Jobs(), len(j.Outbox()))
	for _, r := range s.Resources {
		a, _ := j.Applied(r.ID)
		fmt.Fprintf(&b, " %s=%v:%s", r.ID, r.Attributes["content"], a.State)
	}
	return b.String()
}

func TestReopenKeepsEverything(t *testing.T) {
	for _, compactAt := range []int64{0, 256} {
		t.Run(fmt.Sprintf("compact_at=%d", compactAt), func(t *testing.T) {
			dir := t.TempDir()
			j, err := Open(dir, "a", Config{CompactAt: compactAt})
			if err != nil {
				t.Fatal(err)
			}
			key := j.Key()
			s := model.Slice{Agent: "a"}
			for gen := int64(1); gen <= 50; gen++ {
				r := res("a", fmt.Sprintf("/f%d", gen%7), strconv.FormatInt(gen, 10))
				h, _ := r.Hash()
				err := j.Begin().Seen(fmt.Sprint("cmd", gen)).
					ApplyDiff(model.Diff{From: s.Generation, To: gen, Upserts: []model.Resource{r}}).
					Record([]Result{{ID: r.ID, Applied: Applied{Hash: h, State: model.StateDeployed}}}).
					Out(uint64(gen), []byte("event")).Pause(gen%2 == 0, time.Unix(gen, 0)).Commit()
				if err != nil {
					t.Fatal(err)
				}
				if gen%3 == 0 {
					if err := j.Sent(uint64(gen)); err != nil {
						t.Fatal(err)
					}
				}
				s = j.Slice()
			}
			before := summary(j)
			j.Close()
			j2, err := Open(dir, "a", Config{CompactAt: compactAt})
			if err != nil {
				t.Fatal(err)
			}
			defer j2.Close()
			if after := summary(j2); after != before {
				t.Fatalf("after reopen:\n got %s\nwant %s", after, before)
			}
			if !j2.Key().Equal(key) {
				t.Fatal("the key changed across a reopen")
			}
			if !j2.Seen("cmd50") || !j2.Seen("cmd1") {
				t.Fatal("seen ids lost across a reopen")
			}
			logs, _ := j2.logs()
			if compactAt > 0 && (len(logs) != 1 || logs[0] < 2) {
				t.Fatalf("after compactions: logs %v, want one log past the first", logs)
			}
		})
	}
}

func TestTornTailIsCut(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := j.Begin().Seen(fmt.Sprint("c", i)).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	wal, idPath := filepath.Join(dir, walName(1)), filepath.Join(dir, identityFile)
	good, _ := os.ReadFile(wal)
	// Each case starts from the files as closed here: the identity
	// records the log's committed length, which a case's reopen moves on.
	id, _ := os.ReadFile(idPath)
	cases := map[string][]byte{
		"half a header":  {0x10, 0},
		"short payload":  {0x10, 0, 0, 0, 1, 2, 3, 4, '[', '{'},
		"wrong checksum": append([]byte{2, 0, 0, 0, 9, 9, 9, 9}, "[]"...),
	}
	for name, tail := range cases {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(wal, append(append([]byte{}, good...), tail...), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(idPath, id, 0o600); err != nil {
				t.Fatal(err)
			}
			j, err := Open(dir, "a", Config{})
			if err != nil {
				t.Fatal(err)
			}
			if !j.Seen("c2") {
				t.Fatal("a whole record before the torn tail was lost")
			}
			// New records follow the cut, and read back.
			if err := j.Begin().Seen("after").Commit(); err != nil {
				t.Fatal(err)
			}
			j.Close()
			j, err = Open(dir, "a", Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if !j.Seen("after") {
				t.Fatal("a record written after a cut tail was lost")
			}
		})
	}
}

func TestLeftoverLogOfACompactionIsDropped(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, "a", Config{CompactAt: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := j.Begin().Seen(fmt.Sprint("c", i)).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	n := j.st.Wal
	j.Close()
	// A compaction that stopped after the snapshot and before removing the
	// old log leaves it behind; its records are in the snapshot already.
	if err := os.WriteFile(filepath.Join(dir, walName(n-1)), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err = Open(dir, "a", Config{CompactAt: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if !j.Seen("c19") || !j.Seen("c0") {
		t.Fatal("records lost")
	}
	if _, err := os.Stat(filepath.Join(dir, walName(n-1))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old log still there: %v", err)
	}
}

// A write a crash interrupted leaves a temporary file (durable.WriteFile);
// opening the journal removes it, and nothing else.
func TestLeftoverTemporaryFilesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Begin().Seen("c1").Commit(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	before, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	leftovers := []string{"." + snapshotFile + ".tether-1", "." + identityFile + ".tether-2"}
	for _, name := range leftovers {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	j, err = Open(dir, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if !j.Seen("c1") {
		t.Fatal("records lost")
	}
	after, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := func(es []os.DirEntry) (out []string) {
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	if got, want := names(after), names(before); !slices.Equal(got, want) {
		t.Errorf("files after opening: got %v, want %v", got, want)
	}
}

func TestSeenIsBounded(t *testing.T) {
	j, err := Open("", "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range seenMax + 10 {
		if err := j.Begin().Seen(strconv.Itoa(i)).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if j.Seen("0") || !j.Seen(strconv.Itoa(seenMax+9)) || len(j.st.seen) != seenMax {
		t.Fatalf("seen holds %d ids (0 seen=%v), want the newest %d", len(j.st.seen), j.Seen("0"), seenMax)
	}
}

func TestOneProcessPerDirectory(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "a", Config{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: got %v, want ErrLocked", err)
	}
	j.Close()
	j, err = Open(dir, "a", Config{})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	j.Close()
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	info, err := os.Stat(filepath.Join(dir, "key"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %04o, want 0600", info.Mode().Perm())
	}
	if err := os.Chmod(filepath.Join(dir, "key"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "a", Config{}); err == nil {
		t.Fatal("a key readable by others was accepted")
	}
	if err := os.Chmod(filepath.Join(dir, "key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "a", Config{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("garbage key: got %v, want ErrCorrupt", err)
	}
}

// TestKexFile: the key-agreement key is made on first start next to the
// key (0600), kept across restarts, refused when others can read it; a
// state directory an older agent made (no kex file, an identity that
// never had one) gets one on upgrade, said in the repairs; and one lost
// after it was made stops the journal instead of being replaced.
func TestKexFile(t *testing.T) {
	dir := t.TempDir()
	kexPath := filepath.Join(dir, "kex")
	j, err := Open(dir, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	first := j.Kex().PublicKey().Bytes()
	if len(j.Repairs()) != 0 {
		t.Fatalf("a new state directory reports repairs %q", j.Repairs())
	}
	if err := j.Enroll(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)), time.Now()); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if info, err := os.Stat(kexPath); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("kex file: %v, %v; want mode 0600", info, err)
	}
	j, err = Open(dir, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(j.Kex().PublicKey().Bytes(), first) {
		t.Fatal("the key-agreement key changed across a restart")
	}
	j.Close()
	if err := os.Chmod(kexPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "a", Config{}); err == nil {
		t.Fatal("a key-agreement key readable by others was accepted")
	}

	// An older agent's directory: no kex file, an identity without the mark.
	if err := os.Remove(kexPath); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "identity"))
	if err != nil {
		t.Fatal(err)
	}
	var f identityFileForm
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	f.Kex = false
	f.Check = f.checksum()
	if b, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "identity"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	j, err = Open(dir, "a", Config{})
	if err != nil {
		t.Fatalf("open a state directory of an older agent: %v", err)
	}
	if rep := j.Repairs(); len(rep) != 1 || !strings.Contains(rep[0], "key-agreement key") {
		t.Fatalf("repairs %q, want the new key-agreement key reported", rep)
	}
	if j.ServerKey() == nil {
		t.Fatal("the upgrade lost the enrollment")
	}
	j.Close()

	// Lost after it was made: refused, not replaced.
	if err := os.Remove(kexPath); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "a", Config{}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "kex") {
		t.Fatalf("a lost key-agreement key: got %v, want ErrCorrupt naming the file", err)
	}
}

// TestKillNineLosesNothingCommitted runs a child process that commits
// transactions as fast as it can and prints each number once Commit
// returned, kills it with SIGKILL at several points, and checks every
// printed transaction is in the reopened journal.
func TestKillNineLosesNothingCommitted(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for round := range 5 {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "JOURNAL_CHILD_DIR="+dir, "JOURNAL_CHILD_ROUND="+strconv.Itoa(round))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		var acked []string
		deadline := time.After(time.Duration(50+round*40) * time.Millisecond)
	read:
		for sc.Scan() {
			acked = append(acked, sc.Text())
			select {
			case <-deadline:
				break read
			default:
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() {
			acked = append(acked, sc.Text())
		}
		_ = cmd.Wait()
		if len(acked) == 0 {
			t.Fatalf("round %d: the child committed nothing", round)
		}
		t.Logf("round %d: killed after %d acknowledged commits", round, len(acked))
		j, err := Open(dir, "a", Config{CompactAt: 4096})
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		for _, id := range acked {
			if !j.Seen(id) {
				j.Close()
				t.Fatalf("round %d: committed %s lost by kill -9 (%d acknowledged)", round, id, len(acked))
			}
		}
		if s := j.Slice(); s.Generation < int64(len(acked)) {
			t.Fatalf("round %d: generation %d after %d acknowledged diffs", round, s.Generation, len(acked))
		}
		j.Close()
	}
}

// TestMain turns the test binary into the committing child of
// TestKillNineLosesNothingCommitted when asked to.
func TestMain(m *testing.M) {
	if dir := os.Getenv("JOURNAL_CHILD_DIR"); dir != "" {
		if err := childCommits(dir, os.Getenv("JOURNAL_CHILD_ROUND")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// childCommits commits diffs until it is killed, printing each one's id
// once Commit returned.
func childCommits(dir, round string) error {
	j, err := Open(dir, "a", Config{CompactAt: 4096})
	if err != nil {
		return err
	}
	for i := 0; ; i++ {
		s := j.Slice()
		r := res("a", "/f"+strconv.Itoa(i%5), round+"."+strconv.Itoa(i))
		id := "r" + round + "." + strconv.Itoa(i)
		err := j.Begin().Seen(id).ApplyDiff(model.Diff{From: s.Generation, To: s.Generation + 1, Upserts: []model.Resource{r}}).
			Out(uint64(s.Generation+1), []byte("e")).Commit()
		if err != nil {
			return err
		}
		fmt.Println(id)
	}
}

// TestConcurrentCommitsShareSyncs: many goroutines commit at once (the
// engine's workers journal intents in parallel); every commit is there
// after a reopen, across compactions.
func TestConcurrentCommits(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, "a", Config{CompactAt: 2048})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				id := model.ID{Type: "file", Agent: "a", Key: "path", Value: fmt.Sprintf("/g%d/%d", g, i)}
				if err := j.Begin().Intend(id, model.Hash{}, model.Changes{"x": {Desired: 1}}).Seen(id.String()).Commit(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	j.Close()
	j, err = Open(dir, "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for g := range 8 {
		for i := range 50 {
			id := model.ID{Type: "file", Agent: "a", Key: "path", Value: fmt.Sprintf("/g%d/%d", g, i)}
			if _, ok := j.Intent(id); !ok || !j.Seen(id.String()) {
				t.Fatalf("%s lost", id)
			}
		}
	}
}

// The drift policy of the last deploy or repair done survives a reopen
// (with and without a snapshot between); a dry run's does not count.
func TestDriftPolicyOfTheLastJobDone(t *testing.T) {
	for _, compactAt := range []int64{0, 1} {
		t.Run(fmt.Sprintf("compact_at=%d", compactAt), func(t *testing.T) {
			dir := t.TempDir()
			j, err := Open(dir, "a", Config{CompactAt: compactAt})
			if err != nil {
				t.Fatal(err)
			}
			if p := j.DriftPolicy(); p != "" {
				t.Fatalf("a new journal's drift policy %q, want none", p)
			}
			steps := []struct {
				job  Job
				want model.DriftPolicy
			}{
				{Job{ID: "d1", Kind: "deploy", DriftPolicy: model.DriftHeal}, model.DriftHeal},
				{Job{ID: "d2", Kind: "dryrun", DriftPolicy: model.DriftAlert}, model.DriftHeal},
				{Job{ID: "d3", Kind: "repair"}, model.DriftHeal},
				{Job{ID: "d4", Kind: "repair", DriftPolicy: model.DriftAlert}, model.DriftAlert},
			}
			for _, s := range steps {
				if err := j.Begin().AddJob(s.job).Commit(); err != nil {
					t.Fatal(err)
				}
				if p := j.DriftPolicy(); s.job.ID == "d1" && p != "" {
					t.Fatalf("policy %q before the job is done", p)
				}
				if err := j.Begin().JobDone(s.job.ID).Commit(); err != nil {
					t.Fatal(err)
				}
				if p := j.DriftPolicy(); p != s.want {
					t.Fatalf("after %s %s: policy %q, want %q", s.job.Kind, s.job.ID, p, s.want)
				}
			}
			j.Close()
			j2, err := Open(dir, "a", Config{CompactAt: compactAt})
			if err != nil {
				t.Fatal(err)
			}
			defer j2.Close()
			if p := j2.DriftPolicy(); p != model.DriftAlert {
				t.Fatalf("after a reopen: policy %q, want alert", p)
			}
		})
	}
}

// The drift policy of a settings command and of jobs is the one the
// server issued last, whatever order they arrive or end in, and survives a
// reopen.
func TestDriftPolicyIssuedLastWins(t *testing.T) {
	for _, compactAt := range []int64{0, 1} {
		t.Run(fmt.Sprintf("compact_at=%d", compactAt), func(t *testing.T) {
			dir := t.TempDir()
			j, err := Open(dir, "a", Config{CompactAt: compactAt})
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
			job := Job{ID: "d1", Kind: "deploy", DriftPolicy: model.DriftHeal, IssuedAt: at(1)}
			steps := []struct {
				what string
				tx   *Tx
				want model.DriftPolicy
			}{
				{"a deploy queued", j.Begin().AddJob(job), ""},
				{"settings issued after it", j.Begin().SetDriftPolicy(model.DriftAlert, at(2)), model.DriftAlert},
				{"the deploy done", j.Begin().JobDone("d1"), model.DriftAlert},
				{"settings issued before", j.Begin().SetDriftPolicy(model.DriftHeal, at(0)), model.DriftAlert},
				{"settings issued later", j.Begin().SetDriftPolicy(model.DriftHeal, at(3)), model.DriftHeal},
				{"settings without a policy", j.Begin().SetDriftPolicy("", at(4)), model.DriftHeal},
			}
			for _, s := range steps {
				if err := s.tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if p := j.DriftPolicy(); p != s.want {
					t.Fatalf("after %s: policy %q, want %q", s.what, p, s.want)
				}
			}
			j.Close()
			j2, err := Open(dir, "a", Config{CompactAt: compactAt})
			if err != nil {
				t.Fatal(err)
			}
			defer j2.Close()
			if p := j2.DriftPolicy(); p != model.DriftHeal {
				t.Fatalf("after a reopen: policy %q, want heal", p)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Errorf("Default: %v", err)
	}
	if _, err := Open(t.TempDir(), "a", Config{CompactAt: -1}); !errors.Is(err, ErrConfig) {
		t.Errorf("a negative CompactAt: got %v, want an error wrapping ErrConfig", err)
	}
	j, err := Open(t.TempDir(), "a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if got, want := j.cfg.CompactAt, Default().CompactAt; got != want {
		t.Errorf("CompactAt of a zero config: got %d, want %d", got, want)
	}
}
