package app

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
)

// buildGroup makes this appliance one of several sharing the store
// (store.Group): a coordinator (internal/ha) that Serve runs, and the
// lease feed DHCP follows. On one box it does nothing.
func (a *App) buildGroup() error {
	members := a.Cfg.Store.Group()
	if members == nil {
		return nil
	}
	cs, ok := a.Store.(*closingStore)
	if !ok {
		return fmt.Errorf("store.%s needs an etcd store", "appliances")
	}
	// One feed per DHCP server: each delivers every lease, and buckets or
	// blocks taken from another appliance are used only once every server
	// that will answer for them has applied what that one committed.
	v4, v6 := dhcpServers(&a.Cfg)
	var feeds []*etcdstore.LeaseFeed
	if v4 {
		a.leaseFeed = cs.LeaseFeed()
		feeds = append(feeds, a.leaseFeed)
	}
	if v6 {
		a.leaseFeed6 = cs.LeaseFeed()
		feeds = append(feeds, a.leaseFeed6)
	}
	caughtUp := func(ctx context.Context, rev int64) error {
		for _, f := range feeds {
			if err := f.CaughtUp(ctx, rev); err != nil {
				return err
			}
		}
		return nil
	}
	info := ha.Info{Name: a.Cfg.Store.Name}
	if addr := peerListenAddr(a.Cfg); addr != "" {
		info.PeerURL = "https://" + a.reachable(addr)
	}
	c, err := ha.New(ha.Config{Client: cs.Client(), Prefix: cs.Prefix(), Name: a.Cfg.Store.Name, Members: members,
		TTL: a.Cfg.Store.SessionTTL.D(), Info: info, CaughtUp: caughtUp, Log: a.Log.With("part", "ha"), Registerer: a.Metrics})
	if err != nil {
		return err
	}
	a.Group = c
	a.AddRunner(c)
	return nil
}

// reachable is the peer listener's address as the other appliances dial
// it: a wildcard host (peer_addr 0.0.0.0:8444) becomes advertise_addr.
func (a *App) reachable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
		return net.JoinHostPort(a.Endpoints.Advertise().String(), port)
	}
	return listen
}

// AddSingleton registers a runner that runs on one appliance at a time
// (the group's leader), or always on one box. r.Run must return when its
// context ends and be safe to call again for a later term.
func (a *App) AddSingleton(r Runner) {
	if a.Group == nil {
		a.AddRunner(r)
		return
	}
	a.AddRunner(runnerFunc{r.Name(), func(ctx context.Context) error { return a.Group.RunSingleton(ctx, r.Name(), r.Run) }})
}

// groupStatus is the group part of /healthz.
func (a *App) groupStatus() any {
	if a.Group == nil {
		return nil
	}
	return a.Group.Status()
}

// applianceName names this appliance on the jobs and rollouts it runs
// when several share the store; "" on one box.
func (a *App) applianceName() string {
	if a.Cfg.Store.Group() == nil {
		return ""
	}
	return a.Cfg.Store.Name
}

// addOrphanReaper makes the group's leader, every few seconds, fail the
// jobs and adopt the rollouts of appliances that are gone: nobody else
// would finish them, and a restart of the dead appliance only recovers
// its own. An adopted rollout carries on here from where it was.
func (a *App) addOrphanReaper(cs *clusters.Service) {
	if a.Group == nil {
		return
	}
	a.AddSingleton(runnerFunc{"orphans", func(ctx context.Context) error {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if _, err := cs.FailOrphans(a.Group.IsLive); err != nil {
				a.Log.Warn("failing a gone appliance's jobs", "err", err)
			}
			if a.Rollouts != nil {
				if _, err := a.Rollouts.AdoptOrphans(a.Group.IsLive); err != nil {
					a.Log.Warn("adopting a gone appliance's rollouts", "err", err)
				}
			}
		}
	}})
}
