package bus

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/model"
)

// An agent logs in to the broker as itself: its user name names its
// environment, its name and its public key, and its password is a
// short-lived statement signed by that key. The broker asks the server
// (its HTTP authentication backend) whether the login holds and what the
// user may do; the server answers from what it knows of the agent, so
// every agent has its own rights and no shared password exists.
//
//	user:     agent:<env>:<name>:<public key, base64url>
//	password: v1.<unix time issued>.<signature, base64url>
//
// The signature covers loginDomain, the user name and the time, so a
// password is good only for its user and only while it is fresh.

// loginPrefix starts every agent's broker user name.
const loginPrefix = "agent:"

// loginDomain separates login signatures from any other use of the key.
const loginDomain = "tether.broker-login.v1"

// ErrBadLogin: a broker login that is not an agent's, or whose password
// does not hold.
var ErrBadLogin = errors.New("bad broker login")

// BrokerLogin is an agent's identity on the broker.
type BrokerLogin struct {
	Env, Agent string
	Key        ed25519.PublicKey
}

// User is the broker user name of l.
func (l BrokerLogin) User() string {
	return BrokerUserPrefix(l.Env, l.Agent) + base64.RawURLEncoding.EncodeToString(l.Key)
}

// BrokerUserPrefix starts the broker user names of env/name, whatever
// their key.
func BrokerUserPrefix(env, name string) string { return loginPrefix + env + ":" + name + ":" }

// LoginCredentials returns the user name and a fresh password with which
// the agent env/name, holding key, logs in to the broker.
func LoginCredentials(key ed25519.PrivateKey, env, name string, now time.Time) (user, password string) {
	user = BrokerLogin{Env: env, Agent: name, Key: key.Public().(ed25519.PublicKey)}.User()
	issued := strconv.FormatInt(now.Unix(), 10)
	sig := ed25519.Sign(key, loginInput(user, issued))
	return user, "v1." + issued + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func loginInput(user, issued string) []byte {
	return []byte(loginDomain + "\n" + user + "\n" + issued)
}

// ParseBrokerUser reads an agent's broker user name. It checks the form
// only: whether the user may log in is the password's business.
func ParseBrokerUser(user string) (BrokerLogin, error) {
	rest, ok := strings.CutPrefix(user, loginPrefix)
	if !ok {
		return BrokerLogin{}, fmt.Errorf("%w: user %q is not an agent's (agent:<env>:<name>:<key>)", ErrBadLogin, model.Clip(user, 80))
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return BrokerLogin{}, fmt.Errorf("%w: user %q: want agent:<env>:<name>:<key>", ErrBadLogin, model.Clip(user, 80))
	}
	if err := model.ValidateEnvName(parts[0]); err != nil {
		return BrokerLogin{}, fmt.Errorf("%w: %w", ErrBadLogin, err)
	}
	if err := model.ValidateAgentName(parts[1]); err != nil {
		return BrokerLogin{}, fmt.Errorf("%w: %w", ErrBadLogin, err)
	}
	key, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(key) != ed25519.PublicKeySize {
		return BrokerLogin{}, fmt.Errorf("%w: user %q: the key is not a base64url ed25519 public key", ErrBadLogin, model.Clip(user, 80))
	}
	return BrokerLogin{Env: parts[0], Agent: parts[1], Key: key}, nil
}

// CheckLogin verifies an agent's broker login: the password is signed by
// the key the user name holds, and was issued within skew of now (either
// way: a host's clock may be off). It returns who logs in.
func CheckLogin(user, password string, now time.Time, skew time.Duration) (BrokerLogin, error) {
	l, err := ParseBrokerUser(user)
	if err != nil {
		return BrokerLogin{}, err
	}
	parts := strings.Split(password, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return BrokerLogin{}, fmt.Errorf("%w: %s: the password is not an agent's login statement", ErrBadLogin, l)
	}
	issued, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return BrokerLogin{}, fmt.Errorf("%w: %s: the login's time is not a number", ErrBadLogin, l)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != ed25519.SignatureSize || !ed25519.Verify(l.Key, loginInput(user, parts[1]), sig) {
		return BrokerLogin{}, fmt.Errorf("%w: %s: the password is not signed by the key the user name holds", ErrBadLogin, l)
	}
	if d := now.Sub(time.Unix(issued, 0)); d > skew || d < -skew {
		return BrokerLogin{}, fmt.Errorf("%w: %s: the login was issued %s from the broker's time, more than the %s allowed: is the host's clock right?",
			ErrBadLogin, l, d.Round(time.Second), skew)
	}
	return l, nil
}

// BrokerConnection is one client connection of the broker, as its
// management API lists it.
type BrokerConnection struct {
	// Name is the broker's name for it ("10.0.0.7:51234 -> 10.0.0.2:5671").
	Name string
	// User is the user it logged in as (an agent's: BrokerLogin.User).
	User string
	// ConnectedAt is when it opened.
	ConnectedAt time.Time
	// Channels is how many channels it has open.
	Channels int
}

// String names the agent and its key's fingerprint.
func (l BrokerLogin) String() string {
	return l.Env + "/" + l.Agent + " (key " + Fingerprint(l.Key) + ")"
}
