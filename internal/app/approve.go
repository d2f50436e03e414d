package app

import (
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/content"
)

// profileOf is the profile device d's next fetch gets, picked as the content
// service picks it (its recorded facts, ztp.default_profile), and the
// cluster that profile names; known is false before Start loads the
// profiles (offline CLI use), when nobody can tell.
func (a *App) profileOf(d core.Device) (name, cluster string, known bool) {
	set := a.profiles.Load()
	if set == nil {
		return "", "", false
	}
	p, _, err := content.Pick(set, a.Cfg.ZTP.DefaultProfile, content.Facts(&d))
	if err != nil || p == nil {
		return "", "", true
	}
	return p.Name, p.Cluster, true
}
