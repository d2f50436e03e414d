package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/netns"
)

// TestLabOnIPv6SwitchesThroughRelayAndONIELinkLocal: a v6-only lab (no
// IPv4 address anywhere) with the real ztpd binary: a SONiC switch on the
// appliance's subnet and one behind ISC dhcrelay -6 get their address and
// option 59 from dhclient -6 with SONiC's own option declarations, and
// fetch ztp.json and every URL in it over IPv6 (each bracketed, on the
// appliance's IPv6 address); an ONIE switch finds the installer by ping6
// ff02::1 and the waterfall at its neighbours' link-local addresses; a VM
// on each subnet leases by dhclient -6 and the metadata service, over
// IPv6, names it by its DHCPv6 lease.
func TestLabOnIPv6SwitchesThroughRelayAndONIELinkLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("lab skipped in -short mode")
	}
	if err := netns.Check(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"dhclient", "dhcrelay", "busybox", "curl", "ss"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the IPv6 lab needs %s", tool)
		}
	}
	work := t.TempDir()
	bin := filepath.Join(work, "ztpd")
	if err := BuildBinaries(map[string]string{bin: "github.com/ztpd/ztpd/cmd/ztpd"}); err != nil {
		t.Fatal(err)
	}
	topo, err := BuildFamily("zl6", 176, work, IPv6)
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	s := Scenario{Switches: 2, ONIE: 1, VMs: 2}
	devs := s.Plan()
	// No clusters: this lab checks the network and ztpd's IPv6 answers;
	// a switch of a cluster would wait for the cluster's control plane.
	for i := range devs {
		devs[i].Cluster, devs[i].Role = "", ""
	}
	cfg, err := topo.Config(devs)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cfg, "10.99.") {
		t.Fatalf("a v6-only lab's configuration names an IPv4 address:\n%s", cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app, err := topo.StartAppliance(ctx, bin, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.UseAdminKey(ctx); err != nil {
		t.Fatal(err)
	}
	installer, err := addInstaller(ctx, app, work)
	if err != nil {
		t.Fatal(err)
	}
	logs := func() string {
		b, _ := os.ReadFile(filepath.Join(work, "ztpd.out"))
		r, _ := os.ReadFile(filepath.Join(work, "relay6.out"))
		return "ztpd (tail):\n" + tail(string(b), 3000) + "\ndhcrelay -6:\n" + tail(string(r), 1000)
	}
	want := "http://[" + topo.AppAddr6.String() + "]:8080/"
	for _, d := range devs {
		d := d
		ns, err := topo.AddDevice(d.Name, d.Subnet, d.MAC)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(work, "devices", d.Name)
		if d.Kind == "onie" {
			// ONIE on subnet A: its neighbours are the appliance and the
			// relay's uplink; it tries each, as discover does.
			_, neigh, err := ONIELinkLocalURL(ctx, ns, d.Platform)
			if err != nil {
				t.Fatal(err)
			}
			got := false
			for _, n := range neigh {
				u := fmt.Sprintf("http://[%s%%25eth0]/onie-installer-%s", n, d.Platform)
				arch, machine, rev := splitPlatform(d.Platform)
				out := filepath.Join(work, d.Name+"-installer.bin")
				msg, err := ns.Command(ctx, "curl", "-6", "-f", "-s", "-S", "-m", "20", "-o", out, "-A", "onie/1.0",
					"-H", "ONIE-SERIAL-NUMBER: "+d.Serial, "-H", "ONIE-ETH-ADDR: "+d.MAC, "-H", "ONIE-VENDOR-ID: 259",
					"-H", "ONIE-MACHINE: "+machine, "-H", "ONIE-MACHINE-REV: "+rev, "-H", "ONIE-ARCH: "+arch,
					"-H", "ONIE-OPERATION: os-install", "--", u).CombinedOutput()
				if err != nil {
					t.Logf("ONIE waterfall at neighbour %s: %v: %s", n, err, msg)
					continue
				}
				body, _ := os.ReadFile(out)
				sum := sha256.Sum256(body)
				if hex.EncodeToString(sum[:]) != installer {
					t.Fatalf("ONIE installer from %s: sha256 %x, want %s", u, sum, installer)
				}
				t.Logf("%s: ping6 ff02::1 found %v; the installer came from %s", d.Name, neigh, u)
				got = true
				break
			}
			if !got {
				t.Fatalf("no neighbour of %v served the installer\n%s", neigh, logs())
			}
			continue
		}
		link := topo.link6(&d)
		if d.Kind == "vm" {
			// A VM: dhclient -6, then the metadata service over IPv6,
			// which knows it as the holder of its DHCPv6 lease.
			lease, err := Dhclient6(ctx, ns, filepath.Join(dir, "dhcp6"), vmDhclient6Conf, link.OnLink, link.Router)
			if err != nil {
				t.Fatalf("%s: %v\n%s", d.Name, err, logs())
			}
			base := "http://[" + link.Metadata.String() + "]/latest/meta-data/"
			for key, want := range map[string]string{"local-ipv4": lease.IP(), "local-hostname": d.Name} {
				body, err := Curl(ctx, ns, dir, SwitchIdentity{}, base+key)
				if err != nil || strings.TrimSpace(string(body)) != want {
					t.Fatalf("%s: meta-data/%s over IPv6 = %q, %v; want %q\n%s", d.Name, key, body, err, want, logs())
				}
			}
			t.Logf("%s (subnet %d): %s, meta-data over IPv6 names it", d.Name, d.Subnet, lease.IP())
			continue
		}
		onLink := link.OnLink
		lease, err := Dhclient6(ctx, ns, filepath.Join(dir, "dhcp6"), SONiCDhclient6Conf, onLink, link.Router)
		if err != nil {
			t.Fatalf("%s: %v\n%s", d.Name, err, logs())
		}
		if !onLink.Contains(mustAddr(t, lease.IP())) {
			t.Fatalf("%s on subnet %d leased %s, not in %s", d.Name, d.Subnet, lease.IP(), onLink)
		}
		u := lease["dhcp6_boot_file_url"]
		if !strings.HasPrefix(u, want) {
			t.Fatalf("%s: option 59 %q, want a URL under %s; lease %v", d.Name, u, want, lease)
		}
		id := SwitchIdentity{Serial: d.Serial, Product: d.Product, BaseMAC: d.MAC, Hostname: d.Name}
		doc, fetched, err := WalkZTPJSON(ctx, ns, dir, id, u)
		if err != nil {
			t.Fatalf("%s: ztp.json walk over IPv6: %v\n%s", d.Name, err, logs())
		}
		if doc["ztp"] == nil || len(fetched) == 0 {
			t.Fatalf("%s: ztp.json %v, %d downloads", d.Name, doc, len(fetched))
		}
		for _, f := range fetched {
			if !strings.HasPrefix(f.URL, want) && !strings.HasPrefix(f.URL, "https://["+topo.AppAddr6.String()+"]:") {
				t.Errorf("%s: section %s fetched %s, not on the appliance's IPv6 address", d.Name, f.Section, f.URL)
			}
		}
		t.Logf("%s (subnet %d): %s, option 59 %s, %d URLs fetched over IPv6", d.Name, d.Subnet, lease.IP(), u, len(fetched))
	}
	// Every device is recorded, the ONIE switch without a lease (its
	// record is written behind the download).
	seen := map[string]string{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		devices, err := listDevices(ctx, app)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range devices {
			seen[d.MAC] = string(d.Kind) + " " + string(d.State) + " " + d.IP
		}
		missing := ""
		for _, d := range devs {
			if seen[d.MAC] == "" {
				missing += fmt.Sprintf(" %s (%s)", d.Name, d.MAC)
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ztpd has no device%s: %v\n%s", missing, seen, logs())
		}
	}
	t.Logf("devices: %v", seen)
	topo.Close()
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "zl6-") {
		t.Fatalf("namespaces left behind:\n%s", out)
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("address %q: %v", s, err)
	}
	return a
}

// TestLabDualStackSwitchFetchesOverIPv6: on a dual-stack lab (dnsmasq
// relaying DHCPv4 and dhcrelay -6 DHCPv6 for subnet B) a SONiC switch
// behind the relays asks both, as SONiC's dhclient does on a dual-stack
// eth0: its DHCPv4 option 67 names the appliance's IPv4 address, its
// DHCPv6 option 59 the IPv6 one (advertise_addr6), and ztp.json walked from
// the latter is all IPv6.
func TestLabDualStackSwitchFetchesOverIPv6(t *testing.T) {
	if testing.Short() {
		t.Skip("lab skipped in -short mode")
	}
	if err := netns.Check(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"dhclient", "dhcrelay", "dnsmasq", "busybox", "curl", "ss"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the dual-stack lab needs %s", tool)
		}
	}
	work := t.TempDir()
	bin := filepath.Join(work, "ztpd")
	if err := BuildBinaries(map[string]string{bin: "github.com/ztpd/ztpd/cmd/ztpd"}); err != nil {
		t.Fatal(err)
	}
	topo, err := BuildFamily("zld", 180, work, DualStack)
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	devs := Scenario{Switches: 2}.Plan()[1:] // sw1: subnet B, behind both relays
	devs[0].Cluster, devs[0].Role = "", ""
	cfg, err := topo.Config(devs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := topo.StartAppliance(ctx, bin, cfg); err != nil {
		t.Fatal(err)
	}
	logs := func() string {
		b, _ := os.ReadFile(filepath.Join(work, "ztpd.out"))
		return "ztpd (tail):\n" + tail(string(b), 3000)
	}
	d := devs[0]
	ns, err := topo.AddDevice(d.Name, d.Subnet, d.MAC)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(work, d.Name)
	l4, err := Dhclient(ctx, ns, filepath.Join(dir, "dhcp"), SONiCDhclientConf(d.Product, d.Serial))
	if err != nil {
		t.Fatalf("dhclient -4: %v\n%s", err, logs())
	}
	link := topo.link6(&d)
	l6, err := Dhclient6(ctx, ns, filepath.Join(dir, "dhcp6"), SONiCDhclient6Conf, link.OnLink, link.Router)
	if err != nil {
		t.Fatalf("dhclient -6: %v\n%s", err, logs())
	}
	if !topo.Nets[1].Contains(mustAddr(t, l4.IP())) || !strings.HasPrefix(l4["ztp_json_url"], "http://"+topo.AppAddr.String()+":8080/") {
		t.Fatalf("DHCPv4 lease %s, option 67 %q", l4.IP(), l4["ztp_json_url"])
	}
	want6 := "http://[" + topo.AppAddr6.String() + "]:8080/"
	if !link.OnLink.Contains(mustAddr(t, l6.IP())) || !strings.HasPrefix(l6["dhcp6_boot_file_url"], want6) {
		t.Fatalf("DHCPv6 lease %s, option 59 %q", l6.IP(), l6["dhcp6_boot_file_url"])
	}
	id := SwitchIdentity{Serial: d.Serial, Product: d.Product, BaseMAC: d.MAC, Hostname: d.Name}
	_, fetched, err := WalkZTPJSON(ctx, ns, dir, id, l6["dhcp6_boot_file_url"])
	if err != nil {
		t.Fatalf("ztp.json over IPv6: %v\n%s", err, logs())
	}
	for _, f := range fetched {
		if !strings.HasPrefix(f.URL, want6) {
			t.Errorf("section %s fetched %s, not over IPv6", f.Section, f.URL)
		}
	}
	t.Logf("%s: DHCPv4 %s (option 67 %s), DHCPv6 %s (option 59 %s), %d URLs over IPv6",
		d.Name, l4.IP(), l4["ztp_json_url"], l6.IP(), l6["dhcp6_boot_file_url"], len(fetched))
}
