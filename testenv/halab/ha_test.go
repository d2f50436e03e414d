package halab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/testenv/fleet"
)

// stormSize is the boot storm of TestThreeAppliancesSurviveKill.
const stormSize = 1000

// TestThreeAppliancesSurviveKill: three appliances on embedded etcd split
// every bucket between them; a storm of SONiC switches onboards through
// them (the lab fleet's own onboarding: DORA through a relay that
// broadcasts to every appliance, ztp.json and config_db.json from the
// appliance that answered, the join bundle, the joined report), and a
// third through it the appliance whose etcd member leads the cluster (the
// worst case: the store stalls until a new leader is elected) is killed
// with SIGKILL. Every switch must still onboard (a switch that fails
// starts over, as SONiC's ZTP does); the capture of every reply must show
// no address ACKed to two clients, no client ACKed two addresses, and
// every reply before the kill coming from its bucket's primary; the
// take-over (the victim's last ACK to the first ACK a survivor gives a
// client of the victim's buckets) must stay under session_ttl + 5 s; and
// the survivors' stores must hold exactly the fleet's leases, every switch
// join-issued.
func TestThreeAppliancesSurviveKill(t *testing.T) {
	bin := requireLab(t)
	began := time.Now()
	g := startGroup(t, bin, "k", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	first := g.Apps[0]
	if err := first.App.UseAdminKey(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.App.CreateStormClusters(ctx, StormClusters, (stormSize+StormClusters-1)/StormClusters); err != nil {
		t.Fatal(err)
	}
	victim := raftLeader(t, g)
	victimRoles := g.Roles(victim)
	var survivors []*Appliance
	for _, a := range g.Apps {
		if a != victim {
			survivors = append(survivors, a)
		}
	}
	pcap := filepath.Join(g.Work, "replies.pcap")
	stopCapture := capture(t, g, pcap)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("storm of %d switches starts; %s (%s, %s) dies with SIGKILL once %d are through",
		stormSize, victim.Name, victim.IP, victimRoles, stormSize/3)
	var tKill time.Time
	healed := make(chan time.Duration, 1)
	stormStart := time.Now()
	res, err := g.RunFleet(ctx, []string{exe, "-test.run=^$"}, FleetSpec{N: stormSize, Concurrency: 128,
		Deadline: time.Now().Add(110 * time.Second)}, func(done int) {
		if !tKill.IsZero() || done < stormSize/3 {
			return
		}
		tKill = time.Now()
		if err := victim.Kill(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s killed %.1fs into the storm, %d switches through", victim.Name, tKill.Sub(stormStart).Seconds(), done)
		go func() {
			err := g.WaitBuckets(30*time.Second, survivors, nil)
			if err != nil {
				t.Errorf("after the kill the survivors never answered every bucket: %v", err)
			}
			healed <- time.Since(tKill)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	stormTook := time.Since(stormStart)
	if tKill.IsZero() {
		t.Fatal("the storm never got a third through")
	}
	healthTakeover := <-healed
	dropped := stopCapture()

	notDone, retried := 0, 0
	for i, ok := range res.Done {
		if !ok {
			notDone++
		}
		if res.Attempts[i] > 1 {
			retried++
		}
	}
	t.Logf("storm: %d switches in %.1fs, %d started over at least once; /healthz showed every bucket answered by the two survivors %.2fs after the kill",
		stormSize, stormTook.Seconds(), retried, healthTakeover.Seconds())
	if len(res.Errors) > 0 {
		t.Logf("first failed onboardings (each started over):\n  %s", strings.Join(res.Errors[:min(len(res.Errors), 8)], "\n  "))
	}
	if notDone > 0 {
		t.Errorf("%d of %d switches never onboarded", notDone, stormSize)
	}

	// The capture.
	rs, err := ReadReplies(pcap)
	if err != nil {
		t.Fatal(err)
	}
	if dropped > 0 {
		t.Errorf("tcpdump dropped %d packets: the capture is incomplete", dropped)
	}
	all := Acks(rs)
	t.Logf("capture: %d replies, %d ACKs", len(rs), len(all))
	errorList(t, "address given twice", DoubleGrants(rs))
	ips := map[string]netip.Addr{}
	for _, a := range g.Apps {
		ips[a.Name] = netip.MustParseAddr(a.IP)
	}
	errorList(t, "reply before the kill not from the bucket's primary", misrouted(rs, g.Names(), ips, tKill))
	vip := ips[victim.Name]
	last, ok := lastFrom(rs, vip, time.Now(), dhcpv4.MessageTypeAck)
	if !ok {
		t.Fatalf("%s sent no ACK before it was killed", victim.Name)
	}
	if last.Time.After(tKill) {
		t.Errorf("%s ACKed %s at %s, after it was killed at %s", victim.Name, last.ChAddr, clock(last.Time), clock(tKill))
	}
	victimACKed := map[string]bool{}
	for _, r := range all {
		if r.Server == vip {
			victimACKed[r.ChAddr] = true
		}
	}
	inVictimBuckets := func(r Reply) bool {
		return r.Server != vip && ha.Primary(g.Names(), bucketOf(r)) == victim.Name
	}
	firstTaken, ok := firstAfter(rs, last.Time, dhcpv4.MessageTypeAck, inVictimBuckets)
	if !ok {
		t.Fatalf("no survivor ever ACKed a client of %s's buckets after its last ACK", victim.Name)
	}
	firstOffer, _ := firstAfter(rs, tKill, dhcpv4.MessageTypeOffer, inVictimBuckets)
	firstKnown, knownOK := firstAfter(rs, last.Time, dhcpv4.MessageTypeAck, func(r Reply) bool { return r.Server != vip && victimACKed[r.ChAddr] })
	takeover := firstTaken.Time.Sub(last.Time)
	t.Logf("take-over: %s's last ACK %s (%.2fs before the kill); first survivor OFFER for its buckets %.2fs after the kill (%s by %s); "+
		"first survivor ACK for its buckets %s by %s: take-over %.2fs after its last ACK (%.2fs after the kill)",
		victim.Name, clock(last.Time), tKill.Sub(last.Time).Seconds(), firstOffer.Time.Sub(tKill).Seconds(), firstOffer.ChAddr, firstOffer.Server,
		firstTaken.ChAddr, firstTaken.Server, takeover.Seconds(), firstTaken.Time.Sub(tKill).Seconds())
	if knownOK {
		t.Logf("first survivor ACK for a client %s had ACKed before: %s by %s, %.2fs after its last ACK (same address: %s)",
			victim.Name, firstKnown.ChAddr, firstKnown.Server, firstKnown.Time.Sub(last.Time).Seconds(), firstKnown.YIAddr)
	}
	if limit := SessionTTL + 5*time.Second; takeover >= limit {
		t.Errorf("take-over took %.2fs, not below session_ttl + 5s = %s", takeover.Seconds(), limit)
	}
	t.Logf("replies per second around the kill (t=0):\n%s", strings.Join(timeline(rs, tKill, -2, 8,
		[]string{g.Apps[0].IP, g.Apps[1].IP, g.Apps[2].IP}), "\n"))

	// The fleet's own records, and each survivor's store.
	byIP := map[string]int{}
	for i, ip := range res.Leases {
		if ip == "" {
			continue
		}
		if j, dup := byIP[ip]; dup {
			t.Errorf("switches %d and %d both onboarded with %s", j, i, ip)
		}
		byIP[ip] = i
	}
	var lists [][]core.Lease
	for _, a := range survivors {
		out, err := a.App.CLI(ctx, "lease", "list", "-o", "json")
		if err != nil {
			t.Fatalf("%s: %v", a.Name, err)
		}
		var leases []core.Lease
		if err := json.Unmarshal(out, &leases); err != nil {
			t.Fatalf("%s lease list: %v", a.Name, err)
		}
		lists = append(lists, leases)
		active := map[string]string{}
		seenIP := map[string]bool{}
		for _, l := range leases {
			if seenIP[l.IP] {
				t.Errorf("%s: the lease table lists %s twice", a.Name, l.IP)
			}
			seenIP[l.IP] = true
			if l.State != core.LeaseActive {
				continue
			}
			mac := strings.ToLower(l.MAC)
			if other, ok := active[mac]; ok {
				t.Errorf("%s: %s holds two active leases, %s and %s", a.Name, mac, other, l.IP)
			}
			active[mac] = l.IP
		}
		missing, wrong := 0, 0
		for i, ip := range res.Leases {
			if ip == "" {
				continue
			}
			got, ok := active[fleet.MAC(i).String()]
			switch {
			case !ok:
				missing++
			case got != ip:
				wrong++
				if wrong <= 5 {
					t.Errorf("%s: switch %d onboarded with %s, the store has %s", a.Name, i, ip, got)
				}
			}
		}
		if missing > 0 || wrong > 0 {
			t.Errorf("%s: %d switches without an active lease, %d with another address than they onboarded with", a.Name, missing, wrong)
		}
		t.Logf("%s's store: %d leases, %d active, %d MACs with one each", a.Name, len(leases), len(active), len(active))
	}
	if len(lists) == 2 && len(lists[0]) != len(lists[1]) {
		t.Errorf("the survivors list %d and %d leases", len(lists[0]), len(lists[1]))
	}
	s := survivors[0]
	if err := s.App.UseAdminKey(ctx); err != nil {
		t.Fatal(err)
	}
	if issued, err := s.App.CountDevices(ctx, "join-issued"); err != nil {
		t.Fatal(err)
	} else if issued != stormSize {
		t.Errorf("%d of %d switches join-issued in the store", issued, stormSize)
	}
	t.Logf("test took %.1fs", time.Since(began).Seconds())
}

// TestPartitionedApplianceStopsAnswering: DHCP clients keep running DORAs
// through the three appliances (clients coming back for their address and
// new ones); then the appliance whose etcd member leads the cluster (it
// must notice it lost its quorum) is cut off from the other two by
// nftables in its namespace, its link to the clients kept. Within
// session_ttl + 2 s of the cut it must answer nothing more (no OFFER, no
// ACK), and an ACK it sends after the cut may only repeat a lease
// committed before it (nothing it cannot make durable); the other two must
// take its buckets over (their /healthz buckets sum to 256) and ACK its
// clients. Once the cut is healed it must answer its own buckets again and
// no other; over the whole run no address may go to two clients, no client
// get two addresses, and the store must hold every address for the client
// its last ACK went to.
func TestPartitionedApplianceStopsAnswering(t *testing.T) {
	bin := requireLab(t, "nft")
	began := time.Now()
	g := startGroup(t, bin, "p", 3)
	victim := raftLeader(t, g)
	victimRoles := g.Roles(victim)
	var survivors []*Appliance
	for _, a := range g.Apps {
		if a != victim {
			survivors = append(survivors, a)
		}
	}
	pcap := filepath.Join(g.Work, "replies.pcap")
	stopCapture := capture(t, g, pcap)
	const clients, rate = 600, 150
	load, err := startDORALoad(g.Fleet, 1<<20, clients, rate)
	if err != nil {
		t.Fatal(err)
	}
	loadStopped := false
	defer func() {
		if !loadStopped {
			load.Stop()
		}
	}()
	time.Sleep(6 * time.Second) // every client leased once

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
	t.Logf("%s (%s, %s) cut off from %s and %s; its clients still reach it", victim.Name, victim.IP, victimRoles,
		survivors[0].Name, survivors[1].Name)

	// The survivors take every bucket (their /healthz); the victim says it
	// holds none (its /metrics, and its /healthz: 503 once its store has no
	// quorum, with the group part).
	taken := make(chan error, 1)
	var tTaken time.Time
	go func() {
		err := g.WaitBuckets(SessionTTL+10*time.Second, survivors, nil)
		tTaken = time.Now()
		taken <- err
	}()
	var tStopped time.Time
	for time.Since(tCut) < SessionTTL+10*time.Second {
		if m, err := victim.Metrics(); err == nil && m["ztpd_ha_buckets_owned"] == 0 && m["ztpd_ha_session_valid"] == 0 {
			tStopped = time.Now()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-taken; err != nil {
		t.Errorf("the survivors never answered every bucket while %s was cut off: %v", victim.Name, err)
	}
	if tStopped.IsZero() {
		t.Errorf("%s's /metrics never showed it holding no bucket with its session dead", victim.Name)
	}
	// Its /healthz, without a quorum, answers within a few seconds (503),
	// still saying what it holds: nothing.
	asked := time.Now()
	st, err := victim.Health()
	if took := time.Since(asked); err != nil || st.Alive || st.Buckets != 0 || took > 4*time.Second {
		t.Errorf("%s's /healthz while cut off: %+v, %v, in %s; want its group part, no bucket, no session, within 4 s",
			victim.Name, st, err, took.Round(time.Millisecond))
	}
	t.Logf("%s's /metrics: no bucket, session dead %.2fs after the cut; the survivors' /healthz: all 256 buckets answered %.2fs after it (%s)",
		victim.Name, tStopped.Sub(tCut).Seconds(), tTaken.Sub(tCut).Seconds(), g.StatusLine(survivors))
	// Clients keep asking the victim for a while after its deadline, and
	// the survivors, allocating for new clients, come to reuse the address
	// blocks the victim held.
	if d := time.Until(tCut.Add(SessionTTL + 2*time.Second + 10*time.Second)); d > 0 {
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
	tBack := time.Now()
	t.Logf("healed: %s answers its %d buckets again %.2fs after the heal (%s)", victim.Name, want, tBack.Sub(tHeal).Seconds(),
		g.StatusLine(g.Apps))
	time.Sleep(5 * time.Second)
	load.Stop()
	loadStopped = true
	dropped := stopCapture()

	rs, err := ReadReplies(pcap)
	if err != nil {
		t.Fatal(err)
	}
	if dropped > 0 {
		t.Errorf("tcpdump dropped %d packets: the capture is incomplete", dropped)
	}
	load.mu.Lock()
	t.Logf("load: %d DORAs ACKed, %d failed (four tries each); capture: %d replies, %d ACKs", load.ok, load.failed, len(rs), len(Acks(rs)))
	var twice []string
	for c, ips := range load.leases {
		if len(ips) > 1 {
			twice = append(twice, fmt.Sprintf("client %s was ACKed %d addresses: %v", fleet.MAC(1<<20+c), len(ips), sortedKeys(ips)))
		}
	}
	load.mu.Unlock()
	errorList(t, "client with two addresses (the load's own records)", twice)
	errorList(t, "address given twice", DoubleGrants(rs))
	ips := map[string]netip.Addr{}
	for _, a := range g.Apps {
		ips[a.Name] = netip.MustParseAddr(a.IP)
	}
	errorList(t, "reply before the cut not from the bucket's primary", misrouted(rs, g.Names(), ips, tCut))
	// The store must hold, for every address, the client its last ACK went
	// to: a write decided by the victim before the cut and committed after
	// the heal would overwrite a survivor's lease.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := survivors[0].App.CLI(ctx, "lease", "list", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var leases []core.Lease
	if err := json.Unmarshal(out, &leases); err != nil {
		t.Fatalf("lease list: %v", err)
	}
	stored := map[string]core.Lease{}
	for _, l := range leases {
		stored[l.IP] = l
	}
	latest := map[string]Reply{}
	for _, r := range Acks(rs) {
		latest[r.YIAddr.String()] = r
	}
	var overwritten []string
	for ip, r := range latest {
		l, ok := stored[ip]
		switch {
		case !ok:
			overwritten = append(overwritten, fmt.Sprintf("%s ACKed to %s by %s at %s is not in the store", ip, r.ChAddr, r.Server, clock(r.Time)))
		case !strings.EqualFold(l.MAC, r.ChAddr) || l.State != core.LeaseActive:
			overwritten = append(overwritten, fmt.Sprintf("%s ACKed to %s by %s at %s: the store has it %s for %s (expires %s)",
				ip, r.ChAddr, r.Server, clock(r.Time), l.State, l.MAC, clock(l.Expiry)))
		}
	}
	errorList(t, "lease in the store that is not the last ACK's", overwritten)
	byMAC := map[string][]string{}
	for _, l := range leases {
		if l.State == core.LeaseActive {
			byMAC[strings.ToLower(l.MAC)] = append(byMAC[strings.ToLower(l.MAC)], l.IP)
		}
	}
	var two []string
	for mac, ips := range byMAC {
		if len(ips) > 1 {
			two = append(two, fmt.Sprintf("the store gives %s %d active leases: %v", mac, len(ips), ips))
		}
	}
	errorList(t, "client with two active leases in the store", two)
	// A lease started between the cut and the heal must have reached its
	// client: the victim's decisions after the cut could not be made
	// durable then, and must not be later (a lease committed at the cut
	// itself may have lost only its answer, hence the margin).
	acked := map[string]bool{}
	for _, r := range Acks(rs) {
		acked[strings.ToLower(r.ChAddr)+"/"+r.YIAddr.String()] = true
	}
	var phantom []string
	for _, l := range leases {
		if l.State == core.LeaseActive && l.Start.After(tCut.Add(500*time.Millisecond)) && l.Start.Before(tHeal) && !acked[strings.ToLower(l.MAC)+"/"+l.IP] {
			phantom = append(phantom, fmt.Sprintf("the store holds %s for %s, started %.2fs after the cut, written %.2fs after it: no ACK ever gave it",
				l.IP, l.MAC, l.Start.Sub(tCut).Seconds(), l.UpdatedAt.Sub(tCut).Seconds()))
		}
	}
	errorList(t, "lease started while the victim was cut off that no client was ACKed", phantom)
	t.Logf("%s's store: %d leases; %d addresses ACKed, each stored for the client its last ACK went to unless listed above", survivors[0].Name, len(leases), len(latest))
	vip := ips[victim.Name]
	limit := tCut.Add(SessionTTL + 2*time.Second)
	durable := map[string]bool{} // chaddr/yiaddr ACKed before the cut
	var lastReply, lastACK Reply
	late, nonDurable := 0, 0
	for _, r := range rs {
		switch {
		case r.Time.Before(tCut):
			if r.Type == dhcpv4.MessageTypeAck {
				durable[r.ChAddr+"/"+r.YIAddr.String()] = true
			}
			continue
		case !r.Time.Before(tHeal) || r.Server != vip:
			continue
		}
		lastReply = r
		if r.Time.After(limit) {
			late++
			if late <= 5 {
				t.Errorf("%s sent %s to %s at %.2fs after the cut (bucket %d)", victim.Name, r.Type, r.ChAddr, r.Time.Sub(tCut).Seconds(), bucketOf(r))
			}
		}
		if r.Type == dhcpv4.MessageTypeAck {
			lastACK = r
			// An exchange whose commit was acknowledged just before the
			// cut may still be on its way; anything later must repeat a
			// lease committed before the cut.
			if r.Time.After(tCut.Add(100*time.Millisecond)) && !durable[r.ChAddr+"/"+r.YIAddr.String()] {
				nonDurable++
				t.Errorf("%s ACKed %s to %s %.2fs after the cut: a lease it could not have committed", victim.Name, r.YIAddr, r.ChAddr, r.Time.Sub(tCut).Seconds())
			}
		}
	}
	if late > 0 {
		t.Errorf("%s sent %d replies later than session_ttl + 2s after the cut", victim.Name, late)
	}
	if lastReply.Time.IsZero() {
		t.Logf("%s sent nothing after the cut", victim.Name)
	} else {
		t.Logf("%s's last reply after the cut: %s %.2fs after it; last ACK: %s", victim.Name, lastReply.Type,
			lastReply.Time.Sub(tCut).Seconds(), func() string {
				if lastACK.Time.IsZero() {
					return "none"
				}
				return fmt.Sprintf("%.2fs after it", lastACK.Time.Sub(tCut).Seconds())
			}())
	}
	inVictimBuckets := func(r Reply) bool { return ha.Primary(g.Names(), bucketOf(r)) == victim.Name }
	if r, ok := firstAfter(rs, tCut, dhcpv4.MessageTypeAck, func(r Reply) bool { return r.Server != vip && inVictimBuckets(r) }); !ok || r.Time.After(tHeal) {
		t.Errorf("no survivor ACKed a client of %s's buckets while it was cut off", victim.Name)
	} else {
		t.Logf("first survivor ACK for %s's buckets: %.2fs after the cut (%s by %s)", victim.Name, r.Time.Sub(tCut).Seconds(), r.ChAddr, r.Server)
	}
	if r, ok := firstAfter(rs, tBack, dhcpv4.MessageTypeAck, func(r Reply) bool { return r.Server == vip && inVictimBuckets(r) }); !ok {
		t.Errorf("%s ACKed none of its clients after it took its buckets back", victim.Name)
	} else {
		t.Logf("%s ACKed its clients again: first %.2fs after the heal", victim.Name, r.Time.Sub(tHeal).Seconds())
	}
	var foreign []string
	for _, r := range rs {
		switch {
		case r.Time.After(tBack) && r.Server != vip && inVictimBuckets(r):
			foreign = append(foreign, fmt.Sprintf("%s sent %s to %s (bucket of %s) %.2fs after %s took its buckets back",
				r.Server, r.Type, r.ChAddr, victim.Name, r.Time.Sub(tBack).Seconds(), victim.Name))
		case r.Time.After(tHeal) && r.Server == vip && !inVictimBuckets(r):
			foreign = append(foreign, fmt.Sprintf("%s sent %s to %s (bucket %d, not one of its own) %.2fs after the heal",
				victim.Name, r.Type, r.ChAddr, bucketOf(r), r.Time.Sub(tHeal).Seconds()))
		}
	}
	errorList(t, "reply for another appliance's bucket after the heal", foreign)
	t.Logf("replies per second around the cut (t=0):\n%s", strings.Join(timeline(rs, tCut, -1, int(tHeal.Sub(tCut)/time.Second)+3,
		[]string{g.Apps[0].IP, g.Apps[1].IP, g.Apps[2].IP}), "\n"))
	t.Logf("test took %.1fs", time.Since(began).Seconds())
}

// errorList fails t with the first few of bad and their count.
func errorList(t *testing.T, what string, bad []string) {
	t.Helper()
	for i, b := range bad {
		if i == 8 {
			break
		}
		t.Error(b)
	}
	if len(bad) > 0 {
		t.Errorf("%d times: %s", len(bad), what)
	}
}
