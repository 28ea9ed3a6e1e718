package docs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/bus/amqp"
	"github.com/tetherhq/tether/bus/amqp/amqptest"
	"github.com/tetherhq/tether/model/testenv"
	"github.com/tetherhq/tether/server/store/postgres/pgtest"
)

// marker is the line before a shell block that the test runs. A marker may
// name the services the block needs: `<!-- runnable: postgres rabbitmq -->`.
const marker = "<!-- runnable"

// services a block may need, each checked (testenv.Need) before it runs:
// libvirt is libvirtd's system instance, and root to use it.
var services = []string{"postgres", "rabbitmq", "libvirt"}

// blockTimeout bounds one block: a block that hangs fails. A block that
// makes machines (libvirt) boots them under software emulation: it has
// longer.
const (
	blockTimeout        = 90 * time.Second
	libvirtBlockTimeout = 6 * time.Minute
)

// block is a shell block of a document marked runnable.
type block struct {
	file   string
	line   int // of the opening fence
	needs  []string
	script string
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// runnableBlocks returns the blocks of a Markdown document marked runnable.
// A marker that is not followed by a shell block, or that names a service
// the test does not know, is an error: a typo must not drop a block.
func runnableBlocks(file string, src []byte) ([]block, error) {
	lines := strings.Split(string(src), "\n")
	var out []block
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, marker) {
			continue
		}
		rest, ok := strings.CutSuffix(strings.TrimPrefix(l, marker), "-->")
		if !ok {
			return nil, fmt.Errorf("%s:%d: a runnable marker is one line: %s ... -->", file, i+1, marker)
		}
		var needs []string
		if rest = strings.TrimSpace(rest); rest != "" {
			list, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return nil, fmt.Errorf("%s:%d: %q: write %s --> or %s: SERVICE... -->", file, i+1, l, marker, marker)
			}
			for _, s := range strings.Fields(list) {
				if !slices.Contains(services, s) {
					return nil, fmt.Errorf("%s:%d: unknown service %q: want one of %s", file, i+1, s, strings.Join(services, ", "))
				}
				needs = append(needs, s)
			}
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			return nil, fmt.Errorf("%s:%d: a runnable marker must be followed by a shell block (```sh)", file, i+1)
		}
		if info := strings.TrimSpace(strings.TrimPrefix(lines[i+1], "```")); info != "" && info != "sh" && info != "bash" {
			return nil, fmt.Errorf("%s:%d: a runnable block is shell (```sh), not %q", file, i+2, info)
		}
		b := block{file: file, line: i + 2, needs: needs}
		var body []string
		closed := false
		for i += 2; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == "```" {
				closed = true
				break
			}
			body = append(body, lines[i])
		}
		if !closed {
			return nil, fmt.Errorf("%s:%d: the runnable block is not closed", file, b.line)
		}
		b.script = strings.Join(body, "\n") + "\n"
		out = append(out, b)
	}
	return out, nil
}

// prelude runs before every block: any failing command fails the block,
// and make uses the tether binary under test instead of building one.
const prelude = "set -eo pipefail\nmake() { command make -o build \"$@\"; }\n"

// runBlock runs b's script with bash in dir and env, in a process group of
// its own that is ended (what the block left in the background with it)
// when the script is done. It returns the block's output, and an error if
// it failed or ran longer than timeout.
func runBlock(b block, dir string, env []string, timeout time.Duration) (string, error) {
	out, err := os.CreateTemp("", "tether-doc-block-*.log")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", prelude+b.script)
	cmd.Dir, cmd.Env = dir, env
	// The output is a file, not a pipe, so Wait returns when bash does,
	// not when the last background process closes it.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Run()
	if cmd.Process != nil {
		endGroup(cmd.Process.Pid)
	}
	text, _ := os.ReadFile(out.Name())
	if ctx.Err() != nil {
		return string(text), fmt.Errorf("%s: still running after %s", b, timeout)
	}
	if err != nil {
		return string(text), fmt.Errorf("%s: %w", b, err)
	}
	return string(text), nil
}

// endGroup stops what is left of a process group: SIGTERM, and SIGKILL
// for what still runs 10 s later.
func endGroup(pgid int) {
	if err := syscall.Kill(-pgid, syscall.SIGTERM); errors.Is(err, syscall.ESRCH) {
		return
	}
	for range 100 {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// documents are the files whose runnable blocks are run: README.md and
// docs/*.md, relative to the repository.
func documents(t *testing.T, repo string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(repo, d)
		files = append(files, rel)
	}
	return files
}

// TestRunnableBlocks runs every runnable block of the documentation with
// a tether built from this tree first on PATH, each in a directory of its
// own holding a copy of examples/ and the Makefile (make runs with
// `-o build`: bin/tether is the binary under test), HOME there too, and
// no TETHER_* variables from the test's environment.
func TestRunnableBlocks(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	for _, f := range documents(t, repo) {
		src, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		bs, err := runnableBlocks(f, src)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	// The first thing the README asks a newcomer to run is checked.
	if !slices.ContainsFunc(blocks, func(b block) bool { return b.file == "README.md" && strings.Contains(b.script, "make demo") }) {
		t.Fatal("README.md has no runnable block with `make demo`: mark its first commands <!-- runnable -->")
	}

	bin := filepath.Join(t.TempDir(), "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "tether"), ".")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tether: %v\n%s", err, out)
	}
	// tether-agent beside it, static (as make build makes it): what
	// `tether distribution make-initrd` puts in a machine.
	build = exec.Command("go", "build", "-o", filepath.Join(bin, "tether-agent"), "./cli/tether-agent")
	build.Dir, build.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tether-agent: %v\n%s", err, out)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	for _, b := range blocks {
		t.Run(b.String(), func(t *testing.T) {
			for _, s := range b.needs {
				need(t, s)
			}
			dir := t.TempDir()
			if err := os.CopyFS(filepath.Join(dir, "examples"), os.DirFS(filepath.Join(repo, "examples"))); err != nil {
				t.Fatal(err)
			}
			mk, err := os.ReadFile(filepath.Join(repo, "Makefile"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "Makefile"), mk, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(bin, "tether"), filepath.Join(dir, "bin", "tether")); err != nil {
				t.Fatal(err)
			}
			home := filepath.Join(dir, ".home")
			if err := os.Mkdir(home, 0o700); err != nil {
				t.Fatal(err)
			}
			freePorts(t, b)
			gitCheckout(t, dir)
			blockEnv := append(slices.Clip(env), "HOME="+home)
			if slices.Contains(b.needs, "postgres") {
				dropNewDatabases(t)
			}
			if slices.Contains(b.needs, "rabbitmq") {
				blockEnv = append(blockEnv, "TETHER_AMQP_NAMESPACE="+brokerNamespace(t))
			}
			timeout := blockTimeout
			if slices.Contains(b.needs, "libvirt") {
				timeout = libvirtBlockTimeout
			}
			out, err := runBlock(b, dir, blockEnv, timeout)
			if err != nil {
				t.Fatalf("%v\n--- the block ---\n%s--- its output ---\n%s", err, b.script, tail(out, 8000))
			}
		})
	}
}

// need checks that a service a block needs is up (testenv.Need: skipped
// loudly, or failed where tests must run).
func need(t *testing.T, service string) {
	t.Helper()
	switch service {
	case "postgres":
		pgtest.URL(t)
	case "rabbitmq":
		u, err := url.Parse(amqptest.URL())
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
		if err == nil {
			c.Close()
		}
		testenv.Need(t, err == nil, fmt.Sprintf("RabbitMQ at %s is not reachable (%v): start it with `rabbitmq-server -detached` or set TETHER_TEST_AMQP", u.Host, err))
	case "libvirt":
		testenv.Need(t, os.Geteuid() == 0, "the block makes machines under libvirt's system daemon: it needs root")
		out, err := exec.Command("virsh", "-c", "qemu:///system", "version").CombinedOutput()
		testenv.Need(t, err == nil, fmt.Sprintf("libvirtd does not answer (%v: %s): install and start it (make setup)", err, strings.TrimSpace(string(out))))
	}
}

// listenAddr is an address a block has a server listen on, or talks to.
var listenAddr = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)

// freePorts checks that the local addresses a block names, but for the
// services' own, are free: a server the block starts must not find its
// port taken, nor its commands reach another server there.
func freePorts(t *testing.T, b block) {
	t.Helper()
	for _, m := range listenAddr.FindAllStringSubmatch(b.script, -1) {
		if m[1] == "5432" || m[1] == "5672" {
			continue
		}
		c, err := net.DialTimeout("tcp", m[0], time.Second)
		if err == nil {
			c.Close()
		}
		testenv.Need(t, err != nil, fmt.Sprintf("%s is taken (another tether server?): the block %s starts a server there", m[0], b))
	}
}

// gitCheckout makes dir a git repository with one commit of what it holds,
// as the checkout a reader runs the commands in (a server reads a model
// from `file://$PWD`). .home is left out.
func gitCheckout(t *testing.T, dir string) {
	t.Helper()
	_, err := exec.LookPath("git")
	testenv.Need(t, err == nil, "git is not installed: the documentation's blocks run in a git checkout (make setup installs it)")
	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte(".home/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "the documentation's checkout"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=docs", "GIT_AUTHOR_EMAIL=docs@example.com",
			"GIT_COMMITTER_NAME=docs", "GIT_COMMITTER_EMAIL=docs@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// dropNewDatabases drops, when the test ends, the databases that a block
// created (`createdb tether`): those absent before it ran. A database that
// exists already is left alone, and the block creating it fails.
func dropNewDatabases(t *testing.T) {
	t.Helper()
	u := pgtest.URL(t)
	_, err := exec.LookPath("psql")
	testenv.Need(t, err == nil, "psql is not installed (package postgresql-client): the documentation's server blocks use createdb")
	list := func() []string {
		out, err := exec.Command("psql", u, "-Atc", "SELECT datname FROM pg_database").Output()
		if err != nil {
			t.Fatalf("list databases: %v", err)
		}
		return strings.Fields(string(out))
	}
	before := list()
	t.Cleanup(func() {
		for _, db := range list() {
			if slices.Contains(before, db) {
				continue
			}
			q := `DROP DATABASE "` + strings.ReplaceAll(db, `"`, `""`) + `" WITH (FORCE)`
			if out, err := exec.Command("psql", u, "-c", q).CombinedOutput(); err != nil {
				t.Errorf("drop the database %s the block created: %v\n%s", db, err, out)
			}
		}
	})
}

// brokerNamespace is a namespace of the block's own on the broker
// (TETHER_AMQP_NAMESPACE, which the server and the agents read), so
// blocks run before leave nothing it reads; its queues and exchanges are
// deleted when the test ends.
func brokerNamespace(t *testing.T) string {
	t.Helper()
	cfg := amqptest.Config(t)
	cfg.Namespace = "tetherdocs." + strings.TrimPrefix(cfg.Namespace, "tethertest.")
	t.Cleanup(func() {
		// The inboxes are the agents' queues: the ones rabbitmqctl lists
		// under the namespace, where it is installed.
		var inboxes []string
		if out, err := exec.Command("rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name").Output(); err == nil {
			for _, q := range strings.Fields(string(out)) {
				if strings.HasPrefix(q, cfg.Namespace+".agent.") {
					inboxes = append(inboxes, q)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := amqp.DeleteTopology(ctx, cfg, inboxes); err != nil {
			t.Logf("delete the block's broker namespace %s: %v", cfg.Namespace, err)
		}
	})
	return cfg.Namespace
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// The runner must be able to fail: a block whose command fails, one that
// hangs, and markers that would silently drop a block are all caught, and
// what a block leaves in the background is ended with it.
func TestRunnerCatchesBrokenBlocks(t *testing.T) {
	parse := func(t *testing.T, md string) []block {
		t.Helper()
		bs, err := runnableBlocks("test.md", []byte(md))
		if err != nil {
			t.Fatal(err)
		}
		return bs
	}
	env := os.Environ()

	t.Run("a failing command fails the block", func(t *testing.T) {
		bs := parse(t, "text\n\n<!-- runnable -->\n```sh\necho first\nfalse\necho after\n```\n\n```sh\nunmarked\n```\n")
		if len(bs) != 1 || bs[0].line != 4 {
			t.Fatalf("got %d blocks (%v), want the one marked, at line 4", len(bs), bs)
		}
		out, err := runBlock(bs[0], t.TempDir(), env, time.Minute)
		if err == nil {
			t.Fatalf("a block running `false` passed; output %q", out)
		}
		if !strings.Contains(out, "first") || strings.Contains(out, "after") {
			t.Errorf("output %q: want the block stopped at the failing command", out)
		}
	})
	t.Run("a failing command inside a pipe fails the block", func(t *testing.T) {
		bs := parse(t, "<!-- runnable -->\n```\nnonexistent-command-xyz | cat\n```\n")
		if _, err := runBlock(bs[0], t.TempDir(), env, time.Minute); err == nil {
			t.Fatal("a failing command piped into cat passed")
		}
	})
	t.Run("a good block passes and its background is ended", func(t *testing.T) {
		dir := t.TempDir()
		bs := parse(t, "<!-- runnable -->\n```sh\nsleep 300 &\necho $! > pid\necho done\n```\n")
		out, err := runBlock(bs[0], dir, env, time.Minute)
		if err != nil || !strings.Contains(out, "done") {
			t.Fatalf("got %q, %v; want done, nil", out, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			t.Fatal(err)
		}
		var pid int
		if _, err := fmt.Sscan(string(b), &pid); err != nil {
			t.Fatal(err)
		}
		// Reaped by init once killed: a process that still answers to
		// signal 0 and is not a zombie was left running.
		if err := syscall.Kill(pid, 0); err == nil && !zombie(pid) {
			t.Errorf("the block's background process %d still runs", pid)
		}
	})
	t.Run("a hanging block fails", func(t *testing.T) {
		bs := parse(t, "<!-- runnable -->\n```sh\nsleep 300\n```\n")
		if _, err := runBlock(bs[0], t.TempDir(), env, time.Second); err == nil || !strings.Contains(err.Error(), "still running") {
			t.Fatalf("got %v, want still running", err)
		}
	})
	for _, c := range []struct{ name, md, want string }{
		{"marker without a block", "<!-- runnable -->\n\n```sh\ntrue\n```\n", "must be followed by a shell block"},
		{"not shell", "<!-- runnable -->\n```hcl\nhost \"x\" {}\n```\n", "is shell"},
		{"unknown service", "<!-- runnable: mysql -->\n```sh\ntrue\n```\n", "unknown service"},
		{"garbled marker", "<!-- runnable postgres -->\n```sh\ntrue\n```\n", "write <!-- runnable -->"},
		{"not closed", "<!-- runnable -->\n```sh\ntrue\n", "not closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := runnableBlocks("test.md", []byte(c.md))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// zombie says whether pid has exited and waits for its parent to reap it.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if state, ok := strings.CutPrefix(sc.Text(), "State:"); ok {
			return strings.Contains(state, "Z")
		}
	}
	return false
}
