package source

import (
	"encoding/json"
	"fmt"
)

// stored is a Spec's description as the server keeps it, credentials
// included. It is not a wire format: nothing outside the server reads it.
type stored struct {
	URL        string `json:"url,omitempty"`
	Ref        string `json:"ref,omitempty"`
	Subdir     string `json:"subdir,omitempty"`
	Username   string `json:"username,omitempty"`
	Token      string `json:"token,omitempty"`
	SSHKey     string `json:"ssh_key,omitempty"`
	KnownHosts string `json:"known_hosts,omitempty"`
	CABundle   string `json:"ca_bundle,omitempty"`
}

// Kinds of source, as Encode returns them.
const (
	KindGit     = "git"
	KindArchive = "archive"
)

// Encode returns what the server stores of a valid s: its kind, its
// description with the credentials, and the archive's bytes (archives).
func (s Spec) Encode() (kind string, desc []byte, archive []byte, err error) {
	if err := s.Validate(); err != nil {
		return "", nil, nil, err
	}
	var st stored
	if g := s.Git; g != nil {
		kind = KindGit
		st = stored{URL: g.URL, Ref: g.Ref, Subdir: g.Subdir, Username: g.Username, Token: g.Token.Reveal(),
			SSHKey: g.SSHKey.Reveal(), KnownHosts: g.KnownHosts, CABundle: g.CABundle}
	} else {
		kind, archive = KindArchive, s.Archive.Data
		st = stored{Subdir: s.Archive.Subdir}
	}
	desc, err = json.Marshal(st)
	return kind, desc, archive, err
}

// Decode reads back what Encode returned. An archive's bytes may be left
// out (nil): the Spec then describes the archive without holding it, good
// for Redacted but not for Fetch.
func Decode(kind string, desc []byte, archive []byte) (Spec, error) {
	var st stored
	if err := json.Unmarshal(desc, &st); err != nil {
		return Spec{}, fmt.Errorf("%w: stored source description: %w", ErrInvalid, err)
	}
	switch kind {
	case KindGit:
		return Spec{Git: &GitSpec{URL: st.URL, Ref: st.Ref, Subdir: st.Subdir, Username: st.Username, Token: NewSecret(st.Token),
			SSHKey: NewSecret(st.SSHKey), KnownHosts: st.KnownHosts, CABundle: st.CABundle}}, nil
	case KindArchive:
		return Spec{Archive: &ArchiveSpec{Data: archive, Subdir: st.Subdir}}, nil
	}
	return Spec{}, fmt.Errorf("%w: stored source kind %q", ErrInvalid, kind)
}

// Digest is the revision of an archive: the SHA-256 of its bytes.
func Digest(archive []byte) Revision { return Revision(archiveDigest(archive)) }
