// Package source fetches the files of a model from where an environment
// keeps them: a git repository (fetched in-process by model/gitfetch, with
// go-git, so the server needs no git binary) or an uploaded tar archive. Everything it writes stays
// inside the destination directory and within Limits; anything it refuses is
// an error classified by one of the sentinels below.
//
// It fetches and resolves, nothing more: which environment has which
// source, and when it is compiled, are the compiler's (package compile);
// it never touches the store (the compiler keeps there what Encode
// returns).
package source

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/tetherhq/tether/model/gitfetch"
)

// Spec says where a model's source is: exactly one of Git and Archive.
type Spec struct {
	Git     *GitSpec
	Archive *ArchiveSpec
}

// GitSpec is a git repository. URL is https://, ssh:// (or user@host:path),
// file:// or http:// (the latter without credentials).
type GitSpec struct {
	URL string
	// Ref is a branch, a tag, a full ref name (refs/...) or a commit id;
	// empty means the remote's HEAD.
	Ref string
	// Subdir is the model's directory inside the repository, slash-separated.
	Subdir string
	// Username goes with Token; empty means "git". Some hosts want a
	// particular one (Bitbucket: x-token-auth, GitLab: oauth2).
	Username string
	Token    Secret // HTTPS basic-auth password or access token
	SSHKey   Secret // PEM private key, unencrypted
	// KnownHosts is known_hosts content that the SSH host key must match;
	// required with ssh.
	KnownHosts string
	// CABundle is PEM certificates trusted for https besides the system's.
	CABundle string
}

// ArchiveSpec is an uploaded archive: tar, or tar compressed with gzip
// (recognised by its content, not a name).
type ArchiveSpec struct {
	Data []byte
	// Subdir is the model's directory inside the archive, slash-separated.
	Subdir string
}

// Format keeps a printed ArchiveSpec short: its size and digest, not its bytes.
func (a ArchiveSpec) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "{Data:%d bytes sha256:%s Subdir:%s}", len(a.Data), archiveDigest(a.Data), a.Subdir)
}

// Secret is a credential: write-only. It prints, formats and marshals as
// "[redacted]" (or nothing when unset); only Reveal returns the value, for
// the code that authenticates or stores it.
type Secret struct{ value string }

// NewSecret wraps a credential.
func NewSecret(value string) Secret { return Secret{value: value} }

// Reveal returns the credential.
func (s Secret) Reveal() string { return s.value }

// IsSet says whether there is a credential.
func (s Secret) IsSet() bool { return s.value != "" }

func (s Secret) String() string {
	if s.value == "" {
		return ""
	}
	return "[redacted]"
}

// GoString redacts %#v.
func (s Secret) GoString() string { return fmt.Sprintf("source.Secret(%q)", s.String()) }

// Format redacts every verb (%v, %+v, %s, %q, %x…).
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// MarshalJSON redacts: a Spec marshalled for a log or a response carries no
// credential.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf("%q", s.String())), nil }

// View is what may be shown of a Spec: where the source is and whether
// credentials are set, never their values.
type View struct {
	Kind          string `json:"kind"` // "git" or "archive"
	URL           string `json:"url,omitempty"`
	Ref           string `json:"ref,omitempty"`
	Subdir        string `json:"subdir,omitempty"`
	Username      string `json:"username,omitempty"`
	HasToken      bool   `json:"has_token,omitempty"`
	HasSSHKey     bool   `json:"has_ssh_key,omitempty"`
	HasKnownHosts bool   `json:"has_known_hosts,omitempty"`
	HasCABundle   bool   `json:"has_ca_bundle,omitempty"`
	ArchiveBytes  int    `json:"archive_bytes,omitempty"`
	ArchiveSHA256 string `json:"archive_sha256,omitempty"`
}

// Redacted returns what may be shown of s.
func (s Spec) Redacted() View {
	switch {
	case s.Git != nil:
		g := s.Git
		return View{Kind: "git", URL: g.URL, Ref: g.Ref, Subdir: g.Subdir, Username: g.Username,
			HasToken: g.Token.IsSet(), HasSSHKey: g.SSHKey.IsSet(), HasKnownHosts: g.KnownHosts != "", HasCABundle: g.CABundle != ""}
	case s.Archive != nil:
		return View{Kind: "archive", Subdir: s.Archive.Subdir, ArchiveBytes: len(s.Archive.Data), ArchiveSHA256: archiveDigest(s.Archive.Data)}
	}
	return View{}
}

// ErrInvalid marks a Spec that Validate refuses (gitfetch's, which checks
// URLs and refs).
var ErrInvalid = gitfetch.ErrInvalid

// Validate checks s without contacting anything.
func (s Spec) Validate() error {
	switch {
	case s.Git != nil && s.Archive != nil:
		return fmt.Errorf("%w: both git and archive are set; a source is one of them", ErrInvalid)
	case s.Git != nil:
		return s.Git.validate()
	case s.Archive != nil:
		if len(s.Archive.Data) == 0 {
			return fmt.Errorf("%w: the archive is empty", ErrInvalid)
		}
		return validSubdir(s.Archive.Subdir)
	}
	return fmt.Errorf("%w: neither git nor archive is set", ErrInvalid)
}

func (g *GitSpec) validate() error {
	scheme, err := g.scheme()
	if err != nil {
		return err
	}
	if err := gitfetch.CheckRef(g.Ref); err != nil {
		return err
	}
	if err := validSubdir(g.Subdir); err != nil {
		return err
	}
	if g.Token.IsSet() && g.SSHKey.IsSet() {
		return fmt.Errorf("%w: both a token and an SSH key are set; https uses the token, ssh the key", ErrInvalid)
	}
	switch scheme {
	case "https":
		if g.SSHKey.IsSet() {
			return fmt.Errorf("%w: an SSH key with an https URL; use an ssh URL or a token", ErrInvalid)
		}
	case "http":
		if g.Token.IsSet() {
			return fmt.Errorf("%w: a token with an http URL would travel in clear text; use https", ErrInvalid)
		}
	case "ssh":
		if g.Token.IsSet() {
			return fmt.Errorf("%w: a token with an ssh URL; use https or an SSH key", ErrInvalid)
		}
		if g.KnownHosts == "" {
			return fmt.Errorf("%w: an ssh URL needs known hosts to check the server's key", ErrInvalid)
		}
	case "file":
		if g.Token.IsSet() || g.SSHKey.IsSet() {
			return fmt.Errorf("%w: credentials with a file URL", ErrInvalid)
		}
	}
	return nil
}

// scheme returns the URL's transport: https, http, ssh or file.
func (g *GitSpec) scheme() (string, error) { return gitfetch.CheckURL(g.URL) }

func validSubdir(dir string) error {
	if dir == "" {
		return nil
	}
	if strings.ContainsRune(dir, 0) || strings.HasPrefix(dir, "/") || path.Clean(dir) != strings.TrimSuffix(dir, "/") || path.Clean(dir) == ".." || strings.HasPrefix(path.Clean(dir), "../") {
		return fmt.Errorf("%w: sub-directory %q is not a clean relative path inside the source", ErrInvalid, dir)
	}
	return nil
}

func archiveDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
