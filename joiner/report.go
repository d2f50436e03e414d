package joiner

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// reportEventEvery is how often a node repeating the same report makes an
// event of it.
const reportEventEvery = time.Minute

// Outcomes a node reports.
const (
	ReportJoined = "joined"
	ReportFailed = "failed"
)

// Report records a node's own word on its join, authenticated by the
// report credential from its bundle and the address it comes from, which
// the member's device must hold (an active lease or an operator-declared
// binding, core.HolderOf): a token copied off a node is worthless
// anywhere else. It is a hint, kept on the membership
// and as an event: whether a member joined is what its cluster shows (its
// Node registered and Ready, see NodeSeen), never what the device says. A
// failed report moves a member the cluster has not registered yet to
// failed, so its bundle may be retried; it does not touch a registered one.
func (s *Service) Report(ctx context.Context, credential string, remote netip.Addr, state, detail string) (core.Membership, error) {
	if err := ctx.Err(); err != nil {
		return core.Membership{}, err
	}
	cred, err := tokens.ParseCredential(tokens.KindReport, strings.TrimSpace(credential))
	if err != nil {
		return core.Membership{}, ErrReportInvalid
	}
	switch state {
	case ReportJoined, ReportFailed:
	default:
		return core.Membership{}, fmt.Errorf("%w: state %q (want joined or failed)", ErrInvalid, state)
	}
	if len(detail) > 512 {
		detail = detail[:512]
	}
	detail = core.PrintableText(detail) // it lands in events: pages, terminals
	now := s.now().UTC()
	var out core.Membership
	err = s.store.Batch(func(tx core.Tx) error {
		rec, err := tx.Tokens().Get(string(tokens.KindReport), cred.ID())
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			return err
		}
		if err != nil || !cred.Matches(hexDecode(rec.SecretHash)) {
			return ErrReportInvalid
		}
		if err := tokenRecord(rec).Usable(now); err != nil {
			return fmt.Errorf("%w: %v", ErrReportInvalid, err)
		}
		m, err := tx.Memberships().Get(rec.Device)
		ok := err == nil
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			return err
		}
		if !ok || m.ReportID != rec.ID || m.Cluster != rec.Cluster {
			return ErrReportInvalid // superseded by a re-issued bundle
		}
		if _, _, err := holderOf(tx, remote, now, s.opts.Bindings, asker{device: m.Device}); err != nil {
			return err
		}
		if !holdsSlot(m.State) {
			return fmt.Errorf("%w: membership is %s", ErrInvalid, m.State)
		}
		reason := "node reported " + state
		if detail != "" {
			reason += ": " + detail
		}
		// The same word again within reportEventEvery is no news: the
		// node may repeat itself, but not fill the device's timeline.
		news := m.Reported != state || now.Sub(m.ReportedAt) >= reportEventEvery
		m.Reported, m.ReportedAt = state, now
		registered := m.Node != nil && !m.Node.Deleted
		if state == ReportFailed && !registered && m.State != core.StateFailed {
			news = true
			if err := s.transition(tx, &m, core.StateFailed, reason, now); err != nil {
				return err
			}
		} else {
			m.UpdatedAt = now
			if err := tx.Memberships().Put(m); err != nil {
				return err
			}
		}
		out = m
		if !news {
			return nil
		}
		return s.event(tx, now, "join."+state, m.Device, m.Cluster, reason, nil)
	})
	if err == nil {
		s.metrics.reports.WithLabelValues(state).Inc()
	} else if IsUnauthorized(err) {
		why := "credential"
		if errors.Is(err, ErrNotHolder) || errors.Is(err, ErrWrongHolder) {
			why = "not-holder"
		}
		s.metrics.reportsRefused.WithLabelValues(why).Inc()
		if ok, _ := s.reportLog.Allow(remote.String(), now); ok {
			s.log.Info("join report refused", "report_token", cred.ID(), "remote", remote.String(), "reason", err.Error())
		}
	}
	return out, err
}

// Revoke marks a token revoked (kind kubeadm, k3s, enrollment or report).
// A kubeadm token the running cluster knows (created by kubeadm init or
// published by ztpd) is also deleted there; when that fails the revocation
// in ztpd stands, the error says the cluster still accepts the token, and
// revoking again retries the deletion.
func (s *Service) Revoke(ctx context.Context, kind tokens.Kind, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UTC()
	var (
		rec       core.Token
		cluster   core.Cluster
		rt        core.JoinState
		inCluster bool
	)
	err := s.store.Update(func(tx core.Tx) error {
		// fn may run again on a newer state: nothing from a run before.
		cluster, rt, inCluster = core.Cluster{}, core.JoinState{}, false
		var err error
		rec, err = tx.Tokens().Get(string(kind), id)
		if errors.Is(err, core.ErrNotFound) {
			return fmt.Errorf("token %s/%s: %w", kind, id, core.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if kind == tokens.KindKubeadm && rec.Cluster != "" {
			if cluster, err = tx.Clusters().Get(rec.Cluster); err == nil {
				if rt, err = joinState(tx, rec.Cluster); err != nil {
					return err
				}
				// Pool tokens never handed out after init were never created there.
				inCluster = rt.APIEndpoint != "" && (inInit(rec, rt) || rec.Device != "")
			} else if !errors.Is(err, core.ErrNotFound) {
				return err
			}
		}
		if rec.Revoked {
			return nil
		}
		rec.Revoked = true
		if err := tx.Tokens().Put(rec); err != nil {
			return err
		}
		if kind == tokens.KindKubeadm {
			_ = tx.Tokens().PoolRemove(rec.Cluster, id)
		}
		return s.event(tx, now, "token.revoked", rec.Device, rec.Cluster, string(kind)+" token "+id+" revoked", nil)
	})
	if err != nil || !inCluster {
		return err
	}
	keys, err := s.keysFor(cluster.ID)
	if err == nil {
		err = s.unpublishToken(ctx, keys, cluster.Name, rt.APIEndpoint, id)
	}
	if err != nil {
		return fmt.Errorf("token %s/%s is revoked in ztpd, but deleting it from cluster %s failed, so the cluster accepts it until it expires; revoke again to retry: %w", kind, id, cluster.Name, err)
	}
	return nil
}

// Sweep deletes token records that are expired or revoked, and their pool
// entries, in bounded transactions. It returns how many it deleted.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	now := s.now().UTC()
	total := 0
	after := ""
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, last, more := 0, "", false
		err := s.store.Update(func(tx core.Tx) error {
			n, last, more = 0, "", false
			var doomed []core.Token
			seen := 0
			err := tx.Tokens().List(after, func(rec core.Token) (bool, error) {
				last = core.TokenCursor(rec)
				seen++
				if rec.Revoked || (!rec.Expires.IsZero() && !now.Before(rec.Expires)) {
					doomed = append(doomed, rec)
				}
				if seen >= 5000 {
					more = true
					return false, nil
				}
				return true, nil
			})
			if err != nil {
				return err
			}
			for _, rec := range doomed {
				if err := tx.Tokens().Delete(rec.Kind, rec.ID); err != nil {
					return err
				}
				if rec.Kind == string(tokens.KindKubeadm) {
					if err := tx.Tokens().PoolRemove(rec.Cluster, rec.ID); err != nil {
						return err
					}
				}
			}
			n = len(doomed)
			if n > 0 {
				return s.event(tx, now, "token.swept", "", "", fmt.Sprintf("%d expired or revoked tokens deleted", n), nil)
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if !more {
			return total, nil
		}
		after = last
	}
}

// RunSweeper sweeps tokens and retries failed admin bindings every
// interval, and creates a cluster's admin binding when asked (a member
// joined, a kubeconfig was issued), until ctx ends.
func (s *Service) RunSweeper(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("token sweep failed", "err", err)
		} else if n > 0 {
			s.log.Info("swept tokens", "deleted", n)
		}
		s.retryAdminBindings(ctx)
		if !s.waitSweep(ctx, t.C) {
			return nil
		}
	}
}

// waitSweep serves binding requests until the next tick (true) or the end
// of ctx (false).
func (s *Service) waitSweep(ctx context.Context, tick <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case id := <-s.bindKick:
			s.ensureAdminBindingLogged(ctx, id)
		case <-tick:
			return true
		}
	}
}

// Membership returns a device's membership record.
func (s *Service) Membership(ctx context.Context, deviceID string) (core.Membership, error) {
	var m core.Membership
	err := s.store.View(func(tx core.Tx) error {
		var err error
		m, err = tx.Memberships().Get(deviceID)
		return err
	})
	return m, err
}

// Members lists a cluster's current members (its roster: not those that
// left, nor devices still waiting).
func (s *Service) Members(ctx context.Context, clusterRef string) ([]core.Membership, error) {
	var out []core.Membership
	err := s.store.View(func(tx core.Tx) error {
		c, err := clusters.ByRef(tx, clusterRef)
		if err != nil {
			return err
		}
		return eachMember(tx, c.ID, func(m *core.Membership) error {
			out = append(out, *m)
			return nil
		})
	})
	return out, err
}
