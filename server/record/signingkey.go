package record

import (
	"time"

	"github.com/tetherhq/tether/model"
)

// SigningKeySecret names the secret holding the server's signing key,
// sealed: the key every replica signs with and every agent pins, until a
// rollover's old key is retired.
const SigningKeySecret = "server-signing-key"

// SigningKeys are the server's signing keys as stored: the current one
// (the secret SigningKeySecret, sealed), and the rollover under way.
type SigningKeys struct {
	Current  []byte
	Rollover *SigningKeyRollover
}

// SigningKeyRollover is a rollover of the server's signing key under way.
type SigningKeyRollover struct {
	// PublicKey is the next key; PrivateKey its private half, sealed with
	// the server's key file (as the secrets are).
	PublicKey  []byte
	PrivateKey []byte
	// MadeAt is when `tether server signing-key new` made it.
	MadeAt time.Time
	// SwitchAt, once an operator switched to the next key, is when every
	// server signs with it instead of the current one (the current one is
	// then the previous key, kept until it is retired).
	SwitchAt *time.Time
}

// SigningKeyStatus says where a rollover of the server's signing key
// stands, and which agents are not ready for its next step.
type SigningKeyStatus struct {
	// Phase: "steady" (one key), "announced" (a next key made and
	// announced, the current key signs), "switching" (every server signs
	// with the next key from SwitchAt), "switched" (the next key signs;
	// the previous one is kept for agents that missed the rollover).
	Phase SigningKeyPhase `json:"phase"`
	// Signing is the key the servers sign with now.
	Signing SigningKeyView `json:"signing"`
	// Next is the key announced and not signing yet; Previous the key
	// signing before the switch, kept until retired.
	Next     *SigningKeyView `json:"next,omitempty"`
	Previous *SigningKeyView `json:"previous,omitempty"`
	MadeAt   *time.Time      `json:"made_at,omitempty"`
	SwitchAt *time.Time      `json:"switch_at,omitempty"`
	// Agents counts the accepted agents of every environment; Ready those
	// that take the key the next step needs (the next key before the
	// switch, the signing key after it and when no rollover is under way);
	// Waiting lists the others (at most MaxListedWaiting; WaitingCount
	// counts them all), agents that never said which keys they take (older
	// than rollovers) among them.
	Agents       int            `json:"agents"`
	Ready        int            `json:"ready"`
	Waiting      []WaitingAgent `json:"waiting,omitempty"`
	WaitingCount int            `json:"waiting_count,omitempty"`
	// Sent counts the agents a step sent its messages to: the
	// announcement of `new`, the first command signed by the next key of
	// `switch` (with the rollover first to those that had not taken it).
	Sent int `json:"sent,omitempty"`
	// Note says what an operator should know about the step just taken.
	Note string `json:"note,omitempty"`
}

// SigningKeyPhase names where a rollover of the server's signing key
// stands.
type SigningKeyPhase string

// Phases of a rollover of the server's signing key.
const (
	SigningKeySteady    SigningKeyPhase = "steady"
	SigningKeyAnnounced SigningKeyPhase = "announced"
	SigningKeySwitching SigningKeyPhase = "switching"
	SigningKeySwitched  SigningKeyPhase = "switched"
)

// SigningKeyView is a public signing key.
type SigningKeyView struct {
	Fingerprint string `json:"fingerprint"`
	PublicKey   []byte `json:"public_key"`
}

// WaitingAgent is an accepted agent that does not take the key a
// rollover's next step needs.
type WaitingAgent struct {
	Env       string `json:"env"`
	Agent     string `json:"agent"`
	Connected bool   `json:"connected"`
	// ServerKeys are the fingerprints of the server keys it said it takes
	// (none: it never said, an agent older than signing-key rollovers).
	ServerKeys []string `json:"server_keys,omitempty"`
}

// MaxListedWaiting bounds the agents a SigningKeyStatus lists by name.
const MaxListedWaiting = 100

// SigningKeyStepError refuses a step of a rollover of the server's
// signing key that the rollover's state does not allow now (it wraps
// model.ErrConflict). Its message, written for people, says why and what
// to do; NotReady says agents are not ready for the step (force takes it
// anyway).
type SigningKeyStepError struct {
	Message  string
	NotReady bool
}

func (e *SigningKeyStepError) Error() string { return e.Message }

// Unwrap makes the error a conflict with the stored state.
func (e *SigningKeyStepError) Unwrap() error { return model.ErrConflict }
