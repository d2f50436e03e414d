package dhcp6

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/dhcplease"
)

// exchange is one request on its way through the steps, and the reply
// being built. Each worker owns one and reuses it.
type exchange struct {
	ifc *iface
	src netip.AddrPort
	req *Packet
	now time.Time

	sn       *subnet
	link     netip.Addr // the relay's link address the subnet was chosen by
	duid     []byte
	mac      []byte
	kind     core.DeviceKind
	res      *reservation
	resByMAC bool  // res names the client's MAC (not only its DUID)
	slot     *slot // the planned position its relay proves, nil for none
	product  string
	serial   string
	platform string
	ias      []iaNA
	iaBuf    [maxIAs]iaNA

	replyType uint8
	results   []iaResult
	status    int // top-level status code; -1 none
	statusMsg string
	rapid     bool
	b         *binding
	lifetime  time.Duration // what the reply grants b for
	commit    bool          // the reply waits for the lease to be durable
	cached    bool          // the reply grants what b's durable lease has left: no write
	fresh     bool          // this reply starts a new binding

	msg []byte
	out []byte
	dst netip.AddrPort
}

// iaResult is what the reply says in one IA_NA.
type iaResult struct {
	id       [4]byte
	addr     netip.Addr // granted (or confirmed), with the lease's lifetime
	lifetime time.Duration
	zero     []netip.Addr // addresses returned with lifetimes 0
	status   int          // -1: none
	msg      string
}

func newExchange(ifc *iface) *exchange {
	return &exchange{ifc: ifc, req: &Packet{}, msg: make([]byte, 0, 1500), out: make([]byte, 0, 1500)}
}

// A step does one job on the request and the reply being built and returns
// false to stop: the request then gets no reply (the step counted why).
type step struct {
	name string
	run  func(*Server, *exchange) bool
}

// steps is the whole request path, in order. They run under Server.mu.
var steps = [...]step{
	{"message", (*Server).stepMessage},         // a client message we answer, server id as RFC 8415 §16 says
	{"relay", (*Server).stepRelay},             // Relay-Forw only from declared relays
	{"subnet", (*Server).stepSubnet},           // the relay's link address, else the interface's subnet
	{"partition", (*Server).stepPartition},     // several appliances: only this one's buckets (hash of the DUID)
	{"identify", (*Server).stepIdentify},       // DUID, MAC, class, reservation, planned position
	{"lease", (*Server).stepLease},             // advertise, grant, renew, release, decline, confirm
	{"device", (*Server).stepDevice},           // device record of a lease holder (write-behind)
	{"encode", (*Server).stepEncode},           // mandatory options, IAs, options asked for (ORO)
	{"destination", (*Server).stepDestination}, // the client, or back through the relays
}

// decide runs the steps for one parsed request. On true, x.out holds the
// reply for x.dst; x.commit says it waits for the committer.
func (s *Server) decide(x *exchange) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range steps {
		if !steps[i].run(s, x) {
			return false
		}
	}
	if x.commit {
		return s.enqueueReply(x)
	}
	return true
}

func (s *Server) drop(reason string) bool {
	s.metrics.dropped.WithLabelValues(reason).Inc()
	return false
}

// stepMessage accepts the client messages a server answers and applies
// RFC 8415 §16's server-identifier rules: Solicit, Rebind and Confirm
// carry none; Request, Renew, Release and Decline carry ours (a message
// for another server is ignored); an Information-request may carry ours.
func (s *Server) stepMessage(x *exchange) bool {
	req := x.req
	s.metrics.packets.WithLabelValues(msgName(req.Type)).Inc()
	sid, hasSID := req.Opt(optServerID)
	switch req.Type {
	case msgSolicit, msgRebind, msgConfirm:
		if hasSID {
			return s.drop("server_id")
		}
	case msgRequest, msgRenew, msgRelease, msgDecline:
		if !hasSID {
			return s.drop("server_id")
		}
		if !bytes.Equal(sid, s.duid) {
			return s.drop("not_ours")
		}
	case msgInfoRequest:
		if hasSID && !bytes.Equal(sid, s.duid) {
			return s.drop("not_ours")
		}
	default:
		return s.drop("message_type")
	}
	return true
}

// stepRelay serves a relayed message only when the relay that sent it is
// declared (its source address, interface and the link address it
// states); a client's own message carries no relay information.
func (s *Server) stepRelay(x *exchange) bool {
	rs := x.req.relays
	x.link = netip.Addr{}
	if len(rs) == 0 {
		return true
	}
	// The relay closest to the client names its link; a lightweight relay
	// (RFC 6221) states none and the next one out does.
	for i := len(rs) - 1; i >= 0; i-- {
		if a := netip.AddrFrom16(rs[i].link); !a.IsUnspecified() {
			x.link = a
			break
		}
	}
	if x.link.IsValid() && s.trusted(x.src.Addr(), x.ifc.name, x.link) {
		return true
	}
	s.logDrop(x, "relay "+x.src.Addr().String(),
		"relayed DHCPv6 message from an undeclared relay dropped: declare the relay (its source address, link address and interface) under dhcp.relays",
		"source", x.src.Addr(), "link_address", x.link, "interface", x.ifc.name)
	return s.drop("untrusted_relay")
}

func (s *Server) stepSubnet(x *exchange) bool {
	if x.link.IsValid() {
		x.sn = s.subnetFor(x.link)
	} else {
		x.sn = x.ifc.direct
	}
	if x.sn == nil {
		if x.link.IsValid() {
			s.logDrop(x, "link "+x.link.String(),
				"relayed DHCPv6 message left unanswered: the relay's link address is in no subnet under dhcp.subnets",
				"link_address", x.link, "source", x.src.Addr())
		}
		return s.drop("no_subnet")
	}
	return true
}

// dropLogEvery is how often one key may log why its requests go
// unanswered.
const dropLogEvery = 30 * time.Second

func (s *Server) logDrop(x *exchange, key, msg string, args ...any) {
	if ok, n := s.dropLog.Allow(key, x.now); ok {
		if n > 0 {
			args = append(args, "suppressed", n)
		}
		s.log.Info(msg, args...)
	}
}

// stepIdentify reads the client's DUID, its MAC where one is known (a
// DUID-LL/LLT, else the client link-layer address a relay added), its
// class and its reservation.
func (s *Server) stepIdentify(x *exchange) bool {
	req := x.req
	var ok bool
	x.duid, ok = req.Opt(optClientID)
	if !ok || !validDUID(x.duid) {
		return s.drop("client_id")
	}
	x.mac = macOfDUID(x.duid)
	if rs := req.relays; x.mac == nil && len(rs) > 0 {
		x.mac = macOfLinkLayer(rs[len(rs)-1].linkLayer)
	}
	var err error
	if x.ias, err = req.IANAs(x.iaBuf[:0]); err != nil {
		return s.drop("malformed")
	}
	uc, _ := req.Opt(optUserClass)
	vc, _ := req.Opt(optVendorClass)
	sonicVC, product, serial, onie, platform := vendorClass(vc)
	x.product, x.serial, x.platform = product, serial, platform
	sn := x.sn
	x.res = sn.resByDUID[string(x.duid)]
	x.resByMAC = false
	if x.mac != nil {
		if r := sn.resByMAC[string(x.mac)]; r != nil {
			x.res, x.resByMAC = r, true
		}
	}
	switch {
	case x.res != nil && x.res.kind != "":
		x.kind = x.res.kind
	case isSONiCUserClass(uc) || sonicVC:
		x.kind = core.KindSONiC
	case onie:
		x.kind = core.KindONIE
	case x.res != nil || s.vmMatch(x.mac, vc):
		x.kind = core.KindVM
	default:
		x.kind = core.KindUnknown
	}
	s.identifyPosition(x)
	return true
}

func (s *Server) stepLease(x *exchange) bool {
	x.results, x.status, x.statusMsg = x.results[:0], -1, ""
	x.rapid, x.b, x.commit, x.cached, x.fresh = false, nil, false, false, false
	x.lifetime = x.sn.leaseTime
	x.replyType = msgReply
	switch x.req.Type {
	case msgSolicit:
		return s.solicit(x)
	case msgRequest:
		return s.request(x)
	case msgRenew, msgRebind:
		return s.extend(x)
	case msgRelease:
		s.release(x)
		return true
	case msgDecline:
		s.decline(x)
		return true
	case msgConfirm:
		return s.confirm(x)
	case msgInfoRequest:
		return true
	}
	return false
}

// solicit answers a Solicit: an Advertise holding an address for
// OfferHold (nothing written), or, with Rapid Commit asked and allowed, a
// Reply whose lease is committed first.
func (s *Server) solicit(x *exchange) bool {
	if len(x.ias) == 0 {
		x.replyType = msgAdvertise
		x.status, x.statusMsg = statusNoAddrsAvail, "no IA_NA asked for"
		return true
	}
	x.rapid = x.sn.rapidCommit && x.req.Has(optRapidCommit)
	b := s.allocate(x, x.ias[0].addrs)
	if b == nil {
		s.exhausted(x)
		x.replyType = msgAdvertise
		x.status, x.statusMsg = statusNoAddrsAvail, "no address available"
		return true
	}
	if !x.rapid {
		x.replyType = msgAdvertise
		b.hold = x.now.Add(s.offerHold)
		s.answerIAs(x, b)
		return true
	}
	s.grant(x, b, true)
	return true
}

// request answers a Request (RFC 8415 §18.3.2): the client's address, or a
// new one; hints not on this link come back with lifetimes 0; no address
// is NoAddrsAvail in the IA.
func (s *Server) request(x *exchange) bool {
	if len(x.ias) == 0 {
		x.status, x.statusMsg = statusNoAddrsAvail, "no IA_NA asked for"
		return true
	}
	b := s.allocate(x, x.ias[0].addrs)
	if b == nil {
		s.exhausted(x)
		s.answerIAs(x, nil)
		return true
	}
	s.grant(x, b, true)
	return true
}

// grant binds b to the client and makes the reply wait for its commit.
// With reuse (a Request, or a Solicit with Rapid Commit), the lease the
// client holds, committed moments ago, is granted for what it has left
// instead, without a write (dhcplease.Cached, as DHCPv4 does): a client
// restarting its exchange, a retransmission or a storm's repeat then costs
// no disk I/O. A Renew or Rebind asks for more time and always has it
// written.
func (s *Server) grant(x *exchange, b *binding, reuse bool) {
	if reuse {
		if rest, ok := s.cachedLease(x, b); ok {
			x.b, x.lifetime, x.cached = b, rest, true
			s.answerIAs(x, b)
			return
		}
	}
	x.fresh = s.bind(x, b)
	x.b, x.commit = b, true
	s.answerIAs(x, b)
	if x.fresh {
		s.event(x, "dhcp.ack", "lease granted", b.ip)
	}
}

// extend answers Renew and Rebind (RFC 8415 §18.3.4, §18.3.5): the
// client's address gets a new lifetime; addresses that are not its (or
// not on this link) come back with lifetimes 0. A client the server has no
// binding for gets the address it names when that address is free in a
// pool (the binding was lost with a store reset); otherwise a Renew gets
// NoBinding and a Rebind lifetimes 0.
func (s *Server) extend(x *exchange) bool {
	if len(x.ias) == 0 {
		return s.drop("malformed")
	}
	b := s.lookup(x)
	held := false
	if b != nil {
		for _, a := range x.ias[0].addrs {
			held = held || netip.AddrFrom16(a) == b.ip
		}
	}
	if !held {
		b = nil
		for _, a16 := range x.ias[0].addrs {
			a := netip.AddrFrom16(a16)
			// An address the client does not hold, in another
			// appliance's block: that appliance may be advertising it.
			if x.sn.poolFor(a) != nil && s.mayAllocate(x.sn, a) || (x.res != nil && x.res.ip == a) {
				if c := s.claim(x, a); c != nil {
					b = c
					break
				}
			}
		}
	}
	if b == nil {
		if x.req.Type == msgRebind && len(x.ias[0].addrs) > 0 {
			s.answerIAs(x, nil)
			return true
		}
		s.answerIAs(x, nil)
		for i := range x.results {
			x.results[i].status, x.results[i].msg = statusNoBinding, "no binding for this IA"
		}
		return true
	}
	s.grant(x, b, false)
	return true
}

// cachedLease returns the remaining time of b's durable lease when it can
// answer the exchange as is: b is the client's active lease, unchanged
// since its commit, and binding it again would change nothing but its
// times.
func (s *Server) cachedLease(x *exchange, b *binding) (time.Duration, bool) {
	if b.state != core.LeaseActive || b.dirty || b.duid != string(x.duid) ||
		x.mac != nil && b.mac != string(x.mac) ||
		x.res != nil && x.res.hostname != "" && b.hostname != x.res.hostname ||
		b.reserved != (x.resByMAC && x.res.ip == b.ip) {
		return 0, false
	}
	rest, ok := dhcplease.Cached(b.durable, x.now, x.sn.leaseTime)
	if ok {
		b.hold = time.Time{}
	}
	return rest, ok
}

// answerIAs fills one result per IA_NA of the request: the first carries
// b's address (one address per client and subnet); in a Reply, addresses
// the client named that are not b's come back with lifetimes 0, so it
// stops using them. Without b, an IA with nothing to say is NoAddrsAvail.
func (s *Server) answerIAs(x *exchange, b *binding) {
	for i, ia := range x.ias {
		r := iaResult{id: ia.id, status: -1}
		if i == 0 && b != nil {
			r.addr, r.lifetime = b.ip, x.lifetime
		}
		for _, a16 := range ia.addrs {
			if a := netip.AddrFrom16(a16); a != r.addr && x.replyType == msgReply {
				r.zero = append(r.zero, a)
			}
		}
		if !r.addr.IsValid() && len(r.zero) == 0 {
			r.status, r.msg = statusNoAddrsAvail, "no address available"
		}
		x.results = append(x.results, r)
	}
}

func (s *Server) exhausted(x *exchange) {
	sn := x.sn
	s.metrics.dropped.WithLabelValues("exhausted").Inc()
	if x.now.Sub(sn.lastWarn) >= 10*time.Second {
		sn.lastWarn = x.now
		s.log.Warn("address pool exhausted: NoAddrsAvail", "subnet", sn.name, "duid", hexColon(x.duid),
			"interface", x.ifc.name)
		s.event(x, "dhcp.exhausted", "no free address in the subnet", netip.Addr{})
	}
}

// release frees the client's addresses it names (RFC 8415 §18.3.7); the
// Reply says Success whatever was held.
func (s *Server) release(x *exchange) {
	x.status, x.statusMsg = statusSuccess, "released"
	b := s.lookup(x)
	if b == nil || b.state != core.LeaseActive {
		return
	}
	for _, ia := range x.ias {
		for _, a := range ia.addrs {
			if netip.AddrFrom16(a) == b.ip {
				b.state, b.expiry, b.hold = core.LeaseReleased, x.now, time.Time{}
				s.markDirty(b)
				s.event(x, "dhcp.release", "address released", b.ip)
				return
			}
		}
	}
}

// decline quarantines an address the client found in use (DAD).
func (s *Server) decline(x *exchange) {
	x.status, x.statusMsg = statusSuccess, "declined"
	b := s.lookup(x)
	if b == nil {
		return
	}
	for _, ia := range x.ias {
		for _, a := range ia.addrs {
			if netip.AddrFrom16(a) == b.ip {
				s.disown(b)
				b.state, b.expiry, b.hold = core.LeaseDeclined, x.now.Add(s.quarantine), time.Time{}
				s.markDirty(b)
				s.log.Warn("client declined its address; quarantined", "ip", b.ip, "duid", hexColon(x.duid),
					"until", b.expiry.Format(time.RFC3339))
				s.event(x, "dhcp.decline", "address declined, quarantined", b.ip)
				return
			}
		}
	}
}

// confirm answers whether the addresses a client names are on its link
// (RFC 8415 §18.3.3): Success or NotOnLink; a Confirm naming none gets no
// reply.
func (s *Server) confirm(x *exchange) bool {
	n := 0
	for _, ia := range x.ias {
		for _, a := range ia.addrs {
			n++
			if !x.sn.prefix.Contains(netip.AddrFrom16(a)) {
				x.status, x.statusMsg = statusNotOnLink, "address not on this link"
				return true
			}
		}
	}
	if n == 0 {
		return s.drop("malformed")
	}
	x.status, x.statusMsg = statusSuccess, "addresses on link"
	return true
}

// stepDevice records what a lease holder's request says about its device;
// only a Reply granting a lease counts, so made-up DUIDs store nothing.
func (s *Server) stepDevice(x *exchange) bool {
	if (x.commit || x.cached) && x.b != nil {
		s.touchDevice(x)
	}
	return true
}

// stepEncode writes the reply: client and server ids, Rapid Commit when
// used, the IAs, the status, then the options the client asked for (ORO)
// in its order, from the class's (or reservation's) layers.
func (s *Server) stepEncode(x *exchange) bool {
	req := x.req
	m := append(x.msg[:0], x.replyType, req.XID[0], req.XID[1], req.XID[2])
	m = appendOpt(m, optServerID, s.duid)
	m = appendOpt(m, optClientID, x.duid)
	if x.rapid && (x.commit || x.cached) {
		m = appendOpt(m, optRapidCommit, nil)
	}
	if x.replyType == msgAdvertise {
		// Sole server on its links: clients need not wait for others.
		m = appendOpt(m, optPreference, []byte{255})
	}
	if x.status >= 0 {
		m = appendStatus(m, uint16(x.status), x.statusMsg)
	}
	for i := range x.results {
		r := &x.results[i]
		var at int
		m, at = beginOpt(m, optIANA)
		m = append(m, r.id[:]...)
		secs := uint32(r.lifetime / time.Second)
		if r.addr.IsValid() {
			m = binary.BigEndian.AppendUint32(m, secs/2)                   // T1
			m = binary.BigEndian.AppendUint32(m, uint32(uint64(secs)*4/5)) // T2
		} else {
			m = append(m, 0, 0, 0, 0, 0, 0, 0, 0)
		}
		if r.addr.IsValid() {
			m = appendIAAddr(m, r.addr, secs)
		}
		for _, a := range r.zero {
			m = appendIAAddr(m, a, 0)
		}
		if r.status >= 0 {
			m = appendStatus(m, uint16(r.status), r.msg)
		}
		m = endOpt(m, at)
	}
	if x.status == statusNoAddrsAvail && x.replyType == msgAdvertise {
		x.msg = m
		return true
	}
	set := x.sn.opts[classOf(x.kind)]
	oro := req.ORO()
	for i := 0; i+1 < len(oro); i += 2 {
		code := binary.BigEndian.Uint16(oro[i:])
		if v, ok := set[code]; ok {
			m = appendOpt(m, code, v)
		}
	}
	x.msg = m
	return true
}

func appendIAAddr(b []byte, a netip.Addr, secs uint32) []byte {
	b, at := beginOpt(b, optIAAddr)
	a16 := a.As16()
	b = append(b, a16[:]...)
	b = binary.BigEndian.AppendUint32(b, secs) // preferred
	b = binary.BigEndian.AppendUint32(b, secs) // valid
	return endOpt(b, at)
}

// stepDestination wraps the reply back through the relays (to the relay it
// came from, on its port) or answers the client where it sent from.
func (s *Server) stepDestination(x *exchange) bool {
	x.out = wrapRelays(x.out[:0], x.req.relays, x.msg)
	x.dst = x.src
	return true
}

func msgName(t uint8) string {
	switch t {
	case msgSolicit:
		return "solicit"
	case msgRequest:
		return "request"
	case msgConfirm:
		return "confirm"
	case msgRenew:
		return "renew"
	case msgRebind:
		return "rebind"
	case msgRelease:
		return "release"
	case msgDecline:
		return "decline"
	case msgInfoRequest:
		return "information_request"
	}
	return "other"
}

// event queues a core.Event about the exchange's client; ip may be
// invalid.
func (s *Server) event(x *exchange, typ, msg string, ip netip.Addr) {
	if len(s.events) >= maxPendingEvents {
		return
	}
	f := map[string]string{"interface": x.ifc.name, "subnet": x.sn.name, "family": "ipv6"}
	if ip.IsValid() {
		f["ip"] = ip.String()
	}
	if x.link.IsValid() {
		f["relay"] = x.link.String()
	}
	s.events = append(s.events, core.Event{Time: x.now, Type: typ, Device: s.deviceID(x), Message: msg, Fields: f})
}

// deviceID is the device ID of the exchange's client: its MAC when known,
// else its DUID.
func (s *Server) deviceID(x *exchange) string {
	if x.mac != nil {
		return hexColon(x.mac)
	}
	return "duid:" + hexColon(x.duid)
}
