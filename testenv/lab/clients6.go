package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ztpd/ztpd/testenv/netns"
)

// SONiCDhclient6Conf is dhclient.conf for DHCPv6 as SONiC declares its ZTP
// options: option 59 (RFC 5970 Boot File URL, the ztp.json URL), SONiC's
// private option 239 (provisioning script URL) and user class "SONiC-ZTP";
// sonic-ztp's exit hook reads new_dhcp6_boot_file_url.
const SONiCDhclient6Conf = `option dhcp6.boot-file-url code 59 = string;
option dhcp6.provisioning-script-url code 239 = string;
option dhcp6.user-class code 15 = string;
send dhcp6.user-class "SONiC-ZTP";
request dhcp6.boot-file-url, dhcp6.provisioning-script-url, dhcp6.name-servers, dhcp6.domain-search;
timeout 30;
retry 2;
`

// Dhclient6 runs ISC dhclient -6 in ns on eth0 with conf until it binds
// (the hook adds the leased /128), then does what the management link's
// Router Advertisements would (the lab runs no RA daemon): the on-link
// prefix onLink on eth0 and a default route via router, so the device
// reaches the appliance and, through the relay, the other subnet.
func Dhclient6(ctx context.Context, ns *netns.NS, dir, conf string, onLink netip.Prefix, router netip.Addr) (DHCPLease, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cf, script, out := filepath.Join(dir, "dhclient6.conf"), filepath.Join(dir, "hook.sh"), filepath.Join(dir, "lease.env")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := writeHook(script, out); err != nil {
		return nil, err
	}
	cmd := ns.Command(ctx, "dhclient", "-6", "-d", "-1", "-v", "-cf", cf, "-sf", script,
		"-lf", filepath.Join(dir, "dhclient6.leases"), "-pf", filepath.Join(dir, "dhclient6.pid"), "eth0")
	lease, err := runUntilLease(ctx, cmd, dir, out, "dhclient6")
	if err != nil {
		return nil, err
	}
	if err := ns.IP("-6", "route", "replace", onLink.String(), "dev", "eth0"); err != nil {
		return lease, err
	}
	return lease, ns.IP("-6", "route", "replace", "default", "via", router.String(), "dev", "eth0")
}

// ONIELinkLocalURL is ONIE's IPv6 discovery without DHCP
// (rootconf/default/bin/discover): busybox ping6 ff02::1 on the management
// port, then the HTTP waterfall at each neighbour's link-local address. It
// returns the first neighbour's waterfall URL for the platform's most
// specific name (onie-installer-<arch>-<machine>-r<rev>), zone included as
// curl takes it, and the neighbours it found.
func ONIELinkLocalURL(ctx context.Context, ns *netns.NS, platform string) (string, []netip.Addr, error) {
	// Every node on the link answers, and ping6 -c counts replies, not
	// requests: a short count ends at the first few answers. Three
	// seconds of it let every neighbour answer.
	ping, err := ns.Command(ctx, "busybox", "ping6", "-I", "eth0", "-c", "64", "-w", "3", "ff02::1").CombinedOutput()
	if err != nil && !strings.Contains(string(ping), "bytes from") {
		return "", nil, fmt.Errorf("ping6 ff02::1: %v: %s", err, ping)
	}
	// The neighbours are those that answered, as ping6 shows them, and
	// the neighbour table: a router that learned this host's MAC from its
	// Router Solicitation answers without a Neighbor Solicitation of its
	// own, and stays out of the table.
	neigh, err := ns.Command(ctx, "ip", "-6", "neigh", "show", "dev", "eth0").Output()
	if err != nil {
		return "", nil, err
	}
	// ping6 hears its own answer too.
	own, err := ns.Command(ctx, "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link").Output()
	if err != nil {
		return "", nil, err
	}
	var found []netip.Addr
	add := func(s string) {
		a, err := netip.ParseAddr(strings.TrimSuffix(s, ":"))
		if err == nil && a.IsLinkLocalUnicast() && !slices.Contains(found, a) && !strings.Contains(string(own), a.String()+"/") {
			found = append(found, a)
		}
	}
	for _, line := range strings.Split(string(ping), "\n") {
		if _, rest, ok := strings.Cut(line, " bytes from "); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				add(f[0])
			}
		}
	}
	for _, line := range strings.Split(string(neigh), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			add(f[0])
		}
	}
	if len(found) == 0 {
		return "", nil, fmt.Errorf("no link-local neighbour answered ping6 ff02::1:\n%s", ping)
	}
	return fmt.Sprintf("http://[%s%%25eth0]/onie-installer-%s", found[0], platform), found, nil
}
