// Package bus is how the server and the agents talk: the envelope every
// message travels in, the message kinds and their bodies, the JSON codec,
// ed25519 signing, the Bus interface that transports satisfy, and the
// in-process bus of the embedded mode. The RabbitMQ transport lives in
// bus/amqp; bus/bustest is the contract suite both pass.
package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tetherhq/tether/model"
)

// ProtocolVersion is the envelope version this code speaks.
const ProtocolVersion = 1

// MaxEnvelopeSize bounds an encoded envelope. A desired state larger than this
// must be split by the sender (see docs/protocol.md); the codec refuses it.
const MaxEnvelopeSize = 64 << 20

// Envelope is the unit on the wire.
type Envelope struct {
	V  int    `json:"v"`
	ID string `json:"id"`
	// Kind says what Body holds.
	Kind Kind   `json:"kind"`
	Env  string `json:"env"`
	// Agent is the agent the message is for (commands) or from (events).
	Agent string `json:"agent"`
	// Seq is a per-sender counter, for ordering and deduplication.
	Seq  uint64          `json:"seq"`
	TS   time.Time       `json:"ts"`
	Body json.RawMessage `json:"body"`
	// Sig is the sender's ed25519 signature over the other fields (Sign).
	Sig []byte `json:"sig,omitempty"`
}

// ErrMalformed is wrapped by every error about an envelope that cannot be
// decoded or is not well formed. Transports dead-letter such messages.
var ErrMalformed = errors.New("malformed envelope")

// Validate checks the envelope's fields (not its signature).
func (e *Envelope) Validate() error {
	switch {
	case e.V != ProtocolVersion:
		return fmt.Errorf("%w: protocol version %d, this build speaks %d", ErrMalformed, e.V, ProtocolVersion)
	case !e.Kind.Known():
		return fmt.Errorf("%w: unknown kind %q", ErrMalformed, e.Kind)
	case e.TS.IsZero():
		return fmt.Errorf("%w: %s without a timestamp", ErrMalformed, e.Kind)
	}
	if _, err := uuid.Parse(e.ID); err != nil || len(e.ID) != 36 {
		return fmt.Errorf("%w: id %q is not a UUID", ErrMalformed, e.ID)
	}
	if err := model.ValidateEnvName(e.Env); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if err := model.ValidateAgentName(e.Agent); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if b := bytes.TrimSpace(e.Body); len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("%w: %s body is not a JSON object", ErrMalformed, e.Kind)
	}
	return nil
}

// Encode returns the envelope's JSON form.
func Encode(e *Envelope) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", e.Kind, err)
	}
	if len(b) > MaxEnvelopeSize {
		return nil, fmt.Errorf("encode %s for %s: %d bytes, over the %d-byte limit", e.Kind, e.Agent, len(b), MaxEnvelopeSize)
	}
	return b, nil
}

// Decode parses and validates an envelope. Every error wraps ErrMalformed.
func Decode(b []byte) (*Envelope, error) {
	if len(b) > MaxEnvelopeSize {
		return nil, fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrMalformed, len(b), MaxEnvelopeSize)
	}
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// DecodeBody decodes the body into v, keeping numbers exact (json.Number).
func (e *Envelope) DecodeBody(v any) error {
	if err := model.DecodeJSON(e.Body, v); err != nil {
		return fmt.Errorf("%w: %s body: %w", ErrMalformed, e.Kind, err)
	}
	return nil
}

// String names the envelope in logs.
func (e *Envelope) String() string {
	return fmt.Sprintf("%s %s/%s #%d (%s)", e.Kind, e.Env, e.Agent, e.Seq, e.ID)
}
