// Package stormlab is the set-up the fleet benchmarks share (bootstorm,
// webbench, scalebench, observedjoin): a real `ztpd serve` in namespace
// <prefix>-srv, the simulated fleet in <prefix>-cli at the relay's address
// (10.99.0.2/16, the giaddr), joined by a veth pair. Each switch talks HTTP
// from the address it leased, as a real one does (ztpd hands join material
// only to the address a switch holds), so the pool's /24s are "local"
// routes in the fleet's namespace and routed to the relay from ztpd's.
//
// The storm's plan is fixed: ztpd at 10.99.0.1 unless a benchmark moves it,
// switches STORM-<cluster>-<n> matched by profile storm-<cluster> into
// cluster storm-<cluster>. It needs root.
package stormlab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
)

const (
	// ServerAddr is ztpd's address in the server namespace by default.
	ServerAddr = "10.99.0.1"
	// RelayAddr is the fleet's address: the relay's giaddr.
	RelayAddr = "10.99.0.2"

	// Over IPv6 (NetOptions.IPv6): ztpd and the fleet's relay on the veth
	// link fd99:0:0:1::/64; the fleet leases from FleetPrefix6, behind the
	// relay, whose Relay-Forw messages state LinkAddr6. A /64 holds any
	// fleet, where 10.99.0.0/16 stops at 65,278.
	ServerAddr6  = "fd99:0:0:1::1"
	RelayAddr6   = "fd99:0:0:1::2"
	FleetPrefix6 = "fd99:0:0:100::/64"
	LinkAddr6    = "fd99:0:0:100::1"
	// PoolStart6 and PoolEnd6 are the fleet's pool: 16,777,216 addresses.
	PoolStart6 = "fd99:0:0:100::1:0"
	PoolEnd6   = "fd99:0:0:100::ff:ffff"
)

// Net is the two namespaces and the routes between them.
type Net struct {
	Srv, Cli *netns.NS
}

// NetOptions place the namespaces and the pool.
type NetOptions struct {
	Prefix     string // namespaces <Prefix>-srv and <Prefix>-cli
	ServerAddr string // ztpd's address; "" is ServerAddr
	// PoolFirst and PoolLast are the /24s 10.99.<first..last>.0 the fleet
	// leases from.
	PoolFirst, PoolLast int
	// DefaultRoute routes the fleet's namespace through ztpd's address, the
	// router the DHCP options name (kubeadm looks for a default route even
	// with an advertise address).
	DefaultRoute bool
	// IPv6 lays the namespaces out over IPv6 only (ServerAddr6,
	// RelayAddr6, FleetPrefix6; ServerAddr and the pool's /24s unused):
	// FleetPrefix6 is "local" in the fleet's namespace (any address of it
	// may be bound there) and routed to the relay from ztpd's.
	IPv6 bool
}

// NewNet creates the namespaces (removing leftovers of a killed run of the
// same names), the veth pair and the pool's routes; on an error nothing is
// left behind.
func NewNet(o NetOptions) (n *Net, err error) {
	if o.Prefix == "" {
		return nil, errors.New("stormlab: no namespace prefix")
	}
	srvAddr := cmp.Or(o.ServerAddr, ServerAddr)
	n = &Net{}
	defer func() {
		if err != nil {
			n.Close()
			n = nil
		}
	}()
	if n.Srv, err = netns.Add(o.Prefix + "-srv"); err != nil {
		return n, err
	}
	if n.Cli, err = netns.Add(o.Prefix + "-cli"); err != nil {
		return n, err
	}
	if o.IPv6 {
		return n, n.routes6()
	}
	if err = netns.Veth(n.Srv, "s0", srvAddr+"/16", n.Cli, "c0", RelayAddr+"/16"); err != nil {
		return n, err
	}
	if o.DefaultRoute {
		if err = n.Cli.IP("route", "add", "default", "via", srvAddr); err != nil {
			return n, err
		}
	}
	for i := o.PoolFirst; i <= o.PoolLast; i++ {
		p := fmt.Sprintf("10.99.%d.0/24", i)
		if err = n.Cli.IP("route", "add", "local", p, "dev", "lo"); err != nil {
			return n, err
		}
		if err = n.Srv.IP("route", "add", p, "via", RelayAddr); err != nil {
			return n, err
		}
	}
	return n, nil
}

// routes6 is NewNet's IPv6 layout, DAD off so every address is usable at
// once (they are unique by construction), and non-local binds allowed in
// the fleet's namespace: IPv6 binds only to an interface's own addresses,
// not to those a "local" route makes local.
func (n *Net) routes6() error {
	for _, ns := range []*netns.NS{n.Srv, n.Cli} {
		if err := sysctl(ns, "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"); err != nil {
			return err
		}
	}
	if err := sysctl(n.Cli, "net.ipv6.ip_nonlocal_bind=1"); err != nil {
		return err
	}
	if err := netns.Veth(n.Srv, "s0", ServerAddr6+"/64", n.Cli, "c0", RelayAddr6+"/64"); err != nil {
		return err
	}
	if err := n.Cli.IP("-6", "route", "add", "local", FleetPrefix6, "dev", "lo"); err != nil {
		return err
	}
	return n.Srv.IP("-6", "route", "add", FleetPrefix6, "via", RelayAddr6)
}

func sysctl(ns *netns.NS, settings ...string) error {
	for _, k := range settings {
		if out, err := ns.Command(context.Background(), "sysctl", "-qw", k).CombinedOutput(); err != nil {
			return fmt.Errorf("sysctl %s in %s: %v: %s", k, ns.Name, err, out)
		}
	}
	return nil
}

// Close removes the namespaces; stop what runs in them first.
func (n *Net) Close() {
	if n.Cli != nil {
		n.Cli.Close()
	}
	if n.Srv != nil {
		n.Srv.Close()
	}
}

// WriteProfiles writes <work>/profiles/storm.yaml: profile storm-<c> takes
// the serials STORM-<c>-* into cluster storm-<c>.
func WriteProfiles(work string, clusters int) error {
	pdir := filepath.Join(work, "profiles")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return err
	}
	var prof strings.Builder
	for c := 0; c < clusters; c++ {
		fmt.Fprintf(&prof, "---\nname: storm-%02d\nmatch:\n  serial: \"STORM-%02d-*\"\nhostname: 'sw-{{ .Serial | lower }}'\ncluster: storm-%02d\nrole: sonic\n", c, c, c)
	}
	return os.WriteFile(filepath.Join(pdir, "storm.yaml"), []byte(prof.String()), 0o644)
}

// ConfigOptions vary the storm's ztpd configuration.
type ConfigOptions struct {
	Work       string // data in <Work>/data, profiles from <Work>/profiles
	ServerAddr string // "" is ServerAddr
	// PoolFirst and PoolLast are the pool's /24s, as in NetOptions.
	PoolFirst, PoolLast int
	LeaseTime           time.Duration // 0 is an hour
	Pprof               bool          // the pprof listener on <ServerAddr>:6060
	EventsKeep          int           // events.keep; 0 leaves ztpd's default
	// IPv6 is the storm over DHCPv6 (NetOptions.IPv6's layout): ztpd at
	// ServerAddr6 (ServerAddr and the pool's /24s are ignored), the fleet's
	// subnet FleetPrefix6 relayed by RelayAddr6, four-message exchanges
	// (rapid_commit off, as dhclient -6 does not ask for it).
	IPv6 bool
	// DeviceTLSOff turns the device HTTPS listener off (http.tls.enabled:
	// false): the join and the report cross in clear, as before it was
	// the default, so a storm's TLS costs the difference.
	DeviceTLSOff bool
}

// Config is the storm's ztpd.yaml: DHCP through the fleet's relay on s0,
// HTTP on <ServerAddr>:8080, the storm profiles, and every joiner request
// from the /16 approved.
func Config(o ConfigOptions) string {
	if o.IPv6 {
		return config6(o)
	}
	addr := cmp.Or(o.ServerAddr, ServerAddr)
	var pprof, events string
	if o.Pprof {
		pprof = fmt.Sprintf("debug: {pprof_addr: \"%s:6060\"}\n", addr)
	}
	if o.EventsKeep > 0 {
		events = fmt.Sprintf("events: {keep: %d}\n", o.EventsKeep)
	}
	return fmt.Sprintf(`data_dir: %s
advertise_addr: %s
log: {level: warn, format: json}
%shttp: {addr: "%s:8080"%s}
dhcp:
  interfaces: [s0]
  relays: [{address: %s}] # the fleet relays from its own address
  lease_time: %s
  subnets:
    - {name: storm, subnet: 10.99.0.0/16, interface: s0, pools: ["10.99.%d.0-10.99.%d.254"], router: %s}
profiles: [%s]
%sjoiner:
  auto_approve: [{subnets: [10.99.0.0/16], roles: [control-plane, worker]}]
`, filepath.Join(o.Work, "data"), addr, pprof, addr, deviceTLS(o), RelayAddr, leaseTime(o.LeaseTime),
		o.PoolFirst, o.PoolLast, addr, filepath.Join(o.Work, "profiles"), events)
}

// config6 is Config over IPv6.
func config6(o ConfigOptions) string {
	var pprof, events string
	if o.Pprof {
		pprof = fmt.Sprintf("debug: {pprof_addr: \"[%s]:6060\"}\n", ServerAddr6)
	}
	if o.EventsKeep > 0 {
		events = fmt.Sprintf("events: {keep: %d}\n", o.EventsKeep)
	}
	return fmt.Sprintf(`data_dir: %s
advertise_addr: "%s"
log: {level: warn, format: json}
%shttp: {addr: "[%s]:8080"%s}
dhcp:
  interfaces: [s0]
  relays: [{address: "%s", giaddrs: ["%s"]}]
  lease_time: %s
  subnets:
    - {name: storm6, subnet: "%s", pools: ["%s-%s"], rapid_commit: false}
profiles: [%s]
%sjoiner:
  auto_approve: [{subnets: ["%s"], roles: [control-plane, worker]}]
`, filepath.Join(o.Work, "data"), ServerAddr6, pprof, ServerAddr6, deviceTLS(o), RelayAddr6, LinkAddr6, leaseTime(o.LeaseTime),
		FleetPrefix6, PoolStart6, PoolEnd6, filepath.Join(o.Work, "profiles"), events, FleetPrefix6)
}

// deviceTLS is what the http: block adds for o.DeviceTLSOff.
func deviceTLS(o ConfigOptions) string {
	if o.DeviceTLSOff {
		return ", tls: {enabled: false}"
	}
	return ""
}

// leaseTime spells d as ztpd's config reads it; an hour when unset.
func leaseTime(d time.Duration) string {
	if d <= 0 {
		return "1h"
	}
	return d.String()
}

// Storm is the namespaces with ztpd started in the server's, signed in
// with an admin key and the storm's clusters created.
type Storm struct {
	*Net
	App *lab.Appliance
}

// StormOptions are a Storm's namespaces, ztpd and clusters.
type StormOptions struct {
	Net    NetOptions
	Config ConfigOptions // Work and the pool default to the Storm's
	Bin    string        // the ztpd binary
	Work   string        // ztpd.yaml, data and profiles go here
	// Clusters storm-00.. of PerCluster workers each are created.
	Clusters, PerCluster int
}

// Start sets up the storm: NewNet, WriteProfiles, ztpd with Config in the
// server namespace, an admin key for the appliance's own calls, the
// clusters. Close undoes it.
func Start(ctx context.Context, o StormOptions) (s *Storm, err error) {
	n, err := NewNet(o.Net)
	if err != nil {
		return nil, err
	}
	s = &Storm{Net: n}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	if err = WriteProfiles(o.Work, o.Clusters); err != nil {
		return s, err
	}
	c := o.Config
	c.Work = cmp.Or(c.Work, o.Work)
	c.ServerAddr = cmp.Or(c.ServerAddr, o.Net.ServerAddr)
	if c.PoolFirst == 0 && c.PoolLast == 0 {
		c.PoolFirst, c.PoolLast = o.Net.PoolFirst, o.Net.PoolLast
	}
	base := "http://" + cmp.Or(o.Net.ServerAddr, ServerAddr) + ":8080"
	if o.Net.IPv6 {
		c.IPv6 = true
		base = "http://[" + ServerAddr6 + "]:8080"
	}
	if s.App, err = lab.StartAppliance(ctx, n.Srv, o.Bin, o.Work, Config(c), base); err != nil {
		return s, err
	}
	if err = s.App.UseAdminKey(ctx); err != nil {
		return s, err
	}
	if err = s.App.CreateStormClusters(ctx, o.Clusters, o.PerCluster); err != nil {
		return s, err
	}
	return s, nil
}

// Close stops ztpd and removes the namespaces.
func (s *Storm) Close() {
	if s.App != nil {
		s.App.Close()
	}
	s.Net.Close()
}
