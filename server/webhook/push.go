package webhook

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Push is what a push delivery says.
type Push struct {
	// Ref is the full ref pushed: refs/heads/main, refs/tags/v1.
	Ref string
	// After is the id the ref points at after the push: for GitLab the
	// commit checked out (checkout_sha), elsewhere the ref's new value (for
	// an annotated tag, the tag object). All zeros when Deleted.
	After string
	// Deleted: the push removed the ref.
	Deleted bool
	// DefaultBranch is the repository's default branch ("main"), the
	// remote's HEAD; empty when the payload does not say.
	DefaultBranch string
	// Repository names the repository, for logs: its full name
	// ("owner/name", "group/sub/project"), else its web address.
	Repository string
}

// payload is what this package reads of a push payload: GitHub's, Gitea's
// and Forgejo's name the repository under "repository", GitLab's under
// "project".
type payload struct {
	Ref         string  `json:"ref"`
	After       string  `json:"after"`
	CheckoutSHA *string `json:"checkout_sha"` // GitLab; null when the ref was deleted
	Deleted     bool    `json:"deleted"`      // GitHub
	Repository  struct {
		FullName      string `json:"full_name"`
		DefaultBranch string `json:"default_branch"`
		HTMLURL       string `json:"html_url"`
	} `json:"repository"`
	Project struct {
		PathWithNamespace string `json:"path_with_namespace"`
		DefaultBranch     string `json:"default_branch"`
		WebURL            string `json:"web_url"`
	} `json:"project"`
}

// read normalizes d.Event and, for a push, reads the payload into d.Push.
func (d *Delivery) read(h http.Header, body []byte) error {
	isPush := d.Event == EventPush
	if d.Provider == GitLab {
		isPush = d.Event == "Push Hook" || d.Event == "Tag Push Hook"
	}
	if !isPush {
		return nil // a ping, a test, or an event this package does not read
	}
	raw, err := jsonOf(h, body)
	if err != nil {
		return err
	}
	var p payload
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("%w: %s %s payload: %v", ErrInvalid, d.Provider, d.Event, err)
	}
	push := &Push{Ref: p.Ref, After: p.After, Deleted: p.Deleted,
		DefaultBranch: p.Repository.DefaultBranch, Repository: cmp.Or(p.Repository.FullName, p.Repository.HTMLURL)}
	if d.Provider == GitLab {
		if p.CheckoutSHA != nil && *p.CheckoutSHA != "" {
			push.After = *p.CheckoutSHA
		}
		push.DefaultBranch = p.Project.DefaultBranch
		push.Repository = cmp.Or(p.Project.PathWithNamespace, p.Project.WebURL)
	}
	if !strings.HasPrefix(push.Ref, "refs/") || strings.ContainsFunc(push.Ref, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("%w: %s push payload: ref %q is not a full ref (refs/...)", ErrInvalid, d.Provider, clip(push.Ref))
	}
	if b, err := hex.DecodeString(push.After); err != nil || (len(b) != 20 && len(b) != 32) {
		return fmt.Errorf("%w: %s push payload: after %q is not a commit id", ErrInvalid, d.Provider, clip(push.After))
	}
	if strings.Trim(push.After, "0") == "" {
		push.Deleted = true
	}
	d.Event = EventPush
	if strings.HasPrefix(push.Ref, "refs/tags/") {
		d.Event = EventTagPush
	}
	d.Push = push
	return nil
}

// clip shortens a payload's value for an error message.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// jsonOf returns the JSON of a body: the body itself, or the "payload"
// field of a form (GitHub's and Gitea's application/x-www-form-urlencoded
// content type).
func jsonOf(h http.Header, body []byte) ([]byte, error) {
	media, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil || media != "application/x-www-form-urlencoded" {
		return body, nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: form body: %v", ErrInvalid, err)
	}
	if len(form["payload"]) != 1 {
		return nil, fmt.Errorf("%w: form body without exactly one payload field", ErrInvalid)
	}
	return []byte(form.Get("payload")), nil
}

// Matches says whether d is a push that concerns a source following ref,
// and why, for logs. ref is the source's as configured:
//
//   - "" (or "HEAD"): the remote's HEAD, which is its default branch. A
//     push to a branch matches when it is to the default branch, or when
//     the payload does not name the default branch (better a compile too
//     many than a push missed); a tag push never does.
//   - a full ref ("refs/heads/x", "refs/tags/v1"): a push to that ref.
//   - a commit id (40 hex digits): never; the source is pinned.
//   - a short name ("main", "v1"): a push to the branch or the tag of that
//     name, as the source resolves a name to either.
//
// Nothing matches a push that deletes its ref: there is nothing to compile.
func (d Delivery) Matches(ref string) (bool, string) {
	p := d.Push
	switch {
	case p == nil:
		return false, fmt.Sprintf("a %s event, not a push", d.Event)
	case p.Deleted:
		return false, fmt.Sprintf("the push deletes %s", p.Ref)
	case ref == "" || ref == "HEAD":
		switch {
		case !strings.HasPrefix(p.Ref, "refs/heads/"):
			return false, fmt.Sprintf("a push to %s, and the source follows the remote's HEAD, a branch", p.Ref)
		case p.DefaultBranch == "":
			return true, fmt.Sprintf("a push to %s, and the source follows the remote's HEAD, which the payload does not name", p.Ref)
		case p.Ref == "refs/heads/"+p.DefaultBranch:
			return true, fmt.Sprintf("a push to %s, the default branch the source follows", p.Ref)
		}
		return false, fmt.Sprintf("a push to %s, and the source follows the default branch %s", p.Ref, p.DefaultBranch)
	case isCommitID(ref):
		return false, fmt.Sprintf("the source is pinned to commit %s", ref)
	case p.Ref == ref || p.Ref == "refs/heads/"+ref || p.Ref == "refs/tags/"+ref:
		return true, fmt.Sprintf("a push to %s, which the source follows", p.Ref)
	}
	return false, fmt.Sprintf("a push to %s, and the source follows %s", p.Ref, ref)
}

// isCommitID says whether ref is a commit id as the source reads one.
func isCommitID(ref string) bool {
	return len(ref) == 40 && strings.Trim(ref, "0123456789abcdef") == ""
}
