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
	f := content.FactsAt(&d, a.Positions.Plan())
	p, _, err := content.Pick(set, a.Cfg.ZTP.DefaultProfile, f)
	if err != nil || p == nil {
		return "", "", true
	}
	if f.Position != nil && f.Position.Cluster != "" {
		return p.Name, f.Position.Cluster, true // the plan's cluster for its slot
	}
	return p.Name, p.Cluster, true
}

// desiredDefaults are the desired-state defaults of device's profile (the
// one profileOf picks): its desired: block, and its name. None before
// Start loads the profiles, for a device ztpd does not know, or for a
// profile without the block.
func (a *App) desiredDefaults(device string) (core.DesiredState, string) {
	if a.profiles.Load() == nil {
		return core.DesiredState{}, ""
	}
	var d core.Device
	if err := a.Store.View(func(tx core.Tx) error {
		var err error
		d, err = tx.Devices().Get(device)
		return err
	}); err != nil {
		return core.DesiredState{}, ""
	}
	name, _, _ := a.profileOf(d)
	p := a.profiles.Load().Get(name)
	if p == nil {
		return core.DesiredState{}, ""
	}
	ds, ok := p.Desired()
	if !ok {
		return core.DesiredState{}, ""
	}
	return ds, p.Name
}
