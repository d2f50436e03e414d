package clusters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// ExpireStarts moves to Alert every cluster that has been Starting for
// longer than Options.StartTimeout, as CloudStack's create job gives up
// after cloud.kubernetes.cluster.start.timeout; from Alert it can be
// deleted, or it goes Running when its Nodes come up after all. Each move
// is its own transaction that reads the cluster again, so appliances
// sharing the store that sweep at once move a cluster once. It returns how
// many it moved.
func (s *Service) ExpireStarts() (int, error) {
	at := s.opts.Now()
	var due []string
	err := s.st.View(func(tx core.Tx) error {
		return tx.Clusters().List("", func(c core.Cluster) (bool, error) {
			if startOverdue(c, at, s.opts.StartTimeout) {
				due = append(due, c.ID)
			}
			return true, nil
		})
	})
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, id := range due {
		var name, reason string
		err := s.st.Update(func(tx core.Tx) error {
			name = ""
			c, err := tx.Clusters().Get(id)
			if errors.Is(err, core.ErrNotFound) || err == nil && !startOverdue(c, at, s.opts.StartTimeout) {
				return nil
			}
			if err != nil {
				return err
			}
			etcd := 0
			if c.EtcdNodes > 0 {
				rt, err := tx.Clusters().JoinState(c.ID)
				if err != nil && !errors.Is(err, core.ErrNotFound) {
					return err
				}
				etcd = rt.EtcdMembers
			}
			name, reason = c.Name, startTimeoutReason(c, etcd, s.opts.StartTimeout)
			return s.setState(tx, &c, core.ClusterAlert, reason)
		})
		if err != nil {
			return moved, err
		}
		if name != "" {
			moved++
			s.log.Warn("cluster did not start in time", "cluster", name, "to", core.ClusterAlert, "reason", reason)
		}
	}
	return moved, nil
}

// startOverdue reports whether c has been Starting for timeout or longer at at.
func startOverdue(c core.Cluster, at time.Time, timeout time.Duration) bool {
	if c.State != core.ClusterStarting {
		return false
	}
	since := c.StateSince
	if since.IsZero() {
		since = c.UpdatedAt
	}
	return !since.IsZero() && at.Sub(since) >= timeout
}

// startTimeoutReason says why a Starting cluster gave up: what it still
// waited for. etcdMembers is how many of a cluster's dedicated etcd nodes
// had joined: its first control plane waits for all of them, so those
// missing are the first thing an operator must see.
func startTimeoutReason(c core.Cluster, etcdMembers int, timeout time.Duration) string {
	what := "no control plane joined"
	switch o := c.Observed; {
	case o != nil && o.APIReachable:
		what = fmt.Sprintf("%d of %d control-plane Nodes Ready", o.ReadyControlPlanes, max(c.ControlNodes, 1))
	case c.EtcdNodes > 0 && etcdMembers < c.EtcdNodes:
		what = fmt.Sprintf("%d of %d etcd nodes joined, no control plane joined", etcdMembers, c.EtcdNodes)
	}
	return fmt.Sprintf("%s within %s", what, HumanDuration(timeout))
}

// RunStartTimeouts sweeps for overdue starts every interval until ctx
// ends; the group's leader runs it (one appliance at a time).
func (s *Service) RunStartTimeouts(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := s.ExpireStarts(); err != nil {
			s.log.Warn("moving clusters that did not start in time to Alert", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// HumanDuration writes d as an operator gives it: 1h, 90m, 45s (others
// as time.Duration does).
func HumanDuration(d time.Duration) string {
	switch {
	case d > 0 && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d > 0 && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d > 0 && d%time.Second == 0 && d < time.Minute:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
