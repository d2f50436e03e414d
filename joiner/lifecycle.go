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
// interface). Every method is idempotent.

// Provision gives a cluster created by the API its CA and join tokens.
func (s *Service) Provision(ctx context.Context, c core.Cluster) error {
	return s.SetupCluster(ctx, c.ID, "")
}

// Resize applies a changed desired size: surplus workers (newest first) are
// marked leaving and their tokens revoked; waiting devices are admitted when
// they next ask. The cluster record itself is the caller's to store.
func (s *Service) Resize(ctx context.Context, c core.Cluster) error {
	_, err := s.resize(ctx, c.ID, c.Size, false)
	return err
}

// SetVersion makes new bundles use v and records it as the version every
// current member is to run.
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
		rt, err := getRuntime(tx, c.ID)
		if err != nil {
			return err
		}
		if rt.KubernetesVersion == ver.String() {
			return nil
		}
		rt.KubernetesVersion = ver.String()
		if err := tx.Put(core.BucketMeta, runtimeKey(c.ID), rt); err != nil {
			return err
		}
		err = s.eachMember(tx, c.ID, func(m *member) error {
			m.Version, m.UpdatedAt = ver.String(), now
			return tx.Put(core.BucketMemberships, m.Device, m)
		})
		if err != nil {
			return err
		}
		return event(tx, now, "cluster.version", "", c.ID, "members to run "+ver.String(), nil)
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
		rt, err := getRuntime(tx, clusterID)
		if err != nil {
			return err
		}
		if rt.Suspended == on {
			return nil
		}
		rt.Suspended = on
		if err := tx.Put(core.BucketMeta, runtimeKey(clusterID), rt); err != nil {
			return err
		}
		msg := "joining re-enabled"
		if on {
			msg = "joining suspended"
		}
		return event(tx, now, "cluster.joining", "", clusterID, msg, nil)
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
		err := s.eachMember(tx, c.ID, func(m *member) error {
			if m.State == core.StateLeft {
				return nil
			}
			if err := s.transition(tx, m, core.StateLeft, "cluster destroyed", now); err != nil && !errors.Is(err, core.ErrNotFound) {
				return err
			}
			return tx.Delete(core.BucketIndex, memberIndexKey(c.ID, m.Device))
		})
		if err != nil {
			return err
		}
		var doomed []string
		err = tx.Scan(core.BucketTokens, "", func(k string, v []byte) (bool, error) {
			var rec tokenRecord
			if err := core.Decode(v, &rec); err != nil {
				return false, err
			}
			if rec.Cluster == c.ID && !rec.Revoked {
				doomed = append(doomed, k)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, k := range doomed {
			var rec tokenRecord
			if _, err := tx.Get(core.BucketTokens, k, &rec); err != nil {
				return err
			}
			rec.Revoked = true
			if err := tx.Put(core.BucketTokens, k, rec); err != nil {
				return err
			}
		}
		var pool []string
		err = tx.ScanPrefix(core.BucketIndex, poolIndexKey(c.ID, ""), func(k string, _ []byte) (bool, error) {
			pool = append(pool, k)
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, k := range pool {
			if err := tx.Delete(core.BucketIndex, k); err != nil {
				return err
			}
		}
		if err := tx.Delete(core.BucketSecrets, secretsKey(c.ID)); err != nil {
			return err
		}
		if err := tx.Delete(core.BucketMeta, runtimeKey(c.ID)); err != nil {
			return err
		}
		return event(tx, now, "cluster.destroyed", "", c.ID, fmt.Sprintf("%d tokens revoked, key material deleted", len(doomed)), nil)
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

// eachMember calls fn for every member of a cluster in the member index.
func (s *Service) eachMember(tx core.Tx, clusterID string, fn func(*member) error) error {
	var ids []string
	err := tx.ScanPrefix(core.BucketIndex, memberIndexKey(clusterID, ""), func(k string, _ []byte) (bool, error) {
		ids = append(ids, k[strings.LastIndexByte(k, '/')+1:])
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		var m member
		ok, err := tx.Get(core.BucketMemberships, id, &m)
		if err != nil {
			return err
		}
		if ok && m.Cluster == clusterID {
			if err := fn(&m); err != nil {
				return err
			}
		}
	}
	return nil
}
