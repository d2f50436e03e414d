package ha

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// campaign holds the leader key (_ha/leader, on the session's lease) when
// nobody does: the leader runs the singletons. Leadership ends with the
// session, when the key goes, or when the session's deadline passes.
func (c *Coordinator) campaign() {
	defer c.wg.Done()
	for c.ctx.Err() == nil {
		changed := c.Changed()
		c.mu.RLock()
		alive := time.Now().Before(c.deadline)
		leader, isLeader, id, deadline := c.leader, c.isLeader, c.lease, c.deadline
		c.mu.RUnlock()
		wait := time.Second
		switch {
		case isLeader && !alive:
			c.mu.Lock()
			c.loseLeadershipLocked()
			c.notifyLocked()
			c.mu.Unlock()
			continue
		case isLeader:
			wait = time.Until(deadline) // re-checked at the deadline at the latest
		case alive && leader == "":
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.TTL)
			resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(c.leaderKey()), "=", 0)).
				Then(clientv3.OpPut(c.leaderKey(), c.cfg.Name, clientv3.WithLease(id))).Commit()
			cancel()
			if err == nil && resp.Succeeded {
				c.mu.Lock()
				if c.lease == id && time.Now().Before(c.deadline) {
					c.leader = c.cfg.Name
					c.isLeader = true
					c.metrics.leaderGauge.Set(1)
					c.notifyLocked()
					c.log.Info("this appliance runs the singletons now (cluster watch, rollouts, retention)", "appliance", c.cfg.Name)
				}
				c.mu.Unlock()
				continue
			}
		}
		if wait <= 0 {
			wait = 10 * time.Millisecond
		}
		select {
		case <-c.ctx.Done():
			return
		case <-changed:
		case <-time.After(wait):
		}
	}
}

// loseLeadershipLocked ends the current term (its singletons stop).
func (c *Coordinator) loseLeadershipLocked() {
	if !c.isLeader {
		return
	}
	c.isLeader = false
	c.metrics.leaderGauge.Set(0)
	close(c.leaderCh)
	c.leaderCh = make(chan struct{})
	c.log.Info("this appliance no longer runs the singletons", "appliance", c.cfg.Name)
}

// Leader reports whether this appliance runs the singletons now.
func (c *Coordinator) Leader() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.isLeader && time.Now().Before(c.deadline)
}

// term returns a context that ends with the current leadership term, or
// nil when this appliance is not the leader.
func (c *Coordinator) term(parent context.Context) (context.Context, context.CancelFunc) {
	c.mu.RLock()
	isLeader, end := c.isLeader && time.Now().Before(c.deadline), c.leaderCh
	c.mu.RUnlock()
	if !isLeader {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-end:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// RunSingleton runs run whenever this appliance is the leader, with a
// context that ends with the term, until ctx ends. run must return when its
// context ends and be safe to call again for a later term.
func (c *Coordinator) RunSingleton(ctx context.Context, name string, run func(context.Context) error) error {
	for ctx.Err() == nil {
		changed := c.Changed()
		tctx, cancel := c.term(ctx)
		if tctx == nil {
			select {
			case <-ctx.Done():
			case <-changed:
			case <-time.After(time.Second):
			}
			continue
		}
		c.log.Info("singleton started", "singleton", name, "appliance", c.cfg.Name)
		c.setRunning(name, true)
		err := run(tctx)
		c.setRunning(name, false)
		cancel()
		if ctx.Err() != nil {
			return err
		}
		if err != nil {
			c.log.Warn("singleton stopped", "singleton", name, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		} else {
			c.log.Info("singleton stopped: leadership moved", "singleton", name, "appliance", c.cfg.Name)
		}
	}
	return nil
}

// setRunning records whether singleton name runs here (Status, metrics).
func (c *Coordinator) setRunning(name string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		c.running = map[string]bool{}
	}
	if on {
		c.running[name] = true
		c.metrics.singletonRunning.WithLabelValues(name).Set(1)
	} else {
		delete(c.running, name)
		c.metrics.singletonRunning.WithLabelValues(name).Set(0)
	}
}
