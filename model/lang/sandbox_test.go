package lang

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/model/gitfetch/gittest"
	"golang.org/x/tools/txtar"
)

// secret is in every file outside the model a hostile archive points at:
// no output of a compile may ever contain it.
const secret = "TOP-SECRET"

// TestHostileTrees compiles every testdata/hostile/*.txtar archive: the
// attacks a single file cannot make (links, named pipes, sockets,
// devices, sparse files, modules). Besides the model files, an archive has
//
//   - setup: one action per line, on paths of the model directory:
//     "link NAME TARGET", "fifo NAME", "socket NAME", "device NAME",
//     "sparse NAME SIZE", "dir NAME"; in a target, {outside} is a
//     directory outside the model holding secret, secret.hcl and mod/
//     (all full of TOP-SECRET), and {model} the model directory;
//   - options: NAME=VALUE lines setting Options fields;
//   - want: lines the compile's output must each contain: its
//     diagnostics, or (after a first line "ok") the rendered result.
//
// No output may contain TOP-SECRET, every compile must return (a hang
// fails the test), and the heap stays bounded.
func TestHostileTrees(t *testing.T) {
	archives, err := filepath.Glob("testdata/hostile/*.txtar")
	if err != nil || len(archives) < 25 {
		t.Fatalf("want at least 25 archives in testdata/hostile, found %d (%v)", len(archives), err)
	}
	for _, path := range archives {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			outside := outsideDir(t)
			tmp := t.TempDir()
			model := filepath.Join(tmp, "model")
			if err := os.MkdirAll(model, 0o755); err != nil {
				t.Fatal(err)
			}
			var opts Options
			var want []string
			var setup string
			for _, f := range ar.Files {
				switch f.Name {
				case "setup":
					setup = string(f.Data)
				case "options":
					opts = parseOptions(t, string(f.Data))
				case "want":
					want = strings.Split(strings.TrimSpace(string(f.Data)), "\n")
				default:
					writeTree(t, model, map[string]string{f.Name: string(f.Data)})
				}
			}
			runSetup(t, model, outside, setup)
			t.Chdir(tmp)
			res, err := boundedCompile(t, "model", opts)
			out := render(res, err)
			var le *Error
			if errors.As(err, &le) {
				out += le.Pretty(false)
			}
			if strings.Contains(out, secret) {
				t.Fatalf("the output shows content from outside the model:\n%s", out)
			}
			if len(want) > 0 && want[0] == "ok" {
				if err != nil {
					t.Fatalf("got %v, want a compiled model", err)
				}
				want = want[1:]
			} else if le == nil || !hasError(le) {
				t.Fatalf("got %v, want a compile error", err)
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("the output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// outsideDir makes the directory hostile links point at.
func outsideDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"secret":       secret + "\n",
		"secret.hcl":   secret + " line one {\n" + secret + " line two\n",
		"mod/main.hcl": secret + " {\n",
		"mod/t.tmpl":   secret + "\n",
	})
	return dir
}

func runSetup(t *testing.T, model, outside, setup string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(setup), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		p := filepath.Join(model, f[1])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch f[0] {
		case "link":
			target := strings.NewReplacer("{outside}", outside, "{model}", model).Replace(f[2])
			err = os.Symlink(target, p)
		case "fifo":
			err = syscall.Mkfifo(p, 0o644)
		case "socket":
			var l net.Listener
			if l, err = net.Listen("unix", p); err == nil {
				t.Cleanup(func() { l.Close() })
			}
		case "device":
			// The same device as /dev/null (1, 3); only root may make one.
			if err = syscall.Mknod(p, syscall.S_IFCHR|0o644, 1<<8|3); errors.Is(err, syscall.EPERM) {
				t.Skip("making a device file needs root")
			}
		case "sparse":
			size, perr := strconv.ParseInt(f[2], 10, 64)
			if perr != nil {
				t.Fatal(perr)
			}
			var fh *os.File
			if fh, err = os.Create(p); err == nil {
				err = fh.Truncate(size)
				fh.Close()
			}
		case "dir":
			err = os.MkdirAll(p, 0o755)
		default:
			t.Fatalf("unknown setup action %q", line)
		}
		if err != nil {
			t.Fatalf("setup %q: %v", line, err)
		}
	}
}

func parseOptions(t *testing.T, text string) Options {
	t.Helper()
	var o Options
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		k, v, _ := strings.Cut(line, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if k == "Timeout" {
			var d time.Duration
			d, err = time.ParseDuration(v)
			o.Timeout = d
		}
		if err != nil {
			t.Fatalf("options %q: %v", line, err)
		}
		switch k {
		case "Timeout":
		case "MaxFileSize":
			o.MaxFileSize = n
		case "MaxTotalSize":
			o.MaxTotalSize = n
		case "MaxTokens":
			o.MaxTokens = int(n)
		case "MaxValueSize":
			o.MaxValueSize = int(n)
		case "MaxResultSize":
			o.MaxResultSize = n
		case "MaxNesting":
			o.MaxNesting = int(n)
		case "MaxResources":
			o.MaxResources = int(n)
		default:
			t.Fatalf("unknown option %q", k)
		}
	}
	return o
}

// A link swapped between a file inside the model and one outside, while
// compiles read it, never leads a compile out: each read is either the
// inside content or a refusal.
func TestSwappedLinkNeverLeadsOut(t *testing.T) {
	outside := outsideDir(t)
	model := t.TempDir()
	writeTree(t, model, map[string]string{
		"main.hcl":   "host \"h\" {\n  file \"/x\" { content = file(\"data\") }\n}\n",
		"inside.txt": "inside\n",
	})
	link := filepath.Join(model, "data")
	targets := []string{"inside.txt", filepath.Join(outside, "secret"), filepath.Join(model, "inside.txt")}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := link + ".new"
			os.Remove(tmp)
			if err := os.Symlink(targets[i%len(targets)], tmp); err == nil {
				os.Rename(tmp, link)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	read, refused := 0, 0
	for i := 0; i < 300; i++ {
		res, err := Compile(t.Context(), model, Options{})
		if out := render(res, err); strings.Contains(out, secret) {
			t.Fatalf("compile %d read outside the model:\n%s", i, out)
		}
		if err == nil {
			read++
		} else {
			refused++
		}
	}
	t.Logf("%d compiles read the inside file, %d were refused", read, refused)
}

// Unchanged reads the recorded inputs as a compile does: a named pipe put
// in place of one is a change, not a hang.
func TestUnchangedDoesNotBlock(t *testing.T) {
	model := t.TempDir()
	writeTree(t, model, map[string]string{
		"main.hcl": "host \"h\" {\n  file \"/x\" { content = file(\"f.txt\") }\n}\n",
		"f.txt":    "data",
	})
	res, err := Compile(t.Context(), model, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, swap := range map[string]func(p string) error{
		"named pipe":     func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"link out":       func(p string) error { return os.Symlink(filepath.Join(outsideDir(t), "secret"), p) },
		"directory":      func(p string) error { return os.Mkdir(p, 0o755) },
		"too large file": func(p string) error { return os.WriteFile(p, make([]byte, DefaultMaxFileSize+1), 0o644) },
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(model, "f.txt")
			os.Remove(p)
			if err := swap(p); err != nil {
				t.Fatal(err)
			}
			done := make(chan bool, 1)
			go func() { done <- Unchanged(model, res.Inputs) }()
			select {
			case unchanged := <-done:
				if unchanged {
					t.Fatalf("got unchanged with f.txt replaced by a %s, want changed", name)
				}
			case <-time.After(time.Minute):
				t.Fatal("Unchanged did not return")
			}
			os.Remove(p)
			writeTree(t, model, map[string]string{"f.txt": "data"})
		})
	}
}

// A --var is scanned like a model file before it is parsed.
func TestVarNesting(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"main.hcl": "variable \"v\" { type = list(any) }\n"})
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	_, err := Compile(t.Context(), dir, Options{Vars: map[string]string{"v": deep}})
	if err == nil || !strings.Contains(err.Error(), "Nesting too deep") {
		t.Fatalf("got %v, want the nesting limit", err)
	}
}

// The caller's own cancellation is the context's error, not a diagnostic.
func TestCancelledCompile(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"main.hcl": "locals {\n  x = [for a in range(1024) : [for b in range(1024) : [for c in range(1024) : 1 if false]]]\n}\n"})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := Compile(ctx, dir, Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// A git module reads only its own checkout: a link in it leading back
// into the project (outside the module), or anywhere else out of it,
// refuses the module when it is fetched, and nothing of it is cached.
func TestGitModuleConfinedToItself(t *testing.T) {
	for _, link := range []string{
		"../../../../secret.txt", // from .tether/modules/<url>/<commit>/leak, the project's file
		"/etc/passwd",
		"sub/../../x",
	} {
		t.Run(link, func(t *testing.T) {
			repo := gittest.New(t)
			repo.Commit(map[string]string{
				"main.hcl": "application \"a\" {\n  file \"/x\" { content = file(\"leak\") }\n}\n",
				"leak":     "->" + link,
			})
			noGit(t)
			project := t.TempDir()
			writeTree(t, project, map[string]string{
				"main.hcl":   "module \"m\" {\n  source = \"" + "git::" + repo.URL() + "\"\n  ref = \"main\"\n}\nhost \"h\" {\n  apply \"m.a\" {}\n}\n",
				"secret.txt": secret,
			})
			_, err := Compile(t.Context(), project, Options{})
			if err == nil || !strings.Contains(err.Error(), "Cannot fetch module") || !strings.Contains(err.Error(), "symbolic link leak points to") ||
				!strings.Contains(err.Error(), "fix the module's repository") || strings.Contains(err.Error(), secret) {
				t.Fatalf("got %v, want the module's link refused", err)
			}
			if left := cacheCheckouts(t, project); len(left) > 0 {
				t.Errorf("the refused module left %v in the cache", left)
			}
		})
	}
}

// A .tether committed as a link out of the project does not lead the
// module cache's writes out, and a lock.json linked to an endless device
// is not read.
func TestModuleCacheStaysInside(t *testing.T) {
	repo := gittest.New(t)
	repo.Commit(map[string]string{"main.hcl": "application \"a\" {\n  file \"/x\" { content = \"x\" }\n}\n"})
	noGit(t)
	main := "module \"m\" {\n  source = \"" + "git::" + repo.URL() + "\"\n  ref = \"main\"\n}\nhost \"h\" {\n  apply \"m.a\" {}\n}\n"

	t.Run("cache linked out", func(t *testing.T) {
		project, elsewhere := t.TempDir(), t.TempDir()
		writeTree(t, project, map[string]string{"main.hcl": main})
		if err := os.Symlink(elsewhere, filepath.Join(project, ".tether")); err != nil {
			t.Fatal(err)
		}
		_, err := Compile(t.Context(), project, Options{})
		if err == nil || !strings.Contains(err.Error(), "module cache .tether/modules leads outside the model directory") {
			t.Fatalf("got %v, want the cache refused", err)
		}
		if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
			t.Fatalf("the compile wrote %d entries outside the project", len(entries))
		}
	})
	t.Run("lock linked to a device", func(t *testing.T) {
		project := t.TempDir()
		writeTree(t, project, map[string]string{"main.hcl": main})
		if err := os.MkdirAll(filepath.Join(project, ModuleCacheDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/zero", filepath.Join(project, ModuleCacheDir, "lock.json")); err != nil {
			t.Fatal(err)
		}
		res, err := boundedCompile(t, project, Options{})
		if err != nil || len(res.Modules) != 1 || res.Modules[0].Commit == "" {
			t.Fatalf("got %v, want the module fetched without the lock", err)
		}
	})
}

// Every limit given as an option is the one applied, and named in its
// diagnostic.
func TestLimitOptions(t *testing.T) {
	src := "locals {\n  s = \"" + strings.Repeat("x", 3000) + "\"\n  l = [for i in range(100) : local.s]\n}\n" +
		"host \"h\" {\n  file \"/x\" { content = \"${local.s}${local.s}\" }\n}\n"
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"value size", Options{MaxValueSize: 5000}, "larger than 5000 bytes"},
		{"nesting", Options{MaxNesting: 3}, "more than 3 levels deep"},
		{"file size", Options{MaxFileSize: 1000}, "larger than 1000 bytes"},
		{"tokens", Options{MaxTokens: 20}, "more than 20 tokens"},
		{"result size", Options{MaxResultSize: 5000}, "more than 5000 bytes (Options.MaxResultSize)"},
		{"defaults", Options{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"main.hcl": src})
			_, err := Compile(t.Context(), dir, tc.opts)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want the model within the default limits", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// A model that could run for hours ends at its deadline with a
// diagnostic at the expression it was evaluating.
func TestCompileTimeout(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"main.hcl": "locals {\n  x = [for a in range(1024) : [for b in range(1024) : [for c in range(1024) : 1 if false]]]\n}\n"})
	_, err := boundedCompile(t, dir, Options{Timeout: 100 * time.Millisecond})
	var le *Error
	if !errors.As(err, &le) || len(le.Diagnostics) != 1 {
		t.Fatalf("got %v, want one diagnostic", err)
	}
	d := le.Diagnostics[0]
	if d.Summary != "Compile timed out" || !strings.Contains(d.Detail, "100ms") || d.Start.Line != 2 {
		t.Fatalf("got %s, want the deadline at line 2", d)
	}
}

// Applications applying each other through for_each are bounded like
// resources.
func TestApplicationFanout(t *testing.T) {
	var b strings.Builder
	for _, app := range []string{"a", "b", "c"} {
		next := map[string]string{"a": "b", "b": "c", "c": "d"}[app]
		fmt.Fprintf(&b, "application %q {\n  apply %q {\n    for_each = toset([for i in range(1000) : tostring(i)])\n  }\n}\n", app, next)
	}
	b.WriteString("application \"d\" {}\nhost \"h\" {\n  apply \"a\" {}\n}\n")
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"main.hcl": b.String()})
	_, err := boundedCompile(t, dir, Options{MaxResources: 5000})
	if err == nil || !strings.Contains(err.Error(), "Too many applications") {
		t.Fatalf("got %v, want the application bound", err)
	}
}

// A directory of more model files than a compile reads is refused from
// its listing, before any is read.
func TestTooManyModelFiles(t *testing.T) {
	was := maxFiles
	maxFiles = 1000
	t.Cleanup(func() { maxFiles = was })
	dir := t.TempDir()
	for i := 0; i <= maxFiles; i++ {
		f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)+".hcl"))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	_, err := Compile(t.Context(), dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "more than 1000 model files") {
		t.Fatalf("got %v, want the file count refused", err)
	}
}
