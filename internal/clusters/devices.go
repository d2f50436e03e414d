package clusters

import (
	"context"
	"errors"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
)

// The device and token operations below are the joiner's: the clusters
// service checks the caller and the references, lets the joiner act, and
// records who asked. Without a joiner they are unavailable.

// ApproveDevice admits a device (into clusterRef when given) through the
// joiner.
func (s *Service) ApproveDevice(ctx context.Context, caller Caller, deviceID, clusterRef string) (core.Device, error) {
	if !caller.Admin {
		return core.Device{}, core.Errorf(core.KindPermission, "approving devices is for admins only")
	}
	if id, err := core.NormalizeMAC(deviceID); err == nil {
		deviceID = id
	}
	var clusterID string
	err := s.st.View(func(tx core.Tx) error {
		if _, err := tx.Devices().Get(deviceID); err != nil {
			if _, err := tx.Devices().BySerial(deviceID); core.KindOf(err) == core.KindConflict {
				return err // an ambiguous serial: the candidates are named
			} else if err != nil {
				return core.Errorf(core.KindNotFound, "device %s not found", deviceID)
			}
		}
		if clusterRef != "" {
			c, err := ByRef(tx, clusterRef)
			if errors.Is(err, core.ErrNotFound) {
				// A name or an ID: not CloudStack's "Invalid Kubernetes cluster ID".
				return core.Errorf(core.KindNotFound, "cluster %q not found", clusterRef)
			} else if err != nil {
				return err
			}
			clusterID = c.ID
		}
		return nil
	})
	if err != nil {
		return core.Device{}, err
	}
	if s.mem == nil {
		return core.Device{}, core.Errorf(core.KindUnavailable, "no joiner: devices cannot be admitted")
	}
	var out core.Device
	err = s.call(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.mem.Approve(ctx, deviceID, clusterID)
		return err
	})
	if err != nil {
		return out, err
	}
	err = s.st.Update(func(tx core.Tx) error {
		return appendWrite(tx, caller, "approveDevice", out.Cluster, out.ID, "device "+out.ID+" approved", nil)
	})
	return out, err
}

// ResetDevice is `ztpd device reset`: the operator's decision that a device
// is being re-installed and may be issued join material once more (secrets
// are otherwise handed out once). Admins only; it needs the joiner.
func (s *Service) ResetDevice(ctx context.Context, caller Caller, deviceID string) (core.Device, error) {
	if !caller.Admin {
		return core.Device{}, core.Errorf(core.KindPermission, "resetting devices is for admins only")
	}
	if id, err := core.NormalizeMAC(deviceID); err == nil {
		deviceID = id
	}
	err := s.st.View(func(tx core.Tx) error {
		if _, err := tx.Devices().Get(deviceID); err != nil {
			if _, err := tx.Devices().BySerial(deviceID); core.KindOf(err) == core.KindConflict {
				return err // an ambiguous serial: the candidates are named
			} else if err != nil {
				return core.Errorf(core.KindNotFound, "device %s not found", deviceID)
			}
		}
		return nil
	})
	if err != nil {
		return core.Device{}, err
	}
	if s.mem == nil {
		return core.Device{}, core.Errorf(core.KindUnavailable, "no joiner: there is no join material to reset")
	}
	var out core.Device
	err = s.call(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.mem.ResetDevice(ctx, deviceID)
		return err
	})
	return out, err
}

// RevokeToken revokes a join token through the joiner. ref is
// "<kind>/<id>" or a bare id.
func (s *Service) RevokeToken(ctx context.Context, caller Caller, ref string) (core.Token, error) {
	if !caller.Admin {
		return core.Token{}, core.Errorf(core.KindPermission, "revoking tokens is for admins only")
	}
	var t core.Token
	err := s.st.View(func(tx core.Tx) error {
		var err error
		t, err = tokenByRef(tx, ref)
		return err
	})
	if err != nil {
		return t, err
	}
	if s.mem == nil {
		return t, core.Errorf(core.KindUnavailable, "no joiner: tokens cannot be revoked")
	}
	if err := s.call(ctx, func(ctx context.Context) error { return s.mem.RevokeToken(ctx, t.Kind+"/"+t.ID) }); err != nil {
		return t, err
	}
	t.Revoked = true
	err = s.st.Update(func(tx core.Tx) error {
		return appendWrite(tx, caller, "revokeToken", t.Cluster, t.Device, t.Kind+" token "+t.ID+" revoked", map[string]string{"token": t.ID})
	})
	return t, err
}

// tokenByRef finds a token by "<kind>/<id>" or its bare id.
func tokenByRef(tx core.Tx, ref string) (core.Token, error) {
	if kind, id, ok := strings.Cut(ref, "/"); ok {
		t, err := tx.Tokens().Get(kind, id)
		if err == nil || !errors.Is(err, core.ErrNotFound) {
			return t, err
		}
	}
	var t core.Token
	var n int
	err := tx.Tokens().List("", func(c core.Token) (bool, error) {
		if c.ID == ref {
			t = c
			n++
		}
		return n < 2, nil
	})
	if err != nil {
		return t, err
	}
	switch n {
	case 0:
		return t, core.Errorf(core.KindNotFound, "token %s not found", ref)
	case 1:
		return t, nil
	}
	return t, core.Errorf(core.KindInvalid, "token id %s is ambiguous; give <kind>/<id>", ref)
}

// ListTokens visits the credential records caller may see, in key order
// after after: admins all of them, others those of their account's
// clusters.
func (s *Service) ListTokens(ctx context.Context, caller Caller, after string, fn core.Visit[core.Token]) error {
	return s.st.View(func(tx core.Tx) error {
		seen := map[string]bool{}
		return tx.Tokens().List(after, func(t core.Token) (bool, error) {
			if !caller.Admin {
				sees, ok := seen[t.Cluster]
				if !ok {
					cl, err := tx.Clusters().Get(t.Cluster)
					if err != nil && !errors.Is(err, core.ErrNotFound) {
						return false, err
					}
					sees = err == nil && caller.Sees(cl)
					seen[t.Cluster] = sees
				}
				if !sees {
					return true, nil
				}
			}
			return fn(t)
		})
	})
}
