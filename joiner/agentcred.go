package joiner

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// ErrAgentRefused is every refusal of a device agent's credential: unknown,
// wrong, revoked, or presented from an address its device does not hold.
// The agent sees one message; the log and AgentRefusal say which.
var ErrAgentRefused = joinError(core.KindRefused, "agent credential refused")

// AgentRefusal is why an agent was refused, for the log (never the
// credential itself).
type AgentRefusal struct {
	ID     string // the credential's public id, when it parsed
	Device string // the device it belongs to, when known
	Reason string
}

func (e *AgentRefusal) Error() string {
	return fmt.Sprintf("agent credential %s of device %s refused: %s", e.ID, e.Device, e.Reason)
}

func (e *AgentRefusal) Unwrap() error { return ErrAgentRefused }

// issueAgentCredential stores the hash of a device's new agent credential
// and revokes the one it replaces (a re-issued bundle supersedes it).
func (s *Service) issueAgentCredential(tx core.Tx, m *core.Membership, cred tokens.Credential, now time.Time) error {
	if m.AgentID != "" && m.AgentID != cred.ID() {
		if err := tx.Tokens().Delete(string(tokens.KindAgent), m.AgentID); err != nil {
			return err
		}
	}
	rec := core.Token{ID: cred.ID(), Kind: string(tokens.KindAgent), SecretHash: hex.EncodeToString(cred.Hash()),
		Cluster: m.Cluster, Device: m.Device, Description: "device agent", Created: now}
	if err := tx.Tokens().Put(rec); err != nil {
		return err
	}
	m.AgentID = rec.ID
	return nil
}

// AuthenticateAgent is the device a device agent's request comes from: the
// credential must be one ztpd issued and has not revoked, and the request's
// address must be held by that same device (holderOf: an active lease or
// an operator-declared binding), so a credential copied off a
// device is worthless anywhere else. A refusal wraps ErrAgentRefused in an
// *AgentRefusal that says why.
func (s *Service) AuthenticateAgent(ctx context.Context, credential string, remote netip.Addr) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	cred, err := tokens.ParseCredential(tokens.KindAgent, strings.TrimSpace(credential))
	if err != nil {
		return "", &AgentRefusal{Reason: "malformed credential"}
	}
	now := s.now().UTC()
	var device string
	err = s.store.View(func(tx core.Tx) error {
		rec, err := tx.Tokens().Get(string(tokens.KindAgent), cred.ID())
		if errors.Is(err, core.ErrNotFound) {
			return &AgentRefusal{ID: cred.ID(), Reason: "unknown credential"}
		}
		if err != nil {
			return err
		}
		if !cred.Matches(hexDecode(rec.SecretHash)) {
			return &AgentRefusal{ID: cred.ID(), Device: rec.Device, Reason: "wrong secret"}
		}
		if rec.Revoked {
			return &AgentRefusal{ID: cred.ID(), Device: rec.Device, Reason: "credential revoked"}
		}
		_, _, err = holderOf(tx, remote, now, s.opts.Bindings, asker{device: rec.Device})
		var wrong *wrongHolderError
		switch {
		case errors.Is(err, ErrNotHolder):
			return &AgentRefusal{ID: cred.ID(), Device: rec.Device, Reason: remote.String() + " holds no lease and no binding"}
		case errors.As(err, &wrong):
			return &AgentRefusal{ID: cred.ID(), Device: rec.Device, Reason: wrong.detail()}
		case err != nil:
			return err
		}
		device = rec.Device
		return nil
	})
	return device, err
}

// RevokeAgent revokes a device's agent credential (a scaled-down or
// deleted member): its agent is refused from then on.
func (s *Service) RevokeAgent(ctx context.Context, device, reason string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UTC()
	return s.store.Update(func(tx core.Tx) error { return s.revokeAgent(tx, device, reason, now) })
}

// revokeAgent is RevokeAgent inside tx.
func (s *Service) revokeAgent(tx core.Tx, device, reason string, now time.Time) error {
	m, err := tx.Memberships().Get(device)
	if errors.Is(err, core.ErrNotFound) || (err == nil && m.AgentID == "") {
		return nil
	}
	if err != nil {
		return err
	}
	rec, err := tx.Tokens().Get(string(tokens.KindAgent), m.AgentID)
	if errors.Is(err, core.ErrNotFound) || (err == nil && rec.Revoked) {
		return nil
	}
	if err != nil {
		return err
	}
	rec.Revoked = true
	if err := tx.Tokens().Put(rec); err != nil {
		return err
	}
	return s.event(tx, now, "token.revoked", device, m.Cluster, "agent credential "+rec.ID+" revoked: "+reason,
		map[string]string{"kind": string(tokens.KindAgent), "id": rec.ID})
}

// MemberLeft ends a member's membership once ztpd has taken it out of its
// cluster (drained, reset by its agent, its Node deleted): its slot is
// freed and its join tokens revoked. The agent credential is not: a
// device going standalone stays under ztpd's care (RevokeAgent).
func (s *Service) MemberLeft(ctx context.Context, device, reason string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UTC()
	return s.store.Update(func(tx core.Tx) error {
		m, err := tx.Memberships().Get(device)
		if errors.Is(err, core.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.leave(tx, m, reason, now); err != nil {
			return err
		}
		return s.event(tx, now, "join.left", device, m.Cluster, "left cluster: "+reason, nil)
	})
}
