package fleet

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
)

// TestRenewAgainstZtpd has a real `ztpd serve` lease addresses to three
// SONiC identities through the relay, then each renews as a RENEWING
// client: unicast from its leased address, answered unicast. A renewal
// right after DORA is answered from ztpd's lease cache (the time left, no
// write); one a quarter of the lease later extends the stored lease.
func TestRenewAgainstZtpd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs ztpd; skipped in -short mode")
	}
	pair := netns.ForTest(t, "zfr", "10.99.0.1/16", "10.99.0.2/16")
	srv, cli := pair.A, pair.B
	// The pool's /24 is local on the client side (each client owns its
	// leased address) and routed there from the server.
	if err := cli.IP("route", "add", "local", "10.99.1.0/24", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	if err := srv.IP("route", "add", "10.99.1.0/24", "via", "10.99.0.2"); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	bin := filepath.Join(work, "ztpd")
	if err := lab.BuildBinaries(map[string]string{bin: "github.com/ztpd/ztpd/cmd/ztpd"}); err != nil {
		t.Fatal(err)
	}
	const lease = time.Minute // the shortest ztpd takes
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	app, err := lab.StartAppliance(ctx, srv, bin, work, fmt.Sprintf(`data_dir: %s
advertise_addr: 10.99.0.1
log: {level: warn}
http: {addr: "10.99.0.1:8080"}
dhcp:
  interfaces: [a0]
  relays: [{address: 10.99.0.2}] # the fleet relays from its own address
  lease_time: %s
  subnets:
    - {name: renew, subnet: 10.99.0.0/16, interface: a0, pools: ["10.99.1.10-10.99.1.20"], router: 10.99.0.1}
`, filepath.Join(work, "data"), lease), "http://10.99.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if err := app.UseAdminKey(ctx); err != nil {
		t.Fatal(err)
	}

	server := netip.MustParseAddr("10.99.0.1")
	var relay *Relay
	if err := cli.Do(func() (err error) {
		relay, err = NewRelay(netip.MustParseAddr("10.99.0.2"), server)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	var clients []Renewal
	for i := range 3 {
		id, err := Switch{MAC: MAC(i).String(), Product: "Accton-AS7712-32X", Serial: fmt.Sprintf("RENEW-%d", i)}.Identity()
		if err != nil {
			t.Fatal(err)
		}
		l, err := relay.DORA(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, Renewal{ID: id, IP: l.IP})
	}
	leased := time.Now()
	renewAll := func() []RenewAck {
		var acks []RenewAck
		for _, c := range clients {
			var ack RenewAck
			// The socket must be opened inside the client namespace.
			if err := cli.Do(func() (err error) {
				ack, err = Renew(ctx, server, c, 2, time.Second)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			acks = append(acks, ack)
		}
		return acks
	}
	stored := func() map[string]core.Lease {
		var page struct{ Items []core.Lease }
		if err := app.REST(ctx, "/api/v1/leases", nil, &page); err != nil {
			t.Fatal(err)
		}
		out := map[string]core.Lease{}
		for _, l := range page.Items {
			out[l.IP] = l
		}
		return out
	}
	first := stored()
	for i, ack := range renewAll() {
		if ack.Lease <= 0 || ack.Lease >= lease {
			t.Errorf("%s: renewal right after DORA granted %s, want the cached rest of the %s lease", clients[i].IP, ack.Lease, lease)
		}
	}
	time.Sleep(time.Until(leased.Add(lease/4 + 2*time.Second)))
	renewedAt := time.Now()
	for i, ack := range renewAll() {
		if ack.Lease != lease {
			t.Errorf("%s: renewal past the lease cache granted %s, want %s", clients[i].IP, ack.Lease, lease)
		}
	}
	after := stored()
	for _, c := range clients {
		ip := c.IP.String()
		l, was := after[ip], first[ip]
		if l.MAC != c.ID.MAC.String() || l.State != core.LeaseActive || !l.Expiry.After(was.Expiry) || l.Expiry.Before(renewedAt.Add(lease-time.Second)) {
			t.Errorf("%s: stored lease %+v after renewing at %s, before %+v", ip, l, renewedAt.Format(time.RFC3339), was)
		}
	}
}
