package app

import (
	"net/netip"
	"net/url"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/ztp/content"
)

// startupWarning is one thing that lets ztpd run while devices cannot get
// what they need; attrs are the log line's details.
type startupWarning struct {
	msg   string
	attrs []any
}

// warnStartup logs, once the profiles are loaded at Start (and at each
// reload), the startup warnings.
func (a *App) warnStartup(set *profile.Set) {
	for _, w := range a.startupWarnings(set) {
		a.Log.Warn(w.msg, w.attrs...)
	}
}

// Warnings are the startup warnings as they stand now, recomputed on each
// call over the profiles in use (the web console shows them live).
func (a *App) Warnings() []string {
	ws := a.startupWarnings(a.profiles.Load())
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.msg)
	}
	return out
}

// startupWarnings: no profiles at all (every device is refused with "no
// profile matches"), profiles naming clusters or images that do not exist
// (content.CheckReferences, the check of "ztpd profile check"), the device
// HTTPS listener turned off, and device-facing URLs on a loopback address.
func (a *App) startupWarnings(set *profile.Set) []startupWarning {
	var out []startupWarning
	if len(set.Profiles()) == 0 {
		out = append(out, startupWarning{`no device profiles are loaded: every device that asks for its ZTP content is refused with "no profile matches"; ` +
			"give a profile directory with --profiles DIR (profiles: in the config file)", []any{"profiles", a.Cfg.Profiles}})
	} else {
		var clusters []content.ClusterRef
		err := a.Store.View(func(tx core.Tx) error {
			return tx.Clusters().List("", func(c core.Cluster) (bool, error) {
				clusters = append(clusters, content.ClusterRef{ID: c.ID, Name: c.Name})
				return true, nil
			})
		})
		if err != nil {
			out = append(out, startupWarning{"cannot check the profiles' clusters: " + err.Error(), nil})
			clusters = nil
		} else if clusters == nil {
			clusters = []content.ClusterRef{} // none exist: every cluster named is missing
		}
		for _, w := range content.CheckReferences(set, a.Images, clusters) {
			out = append(out, startupWarning{"profile refers to what does not exist: " + w, nil})
		}
	}
	if !a.Cfg.HTTP.TLS.Enabled {
		out = append(out, startupWarning{config.DeviceTLSOffWarning, []any{"http_addr", a.Cfg.HTTP.Addr}})
	}
	// Join and ISO URLs (and ZTP URLs of requests whose local address is
	// unknown) use the advertised address, else the listener's host, else
	// 127.0.0.1.
	if u, err := url.Parse(a.Endpoints.Join()); err == nil {
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil && (ip.IsLoopback() || ip.IsUnspecified()) {
			out = append(out, startupWarning{"URLs handed to devices use " + ip.String() + ", which no switch can reach: " +
				"set --advertise-addr (advertise_addr) to this host's address on the devices' network",
				[]any{"advertise_addr", a.Cfg.AdvertiseAddr, "http_addr", a.Cfg.HTTP.Addr, "join_url", a.Endpoints.Join()}})
		}
	}
	return out
}
