package halab

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/ha"
)

// requireDhclient6 skips unless ISC dhclient is installed.
func requireDhclient6(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dhclient"); err != nil {
		t.Skip("skipping: needs dhclient (ISC) for DHCPv6 clients")
	}
}

// startClients6 starts a dhclient -6 for every MAC (named <tag><i>).
func startClients6(t *testing.T, g *Group, tag string, macs []net.HardwareAddr) []*Client6 {
	t.Helper()
	var out []*Client6
	for i, mac := range macs {
		c, err := g.AddClient6(fmt.Sprintf("%s%d", tag, i), mac)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// waitLeased6 waits until every client's lease file holds an address.
func waitLeased6(t *testing.T, cs []*Client6, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var missing []*Client6
		for _, c := range cs {
			if _, ok := c.Address(); !ok {
				missing = append(missing, c)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, c := range missing {
				out, _ := os.ReadFile(c.Out)
				t.Errorf("%s (DUID %s, bucket %d): no lease after %s; dhclient -6 said:\n%s", c.Name, duidText(c.DUID), c.Bucket(),
					limit, TailLines(string(out), 15))
			}
			t.FailNow()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// replies6 stops the capture and reads every appliance's replies.
func replies6(t *testing.T, g *Group, dir string, stop func() int) []Reply6 {
	t.Helper()
	if dropped := stop(); dropped > 0 {
		t.Errorf("tcpdump dropped %d packets: the capture is incomplete", dropped)
	}
	var paths []string
	for _, a := range g.Apps {
		paths = append(paths, filepath.Join(dir, a.Name+".pcap"))
	}
	rs, err := ReadReplies6(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// nameOf maps an appliance's link-local address to its name.
func nameOf(g *Group) map[netip.Addr]string {
	m := map[netip.Addr]string{}
	for _, a := range g.Apps {
		m[a.LinkLocal] = a.Name
	}
	return m
}

// misrouted6 lists replies sent before until by an appliance that is not
// the primary of the client's bucket.
func misrouted6(g *Group, rs []Reply6, until time.Time) []string {
	names, who := g.Names(), nameOf(g)
	var bad []string
	for _, r := range rs {
		if !r.Time.Before(until) || len(r.DUID) == 0 {
			continue
		}
		if p := ha.Primary(names, int(ha.Bucket(r.DUID))); who[r.Server] != p {
			bad = append(bad, fmt.Sprintf("%s to %x (bucket %d, primary %s) came from %s at %s",
				r.Type, r.DUID, ha.Bucket(r.DUID), p, who[r.Server], clock(r.Time)))
		}
	}
	return bad
}

// leases6 is a's stored IPv6 leases (lease list -o json).
func leases6(t *testing.T, a *Appliance) []core.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := a.App.CLI(ctx, "lease", "list", "-o", "json")
	if err != nil {
		t.Fatalf("%s: %v", a.Name, err)
	}
	var all []core.Lease
	if err := json.Unmarshal(out, &all); err != nil {
		t.Fatalf("%s lease list: %v", a.Name, err)
	}
	var v6 []core.Lease
	for _, l := range all {
		if ad, err := netip.ParseAddr(l.IP); err == nil && ad.Is6() && !ad.Is4In6() {
			v6 = append(v6, l)
		}
	}
	return v6
}

func duidText(d []byte) string {
	var b strings.Builder
	for i, c := range d {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x", c)
	}
	return b.String()
}

// checkStore6 checks a's IPv6 leases: each address once, each client
// (DUID) one active lease, and every client holding, in the store, the
// address of the last Reply that granted it one.
func checkStore6(t *testing.T, a *Appliance, rs []Reply6) int {
	t.Helper()
	leases := leases6(t, a)
	seen := map[string]bool{}
	active := map[string]string{}
	for _, l := range leases {
		if seen[l.IP] {
			t.Errorf("%s: the lease table lists %s twice", a.Name, l.IP)
		}
		seen[l.IP] = true
		if l.State != core.LeaseActive {
			continue
		}
		id := strings.ToLower(l.ClientID)
		if other, ok := active[id]; ok {
			t.Errorf("%s: %s holds two active leases, %s and %s", a.Name, id, other, l.IP)
		}
		active[id] = l.IP
	}
	last := map[string]Reply6{}
	for _, r := range rs {
		if r.Grants() {
			last[duidText(r.DUID)] = r
		}
	}
	for id, r := range last {
		if got := active[id]; got != r.Addr.String() {
			t.Errorf("%s: client %s was last granted %s (by %s at %s), the store has %q", a.Name, id, r.Addr,
				r.Server, clock(r.Time), got)
		}
	}
	return len(leases)
}

// TestThreeAppliancesDHCPv6SplitAndSurviveKill: three appliances on
// embedded etcd serve one IPv6 link. Real DHCPv6 clients (ISC dhclient -6
// with SONiC's option declarations, DUID-LL) chosen so each appliance is
// the primary of four, get their leases each from its bucket's primary
// (the hash of the DUID). Then the appliance whose etcd member leads the
// cluster is killed with SIGKILL: the survivors must answer its buckets
// within session_ttl + 5 s (/healthz), give new clients of every bucket
// addresses, and renew the dead one's clients' addresses (their Renews,
// sent to the group's one server DUID at T1, are answered by the taker
// with the same address); no address may go to two clients, and the
// survivors' stores must hold every client's last granted address.
func TestThreeAppliancesDHCPv6SplitAndSurviveKill(t *testing.T) {
	bin := requireLab(t)
	requireDhclient6(t)
	began := time.Now()
	g := startGroupWith(t, bin, "v6k", 3, func(o *Options) { o.IPv6 = true })
	dir := t.TempDir()
	stopCapture, err := g.Capture6(dir)
	if err != nil {
		t.Fatal(err)
	}
	first := startClients6(t, g, "k", g.MACsFor(12, 1))
	waitLeased6(t, first, 90*time.Second)
	t.Logf("12 dhclient -6 leased %.1fs after the group was up", time.Since(began).Seconds())

	victim := raftLeader(t, g)
	roles := g.Roles(victim)
	survivors := g.Others(victim)
	tKill := time.Now()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%s) killed with SIGKILL", victim.Name, roles)
	healthErr := g.WaitBuckets(SessionTTL+10*time.Second, survivors, nil)
	healed := time.Since(tKill)
	if healthErr != nil {
		t.Errorf("the survivors never answered every bucket: %v", healthErr)
	} else if healed >= SessionTTL+5*time.Second {
		t.Errorf("the survivors answered every bucket %.2fs after the kill, not below session_ttl + 5s", healed.Seconds())
	}
	t.Logf("/healthz: the survivors answer all 256 buckets %.2fs after the kill (%s)", healed.Seconds(), g.StatusLine(survivors))
	late := startClients6(t, g, "n", g.MACsFor(6, 2))

	// The victim's clients renew at T1 (30 s after their grant) through
	// the survivors.
	names := g.Names()
	var theirs []*Client6
	for _, c := range first {
		if ha.Primary(names, c.Bucket()) == victim.Name {
			theirs = append(theirs, c)
		}
	}
	had := map[string]netip.Addr{}
	for _, c := range first {
		had[duidText(c.DUID)], _ = c.Address()
	}
	waitLeased6(t, late, 60*time.Second)
	renewed := func() (int, error) {
		var paths []string
		for _, a := range survivors {
			paths = append(paths, filepath.Join(dir, a.Name+".pcap"))
		}
		rs, err := ReadReplies6(paths...)
		if err != nil {
			return 0, err
		}
		n := 0
		for _, c := range theirs {
			for _, r := range rs {
				if r.Time.After(tKill) && r.Grants() && duidText(r.DUID) == duidText(c.DUID) {
					n++
					break
				}
			}
		}
		return n, nil
	}
	deadline := time.Now().Add(75 * time.Second)
	for {
		n, err := renewed()
		if err == nil && n == len(theirs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %s's %d clients renewed through the survivors (%v)", n, victim.Name, len(theirs), err)
		}
		time.Sleep(time.Second)
	}
	rs := replies6(t, g, dir, stopCapture)
	who := nameOf(g)

	grants := 0
	for _, r := range rs {
		if r.Grants() {
			grants++
		}
	}
	t.Logf("capture: %d replies, %d granting", len(rs), grants)
	errorList(t, "address granted twice", DoubleGrants6(rs))
	errorList(t, "reply before the kill not from the bucket's primary", misrouted6(g, rs, tKill))
	perPrimary := map[string]int{}
	for _, r := range rs {
		if r.Time.Before(tKill) && r.Grants() {
			perPrimary[who[r.Server]]++
		}
	}
	for _, n := range names {
		if perPrimary[n] == 0 {
			t.Errorf("%s granted nothing before the kill: the clients were not split (%v)", n, perPrimary)
		}
	}
	t.Logf("grants before the kill by appliance: %v", perPrimary)
	var lastVictim time.Time
	for _, r := range rs {
		if who[r.Server] == victim.Name {
			if r.Time.After(tKill) {
				t.Errorf("%s sent %s to %x at %s, after it was killed", victim.Name, r.Type, r.DUID, clock(r.Time))
			}
			lastVictim = r.Time
		}
	}
	for _, c := range theirs {
		for _, r := range rs {
			if r.Time.After(tKill) && r.Grants() && duidText(r.DUID) == duidText(c.DUID) {
				if want := had[duidText(c.DUID)]; r.Addr != want {
					t.Errorf("%s renewed through %s with %s, it held %s", c.Name, who[r.Server], r.Addr, want)
				} else {
					t.Logf("%s (bucket %d of %s) renewed %s through %s %.1fs after the kill", c.Name, c.Bucket(), victim.Name,
						r.Addr, who[r.Server], r.Time.Sub(tKill).Seconds())
				}
				break
			}
		}
	}
	for _, c := range late {
		if ha.Primary(names, c.Bucket()) != victim.Name {
			continue
		}
		for _, r := range rs {
			if r.Time.After(tKill) && duidText(r.DUID) == duidText(c.DUID) {
				t.Logf("new client %s of %s's bucket %d: first answer (%s) from %s %.2fs after the kill, %.2fs after %s's last reply",
					c.Name, victim.Name, c.Bucket(), r.Type, who[r.Server], r.Time.Sub(tKill).Seconds(), r.Time.Sub(lastVictim).Seconds(), victim.Name)
				break
			}
		}
	}
	n0 := checkStore6(t, survivors[0], rs)
	n1 := checkStore6(t, survivors[1], rs)
	if n0 != n1 {
		t.Errorf("the survivors list %d and %d IPv6 leases", n0, n1)
	}
	t.Logf("survivors' stores: %d IPv6 leases each; test took %.1fs", n0, time.Since(began).Seconds())
}

// TestPartitionedApplianceStopsAnsweringDHCPv6: the appliance whose etcd
// member leads the cluster is cut off from the other two (nftables in its
// namespace; its clients still reach it) while new DHCPv6 clients of
// every bucket start. Within session_ttl + 2 s it must answer nothing, and
// no Reply it sends after the cut may grant a lease (it cannot commit
// one); the survivors take its buckets and lease its new clients. After
// the heal it answers its own buckets again; no address goes to two
// clients, and the store holds every client's last granted address.
func TestPartitionedApplianceStopsAnsweringDHCPv6(t *testing.T) {
	bin := requireLab(t, "nft")
	requireDhclient6(t)
	began := time.Now()
	g := startGroupWith(t, bin, "v6p", 3, func(o *Options) { o.IPv6 = true })
	dir := t.TempDir()
	stopCapture, err := g.Capture6(dir)
	if err != nil {
		t.Fatal(err)
	}
	first := startClients6(t, g, "p", g.MACsFor(6, 3))
	waitLeased6(t, first, 90*time.Second)

	victim := raftLeader(t, g)
	roles := g.Roles(victim)
	survivors := g.Others(victim)
	rules := fmt.Sprintf(`table inet halab {
  chain in { type filter hook input priority 0; ip saddr { %[1]s, %[2]s } drop; }
  chain out { type filter hook output priority 0; ip daddr { %[1]s, %[2]s } drop; }
}
`, survivors[0].IP, survivors[1].IP)
	nft := func(args ...string) {
		t.Helper()
		cmd := victim.NS.Command(context.Background(), "nft", args...)
		if len(args) == 2 && args[1] == "-" {
			cmd.Stdin = strings.NewReader(rules)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft %v: %v: %s", args, err, out)
		}
	}
	nft("-f", "-")
	tCut := time.Now()
	t.Logf("%s (%s) cut off from %s and %s; its clients still reach it", victim.Name, roles, survivors[0].Name, survivors[1].Name)
	late := startClients6(t, g, "q", g.MACsFor(6, 4))
	if err := g.WaitBuckets(SessionTTL+10*time.Second, survivors, nil); err != nil {
		t.Errorf("the survivors never answered every bucket while %s was cut off: %v", victim.Name, err)
	}
	t.Logf("/healthz: the survivors answer all 256 buckets %.2fs after the cut", time.Since(tCut).Seconds())
	waitLeased6(t, late, 60*time.Second)
	if d := time.Until(tCut.Add(SessionTTL + 2*time.Second + 5*time.Second)); d > 0 {
		time.Sleep(d)
	}
	nft("delete", "table", "inet", "halab")
	tHeal := time.Now()
	want := g.Primaries(victim)
	if err := g.WaitBuckets(45*time.Second, g.Apps, func(sts map[string]ha.Status) error {
		if st := sts[victim.Name]; st.Buckets != want {
			return fmt.Errorf("%s answers %d buckets, its own are %d", victim.Name, st.Buckets, want)
		}
		return nil
	}); err != nil {
		t.Errorf("after the heal: %v", err)
	}
	t.Logf("healed: %s answers its %d buckets again %.2fs after the heal", victim.Name, want, time.Since(tHeal).Seconds())
	rs := replies6(t, g, dir, stopCapture)
	who := nameOf(g)
	names := g.Names()

	errorList(t, "address granted twice", DoubleGrants6(rs))
	errorList(t, "reply before the cut not from the bucket's primary", misrouted6(g, rs, tCut))
	durable := map[string]bool{}
	limit := tCut.Add(SessionTTL + 2*time.Second)
	var lastReply Reply6
	for _, r := range rs {
		switch {
		case r.Time.Before(tCut):
			if r.Grants() {
				durable[duidText(r.DUID)+"/"+r.Addr.String()] = true
			}
			continue
		case !r.Time.Before(tHeal) || who[r.Server] != victim.Name:
			continue
		}
		lastReply = r
		if r.Time.After(limit) {
			t.Errorf("%s sent %s to %x %.2fs after the cut", victim.Name, r.Type, r.DUID, r.Time.Sub(tCut).Seconds())
		}
		if r.Grants() && r.Time.After(tCut.Add(100*time.Millisecond)) && !durable[duidText(r.DUID)+"/"+r.Addr.String()] {
			t.Errorf("%s granted %s to %x %.2fs after the cut: a lease it could not have committed", victim.Name, r.Addr, r.DUID,
				r.Time.Sub(tCut).Seconds())
		}
	}
	if lastReply.Time.IsZero() {
		t.Logf("%s sent nothing after the cut", victim.Name)
	} else {
		t.Logf("%s's last reply after the cut: %s %.2fs after it", victim.Name, lastReply.Type, lastReply.Time.Sub(tCut).Seconds())
	}
	for _, c := range late {
		if ha.Primary(names, c.Bucket()) != victim.Name {
			continue
		}
		granted := ""
		for _, r := range rs {
			if r.Grants() && duidText(r.DUID) == duidText(c.DUID) && r.Time.Before(tHeal) {
				granted = who[r.Server]
				t.Logf("new client %s of %s's bucket %d leased %s from %s %.2fs after the cut", c.Name, victim.Name, c.Bucket(),
					r.Addr, granted, r.Time.Sub(tCut).Seconds())
				break
			}
		}
		if granted == "" || granted == victim.Name {
			t.Errorf("new client %s of %s's bucket was granted by %q while it was cut off, want a survivor", c.Name, victim.Name, granted)
		}
	}
	n := checkStore6(t, survivors[0], rs)
	t.Logf("%s's store: %d IPv6 leases; test took %.1fs", survivors[0].Name, n, time.Since(began).Seconds())
}
