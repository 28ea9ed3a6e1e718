package embedded

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tetherhq/tether/bus"
	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/lang"
	"github.com/tetherhq/tether/model/secret/secrettest"
)

// tapBus keeps every message that crosses the bus, encoded as on the wire.
type tapBus struct {
	runBus
	mu       sync.Mutex
	messages [][]byte
	kinds    []bus.Kind
}

func (b *tapBus) keep(e *bus.Envelope) {
	data, err := bus.Encode(e)
	if err != nil {
		panic(err) // the sender encodes it too: it cannot fail here
	}
	b.mu.Lock()
	b.messages, b.kinds = append(b.messages, data), append(b.kinds, e.Kind)
	b.mu.Unlock()
}

func (b *tapBus) Send(ctx context.Context, e *bus.Envelope, opts bus.SendOptions) error {
	b.keep(e)
	return b.runBus.Send(ctx, e, opts)
}

func (b *tapBus) SendBatch(ctx context.Context, msgs []bus.Outgoing) []error {
	for _, m := range msgs {
		b.keep(m.Envelope)
	}
	return b.runBus.SendBatch(ctx, msgs)
}

func (b *tapBus) Publish(ctx context.Context, e *bus.Envelope) error {
	b.keep(e)
	return b.runBus.Publish(ctx, e)
}

// resultRecorder is a Display that keeps every result as shown, encoded.
type resultRecorder struct {
	recorder
	shown bytes.Buffer
}

func (r *resultRecorder) Progress(res *model.Result) {
	b, _ := json.Marshal(res)
	r.shown.Write(b)
	r.recorder.Progress(res)
}

// TestPlantedSecretStaysSealed deploys a sensitive value with a unique
// marker through the whole embedded pipeline and counts the marker in
// everything it passed through or rests in: the store's files, every
// message on the bus, the logs (at debug level), what the run showed.
// Only the deployed file may hold it, and it does.
func TestPlantedSecretStaysSealed(t *testing.T) {
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	marker := "PLANTED-embedded-" + hex.EncodeToString(nonce)
	dir, root := t.TempDir(), t.TempDir()
	src := `variable "password" {
  type      = string
  sensitive = true
}
host "local" {
  file "secret" {
    path    = "/secret.conf"
    content = sensitive("token = ` + marker + `\n")
    mode    = "0600"
  }
  file "password" {
    path    = "/password"
    content = var.password
  }
  file "plain" {
    path    = "/plain"
    content = "nothing to hide\n"
  }
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Dir: dir, StateDir: filepath.Join(t.TempDir(), "state"), Root: root, Compiler: "test", Salt: "test",
		Compile: lang.Options{Vars: map[string]string{"password": marker + "-pw"}}}

	tap := &tapBus{}
	made := newBus
	newBus = func(log zerolog.Logger) runBus { tap.runBus = made(log); return tap }
	t.Cleanup(func() { newBus = made })
	var logs bytes.Buffer
	log := zerolog.New(zerolog.SyncWriter(&logs)).Level(zerolog.DebugLevel)

	ctx := context.Background()
	res, err := lang.Compile(ctx, o.Dir, o.Compile)
	if err != nil {
		t.Fatal(err)
	}
	shown := &resultRecorder{}
	rep, err := Run(ctx, o, Compiled(res), shown, log)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Created != 3 || rep.Summary.Failed != 0 {
		t.Fatalf("report %+v, want the 3 files created", rep.Summary)
	}

	// The handler got the clear values.
	for path, want := range map[string]string{"secret.conf": marker, "password": marker + "-pw"} {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || secrettest.Count(b, want) != 1 {
			t.Fatalf("%s on the host: %q, %v; want it to hold the planted value", path, b, err)
		}
	}

	// Nowhere else.
	if found := secrettest.CountFiles(t, o.StateDir, marker); len(found) > 0 {
		t.Errorf("the store's directory holds the planted secret: %v", found)
	}
	tap.mu.Lock()
	desired := 0
	for i, m := range tap.messages {
		if n := secrettest.Count(m, marker); n > 0 {
			t.Errorf("a %s message on the bus holds the planted secret %d times", tap.kinds[i], n)
		}
		if tap.kinds[i] == bus.KindDesiredFull && bytes.Contains(m, []byte(`"sealed"`)) {
			desired++
		}
	}
	tap.mu.Unlock()
	if desired == 0 {
		t.Error("no desired state with sealed values crossed the bus: the tap saw nothing")
	}
	if logs.Len() == 0 {
		t.Fatal("nothing was logged: the log check would prove nothing")
	}
	if n := secrettest.Count(logs.Bytes(), marker); n > 0 {
		t.Errorf("the logs hold the planted secret %d times", n)
	}
	if n := secrettest.Count(shown.shown.Bytes(), marker); n > 0 {
		t.Errorf("the results shown hold the planted secret %d times", n)
	}
}
