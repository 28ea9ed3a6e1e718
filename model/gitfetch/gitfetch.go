// Package gitfetch fetches a git repository at a ref in-process, with
// go-git (no git binary), and writes its files into a directory through an
// os.Root, within limits. It treats the repository as untrusted: a name
// leading out of the directory, a symbolic link resolving outside it, or a
// tree over the limits is refused, and every error is classified by one of
// the sentinels below.
//
// The model compiler fetches its git modules with it, and the server its
// models' sources; the server's archives are written with its Tree, so
// that both kinds of source are held to the same rules.
package gitfetch

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
)

// The classes of errors, for callers to report (errors.Is).
var (
	// ErrInvalid: a URL, ref or credential refused before anything is
	// contacted.
	ErrInvalid = errors.New("invalid source")
	// ErrUnreachable: the repository could not be reached or does not exist.
	ErrUnreachable = errors.New("repository unreachable")
	// ErrAuth: the server refused the credentials, or asked for some.
	ErrAuth = errors.New("authentication refused")
	// ErrRefNotFound: no branch, tag or commit by that name, or no such
	// sub-directory at it.
	ErrRefNotFound = errors.New("ref not found")
	// ErrLimit: the tree is over one of the Limits, or past the deadline.
	ErrLimit = errors.New("over a limit")
	// ErrUnsafe: the tree holds something that is not written: a path
	// leading out, a link pointing out, a device, a malformed archive.
	ErrUnsafe = errors.New("unsafe source")
)

// Limits bound what one fetch writes. The deadline is the context's.
type Limits struct {
	MaxBytes int64 // total size of the files written (the checkout, not the download)
	MaxFiles int   // files, links and (archives) directories written
}

// DefaultLimits fits a large model with room to spare.
func DefaultLimits() Limits { return Limits{MaxBytes: 64 << 20, MaxFiles: 10000} }

// Validate checks the limits.
func (l Limits) Validate() error {
	if l.MaxBytes <= 0 || l.MaxFiles <= 0 {
		return fmt.Errorf("fetch limits: MaxBytes %d and MaxFiles %d must be positive", l.MaxBytes, l.MaxFiles)
	}
	return nil
}

// Auth is how to authenticate to a repository. The zero value sends no
// credentials over https and http, and uses the SSH agent (SSH_AUTH_SOCK)
// with the user's known_hosts files over ssh.
type Auth struct {
	// Username goes with Token, and with SSHKey when the URL names none;
	// empty means "git".
	Username string
	// Token is the https basic-auth password or access token.
	Token string
	// SSHKey is a PEM private key, unencrypted; it needs KnownHosts.
	SSHKey string
	// KnownHosts is known_hosts content the SSH host key must match
	// (empty without SSHKey: the user's known_hosts files).
	KnownHosts string
	// CABundle is PEM certificates trusted for https besides the system's.
	CABundle string
}

// Format keeps credentials out of anything printed: %v of an Auth shows
// which are set, never their values.
func (a Auth) Format(f fmt.State, _ rune) {
	set := func(s string) string {
		if s == "" {
			return ""
		}
		return "[redacted]"
	}
	_, _ = io.WriteString(f, fmt.Sprintf("{Username:%s Token:%s SSHKey:%s KnownHosts:%d bytes CABundle:%d bytes}",
		a.Username, set(a.Token), set(a.SSHKey), len(a.KnownHosts), len(a.CABundle)))
}

var scpLike = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/]`)

// CheckURL returns the transport of a repository URL (https, http, ssh or
// file; user@host:path is ssh), or an ErrInvalid error saying what is
// wrong with it. Nothing is contacted.
func CheckURL(raw string) (string, error) {
	if raw == "" {
		return "", fmt.Errorf("%w: the git URL is empty", ErrInvalid)
	}
	if strings.HasPrefix(raw, "-") || strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", fmt.Errorf("%w: git URL %q has a leading dash, a space or a control character", ErrInvalid, raw)
	}
	if !strings.Contains(raw, "://") && scpLike.MatchString(raw) {
		return "ssh", nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w: git URL: %v", ErrInvalid, err)
	}
	switch u.Scheme {
	case "https", "http", "ssh", "file":
	default:
		return "", fmt.Errorf("%w: git URL %q: scheme %q is not https, http, ssh or file (a repository on this machine is file:///path/to/repo)", ErrInvalid, raw, u.Scheme)
	}
	if _, set := u.User.Password(); set {
		return "", fmt.Errorf("%w: git URL has a password in it; set the token instead", ErrInvalid)
	}
	if u.Scheme != "file" && u.Host == "" {
		return "", fmt.Errorf("%w: git URL %q has no host", ErrInvalid, raw)
	}
	return u.Scheme, nil
}

// CheckRef refuses a ref that cannot name a branch, tag or commit (and
// could be taken for an option or a range); "" is the remote's HEAD.
func CheckRef(ref string) error {
	if strings.HasPrefix(ref, "-") || strings.Contains(ref, "..") ||
		strings.ContainsFunc(ref, func(r rune) bool { return r <= ' ' || r == 0x7f || strings.ContainsRune(`~^:?*[\`, r) }) {
		return fmt.Errorf("%w: ref %q is not a branch, tag or commit id", ErrInvalid, ref)
	}
	return nil
}

// commitID is a full commit id: refs are resolved to one, and a ref that
// is one is taken as it is.
var commitID = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommitID says whether ref is a full commit id (40 hex digits).
func IsCommitID(ref string) bool { return commitID.MatchString(ref) }

// redactURL drops a user name from a URL for messages.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	return raw
}
