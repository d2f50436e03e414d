package halab

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"

	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
)

// The IPv6 lab (Options.IPv6): the appliances share the link
// fd99:0:a::/64 with the DHCPv6 clients; a client's Solicit, Request and
// Renew go to ff02::1:2, so every appliance receives every message (what
// load balancing needs, without a relay), and the one holding the bucket
// of the client's DUID answers it by unicast from its link-local address.
const (
	// Subnet6 is the IPv6 lab's subnet; Pool6First-Pool6Last its pool.
	Subnet6    = "fd99:0:a::/64"
	Pool6First = "fd99:0:a::1000"
	Pool6Last  = "fd99:0:a::1fff"
)

// applianceAddr6 is appliance i's (1-9) IPv6 address.
func applianceAddr6(i int) string { return fmt.Sprintf("fd99:0:a::1%d", i) }

// subnet6 is the dhcp.subnets entry of the IPv6 lab ("" without it): the
// shortest lease the configuration takes, so clients renew (T1, half of
// it) within a test.
func (g *Group) subnet6() string {
	if !g.o.IPv6 {
		return ""
	}
	return fmt.Sprintf("    - {name: lab6, subnet: \"%s\", interface: ha0, pools: [\"%s-%s\"], lease_time: 1m}\n", Subnet6, Pool6First, Pool6Last)
}

// noDAD turns IPv6 duplicate address detection off in ns before any link
// exists there.
func noDAD(ns *netns.NS) error {
	for _, k := range []string{"net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"} {
		if out, err := ns.Command(context.Background(), "sysctl", "-qw", k).CombinedOutput(); err != nil {
			return fmt.Errorf("sysctl %s in %s: %v: %s", k, ns.Name, err, out)
		}
	}
	return nil
}

// linkLocal waits for ifname's link-local address in ns.
func linkLocal(ns *netns.NS, ifname string) (netip.Addr, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("ip", "-n", ns.Name, "-6", "-br", "addr", "show", "dev", ifname, "scope", "link").Output()
		for _, f := range strings.Fields(string(out)) {
			if p, err := netip.ParsePrefix(f); err == nil && p.Addr().IsLinkLocalUnicast() && !strings.Contains(string(out), "tentative") {
				return p.Addr(), nil
			}
		}
		if time.Now().After(deadline) {
			return netip.Addr{}, fmt.Errorf("%s in %s has no usable link-local address: %s", ifname, ns.Name, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client6 is one DHCPv6 client of the IPv6 lab: dhclient -6 in its own
// namespace (one dhclient per namespace: ISC dhclient's sockets are not
// tied to an interface), its DUID a DUID-LL of its MAC.
type Client6 struct {
	Name   string
	MAC    net.HardwareAddr
	DUID   []byte
	NS     *netns.NS
	Leases string // dhclient's lease file
	Out    string // dhclient's output
	proc   *lab.Proc
}

// Bucket is the client's load-balancing bucket, as the appliances hash it.
func (c *Client6) Bucket() int { return int(ha.Bucket(c.DUID)) }

// duidLL is the DUID-LL (RFC 8415 §11.4) of an Ethernet address.
func duidLL(mac net.HardwareAddr) []byte { return append([]byte{0, 3, 0, 1}, mac...) }

// MACsFor returns n MACs whose clients' buckets have primary (among the
// group's appliances) each appliance in turn: n/len(apps) per appliance.
// seed keeps different calls apart.
func (g *Group) MACsFor(n int, seed byte) []net.HardwareAddr {
	names := g.Names()
	var out []net.HardwareAddr
	for i := 0; len(out) < n && i < 1<<16; i++ {
		mac := net.HardwareAddr{0x02, 0x66, seed, 0, byte(i >> 8), byte(i)}
		if ha.Primary(names, int(ha.Bucket(duidLL(mac)))) == names[len(out)%len(names)] {
			out = append(out, mac)
		}
	}
	return out
}

// sonicDhclient6 declares the options as SONiC's dhclient.conf does for
// DHCPv6 ZTP: option 59 (RFC 5970), SONiC's 239, user class "SONiC-ZTP".
const sonicDhclient6 = `option dhcp6.boot-file-url code 59 = string;
option dhcp6.provisioning-script-url code 239 = string;
option dhcp6.user-class code 15 = string;
send dhcp6.user-class "SONiC-ZTP";
request dhcp6.boot-file-url, dhcp6.provisioning-script-url, dhcp6.name-servers, dhcp6.domain-search;
`

// AddClient6 plugs a namespace <prefix>-<name> with c0 (mac) on the
// bridge and starts dhclient -6 there (DUID-LL, SONiC's option
// declarations, no address configured: the lease file is the result).
func (g *Group) AddClient6(name string, mac net.HardwareAddr) (*Client6, error) {
	ns, err := netns.Add(g.o.Prefix + "-" + name)
	if err != nil {
		return nil, err
	}
	g.nss = append(g.nss, ns)
	if err := noDAD(ns); err != nil {
		return nil, err
	}
	port := "p" + name
	if out, err := exec.Command("ip", "link", "add", "c0", "netns", ns.Name, "address", mac.String(), "type", "veth",
		"peer", "name", port, "netns", g.br.Name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("veth for %s: %v: %s", name, err, out)
	}
	if err := g.br.IP("link", "set", port, "master", "br0", "up"); err != nil {
		return nil, err
	}
	if err := ns.IP("link", "set", "c0", "up"); err != nil {
		return nil, err
	}
	if _, err := linkLocal(ns, "c0"); err != nil {
		return nil, err
	}
	dir := filepath.Join(g.Work, "clients6", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "dhclient6.conf")
	if err := os.WriteFile(conf, []byte(sonicDhclient6), 0o644); err != nil {
		return nil, err
	}
	c := &Client6{Name: name, MAC: mac, DUID: duidLL(mac), NS: ns, Leases: filepath.Join(dir, "leases"), Out: filepath.Join(dir, "dhclient.out")}
	out, err := os.Create(c.Out)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := ns.Command(context.Background(), "dhclient", "-6", "-d", "-v", "-D", "LL", "-cf", conf, "-lf", c.Leases,
		"-pf", filepath.Join(dir, "pid"), "-sf", "/bin/true", "c0")
	cmd.Stdout, cmd.Stderr = out, out
	if c.proc, err = lab.StartProc(cmd); err != nil {
		return nil, err
	}
	g.procs = append(g.procs, c.proc)
	return c, nil
}

// Address is the address of the client's latest lease (dhclient's lease
// file), if any.
func (c *Client6) Address() (netip.Addr, bool) {
	b, err := os.ReadFile(c.Leases)
	if err != nil {
		return netip.Addr{}, false
	}
	var last netip.Addr
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "iaaddr" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				last = a
			}
		}
	}
	return last, last.IsValid()
}

// Capture6 runs tcpdump on each appliance's ha0, writing the DHCPv6
// replies it sends (UDP from port 547) to <dir>/<name>.pcap; the stop
// function ends them all and reports the packets the kernel dropped.
func (g *Group) Capture6(dir string) (stop func() (dropped int), err error) {
	var stops []func() int
	for _, a := range g.Apps {
		stop, err := g.capture(a.NS, "4096", filepath.Join(dir, a.Name+".pcap"), "ip6 and udp src port 547")
		if err != nil {
			return nil, err
		}
		stops = append(stops, stop)
	}
	return func() int {
		time.Sleep(time.Second) // the last replies in flight
		n := 0
		for _, s := range stops {
			n += s()
		}
		return n
	}, nil
}

// Reply6 is one DHCPv6 reply an appliance sent, as a capture saw it.
type Reply6 struct {
	Time   time.Time
	Server netip.Addr // the IPv6 source (the appliance's link-local address)
	Type   dhcpv6.MessageType
	DUID   []byte // the client identifier
	// Addr is the address the first IA_NA gives with a lifetime above 0
	// (invalid when none), Lifetime its valid lifetime.
	Addr     netip.Addr
	Lifetime time.Duration
}

// Grants reports whether r is a Reply that gives its client an address.
func (r Reply6) Grants() bool { return r.Type == dhcpv6.MessageTypeReply && r.Addr.IsValid() }

// ReadReplies6 reads every DHCPv6 reply (IPv6, UDP from port 547) of
// the classic pcap files, merged in time order.
func ReadReplies6(paths ...string) ([]Reply6, error) {
	var out []Reply6
	for _, path := range paths {
		err := readPcap(path, func(ts time.Time, pkt []byte, link uint32) {
			if r, err := parseReply6(pkt, link); err == nil {
				r.Time = ts
				out = append(out, r)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	sortByTime(out)
	return out, nil
}

func sortByTime(rs []Reply6) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].Time.Before(rs[j-1].Time); j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// parseReply6 decodes one frame down to its DHCPv6 reply.
func parseReply6(pkt []byte, link uint32) (Reply6, error) {
	etherType, pkt, ok := frame(pkt, link)
	if !ok || etherType != 0x86dd || len(pkt) < 48 || pkt[0]>>4 != 6 || pkt[6] != 17 {
		return Reply6{}, errSkip
	}
	src := netip.AddrFrom16([16]byte(pkt[8:24]))
	udp := pkt[40:]
	if binary.BigEndian.Uint16(udp) != 547 {
		return Reply6{}, errSkip
	}
	m, err := dhcpv6.MessageFromBytes(udp[8:])
	if err != nil {
		return Reply6{}, errSkip
	}
	r := Reply6{Server: src, Type: m.MessageType}
	if cid := m.Options.ClientID(); cid != nil {
		r.DUID = cid.ToBytes()
	}
	if ia := m.Options.OneIANA(); ia != nil {
		for _, a := range ia.Options.Addresses() {
			if a.ValidLifetime > 0 {
				r.Addr, _ = netip.AddrFromSlice(a.IPv6Addr.To16())
				r.Lifetime = a.ValidLifetime
				break
			}
		}
	}
	return r, nil
}

// DoubleGrants6 lists every Reply that gave an address to a second client
// while the first's lease was unexpired, and every Reply that gave a
// client a second address while its first lease was unexpired.
func DoubleGrants6(rs []Reply6) []string {
	type grant struct {
		other  string
		at     time.Time
		until  time.Time
		server netip.Addr
	}
	byIP := map[netip.Addr]grant{}
	byDUID := map[string]grant{}
	var bad []string
	for _, r := range rs {
		if !r.Grants() {
			continue
		}
		duid := fmt.Sprintf("%x", r.DUID)
		until := r.Time.Add(r.Lifetime)
		if g, ok := byIP[r.Addr]; ok && g.other != duid && r.Time.Before(g.until) {
			bad = append(bad, fmt.Sprintf("%s granted to %s by %s at %s while %s held it (granted by %s at %s)",
				r.Addr, duid, r.Server, clock(r.Time), g.other, g.server, clock(g.at)))
		}
		if g, ok := byDUID[duid]; ok && g.other != r.Addr.String() && r.Time.Before(g.until) {
			bad = append(bad, fmt.Sprintf("%s granted %s by %s at %s while holding %s (granted by %s at %s)",
				duid, r.Addr, r.Server, clock(r.Time), g.other, g.server, clock(g.at)))
		}
		byIP[r.Addr] = grant{duid, r.Time, until, r.Server}
		byDUID[duid] = grant{r.Addr.String(), r.Time, until, r.Server}
	}
	return bad
}
