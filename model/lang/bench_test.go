package lang

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFilesModel writes the model `tether bench deploy` uses: n files with
// distinct content, mode 0644.
func writeFilesModel(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	var sb strings.Builder
	sb.WriteString("variable \"out\" {\n  type = string\n  default = \"/out\"\n}\n\nhost \"local\" {\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sb, "  file \"f%04d\" {\n    path    = \"${var.out}/f%04d\"\n    content = \"file %d: managed by tether\\n\"\n    mode    = \"0644\"\n  }\n", i, i, i)
	}
	sb.WriteString("}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// BenchmarkCompile1000Files compiles the 1000-file model of the deploy
// benchmark.
//
//	go test ./model/lang -run '^$' -bench Compile1000 -benchmem
func BenchmarkCompile1000Files(b *testing.B) {
	dir := writeFilesModel(b, 1000)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		res, err := Compile(b.Context(), dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Resources) != 1000 {
			b.Fatalf("%d resources", len(res.Resources))
		}
	}
}
