package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --compile-timeout bounds the compile of compile, deploy and export: a
// model that would run for hours ends with the deadline's diagnostic and
// the usage status, and nothing is deployed.
func TestCompileTimeoutFlag(t *testing.T) {
	dir := t.TempDir()
	loop := "locals {\n  x = [for a in range(1024) : [for b in range(1024) : [for c in range(1024) : 1 if false]]]\n}\nhost \"h\" {}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(loop), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"compile", dir, "--compile-timeout", "100ms"},
		{"deploy", dir, "--compile-timeout", "100ms", "--root", t.TempDir(), "--state-dir", t.TempDir()},
	} {
		t.Run(args[0], func(t *testing.T) {
			code, _, errs := invoke(t, args...)
			if code != exitUsage || !strings.Contains(errs, "Compile timed out") || !strings.Contains(errs, "100ms") {
				t.Fatalf("exit %d, want %d with the deadline's diagnostic:\n%s", code, exitUsage, errs)
			}
		})
	}
	code, _, errs := invoke(t, "compile", dir, "--compile-timeout", "0s")
	if code != exitUsage || !strings.Contains(errs, "--compile-timeout") {
		t.Fatalf("--compile-timeout 0s: exit %d, want a usage error naming the flag:\n%s", code, errs)
	}
}
