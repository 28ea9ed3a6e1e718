package record

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidSource marks a source the server refuses (an unusable URL, a
// credential that does not fit it, an archive that holds what the server
// will not write): its text says why, for the operator.
var ErrInvalidSource = errors.New("invalid source")

// Errors of a push webhook: ErrWebhookRefused when it is not
// authenticated (no source with a webhook secret, a bad signature: the
// answer does not say which), ErrInvalidWebhook when it is malformed.
var (
	ErrWebhookRefused = errors.New("webhook refused")
	ErrInvalidWebhook = errors.New("invalid webhook")
)

// WebhookResult is what a push webhook did.
type WebhookResult struct {
	// Compile says whether it asked for a compile; Why says why (not).
	Compile  bool   `json:"compile"`
	Why      string `json:"why"`
	Provider string `json:"provider"`
	Event    string `json:"event"`
	Delivery string `json:"delivery,omitempty"`
}

// Source is where an environment's model comes from, as the store keeps it:
// a git repository or an uploaded archive. Spec and WebhookSecret hold
// credentials: the server reads them, no API response or log ever carries
// them.
type Source struct {
	Env string
	// Kind is SourceGit or SourceArchive.
	Kind string
	// Spec is the source's description in the server's own encoding,
	// credentials included.
	Spec []byte
	// Archive is the uploaded archive (kind archive); empty when read
	// without it.
	Archive []byte
	// ArchiveSize and ArchiveSHA256 describe the archive even when it was
	// not read.
	ArchiveSize   int64
	ArchiveSHA256 string
	// WebhookSecret authenticates the push webhook; empty: none is set.
	WebhookSecret string
	// PollInterval is how often the repository is asked for a new commit;
	// 0: never (webhooks and operators trigger compiles).
	PollInterval time.Duration
	UpdatedAt    time.Time
	UpdatedBy    string
}

// Source kinds.
const (
	SourceGit     = "git"
	SourceArchive = "archive"
)

// Poll intervals a source may have (besides 0, never).
const (
	MinPollInterval = 10 * time.Second
	MaxPollInterval = 24 * time.Hour
)

// Validate checks what the store relies on.
func (s Source) Validate() error {
	switch {
	case s.Kind != SourceGit && s.Kind != SourceArchive:
		return fmt.Errorf("source kind %q: want %s or %s", s.Kind, SourceGit, SourceArchive)
	case len(s.Spec) == 0:
		return fmt.Errorf("source of %s has no description", s.Env)
	case s.Kind == SourceArchive && len(s.Archive) == 0:
		return fmt.Errorf("archive source of %s has no archive", s.Env)
	case s.Kind == SourceGit && len(s.Archive) != 0:
		return fmt.Errorf("git source of %s carries an archive", s.Env)
	case s.PollInterval != 0 && (s.PollInterval < MinPollInterval || s.PollInterval > MaxPollInterval):
		return fmt.Errorf("poll interval %s: want 0 (never) or between %s and %s", s.PollInterval, MinPollInterval, MaxPollInterval)
	case s.PollInterval != 0 && s.Kind == SourceArchive:
		return fmt.Errorf("an uploaded archive changes only by a new upload: it has no poll interval")
	}
	return nil
}

// SourceRequest sets an environment's source to a git repository. The
// credentials are write-only: no answer carries them. A request that names
// the URL the source has already keeps the credentials it leaves empty (a
// new ref needs no new token); a new URL never inherits them.
type SourceRequest struct {
	URL        string `json:"url"`
	Ref        string `json:"ref,omitempty"`
	Subdir     string `json:"subdir,omitempty"`
	Username   string `json:"username,omitempty"`
	Token      string `json:"token,omitempty"`
	SSHKey     string `json:"ssh_key,omitempty"`
	KnownHosts string `json:"known_hosts,omitempty"`
	CABundle   string `json:"ca_bundle,omitempty"`
	// PollInterval, e.g. "5m"; "" or "0" never polls.
	PollInterval string `json:"poll_interval,omitempty"`
	// WebhookSecret sets the push webhook's secret; empty keeps the one
	// the source has, or makes one when it has none.
	WebhookSecret string `json:"webhook_secret,omitempty"`
	// RotateWebhookSecret makes a new webhook secret.
	RotateWebhookSecret bool `json:"rotate_webhook_secret,omitempty"`
	// NoCredentials drops the credentials the source has.
	NoCredentials bool `json:"no_credentials,omitempty"`
}

// SourceView is what may be shown of a source: where it is and whether
// credentials are set, never their values.
type SourceView struct {
	Env           string `json:"env"`
	Kind          string `json:"kind"`
	URL           string `json:"url,omitempty"`
	Ref           string `json:"ref,omitempty"`
	Subdir        string `json:"subdir,omitempty"`
	Username      string `json:"username,omitempty"`
	HasToken      bool   `json:"has_token,omitempty"`
	HasSSHKey     bool   `json:"has_ssh_key,omitempty"`
	HasKnownHosts bool   `json:"has_known_hosts,omitempty"`
	HasCABundle   bool   `json:"has_ca_bundle,omitempty"`
	ArchiveBytes  int64  `json:"archive_bytes,omitempty"`
	ArchiveSHA256 string `json:"archive_sha256,omitempty"`
	// HasWebhook says whether a webhook secret is set. WebhookSecret is
	// the secret itself, only in the answer that made it (shown once).
	HasWebhook    bool   `json:"has_webhook"`
	WebhookSecret string `json:"webhook_secret,omitempty"`
	// WebhookPath is where the push webhook is received.
	WebhookPath  string    `json:"webhook_path,omitempty"`
	PollInterval string    `json:"poll_interval,omitempty"`
	UpdatedAt    time.Time `json:"updated_at"`
	UpdatedBy    string    `json:"updated_by,omitempty"`
}
