package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/cli/bench"
)

// BenchmarkEmbeddedDeploy1000 runs `tether deploy` in-process on the model
// of `tether bench deploy` (1000 files): create (fresh store, empty
// directory) and no-op (everything in place, compile cached). Process start
// is not included; `tether bench deploy` measures whole processes.
//
//	go test ./cli -run '^$' -bench EmbeddedDeploy -benchtime 10x
func BenchmarkEmbeddedDeploy1000(b *testing.B) {
	work := b.TempDir()
	model := filepath.Join(work, "model")
	if err := bench.DeployModel(model, 1000); err != nil {
		b.Fatal(err)
	}
	deploy := func(b *testing.B, out, state string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"tether", "deploy", model, "--var", "out=" + out, "--state-dir", state, "-o", "json"},
			strings.NewReader(""), &stdout, &stderr)
		if code != 0 {
			b.Fatalf("exit %d: %s", code, stderr.String())
		}
	}
	b.Run("create", func(b *testing.B) {
		// Every run of this function (the testing package calls it more
		// than once) gets directories of its own: a reused state directory
		// would turn a create into a cached no-op.
		base := b.TempDir()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			out := filepath.Join(base, "out", strconv.Itoa(i))
			if err := os.MkdirAll(out, 0o755); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			deploy(b, out, filepath.Join(base, "state", strconv.Itoa(i)))
		}
	})
	b.Run("noop", func(b *testing.B) {
		out := filepath.Join(work, "noop")
		if err := os.MkdirAll(out, 0o755); err != nil {
			b.Fatal(err)
		}
		state := filepath.Join(work, "noop-state")
		deploy(b, out, state)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			deploy(b, out, state)
		}
	})
}
