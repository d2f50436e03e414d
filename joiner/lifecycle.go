package joiner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// The cluster lifecycle as the clusters service drives it (its Membership
// interface, with Provision and Resize in cluster.go). Every method is
// idempotent.

// SetVersion makes new bundles use v and records it as the version every
// current member is to run, but for those the cluster's rolling upgrades
// leave out (manual upgrade).
func (s *Service) SetVersion(ctx context.Context, c core.Cluster, v core.Version) error {
	ver, err := bundle.ParseVersion(v.SemVer)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := bundle.KubeadmAPIFor(ver); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	now := s.now().UTC()
	return s.store.Update(func(tx core.Tx) error {
		rt, err := joinState(tx, c.ID)
		if err != nil {
			return err
		}
		if rt.KubernetesVersion == ver.Tag() {
			return nil
		}
		rt.KubernetesVersion = ver.Tag()
		if err := tx.Clusters().PutJoinState(c.ID, rt); err != nil {
			return err
		}
		stored, err := tx.Clusters().Get(c.ID)
		if err != nil {
			return err
		}
		err = eachMember(tx, c.ID, func(m *core.Membership) error {
			// A manual-upgrade node was left out of the rollout and still
			// runs the version it had.
			if clusters.IsManualUpgrade(stored, m.Device) {
				return nil
			}
			m.Version, m.UpdatedAt = ver.Tag(), now
			return tx.Memberships().Put(*m)
		})
		if err != nil {
			return err
		}
		return s.event(tx, now, "cluster.version", "", c.ID, "members to run "+ver.Tag(), nil)
	})
}

// Stop suspends joining: no enrollment or bundle is issued until Start.
func (s *Service) Stop(ctx context.Context, c core.Cluster) error { return s.suspend(ctx, c.ID, true) }

// Start re-enables joining.
func (s *Service) Start(ctx context.Context, c core.Cluster) error {
	return s.suspend(ctx, c.ID, false)
}

func (s *Service) suspend(ctx context.Context, clusterID string, on bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UTC()
	return s.store.Update(func(tx core.Tx) error {
		rt, err := joinState(tx, clusterID)
		if err != nil {
			return err
		}
		if rt.Suspended == on {
			return nil
		}
		rt.Suspended = on
		if err := tx.Clusters().PutJoinState(clusterID, rt); err != nil {
			return err
		}
		msg := "joining re-enabled"
		if on {
			msg = "joining suspended"
		}
		return s.event(tx, now, "cluster.joining", "", clusterID, msg, nil)
	})
}

// Destroy revokes every token of the cluster, moves every membership to
// left, and deletes the cluster's key material (the CA key, certificate key
// and token seed): nothing can be issued for it again.
func (s *Service) Destroy(ctx context.Context, c core.Cluster) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UTC()
	err := s.store.Update(func(tx core.Tx) error {
		err := eachMember(tx, c.ID, func(m *core.Membership) error {
			if m.State == core.StateLeft {
				return nil
			}
			if err := s.transition(tx, m, core.StateLeft, "cluster destroyed", now); err != nil && !errors.Is(err, core.ErrNotFound) {
				return err
			}
			return tx.Memberships().Delist(c.ID, m.Device)
		})
		if err != nil {
			return err
		}
		var doomed []core.Token
		err = tx.Tokens().List("", func(t core.Token) (bool, error) {
			if t.Cluster == c.ID && !t.Revoked {
				doomed = append(doomed, t)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, t := range doomed {
			t.Revoked = true
			if err := tx.Tokens().Put(t); err != nil {
				return err
			}
		}
		var pool []string
		err = tx.Tokens().Pool(c.ID, func(id string) (bool, error) {
			pool = append(pool, id)
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, id := range pool {
			if err := tx.Tokens().PoolRemove(c.ID, id); err != nil {
				return err
			}
		}
		if err := tx.Secrets().Delete(secretsOwner(c.ID)); err != nil {
			return err
		}
		if err := tx.Clusters().DeleteJoinState(c.ID); err != nil {
			return err
		}
		return s.event(tx, now, "cluster.destroyed", "", c.ID, fmt.Sprintf("%d tokens revoked, key material deleted", len(doomed)), nil)
	})
	s.forget(c.ID)
	return err
}

// Kubeconfig is IssueKubeconfig for the clusters service.
func (s *Service) Kubeconfig(ctx context.Context, c core.Cluster, req clusters.KubeconfigRequest) (clusters.IssuedKubeconfig, error) {
	return s.IssueKubeconfig(ctx, c.ID, req.User, req.Group, req.Validity)
}

// RevokeToken revokes a token by its bare id (searched across kinds) or
// by "<kind>/<id>".
func (s *Service) RevokeToken(ctx context.Context, ref string) error {
	if kind, id, ok := strings.Cut(ref, "/"); ok {
		return s.Revoke(ctx, tokens.Kind(kind), id)
	}
	for _, kind := range []tokens.Kind{tokens.KindKubeadm, tokens.KindEnrollment, tokens.KindReport, tokens.KindK3s} {
		err := s.Revoke(ctx, kind, ref)
		if !errors.Is(err, core.ErrNotFound) {
			return err
		}
	}
	return fmt.Errorf("token %s: %w", ref, core.ErrNotFound)
}
