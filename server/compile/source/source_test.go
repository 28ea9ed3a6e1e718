package source

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model/gitfetch/gittest"
)

func fetch(t *testing.T, spec Spec, limits Limits) (string, Revision, error) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "model")
	rev, err := Fetch(context.Background(), spec, dst, limits)
	return dst, rev, err
}

func read(t *testing.T, dst, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dst, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

func TestFetchGitRefs(t *testing.T) {
	r := gittest.New(t)
	first := r.Commit(map[string]string{"main.hcl": "one", "model/web.hcl": "web one"})
	second := r.Commit(map[string]string{"main.hcl": "two", "model/web.hcl": "web two", "model/link.hcl": "->web.hcl"})
	r.Tag("v1", first)
	r.AnnotatedTag("v2", first)
	r.Branch("dev")
	third := r.Commit(map[string]string{"main.hcl": "three"})

	tests := []struct {
		ref, subdir, file, want, rev string
	}{
		{"", "", "main.hcl", "three", third}, // HEAD is dev, checked out last
		{"main", "", "main.hcl", "two", second},
		{"dev", "", "main.hcl", "three", third},
		{"refs/heads/main", "", "main.hcl", "two", second},
		{"v1", "", "main.hcl", "one", first},
		{"v2", "", "main.hcl", "one", first},
		{second, "", "main.hcl", "two", second},
		{first, "", "main.hcl", "one", first}, // no branch points at it
		{"main", "model", "web.hcl", "web two", second},
		{"main", "model/", "link.hcl", "web two", second},
	}
	for _, tt := range tests {
		t.Run(tt.ref+"/"+tt.subdir, func(t *testing.T) {
			dst, rev, err := fetch(t, Spec{Git: &GitSpec{URL: r.URL(), Ref: tt.ref, Subdir: tt.subdir}}, DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if string(rev) != tt.rev {
				t.Errorf("revision %s, want %s", rev, tt.rev)
			}
			if got := read(t, dst, tt.file); got != tt.want {
				t.Errorf("%s: got %q, want %q", tt.file, got, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dst, ".git")); !os.IsNotExist(err) {
				t.Errorf(".git in the checkout: %v", err)
			}
			if tt.subdir != "" {
				if _, err := os.Stat(filepath.Join(dst, "main.hcl")); !os.IsNotExist(err) {
					t.Errorf("a file outside the sub-directory was written: %v", err)
				}
			}
		})
	}
	t.Run("link kept as a link", func(t *testing.T) {
		dst, _, err := fetch(t, Spec{Git: &GitSpec{URL: r.URL(), Ref: "main", Subdir: "model"}}, DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		if target, err := os.Readlink(filepath.Join(dst, "link.hcl")); err != nil || target != "web.hcl" {
			t.Errorf("link.hcl -> %q (%v), want web.hcl", target, err)
		}
	})
}

func TestFetchGitErrors(t *testing.T) {
	r := gittest.New(t)
	r.Commit(map[string]string{"main.hcl": strings.Repeat("x", 2000), "b.hcl": "b"})
	evil := gittest.New(t)
	evil.Commit(map[string]string{"main.hcl": "ok", "evil.hcl": "->/etc/shadow"})
	up := gittest.New(t)
	up.Commit(map[string]string{"model/main.hcl": "ok", "model/up.hcl": "->../secret", "secret": "s"})
	chain := gittest.New(t)
	chain.Commit(map[string]string{"a": "->.", "b": "->a/../x"})

	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}))
	defer unauthorized.Close()
	var gotUser string
	refused := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		gotUser, _, _ = req.BasicAuth()
		w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}))
	defer refused.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: refused.Certificate().Raw}))

	tests := []struct {
		name   string
		spec   GitSpec
		limits Limits
		want   error
		msg    string
	}{
		{"missing repository", GitSpec{URL: "file://" + filepath.Join(t.TempDir(), "none")}, DefaultLimits(), ErrUnreachable, "none"},
		{"closed port", GitSpec{URL: "http://127.0.0.1:1/repo.git"}, DefaultLimits(), ErrUnreachable, "127.0.0.1:1"},
		{"no credentials", GitSpec{URL: unauthorized.URL + "/repo.git"}, DefaultLimits(), ErrAuth, "authentication"},
		{"wrong token", GitSpec{URL: refused.URL + "/repo.git", Token: NewSecret("wrong"), Username: "ci", CABundle: ca}, DefaultLimits(), ErrAuth, "auth"},
		{"unknown branch", GitSpec{URL: r.URL(), Ref: "nope"}, DefaultLimits(), ErrRefNotFound, `"nope"`},
		{"unknown commit", GitSpec{URL: r.URL(), Ref: strings.Repeat("ab", 20)}, DefaultLimits(), ErrRefNotFound, "abab"},
		{"unknown sub-directory", GitSpec{URL: r.URL(), Subdir: "nope"}, DefaultLimits(), ErrRefNotFound, "sub-directory nope"},
		{"over the size limit", GitSpec{URL: r.URL()}, Limits{MaxBytes: 1000, MaxFiles: 10}, ErrLimit, "more than 1000 bytes (Limits.MaxBytes)"},
		{"over the file limit", GitSpec{URL: r.URL()}, Limits{MaxBytes: 1 << 20, MaxFiles: 1}, ErrLimit, "more than 1 files (Limits.MaxFiles)"},
		{"link to /etc/shadow", GitSpec{URL: evil.URL()}, DefaultLimits(), ErrUnsafe, "evil.hcl points to"},
		{"link out of the sub-directory", GitSpec{URL: up.URL(), Subdir: "model"}, DefaultLimits(), ErrUnsafe, "up.hcl"},
		{"chain of links out", GitSpec{URL: chain.URL()}, DefaultLimits(), ErrUnsafe, "leads outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst, rev, err := fetch(t, Spec{Git: &tt.spec}, tt.limits)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v (revision %q), want %v", err, rev, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
			if entries, _ := os.ReadDir(dst); len(entries) > 0 {
				t.Errorf("dst holds %d entries after an error, want none", len(entries))
			}
		})
	}
	if gotUser != "ci" {
		t.Errorf("the TLS server saw user %q, want ci (did the request carry the token?)", gotUser)
	}
}

// Resolve names the revision Fetch would write, for every kind of ref,
// without fetching: what a poll compares with the last fetch.
func TestResolve(t *testing.T) {
	r := gittest.New(t)
	first := r.Commit(map[string]string{"main.hcl": "one"})
	second := r.Commit(map[string]string{"main.hcl": "two"})
	r.Tag("light", first)
	r.AnnotatedTag("annotated", first)
	for _, tt := range []struct{ ref, want string }{
		{"", second}, {"main", second}, {"refs/heads/main", second},
		{"light", first}, {"annotated", first}, {first, first},
	} {
		t.Run(tt.ref, func(t *testing.T) {
			spec := Spec{Git: &GitSpec{URL: r.URL(), Ref: tt.ref}}
			got, err := Resolve(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if _, fetched, err := fetch(t, spec, DefaultLimits()); err != nil || fetched != got {
				t.Errorf("Fetch gave %s (%v), Resolve %s: a poll would see a change that is none", fetched, err, got)
			}
		})
	}
	t.Run("moved branch", func(t *testing.T) {
		third := r.Commit(map[string]string{"main.hcl": "three"})
		if got, err := Resolve(context.Background(), Spec{Git: &GitSpec{URL: r.URL(), Ref: "main"}}); err != nil || string(got) != third {
			t.Errorf("got %s (%v), want the new commit %s", got, err, third)
		}
	})
	for _, tt := range []struct {
		name string
		spec GitSpec
		want error
		msg  string
	}{
		{"unknown ref", GitSpec{URL: r.URL(), Ref: "nope"}, ErrRefNotFound, `"nope"`},
		{"short commit id", GitSpec{URL: r.URL(), Ref: first[:7]}, ErrRefNotFound, "40 hex digits"},
		{"missing repository", GitSpec{URL: "file://" + filepath.Join(t.TempDir(), "none")}, ErrUnreachable, "none"},
		{"invalid ref", GitSpec{URL: r.URL(), Ref: "--upload-pack=x"}, ErrInvalid, "ref"},
		{"ssh without a key", GitSpec{URL: "ssh://git@example.com/m.git", KnownHosts: "example.com ssh-ed25519 AAAA"}, ErrInvalid, "SSH key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rev, err := Resolve(context.Background(), Spec{Git: &tt.spec})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %q (%v), want %v saying %q", rev, err, tt.want, tt.msg)
			}
		})
	}
	t.Run("archive", func(t *testing.T) {
		spec := Spec{Archive: &ArchiveSpec{Data: archive(t, true, entry{name: "main.hcl", body: "x"})}}
		got, err := Resolve(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, fetched, err := fetch(t, spec, DefaultLimits()); err != nil || fetched != got || len(got) != 64 {
			t.Errorf("Resolve %s, Fetch %s (%v): want the same digest", got, fetched, err)
		}
	})
}

func TestFetchDeadline(t *testing.T) {
	r := gittest.New(t)
	r.Commit(map[string]string{"main.hcl": "x"})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := Fetch(ctx, Spec{Git: &GitSpec{URL: r.URL()}}, filepath.Join(t.TempDir(), "m"), DefaultLimits())
	if !errors.Is(err, ErrLimit) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrLimit and DeadlineExceeded", err)
	}
}

func TestFetchDestination(t *testing.T) {
	r := gittest.New(t)
	r.Commit(map[string]string{"main.hcl": "x"})
	dst := t.TempDir()
	if err := os.WriteFile(filepath.Join(dst, "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Fetch(context.Background(), Spec{Git: &GitSpec{URL: r.URL()}}, dst, DefaultLimits()); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("got %v, want a refusal of a non-empty destination", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "old")); err != nil {
		t.Errorf("the refused destination lost its file: %v", err)
	}
}

// entry is one tar entry; typ 0 is a regular file.
type entry struct {
	name string
	typ  byte
	body string
	link string
}

func archive(t *testing.T, gz bool, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ == 0 {
			h.Typeflag = tar.TypeReg
		} else if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if !gz {
		return buf.Bytes()
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(buf.Bytes())
	_ = zw.Close()
	return z.Bytes()
}

func TestFetchArchive(t *testing.T) {
	for _, gz := range []bool{true, false} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			data := archive(t, gz,
				entry{name: "./", typ: tar.TypeDir},
				entry{name: "./README", body: "not the model"},
				entry{name: "./model/", typ: tar.TypeDir},
				entry{name: "./model/main.hcl", body: "main"},
				entry{name: "./model/lib/x.hcl", body: "x"},
				entry{name: "./model/link.hcl", typ: tar.TypeSymlink, link: "lib/x.hcl"},
			)
			dst, rev, err := fetch(t, Spec{Archive: &ArchiveSpec{Data: data, Subdir: "model"}}, DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if want := archiveDigest(data); string(rev) != want || len(rev) != 64 {
				t.Errorf("revision %s, want %s", rev, want)
			}
			if got := read(t, dst, "main.hcl") + read(t, dst, "lib/x.hcl") + read(t, dst, "link.hcl"); got != "mainxx" {
				t.Errorf("contents %q, want mainxx", got)
			}
			if _, err := os.Stat(filepath.Join(dst, "README")); !os.IsNotExist(err) {
				t.Errorf("a file outside the sub-directory was written: %v", err)
			}
		})
	}
}

func TestFetchArchiveHostile(t *testing.T) {
	outside := t.TempDir()
	bomb := make([]entry, 101)
	for i := range bomb {
		bomb[i] = entry{name: fmt.Sprintf("f%d", i), body: "x"}
	}
	small := archive(t, true, entry{name: "a", body: "a"}, entry{name: "b", body: strings.Repeat("b", 600)})
	huge := archive(t, true, entry{name: "big", body: strings.Repeat("0", 1<<20)})
	tests := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"dot-dot", archive(t, true, entry{name: "../x", body: "x"}), ErrUnsafe, "has a .. component"},
		{"dot-dot inside", archive(t, true, entry{name: "a/../../x", body: "x"}), ErrUnsafe, "leads out"},
		{"absolute", archive(t, true, entry{name: filepath.Join(outside, "x"), body: "x"}), ErrUnsafe, "absolute path"},
		{"symlink out", archive(t, true, entry{name: "evil.hcl", typ: tar.TypeSymlink, link: "/etc/shadow"}), ErrUnsafe, "outside the source"},
		{"relative symlink out", archive(t, true, entry{name: "a/evil.hcl", typ: tar.TypeSymlink, link: "../../x"}), ErrUnsafe, "outside the source"},
		{"chain of links out", archive(t, true, entry{name: "a", typ: tar.TypeSymlink, link: "."}, entry{name: "b", typ: tar.TypeSymlink, link: "a/../x"}), ErrUnsafe, "leads outside"},
		{"write through a link", archive(t, true, entry{name: "d", typ: tar.TypeSymlink, link: "."}, entry{name: "d/x", body: "x"}), ErrUnsafe, "below the symbolic link d"},
		{"hard link", archive(t, true, entry{name: "h", typ: tar.TypeLink, link: "/etc/shadow"}), ErrUnsafe, "hard link"},
		{"device", archive(t, true, entry{name: "dev", typ: tar.TypeChar}), ErrUnsafe, "character device"},
		{"fifo", archive(t, true, entry{name: "p", typ: tar.TypeFifo}), ErrUnsafe, "named pipe"},
		{"duplicate", archive(t, true, entry{name: "x", body: "1"}, entry{name: "x", body: "2"}), ErrUnsafe, "appears twice"},
		{"huge file", huge, ErrLimit, "Limits.MaxBytes"},
		{"tar bomb", archive(t, true, bomb...), ErrLimit, "more than 100 entries (Limits.MaxFiles)"},
		{"not an archive", []byte("hello, this is not a tar archive at all, and it goes on for more than one block of 512 bytes? no."), ErrUnsafe, "archive"},
		{"truncated gzip", small[:len(small)-30], ErrUnsafe, "archive"},
		{"missing sub-directory", archive(t, true, entry{name: "a", body: "a"}), ErrRefNotFound, "no sub-directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := ArchiveSpec{Data: tt.data}
			if tt.name == "missing sub-directory" {
				spec.Subdir = "model"
			}
			dst, _, err := fetch(t, Spec{Archive: &spec}, Limits{MaxBytes: 1000, MaxFiles: 100})
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
			if entries, _ := os.ReadDir(dst); len(entries) > 0 {
				t.Errorf("dst holds %d entries after an error, want none", len(entries))
			}
			if entries, _ := os.ReadDir(outside); len(entries) > 0 {
				t.Errorf("a file was written outside dst: %v", entries)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		msg  string // "" = valid
	}{
		{"https", Spec{Git: &GitSpec{URL: "https://example.com/m.git", Token: NewSecret("t")}}, ""},
		{"scp-like ssh", Spec{Git: &GitSpec{URL: "git@example.com:org/m.git", SSHKey: NewSecret("k"), KnownHosts: "example.com ssh-ed25519 AAAA"}}, ""},
		{"archive", Spec{Archive: &ArchiveSpec{Data: []byte{1}}}, ""},
		{"neither", Spec{}, "neither"},
		{"both", Spec{Git: &GitSpec{URL: "https://example.com/m"}, Archive: &ArchiveSpec{Data: []byte{1}}}, "both"},
		{"empty url", Spec{Git: &GitSpec{}}, "URL is empty"},
		{"option as url", Spec{Git: &GitSpec{URL: "--upload-pack=touch /tmp/x"}}, "leading dash"},
		{"option as ref", Spec{Git: &GitSpec{URL: "https://example.com/m", Ref: "--orphan"}}, "ref"},
		{"scheme", Spec{Git: &GitSpec{URL: "ext::sh -c touch% /tmp/pwned"}}, "space"},
		{"password in url", Spec{Git: &GitSpec{URL: "https://u:secret@example.com/m"}}, "password"},
		{"token over http", Spec{Git: &GitSpec{URL: "http://example.com/m", Token: NewSecret("t")}}, "clear text"},
		{"key over https", Spec{Git: &GitSpec{URL: "https://example.com/m", SSHKey: NewSecret("k")}}, "SSH key with an https"},
		{"ssh without known hosts", Spec{Git: &GitSpec{URL: "ssh://git@example.com/m", SSHKey: NewSecret("k")}}, "known hosts"},
		{"subdir out", Spec{Git: &GitSpec{URL: "https://example.com/m", Subdir: "../x"}}, "sub-directory"},
		{"absolute subdir", Spec{Git: &GitSpec{URL: "https://example.com/m", Subdir: "/etc"}}, "sub-directory"},
		{"empty archive", Spec{Archive: &ArchiveSpec{}}, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			switch {
			case tt.msg == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tt.msg != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.msg)):
				t.Errorf("got %v, want ErrInvalid saying %q", err, tt.msg)
			}
		})
	}
}

func TestCredentialsNeverPrinted(t *testing.T) {
	g := &GitSpec{URL: "https://example.com/m", Token: NewSecret("tok-s3cret"), SSHKey: NewSecret("key-s3cret")}
	spec := Spec{Git: g}
	j, _ := json.Marshal(g)
	for _, out := range []string{
		fmt.Sprintf("%v %+v %#v %s %q %x", g, g, g, g.Token, g.Token, g.SSHKey),
		fmt.Sprintf("%v %+v %#v", *g, *g, *g),
		fmt.Sprintf("%v %+v %#v", spec, spec, spec),
		fmt.Sprintf("%+v", spec.Redacted()),
		string(j),
	} {
		if strings.Contains(out, "s3cret") {
			t.Errorf("a credential was printed: %s", out)
		}
	}
	if !strings.Contains(fmt.Sprintf("%+v", *g), "Token:[redacted]") {
		t.Errorf("%%+v = %+v, want Token:[redacted]", *g)
	}
	v := spec.Redacted()
	if !v.HasToken || !v.HasSSHKey || v.URL != g.URL || v.Kind != "git" {
		t.Errorf("Redacted() = %+v, want kind git, the URL and both credentials set", v)
	}
	if (Spec{Git: &GitSpec{URL: "https://example.com/m"}}).Redacted().HasToken {
		t.Error("Redacted() says a token is set when none is")
	}
	if g.Token.Reveal() != "tok-s3cret" {
		t.Error("Reveal lost the credential")
	}
}
