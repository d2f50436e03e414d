package lab

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/netns"
)

// The lab itself is checked against dnsmasq as a reference DHCP server, so a
// ztpd failure in the end-to-end test is never a lab failure.
func TestLabRelayAndClientsWithReferenceServer(t *testing.T) {
	if err := netns.Check(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"dnsmasq", "dhclient", "busybox", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the lab needs %s", tool)
		}
	}
	work := t.TempDir()
	topo, err := Build("zlt", 120, work)
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	srv := topo.App.Command(context.Background(), "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
		"--pid-file=", "--port=0", "--user=root", "--no-ping", "--interface=br0", "--bind-interfaces",
		"--dhcp-leasefile="+filepath.Join(work, "leases"),
		"--dhcp-range=set:a,10.99.120.10,10.99.120.20,255.255.255.0", "--dhcp-range=set:b,10.99.121.10,10.99.121.20,255.255.255.0",
		"--dhcp-option=tag:a,3,10.99.120.1", "--dhcp-option=tag:b,3,10.99.121.1", "--dhcp-option=67,http://10.99.120.1/ztp.json")
	if err := topo.Start(srv, "dnsmasq"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	sw, err := topo.AddDevice("sw1", SubnetA, "02:00:00:00:78:01")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Dhclient(ctx, sw, filepath.Join(work, "sw1"), SONiCDhclientConf("Force10-S6000", "SN1"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(l.IP(), "10.99.120.") || l["ztp_json_url"] != "http://10.99.120.1/ztp.json" {
		t.Fatalf("dhclient lease: %v", l)
	}

	vm, err := topo.AddDevice("vm1", SubnetB, "1e:00:00:00:79:01")
	if err != nil {
		t.Fatal(err)
	}
	l, err = Udhcpc(ctx, vm, filepath.Join(work, "vm1"), "vm1", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(l.IP(), "10.99.121.") {
		t.Fatalf("relayed udhcpc lease: %v", l)
	}
	// The relayed device reaches the appliance through the relay.
	if out, err := vm.Command(ctx, "busybox", "ping", "-c1", "-W2", "10.99.120.1").CombinedOutput(); err != nil {
		t.Fatalf("relayed device cannot reach the appliance: %v %s", err, out)
	}

	// The relay has the appliance's MAC in its ARP cache now. A port with
	// the lowest MAC there is joins the appliance's bridge (a bridge
	// without a MAC of its own would take it); relayed requests must
	// still reach the appliance.
	if err := ipIn(topo.App.Name, "link", "add", "lowport", "address", "00:00:00:00:00:01", "type", "veth", "peer", "name", "lowpeer"); err != nil {
		t.Fatal(err)
	}
	if err := ipIn(topo.App.Name, "link", "set", "lowport", "master", "br0", "up"); err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct{ ns, br, mac string }{
		{topo.App.Name, "br0", bridgeMAC(topo.AppAddr)},
		{topo.Relay.Name, "br1", bridgeMAC(topo.RelayGW)},
	} {
		out, err := exec.Command("ip", "-n", b.ns, "-br", "link", "show", b.br).Output()
		if err != nil || !strings.Contains(string(out), b.mac) {
			t.Errorf("%s in %s: want MAC %s, got %s (%v)", b.br, b.ns, b.mac, out, err)
		}
	}
	sw2, err := topo.AddDevice("sw2", SubnetB, "02:00:00:00:78:02")
	if err != nil {
		t.Fatal(err)
	}
	l, err = Dhclient(ctx, sw2, filepath.Join(work, "sw2"), SONiCDhclientConf("Force10-S6000", "SN2"))
	if err != nil {
		t.Fatalf("relayed dhclient after the appliance's bridge gained a port: %v", err)
	}
	if !strings.HasPrefix(l.IP(), "10.99.121.") {
		t.Fatalf("relayed dhclient lease: %v", l)
	}
	topo.Close()
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "zlt-") {
		t.Fatalf("namespaces left behind:\n%s", out)
	}
}
