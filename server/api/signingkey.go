package api

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/server/record"
)

// serverRoutes are the routes of the server's signing key: its public
// half, and its rollover.
func (a *API) serverRoutes() []route {
	return []route{
		{method: "GET", path: "/server", role: record.RoleViewer, summary: "The server's public key and its fingerprint (agents pin it with --server-key)", out: of[ServerInfo](), serve: a.serverInfo},
		{method: "GET", path: "/server/signing-key", role: record.RoleAdmin, global: true, summary: "Where a rollover of the server's signing key stands, and which agents are not ready for its next step", out: of[record.SigningKeyStatus](), serve: a.signingKeyStatus},
		{method: "POST", path: "/server/signing-key/new", role: record.RoleAdmin, global: true, action: "server.signing-key.new", summary: "Make the server's next signing key and announce it to every accepted agent (server.rollover)", out: of[record.SigningKeyStatus](), serve: a.signingKeyStep("new")},
		{method: "POST", path: "/server/signing-key/switch", role: record.RoleAdmin, global: true, action: "server.signing-key.switch", summary: "Make every server sign with the next key, once every accepted agent took it (or force); answers after the switch", in: of[SigningKeyRequest](), inOptional: true, out: of[record.SigningKeyStatus](), serve: a.signingKeyStep("switch")},
		{method: "POST", path: "/server/signing-key/retire", role: record.RoleAdmin, global: true, action: "server.signing-key.retire", summary: "Forget the key the servers signed with before the switch, once every accepted agent takes the new one (or force)", in: of[SigningKeyRequest](), inOptional: true, out: of[record.SigningKeyStatus](), serve: a.signingKeyStep("retire")},
	}
}

// serverKey is the key the server signs with now.
func (a *API) serverKey() ed25519.PublicKey {
	if a.svc.ServerKey == nil {
		return nil
	}
	return a.svc.ServerKey()
}

// ServerInfo is what agents need to know of the server: the key it signs
// commands with.
type ServerInfo struct {
	// PublicKey is the server's ed25519 public key (base64 in JSON).
	PublicKey []byte `json:"public_key"`
	// Fingerprint names the key: SHA256:<base64>.
	Fingerprint string `json:"fingerprint"`
	Version     string `json:"version"`
}

func (a *API) serverInfo(r *request) (int, any, error) {
	key := a.serverKey()
	return http.StatusOK, ServerInfo{PublicKey: key, Fingerprint: model.Fingerprint(key), Version: a.cfg.Version}, nil
}

// SigningKeyRequest is the body of a switch or a retirement of the
// server's signing key.
type SigningKeyRequest struct {
	// Force takes the step though agents are not ready for it.
	Force bool `json:"force,omitempty"`
}

func (a *API) signingKeyStatus(r *request) (int, any, error) {
	if a.svc.SigningKey == nil {
		return 0, nil, noSigningKeys()
	}
	st, err := a.svc.SigningKey.SigningKeyStatus(r.ctx())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, st, nil
}

// signingKeyStep serves one step of a rollover of the server's signing
// key: new, switch or retire.
func (a *API) signingKeyStep(step string) func(*request) (int, any, error) {
	return func(r *request) (int, any, error) {
		if a.svc.SigningKey == nil {
			return 0, nil, noSigningKeys()
		}
		var req SigningKeyRequest
		if step != "new" && r.Request().ContentLength != 0 {
			if err := a.decode(r, &req); err != nil {
				return 0, nil, err
			}
		}
		var st record.SigningKeyStatus
		var err error
		switch step {
		case "new":
			st, err = a.svc.SigningKey.NewSigningKey(r.ctx())
		case "switch":
			st, err = a.svc.SigningKey.SwitchSigningKey(r.ctx(), req.Force)
		default:
			st, err = a.svc.SigningKey.RetireSigningKey(r.ctx(), req.Force)
		}
		var refused *record.SigningKeyStepError
		switch {
		case errors.As(err, &refused) && refused.NotReady:
			return 0, nil, newError("not_ready", "tether server signing-key status lists the agents", "%s", model.Clip(refused.Message, 2048))
		case errors.As(err, &refused):
			return 0, nil, newError("conflict", "tether server signing-key status says where the rollover stands", "%s", model.Clip(refused.Message, 2048))
		case err != nil:
			return 0, nil, err
		}
		switch step {
		case "new":
			r.detail = "next key " + st.Next.Fingerprint
		case "switch":
			r.detail = fmt.Sprintf("switched to %s (force %v)", st.Signing.Fingerprint, req.Force)
		default:
			r.detail = fmt.Sprintf("retired; signing key %s (force %v)", st.Signing.Fingerprint, req.Force)
		}
		return http.StatusOK, st, nil
	}
}

func noSigningKeys() *Error {
	return newError("conflict", "", "this server has no signing key to roll over")
}
