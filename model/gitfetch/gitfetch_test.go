package gitfetch

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model/gitfetch/gittest"
)

// fetch writes url at ref into a new directory through an os.Root.
func fetch(t *testing.T, url, ref, subdir string, limits Limits) (string, string, error) {
	t.Helper()
	dst := t.TempDir()
	root, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	commit, err := Fetch(context.Background(), url, ref, Auth{}, Checkout{Root: root, Subdir: subdir, Limits: limits})
	return dst, commit, err
}

// Fetch and Resolve name the same commit for every kind of ref, and the
// checkout holds the tree (or its sub-directory) without .git.
func TestFetchAndResolve(t *testing.T) {
	r := gittest.New(t)
	first := r.Commit(map[string]string{"main.hcl": "one", "mod/a.hcl": "a one", "mod/link.hcl": "->a.hcl"})
	second := r.Commit(map[string]string{"main.hcl": "two"})
	r.AnnotatedTag("v1", first)
	tests := []struct {
		ref, subdir, file, want, commit string
	}{
		{"", "", "main.hcl", "two", second},
		{"main", "", "main.hcl", "two", second},
		{"v1", "", "main.hcl", "one", first},
		{"refs/tags/v1", "mod", "link.hcl", "a one", first},
		{first, "mod/", "a.hcl", "a one", first},
	}
	for _, tt := range tests {
		t.Run(tt.ref+"/"+tt.subdir, func(t *testing.T) {
			resolved, err := Resolve(context.Background(), r.URL(), tt.ref, Auth{})
			if err != nil || resolved != tt.commit {
				t.Errorf("Resolve: got %s (%v), want %s", resolved, err, tt.commit)
			}
			dst, commit, err := fetch(t, r.URL(), tt.ref, tt.subdir, DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if commit != tt.commit {
				t.Errorf("Fetch: got commit %s, want %s", commit, tt.commit)
			}
			if b, err := os.ReadFile(filepath.Join(dst, tt.file)); err != nil || string(b) != tt.want {
				t.Errorf("%s: got %q (%v), want %q", tt.file, b, err, tt.want)
			}
			if _, err := os.Lstat(filepath.Join(dst, ".git")); !os.IsNotExist(err) {
				t.Errorf(".git in the checkout: %v", err)
			}
		})
	}
}

func TestFetchRefuses(t *testing.T) {
	r := gittest.New(t)
	r.Commit(map[string]string{"main.hcl": strings.Repeat("x", 100), "b.hcl": "b"})
	out := gittest.New(t)
	out.Commit(map[string]string{"main.hcl": "ok", "d/evil.hcl": "->../../x"})
	tests := []struct {
		name, url, ref string
		limits         Limits
		want           error
		msg            string
	}{
		{"unknown ref", r.URL(), "nope", DefaultLimits(), ErrRefNotFound, `no branch, tag or commit "nope"`},
		{"short commit id", r.URL(), "abc1234", DefaultLimits(), ErrRefNotFound, "40 hex digits"},
		{"missing repository", "file://" + filepath.Join(t.TempDir(), "none"), "", DefaultLimits(), ErrUnreachable, "none"},
		{"link out", out.URL(), "", DefaultLimits(), ErrUnsafe, `d/evil.hcl points to "../../x"`},
		{"files", r.URL(), "", Limits{MaxBytes: 1 << 20, MaxFiles: 1}, ErrLimit, "more than 1 files"},
		{"bytes", r.URL(), "", Limits{MaxBytes: 50, MaxFiles: 10}, ErrLimit, "more than 50 bytes"},
		{"option as URL", "--upload-pack=touch", "", DefaultLimits(), ErrInvalid, "leading dash"},
		{"range as ref", r.URL(), "main..x", DefaultLimits(), ErrInvalid, "not a branch"},
		{"revision syntax as ref", r.URL(), "main^", DefaultLimits(), ErrInvalid, "not a branch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst, commit, err := fetch(t, tt.url, tt.ref, "", tt.limits)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %q (%v), want %v saying %q", commit, err, tt.want, tt.msg)
			}
			// Limits are checked on the whole tree before anything is
			// written, and the names first of all.
			if tt.want != ErrUnsafe {
				if entries, _ := os.ReadDir(dst); len(entries) > 0 {
					t.Errorf("%d entries written before the refusal", len(entries))
				}
			}
		})
	}
}

func TestFetchDeadline(t *testing.T) {
	r := gittest.New(t)
	r.Commit(map[string]string{"main.hcl": "x"})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, resolveErr := Resolve(ctx, r.URL(), "", Auth{})
	_, fetchErr := Fetch(ctx, r.URL(), "", Auth{}, Checkout{Root: root, Limits: DefaultLimits()})
	for name, err := range map[string]error{"Resolve": resolveErr, "Fetch": fetchErr} {
		if !errors.Is(err, ErrLimit) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: got %v, want ErrLimit and DeadlineExceeded", name, err)
		}
	}
}

func TestCheckURL(t *testing.T) {
	tests := []struct {
		url, scheme, msg string // msg "" = valid
	}{
		{"https://example.com/m.git", "https", ""},
		{"http://example.com/m.git", "http", ""},
		{"ssh://git@example.com/m.git", "ssh", ""},
		{"git@example.com:org/m.git", "ssh", ""},
		{"file:///srv/m", "file", ""},
		{"", "", "empty"},
		{"-oProxyCommand=x", "", "leading dash"},
		{"ext::sh -c x", "", "space"},
		{"git://example.com/m.git", "", `scheme "git"`},
		{"/srv/m", "", "file:///path/to/repo"},
		{"https://u:p@example.com/m", "", "password"},
		{"https:///m", "", "no host"},
	}
	for _, tt := range tests {
		scheme, err := CheckURL(tt.url)
		switch {
		case tt.msg == "" && (err != nil || scheme != tt.scheme):
			t.Errorf("CheckURL(%q) = %q, %v; want %q", tt.url, scheme, err, tt.scheme)
		case tt.msg != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.msg)):
			t.Errorf("CheckURL(%q): got %v, want ErrInvalid saying %q", tt.url, err, tt.msg)
		}
	}
}

func TestAuth(t *testing.T) {
	a := Auth{Username: "ci", Token: "tok-s3cret", SSHKey: "key-s3cret", KnownHosts: "h ssh-ed25519 AAAA"}
	for _, out := range []string{fmt.Sprintf("%v %+v %#v %s", a, a, a, a), fmt.Sprint(&a)} {
		if strings.Contains(out, "s3cret") {
			t.Errorf("a credential was printed: %s", out)
		}
		if !strings.Contains(out, "Token:[redacted]") {
			t.Errorf("%s does not say a token is set", out)
		}
	}
	if _, _, err := (Auth{SSHKey: "k"}).method("ssh://git@example.com/m", "ssh"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "known hosts") {
		t.Errorf("an SSH key without known hosts: got %v, want ErrInvalid", err)
	}
	if _, _, err := (Auth{SSHKey: "not a key", KnownHosts: "example.com ssh-ed25519 AAAA"}).method("ssh://git@example.com/m", "ssh"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "SSH key") {
		t.Errorf("a malformed SSH key: got %v, want ErrInvalid", err)
	}
}

// Without a key, ssh goes through the SSH agent and the user's known
// hosts, as git does; either missing is an authentication error saying so.
func TestSSHWithoutAKey(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	t.Setenv("SSH_KNOWN_HOSTS", filepath.Join(t.TempDir(), "none"))
	if _, _, err := (Auth{}).method("git@example.com:m.git", "ssh"); !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "no known hosts") {
		t.Errorf("no known_hosts: got %v, want ErrAuth saying so", err)
	}
	if _, _, err := (Auth{KnownHosts: knownHost(t, "example.com")}).method("git@example.com:m.git", "ssh"); !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "SSH agent") {
		t.Errorf("no SSH agent: got %v, want ErrAuth saying so", err)
	}
}

// knownHost is a known_hosts line for host with a new ed25519 key.
func knownHost(t *testing.T, host string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	var wire []byte
	for _, part := range [][]byte{[]byte("ssh-ed25519"), pub} {
		wire = binary.BigEndian.AppendUint32(wire, uint32(len(part)))
		wire = append(wire, part...)
	}
	return host + " ssh-ed25519 " + base64.StdEncoding.EncodeToString(wire)
}

func TestResolvesInside(t *testing.T) {
	tests := []struct {
		links map[string]string
		name  string
		want  bool
	}{
		{map[string]string{"l": "x"}, "l", true},
		{map[string]string{"d/l": "../x"}, "d/l", true},
		{map[string]string{"l": "../x"}, "l", false},
		{map[string]string{"a": ".", "b": "a/../x"}, "b", false},
		{map[string]string{"a": "d/e", "b": "a/../x"}, "b", true},
		{map[string]string{"a": "b", "b": "a"}, "a", false}, // a loop
		{map[string]string{"a": "/etc"}, "a", false},
	}
	for _, tt := range tests {
		if got := resolvesInside(tt.links, tt.name); got != tt.want {
			t.Errorf("resolvesInside(%v, %s) = %v, want %v", tt.links, tt.name, got, tt.want)
		}
	}
}
