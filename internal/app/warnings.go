package app

import (
	"net/netip"
	"net/url"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/ztp/content"
)

// warnStartup logs, once the profiles are loaded at Start, what lets ztpd
// run while no device can get what it needs: no profiles at all (every
// device is refused with "no profile matches"), profiles naming clusters
// or images that do not exist (content.CheckReferences, the check of
// "ztpd profile check"), and device-facing URLs on a loopback address.
func (a *App) warnStartup(set *profile.Set) {
	if len(set.Profiles()) == 0 {
		a.Log.Warn(`no device profiles are loaded: every device that asks for its ZTP content is refused with "no profile matches"; `+
			"give a profile directory with --profiles DIR (profiles: in the config file)", "profiles", a.Cfg.Profiles)
	} else {
		var clusters []content.ClusterRef
		err := a.Store.View(func(tx core.Tx) error {
			return tx.Clusters().List("", func(c core.Cluster) (bool, error) {
				clusters = append(clusters, content.ClusterRef{ID: c.ID, Name: c.Name})
				return true, nil
			})
		})
		if err != nil {
			a.Log.Warn("cannot check the profiles' clusters", "err", err)
			clusters = nil
		} else if clusters == nil {
			clusters = []content.ClusterRef{} // none exist: every cluster named is missing
		}
		for _, w := range content.CheckReferences(set, a.Images, clusters) {
			a.Log.Warn("profile refers to what does not exist: " + w)
		}
	}
	// Join and ISO URLs (and ZTP URLs of requests whose local address is
	// unknown) use the advertised address, else the listener's host, else
	// 127.0.0.1.
	if u, err := url.Parse(a.Endpoints.Join()); err == nil {
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil && (ip.IsLoopback() || ip.IsUnspecified()) {
			a.Log.Warn("URLs handed to devices use "+ip.String()+", which no switch can reach: "+
				"set --advertise-addr (advertise_addr) to this host's address on the devices' network",
				"advertise_addr", a.Cfg.AdvertiseAddr, "http_addr", a.Cfg.HTTP.Addr, "join_url", a.Endpoints.Join())
		}
	}
}
