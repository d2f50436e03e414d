package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ReplaceSwitch swaps the box cabled to a planned switch's relay port for
// another (mac, serial), as a technician replacing a failed switch does:
// the old box just dies (its kubelet and every process in it stop, no DHCP
// release, no leave), the new box comes up on the same cable with a fresh
// disk and onboards as any switch. It returns the new box's device.
func (l *Lab) ReplaceSwitch(ctx context.Context, name, mac, serial string, progress Progress) (Device, error) {
	var d *Device
	for i := range l.Plan {
		if l.Plan[i].Name == name {
			d = &l.Plan[i]
		}
	}
	if d == nil || !d.Cabled || d.Kind == "vm" {
		return Device{}, fmt.Errorf("%s is not a switch cabled to a relay port (Scenario.Positions)", name)
	}
	ns := l.Topo.deviceNS(name)
	if ns == nil {
		return Device{}, fmt.Errorf("no namespace for %s", name)
	}
	if kl := l.Kube.Kubelet(name); kl != nil && kl.Proc != nil {
		kl.Proc.Stop(time.Second)
	}
	killInside(ns.Name)
	for _, s := range [][]string{{"addr", "flush", "dev", "eth0"}, {"link", "set", "eth0", "down"},
		{"link", "set", "eth0", "address", mac}, {"link", "set", "eth0", "up"}} {
		if err := ns.IP(s...); err != nil {
			return Device{}, err
		}
	}
	nd := *d
	nd.MAC, nd.Serial, nd.Kind = mac, serial, "sonic"
	dir := filepath.Join(l.Topo.WorkDir, "devices", name+"-"+serial)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Device{}, err
	}
	if progress == nil {
		progress = func(string, string) {}
	}
	return nd, RunSwitch(ctx, l.Kube, ns, dir, nd, progress)
}
