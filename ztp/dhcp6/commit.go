package dhcp6

import (
	"context"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/ztp/dhcpgroup"
)

// Commit pacing: a lone request is committed at once; under load one
// commit every commitEvery carries all that waits. Each commit costs about
// a millisecond of CPU (fdatasync, meta and branch pages) whatever it
// carries: at 16 ms rather than DHCPv4's 8 ms, a storm's exchange spends
// some 10 µs less (BenchmarkSARR at 72 and 144 exchanges a commit), and a
// Reply waits 8 ms more, far inside the client's 1 s retransmission
// timeout. A commit then releases up to twice as many Replies at once
// (DHCPv4 paces its ACKs for receivers' socket buffers; these are sent
// back to back), fewer where repeated Requests need no commit
// (dhcplease.Cached).
const (
	commitEvery      = 16 * time.Millisecond
	lazyFlush        = 200 * time.Millisecond
	maxPendingReply  = 50000
	maxPendingEvents = 10000
	deviceChunk      = 2048
	eventChunk       = 4096
	// lastSeenEvery: an unchanged device is rewritten by a renewal only
	// when its last-seen time is older than this.
	lastSeenEvery = 5 * time.Minute
)

// pendingReply is a Reply waiting for the commit of the lease it grants.
type pendingReply struct {
	ifc    *iface
	dst    netip.AddrPort
	pkt    []byte
	b      *binding
	duid   string
	expiry time.Time
}

func (s *Server) enqueueReply(x *exchange) bool {
	if len(s.replies) >= maxPendingReply {
		return s.drop("backlog")
	}
	var pkt []byte
	if n := len(s.pktFree); n > 0 {
		pkt, s.pktFree = s.pktFree[n-1], s.pktFree[:n-1]
	}
	s.replies = append(s.replies, pendingReply{ifc: x.ifc, dst: x.dst, pkt: append(pkt[:0], x.out...),
		b: x.b, duid: x.b.duid, expiry: x.b.expiry})
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return true
}

// device is this server's view of one device record (by MAC), what it
// hands the devices service.
type device struct {
	d       core.Device
	facts   devices.Facts
	state   core.DeviceState
	written time.Time
	queued  bool
	// rawDUID is the client DUID last stated, duidText its text: most
	// exchanges state the same one, and need not format it again.
	rawDUID, duidText string
}

// touchDevice records what a lease holder's request says about its device.
// A client without a known MAC gets its lease and no record (records are
// keyed by MAC).
func (s *Server) touchDevice(x *exchange) {
	if x.mac == nil {
		return
	}
	dv := s.devs[string(x.mac)]
	changed := false
	if dv == nil {
		mac := hexColon(x.mac)
		dv = &device{d: core.Device{ID: mac, MAC: mac, FirstSeen: x.now}, state: core.StateDiscovered}
		s.devs[string(x.mac)] = dv
		changed = true
	}
	if dv.rawDUID != string(x.duid) {
		dv.rawDUID, dv.duidText = string(x.duid), hexColon(x.duid)
	}
	stated := devices.Facts{Source: devices.SourceDHCP, Kind: x.kind, KindDeclared: x.res != nil && x.res.kind != "",
		Serial: x.serial, Product: x.product, Platform: x.platform, ClientID: dv.duidText}
	if vc, ok := x.req.Opt(optVendorClass); ok {
		stated.VendorClass = vendorText(vc)
	}
	if x.link.IsValid() {
		stated.RelayAddr = x.link.String()
		// The interface-id and remote-id are recorded as option 82's
		// circuit and remote ids are, so auto_approve rules and profiles
		// match them alike.
		ifaceID, remoteID := relayIDs(x.req.relays)
		if ifaceID != nil {
			stated.CircuitID = idText(ifaceID)
		}
		if remoteID != nil {
			stated.RemoteID = idText(remoteID)
		}
	}
	if x.slot != nil {
		stated.Position = x.slot.pos.Name
	}
	if x.fresh {
		ip := x.b.ip.String()
		stated.IP, stated.Subnet = ip, x.sn.name
		dv.d.IP, dv.d.Subnet = ip, x.sn.name
		dv.state = core.StateLeased
		changed = true
	} else {
		stated.IP, stated.Subnet = dv.facts.IP, dv.facts.Subnet
	}
	stated.Check(func(fact string, err error) {
		s.log.Debug("device fact refused", "mac", dv.d.MAC, "fact", fact, "err", err)
	})
	if was := dv.facts; was != stated || changed {
		devices.Merge(&dv.d, &stated)
		dv.facts.Update(&stated)
		changed = true
	}
	dv.d.LastSeen = x.now
	if (changed || x.now.Sub(dv.written) >= lastSeenEvery) && !dv.queued {
		dv.queued = true
		s.devQueue = append(s.devQueue, dv)
	}
}

// idText is a relay's id as the device record shows it: text when
// printable, else hex.
func idText(b []byte) string {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return hexColon(b)
		}
	}
	return string(b)
}

// snapshot is one commit's worth of changes, taken under Server.mu.
type snapshot struct {
	bindings []*binding
	leases   []core.Lease
	reports  []devices.Lease
	events   []core.Event
	recs     devices.Batch
	replies  []pendingReply
	// fence checks, before leases are written, that session (the one
	// every lease of the snapshot was decided under) is still this
	// appliance's (several appliances; nil on one box).
	fence   func(core.Tx) error
	session int64
	stale   int // decisions of an ended session dropped by take
}

func (s *Server) take(snap *snapshot, now time.Time) {
	snap.bindings, snap.leases = snap.bindings[:0], snap.leases[:0]
	snap.reports, snap.events, snap.replies = snap.reports[:0], snap.events[:0], snap.replies[:0]
	snap.session, snap.stale = dhcpgroup.Session(s.part), 0
	snap.fence = dhcpgroup.FenceFor(s.part, snap.session)
	for _, b := range s.dirty {
		b.dirty = false
		if s.part != nil && b.pending && b.session != snap.session {
			// Decided under a session that has ended: never committed
			// under the next one over what the others gave meanwhile.
			if s.byIP[b.ip] == b {
				s.revert(b, now)
				snap.stale++
			}
			b.pending = false
			continue
		}
		if s.byIP[b.ip] != b {
			continue // superseded by a newer binding of the address
		}
		b.durable = time.Time{}
		snap.bindings = append(snap.bindings, b)
		snap.leases = append(snap.leases, b.lease(now))
	}
	clear(s.dirty)
	s.dirty = s.dirty[:0]
	for _, dv := range s.devQueue {
		dv.queued, dv.written = false, now
		snap.reports = append(snap.reports, devices.Lease{Device: dv.d.ID, Facts: dv.facts,
			FirstSeen: dv.d.FirstSeen, LastSeen: dv.d.LastSeen, New: dv.state == core.StateLeased})
		dv.state = ""
	}
	clear(s.devQueue)
	s.devQueue = s.devQueue[:0]
	snap.events = append(snap.events, s.events...)
	clear(s.events)
	s.events = s.events[:0]
	for _, r := range s.replies {
		b := r.b
		if s.byIP[b.ip] != b || b.duid != r.duid || b.state != core.LeaseActive || b.expiry.Before(r.expiry) {
			s.metrics.dropped.WithLabelValues("stale").Inc() // released or taken over before it became durable
			s.freePkt(r.pkt)
			continue
		}
		snap.replies = append(snap.replies, r)
	}
	clear(s.replies)
	s.replies = s.replies[:0]
}

func (snap *snapshot) write(tx core.Tx) error {
	if snap.fence != nil && len(snap.leases) > 0 {
		if err := snap.fence(tx); err != nil {
			return err
		}
	}
	for i := range snap.leases {
		if err := tx.Leases().Put(snap.leases[i]); err != nil {
			return err
		}
	}
	return snap.recs.Write(tx)
}

// flush commits one snapshot and sends its replies; it reports whether
// records are left over.
func (s *Server) flush(snap *snapshot, lastErr *time.Time) bool {
	s.mu.Lock()
	s.take(snap, time.Now())
	s.mu.Unlock()
	if snap.stale > 0 {
		s.log.Warn("dropped lease decisions made under an ended appliance session; their addresses went back to what the store holds",
			"decisions", snap.stale, "session", snap.session)
	}
	for i := range snap.reports {
		s.devices.ObserveLease(snap.reports[i])
	}
	s.devices.Events(snap.events)
	n := deviceChunk
	if len(snap.replies) > 0 {
		n = 128
	}
	more := s.devices.Take(&snap.recs, n, eventChunk)
	if len(snap.leases) == 0 && snap.recs.Len() == 0 && len(snap.replies) == 0 {
		return more
	}
	err := s.store.Batch(snap.write)
	if err != nil && snap.recs.Len() > 0 {
		// The leases alone, so a record the store refuses holds no Reply
		// back; the devices service retries its records one by one.
		leases := &snapshot{leases: snap.leases, fence: snap.fence}
		if lerr := s.store.Batch(leases.write); lerr != nil {
			s.devices.Return(&snap.recs)
		} else {
			s.devices.Done(&snap.recs, err)
			err = nil
		}
	} else {
		s.devices.Done(&snap.recs, err)
	}
	if err != nil {
		s.metrics.commitErrors.Inc()
		if time.Since(*lastErr) > 5*time.Second {
			*lastErr = time.Now()
			s.log.Error("lease commit failed; replies withheld, will retry", "err", err,
				"leases", len(snap.leases), "replies", len(snap.replies))
		}
		// Retried by the next commit under the session they were decided
		// under, or not at all (take reverts them).
		s.mu.Lock()
		for _, b := range snap.bindings {
			if s.byIP[b.ip] == b && b.pending {
				s.markDirty(b)
			}
		}
		s.mu.Unlock()
		return false
	}
	s.mu.Lock()
	for i, b := range snap.bindings {
		if s.part != nil {
			l := snap.leases[i]
			b.stored = &l
		}
		if b.dirty {
			continue // changed again since: its next write is pending
		}
		b.pending = false
		if snap.leases[i].State == core.LeaseActive {
			b.durable = snap.leases[i].Expiry
		}
	}
	s.mu.Unlock()
	for _, r := range snap.replies {
		s.send(r.ifc, r.dst, r.pkt)
	}
	s.mu.Lock()
	for _, r := range snap.replies {
		s.freePkt(r.pkt)
	}
	s.mu.Unlock()
	clear(snap.replies)
	return more
}

// maxFreePkts bounds the reply buffers kept for reuse.
const maxFreePkts = 4096

// freePkt keeps a sent reply's buffer for the next one that waits for a
// commit, instead of a new copy per Reply. The caller holds s.mu.
func (s *Server) freePkt(pkt []byte) {
	if len(s.pktFree) < maxFreePkts {
		s.pktFree = append(s.pktFree, pkt[:0])
	}
}

// commitLoop runs until ctx ends, then commits what is left once more.
func (s *Server) commitLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	snap := &snapshot{}
	tick := time.NewTicker(lazyFlush)
	defer tick.Stop()
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	var lastErr, last time.Time
	for {
		select {
		case <-s.kick:
		case <-tick.C:
		case <-ctx.Done():
			for s.flush(snap, &lastErr) {
			}
			return
		}
		if since := time.Since(last); since < commitEvery {
			wait.Reset(commitEvery - since)
			select {
			case <-wait.C:
			case <-ctx.Done():
				wait.Stop()
				for s.flush(snap, &lastErr) {
				}
				return
			}
		}
		last = time.Now()
		if s.flush(snap, &lastErr) {
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
	}
}
