package dhcp

import (
	"context"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/ztp/dhcpgroup"
)

// The committer makes in-memory decisions durable. Workers mark bindings
// dirty and queue device changes, events and ACKs; the committer takes a
// snapshot of all of it, hands the device changes and events to the devices
// service (which owns device records and merges them), takes back a chunk of
// that service's queue and writes it with the leases in one store.Batch (a
// group commit, fsynced), and only then sends the ACKs of that snapshot.
// While one commit runs the next one fills up, so the commit rate adapts to
// the load.

const (
	// lazyFlush bounds how long device and event records wait when no ACK
	// triggers a commit.
	lazyFlush = 100 * time.Millisecond
	// commitEvery is the shortest time between two commits.
	commitEvery = 8 * time.Millisecond
	// Records per commit: a new device dirties a page of its own (MACs are
	// scattered keys), so commits that ACKs wait for carry few of them and
	// the backlog drains in the commits that follow, bigger when no ACK is
	// waiting. Events are appended in key order and cheap.
	deviceChunkWithAcks = 32
	deviceChunk         = 512
	eventChunk          = 512
	// lastSeenEvery coalesces last_seen updates of a chatty client.
	lastSeenEvery = time.Minute
	// maxPendingAcks bounds ACKs waiting for a commit; beyond it REQUESTs
	// are dropped (the client retries) rather than answered too late.
	maxPendingAcks = 8192
	// maxPendingEvents bounds events kept between two commits (the devices
	// service bounds them after).
	maxPendingEvents = 100000
)

// pendingAck is an encoded ACK waiting for its lease to be committed.
type pendingAck struct {
	ifc    *iface
	dst    dest
	pkt    []byte
	b      *binding
	key    string
	expiry time.Time
	queued time.Time
}

// device is this server's view of one device. facts is what its lease
// exchanges stated (the latest statement of each), what the next commit
// hands the devices service; d is those facts merged by the devices
// service's rule (devices.Merge), what this server answers before the
// record is stored (DeviceByIP).
type device struct {
	d           core.Device
	facts       devices.Facts
	state       core.DeviceState // a transition to apply with the next write
	written     time.Time
	queued      bool
	rawClientID string  // as last sent, to notice changes without formatting
	relay       [4]byte // giaddr as last seen
	rawCircuit  string  // option 82 sub-options as last seen
	rawRemote   string
	warned      time.Time // last conflicting-claim warning
}

// warnClaim logs (at most once a minute per device) a client that states a
// fact different from the one it stated before; the devices service keeps
// the record and notes the contradiction as an event.
func (s *Server) warnClaim(x *exchange, dv *device, fact, have, claimed string) {
	if x.now.Sub(dv.warned) < time.Minute {
		return
	}
	dv.warned = x.now
	s.log.Warn("DHCP client states a different "+fact+" than its record; the record is kept",
		"mac", dv.d.MAC, "stated before", have, "claimed", claimed, "interface", x.ifc.name)
}

func (s *Server) enqueueAck(x *exchange) bool {
	if len(s.acks) >= maxPendingAcks {
		s.metrics.dropBacklog.Inc()
		return false
	}
	pkt := make([]byte, len(x.out))
	copy(pkt, x.out)
	s.acks = append(s.acks, pendingAck{ifc: x.ifc, dst: x.dst, pkt: pkt, b: x.b, key: x.b.key,
		expiry: x.b.expiry, queued: x.now})
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return true
}

// touchDevice records what this request says about its device, only when
// leased is true (this reply ACKs a lease: one granted or renewed to the
// client that holds it). A DISCOVER, an INFORM or a NAKed REQUEST may quote
// any hardware address and proves nothing: it changes no record. A write
// is queued when something changed, or last_seen is older than
// lastSeenEvery. What the client states anew is checked here, where it
// enters (devices.Facts.Check: a fact that fails is dropped and counted);
// the devices service merges it into the record by its one rule (a kind is
// refined, never changed; a serial, product or platform fills in and never
// replaces; a contradiction is an event). Only values that changed are
// converted and checked: most ACKs are renewals that state nothing new.
func (s *Server) touchDevice(x *exchange, leased bool) {
	if len(x.hw) == 0 || !leased {
		// Device records are keyed by hardware address; a client without one
		// (hlen 0, known by its client id alone) gets leases but no record.
		return
	}
	dv := s.devs[string(x.hw)]
	changed := false
	if dv == nil {
		mac := macText(x.hw)
		dv = &device{d: core.Device{ID: mac, MAC: mac, FirstSeen: x.now}, state: core.StateDiscovered}
		s.devs[string(x.hw)] = dv
		changed = true
	}
	was := &dv.facts
	stated := devices.Facts{Source: devices.SourceDHCP, Kind: x.kind, KindDeclared: x.declared}
	if was.Kind != stated.Kind || was.KindDeclared != stated.KindDeclared {
		changed = true
	}
	anew := func(v, was string) string {
		if v == was {
			return ""
		}
		return v
	}
	stated.Serial = anew(x.serial, was.Serial)
	stated.Product = anew(x.product, was.Product)
	stated.Platform = anew(x.platform, was.Platform)
	if h, ok := x.req.Opt(optHostname); ok && string(h) != was.Hostname {
		stated.Hostname = string(h)
	}
	if len(x.clientID) > 0 && string(x.clientID) != dv.rawClientID {
		dv.rawClientID = string(x.clientID)
		stated.ClientID = anew(clientIDText(x.clientID), was.ClientID)
	}
	if vc, ok := x.req.Opt(optVendorClass); ok && string(vc) != was.VendorClass {
		stated.VendorClass = printable(vc)
	}
	if x.req.GIAddr != ([4]byte{}) && x.req.GIAddr != dv.relay {
		dv.relay = x.req.GIAddr
		stated.RelayAddr = anew(ip4String(x.req.GIAddr), was.RelayAddr)
	}
	if x.req.GIAddr != ([4]byte{}) {
		if v, ok := x.req.relaySubOpt(relayCircuitID); ok && string(v) != dv.rawCircuit {
			dv.rawCircuit = string(v)
			stated.CircuitID = anew(clientIDText(v), was.CircuitID)
		}
		if v, ok := x.req.relaySubOpt(relayRemoteID); ok && string(v) != dv.rawRemote {
			dv.rawRemote = string(v)
			stated.RemoteID = anew(clientIDText(v), was.RemoteID)
		}
	}
	if x.slot != nil && x.slot.pos.Name != was.Position {
		stated.Position = x.slot.pos.Name
	}
	if kindOnly := (devices.Facts{Source: stated.Source, Kind: stated.Kind, KindDeclared: stated.KindDeclared}); stated != kindOnly {
		stated.Check(func(fact string, err error) {
			s.metrics.factsRefused.WithLabelValues(fact).Inc()
			s.log.Debug("device fact refused", "mac", dv.d.MAC, "fact", fact, "err", err)
		})
		changed = changed || stated != kindOnly
	}
	if changed {
		bad := devices.Merge(&dv.d, &stated)
		for _, c := range [...]struct {
			fact      devices.FactSet
			name      string
			have, new string
		}{{devices.FactSerial, "serial", dv.d.Serial, stated.Serial}, {devices.FactProduct, "product", dv.d.Product, stated.Product},
			{devices.FactPlatform, "platform", dv.d.Platform, stated.Platform}} {
			if bad.Has(c.fact) {
				// Handed on as stated: the devices service keeps the
				// record's and records the contradiction.
				s.warnClaim(x, dv, c.name, c.have, c.new)
			}
		}
		was.Update(&stated)
	}
	dv.d.LastSeen = x.now
	if changed || x.now.Sub(dv.written) >= lastSeenEvery {
		s.queueDevice(dv)
	}
}

// forgetDevices drops this server's view of the devices that no binding
// names any more (their address released and given to another client, or
// expired and forgotten), so made-up hardware addresses cannot grow it: it
// stays within the bindings, which the pools bound. Only needed when there
// are more views than bindings. A device that comes back starts a new view
// (its record is in the store). The caller holds s.mu.
func (s *Server) forgetDevices() {
	if len(s.devs) <= len(s.byIP) {
		return
	}
	named := make(map[string]struct{}, len(s.byIP))
	for _, b := range s.byIP {
		named[b.hw] = struct{}{}
	}
	for hw, dv := range s.devs {
		if _, ok := named[hw]; !ok && !dv.queued {
			delete(s.devs, hw)
		}
	}
}

// deviceLeased records a new lease on the device; it is written in the same
// commit as the lease.
func (s *Server) deviceLeased(x *exchange, b *binding) {
	dv := s.devs[string(x.hw)]
	if dv == nil {
		return
	}
	ip := addrOf(b.ip).String()
	dv.d.IP, dv.d.Subnet = ip, b.sn.name
	dv.facts.IP, dv.facts.Subnet = ip, b.sn.name
	dv.state = core.StateLeased
	s.queueDevice(dv)
}

func (s *Server) queueDevice(dv *device) {
	if !dv.queued {
		dv.queued = true
		s.devQueue = append(s.devQueue, dv)
	}
}

// event queues a core.Event about the exchange's client; ip may be empty.
func (s *Server) event(x *exchange, typ, msg string, ip uint32) {
	if len(s.events) >= maxPendingEvents {
		return
	}
	s.events = append(s.events, eventRec{time: x.now, typ: typ, device: s.deviceID(x), msg: msg,
		subnet: x.sn.name, iface: x.ifc.name, ip: ip, relay: x.req.GIAddr})
}

// deviceID is the device ID of the exchange's client, shared with its
// device record when there is one.
func (s *Server) deviceID(x *exchange) string {
	if dv := s.devs[string(x.hw)]; dv != nil {
		return dv.d.ID
	}
	return macText(x.hw)
}

// snapshot is one commit's worth of changes, taken under Server.mu.
type snapshot struct {
	bindings []*binding
	leases   []leaseRec
	devices  []*device
	reports  []devices.Lease
	events   []eventRec
	evs      []core.Event
	recs     devices.Batch // device and event records carried by this commit
	acks     []pendingAck
	// fence checks, before leases are written, that session (the one
	// every lease of the snapshot was decided under) is still this
	// appliance's (several appliances; nil on one box).
	fence   func(core.Tx) error
	session int64
	stale   int // decisions of an ended session dropped by take
}

func (sn *snapshot) empty() bool {
	return len(sn.leases) == 0 && sn.recs.Len() == 0 && len(sn.acks) == 0
}

// take moves the pending changes into snap (reusing its slices): every
// dirty lease, waiting ACK, device change and event. With several
// appliances, a lease decided under a session that has since ended is not
// taken: the binding goes back to what the store holds (its ACK, if any,
// is dropped), so a cut-off appliance never commits its old decisions
// under its next session over what the others gave meanwhile.
func (s *Server) take(snap *snapshot, now time.Time) {
	snap.bindings, snap.leases = snap.bindings[:0], snap.leases[:0]
	snap.devices, snap.reports = snap.devices[:0], snap.reports[:0]
	snap.events, snap.acks = snap.events[:0], snap.acks[:0]
	snap.session, snap.stale = dhcpgroup.Session(s.part), 0
	snap.fence = dhcpgroup.FenceFor(s.part, snap.session)
	for _, b := range s.dirty {
		b.dirty = false
		if s.part != nil && b.pending && b.session != snap.session {
			if s.byIP[b.ip] == b {
				s.revert(b, now)
				snap.stale++
			}
			b.pending = false
			continue
		}
		if cur := s.byIP[b.ip]; cur != b && cur != nil {
			continue // superseded by a newer binding of the address
		}
		if b.unbound() {
			continue
		}
		b.durable = time.Time{} // until this write is committed
		snap.bindings = append(snap.bindings, b)
		snap.leases = append(snap.leases, recOf(b, now))
	}
	clear(s.dirty)
	s.dirty = s.dirty[:0]
	for _, dv := range s.devQueue {
		dv.queued = false
		dv.written = now
		snap.devices = append(snap.devices, dv)
		snap.reports = append(snap.reports, devices.Lease{Device: dv.d.ID, Facts: dv.facts,
			FirstSeen: dv.d.FirstSeen, LastSeen: dv.d.LastSeen, New: dv.state == core.StateLeased})
		dv.state = ""
	}
	clear(s.devQueue)
	s.devQueue = s.devQueue[:0]
	snap.events = append(snap.events, s.events...)
	clear(s.events)
	s.events = s.events[:0]
	for _, a := range s.acks {
		b := a.b
		if s.byIP[b.ip] != b || b.key != a.key || b.state != core.LeaseActive || b.expiry.Before(a.expiry) {
			s.metrics.dropStale.Inc() // released, declined or taken over before it became durable
			continue
		}
		snap.acks = append(snap.acks, a)
	}
	clear(s.acks)
	s.acks = s.acks[:0]
}

// handOver gives the snapshot's device changes and events to the devices
// service (outside Server.mu) and takes back a chunk of its queue for this
// commit. It reports whether records are left for another commit.
func (s *Server) handOver(snap *snapshot) (more bool) {
	for i := range snap.reports {
		s.devices.ObserveLease(snap.reports[i])
	}
	snap.evs = snap.evs[:0]
	for i := range snap.events {
		snap.evs = append(snap.evs, snap.events[i].event())
	}
	s.devices.Events(snap.evs)
	clear(snap.evs)
	n := deviceChunk
	if len(snap.acks) > 0 {
		n = deviceChunkWithAcks
	}
	return s.devices.Take(&snap.recs, n, eventChunk)
}

// write stores snap in one transaction.
func (snap *snapshot) write(tx core.Tx) error {
	if snap.fence != nil && len(snap.leases) > 0 {
		if err := snap.fence(tx); err != nil {
			return err
		}
	}
	for i := range snap.leases {
		if err := tx.Leases().Put(snap.leases[i].lease()); err != nil {
			return err
		}
	}
	return snap.recs.Write(tx)
}

// restore marks a failed snapshot's leases dirty again so the next commit
// retries them (under the session they were decided under, or not at
// all); its ACKs are dropped (the clients retry their REQUEST).
func (s *Server) restore(snap *snapshot) {
	for _, b := range snap.bindings {
		if s.byIP[b.ip] == b && b.pending {
			s.queueDirty(b)
		}
	}
}

// dropFront removes the first n elements, keeping the backing array.
func dropFront[T any](q []T, n int) []T {
	m := copy(q, q[n:])
	clear(q[m:])
	return q[:m]
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
		// Under load, gather for commitEvery: each commit costs its fsyncs
		// (about a millisecond of kernel CPU here) whatever it carries. A
		// request after a quiet spell is committed at once.
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
			select { // records left: commit them next, after what is waiting
			case s.kick <- struct{}{}:
			default:
			}
		}
	}
}

// committed records what snap made durable: the expiry of each active
// lease not changed since (see cachedLease).
func (s *Server) committed(snap *snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, b := range snap.bindings {
		if s.part != nil {
			l := snap.leases[i].lease()
			b.stored = &l
		}
		if b.dirty {
			continue // changed again since: its next write is pending
		}
		b.pending = false
		if snap.leases[i].state == core.LeaseActive {
			b.durable = snap.leases[i].expiry
		}
	}
}

// flush commits one snapshot and sends its ACKs; it reports whether
// records are left over.
func (s *Server) flush(snap *snapshot, lastErr *time.Time) bool {
	s.mu.Lock()
	s.take(snap, time.Now())
	s.mu.Unlock()
	if snap.stale > 0 {
		s.log.Warn("dropped lease decisions made under an ended appliance session; their addresses went back to what the store holds",
			"decisions", snap.stale, "session", snap.session)
	}
	more := s.handOver(snap)
	if snap.empty() {
		return false
	}
	if err := s.commitSnapshot(snap); err != nil {
		s.metrics.commitErrors.Inc()
		s.metrics.dropCommit.Add(float64(len(snap.acks)))
		if time.Since(*lastErr) > 5*time.Second {
			*lastErr = time.Now()
			s.log.Error("lease commit failed; ACKs withheld, will retry", "err", err,
				"leases", len(snap.leases), "acks", len(snap.acks))
		}
		s.mu.Lock()
		s.restore(snap)
		s.mu.Unlock()
		return false
	}
	now := time.Now()
	if len(snap.acks) > 0 {
		s.metrics.commitBatch.Observe(float64(len(snap.acks)))
		for i := range snap.acks {
			s.metrics.commitSeconds.Observe(now.Sub(snap.acks[i].queued).Seconds())
		}
		s.pacer.push(snap.acks, now)
		clear(snap.acks)
	}
	return more
}

// commitSnapshot makes snap durable. When the whole commit fails and it
// carries device or event records, the leases (what ACKs wait for) are
// committed alone and the devices service commits each record on its own: a
// record that cannot be stored is logged and dropped rather than holding
// every ACK back. When the leases cannot be stored either (a full disk),
// the records go back to the devices service's queue, the error is returned
// and nothing is acknowledged.
func (s *Server) commitSnapshot(snap *snapshot) error {
	err := s.store.Batch(snap.write)
	if err != nil {
		if snap.recs.Len() == 0 {
			return err
		}
		leases := &snapshot{leases: snap.leases, fence: snap.fence}
		if lerr := s.store.Batch(leases.write); lerr != nil {
			s.devices.Return(&snap.recs)
			return err
		}
	}
	s.devices.Done(&snap.recs, err) // err != nil: the records are committed one by one
	s.committed(snap)
	return nil
}
