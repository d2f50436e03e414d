package dhcp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/dhcplease"
)

// exchange is one request on its way through the steps, and the reply being
// built. Each worker owns one and reuses it, so the path allocates little.
type exchange struct {
	ifc *iface
	src netip.Addr // the packet's source address
	req *Packet
	now time.Time
	mt  uint8

	sn           *subnet
	hw           []byte
	clientID     []byte
	key          []byte // 'i'+client id, or 'h'+hardware address
	keyBuf       [1 + 255 + 16]byte
	kind         core.DeviceKind
	res          *reservation
	resByMAC     bool  // res names the client's hardware address (not only its word)
	declared     bool  // a configured reservation declares the client's kind
	slot         *slot // the planned position its relay proves, nil for none
	product      string
	serial       string
	platform     string
	requested    [4]byte
	hasRequested bool

	reply     reply
	b         *binding
	lease     time.Duration
	withLease bool
	commit    bool // the reply waits for the lease to be durable
	nakReason string
	fresh     bool // this ACK starts a new binding (not an extension)

	opts  []option
	dyn   [4][4]byte
	mtBuf [1]byte
	out   []byte
	dst   dest
}

// A step does one job on the request and the reply being built and returns
// false to stop: the request then gets no reply (the step counted why).
type step struct {
	name string
	run  func(*Server, *exchange) bool
}

// steps is the whole request path, in order. They run under Server.mu.
var steps = [...]step{
	{"message", (*Server).stepMessage},         // a client message type we answer
	{"relay", (*Server).stepRelay},             // giaddr and relay information only from declared relays
	{"subnet", (*Server).stepSubnet},           // relay link selection, giaddr, ciaddr, interface
	{"identify", (*Server).stepIdentify},       // client key, class, reservation, planned position
	{"partition", (*Server).stepPartition},     // several appliances: only this one's buckets
	{"lease", (*Server).stepLease},             // offer, ack/nak, decline, release, inform
	{"device", (*Server).stepDevice},           // device record of a lease holder (write-behind)
	{"options", (*Server).stepOptions},         // per class and overrides, request-list order, size cap
	{"destination", (*Server).stepDestination}, // RFC 2131 §4.1, then encode
}

// decide runs the steps for one parsed request. On true, x.out holds the
// reply for x.dst; x.commit says it must wait for the committer.
func (s *Server) decide(x *exchange) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range steps {
		if !steps[i].run(s, x) {
			return false
		}
	}
	if x.commit {
		return s.enqueueAck(x)
	}
	return true
}

func (s *Server) stepMessage(x *exchange) bool {
	x.mt = x.req.MessageType()
	s.metrics.countPacket(x.mt)
	switch x.mt {
	case msgDiscover, msgRequest, msgDecline, msgRelease, msgInform:
		return true
	}
	s.metrics.dropNoType.Inc()
	return false
}

// stepSubnet picks the subnet: the relay's link-selection address (RFC 3527
// sub-option 5, or option 118), else giaddr, else ciaddr for a client
// renewing by unicast, else the subnet on the receiving interface.
func (s *Server) stepSubnet(x *exchange) bool {
	req := x.req
	var sel [4]byte
	if req.GIAddr != ([4]byte{}) {
		sel = req.GIAddr
		if v, ok := req.relaySubOpt(relayLinkSelection); ok && len(v) == 4 {
			sel = [4]byte(v)
		} else if v, ok := req.optIP(optSubnetSelection); ok {
			sel = v
		}
		x.sn = s.subnetFor(sel)
	} else if req.CIAddr != ([4]byte{}) && x.mt != msgDiscover {
		x.sn = s.subnetFor(req.CIAddr)
		if x.sn == nil {
			x.sn = x.ifc.direct
		}
	} else {
		x.sn = x.ifc.direct
	}
	if x.sn == nil {
		s.metrics.dropNoSubnet.Inc()
		if req.GIAddr != ([4]byte{}) {
			s.logDrop(x, "relay "+netip.AddrFrom4(req.GIAddr).String(),
				"relayed DHCP request left unanswered: the relay's address (or its link selection) is in no subnet under dhcp.subnets; declare the relayed subnet there",
				"mac", macText(req.HWAddr()), "giaddr", netip.AddrFrom4(req.GIAddr), "link_selection", netip.AddrFrom4(sel))
		}
		return false
	}
	return true
}

// dropLogEvery is how often one key (a relay, a client) may log why its
// requests go unanswered.
const dropLogEvery = 30 * time.Second

// logDrop says at info, at most once per key every dropLogEvery, why a
// request gets no reply when the operator can do something about it.
func (s *Server) logDrop(x *exchange, key, msg string, args ...any) {
	if ok, n := s.dropLog.Allow(key, x.now); ok {
		if n > 0 {
			args = append(args, "suppressed", n)
		}
		s.log.Info(msg, args...)
	}
}

// stepIdentify keys the client (client id, else hardware address),
// classifies it and finds its reservation, and the planned position its
// relay proves.
func (s *Server) stepIdentify(x *exchange) bool {
	req := x.req
	x.hw = req.HWAddr()
	x.clientID, _ = req.Opt(optClientID)
	if len(x.clientID) > 0 {
		x.key = append(append(x.keyBuf[:0], 'i'), x.clientID...)
	} else if len(x.hw) > 0 {
		x.key = append(append(x.keyBuf[:0], 'h'), x.hw...)
	} else {
		s.metrics.dropMalformed.Inc()
		return false
	}
	sn := x.sn
	if len(x.clientID) > 0 {
		// A client id is the client's word: it never moves a live binding
		// from the hardware address holding it (a copied "01:<MAC>" or
		// "SONiC##product##serial"). Such a client is keyed by its own
		// hardware address instead, a client apart.
		if b := sn.clients[string(x.key)]; b != nil && b.hw != string(x.hw) && b.busy(x.now) {
			x.key = append(append(x.keyBuf[:0], 'h'), x.hw...)
			s.metrics.clientIDInUse.Inc()
			s.logDrop(x, "client id "+macText(x.hw),
				"client id already held by another hardware address with a live lease: the client is served by its own hardware address",
				"mac", macText(x.hw), "holder", macText([]byte(b.hw)), "ip", addrOf(b.ip))
		}
	}
	x.requested, x.hasRequested = req.optIP(optRequestedIP)

	uc, _ := req.Opt(optUserClass)
	sonic := isSONiCUserClass(uc)
	var sonicID bool
	x.product, x.serial, sonicID = sonicClientID(x.clientID)
	vc, _ := req.Opt(optVendorClass)
	var onie bool
	x.platform, onie = onieVendor(vc)

	x.res = sn.resByHW[string(x.hw)]
	x.resByMAC = x.res != nil
	if x.res == nil && len(x.clientID) > 0 {
		x.res = sn.resByID[string(x.clientID)]
	}
	if x.res == nil && x.serial != "" {
		x.res = sn.resBySerial[x.serial]
	}
	x.declared = x.res != nil && x.res.kind != ""
	switch {
	case x.declared:
		x.kind = x.res.kind
	case sonic || sonicID:
		x.kind = core.KindSONiC
	case onie:
		x.kind = core.KindONIE
	case x.res != nil || s.vmMatch(x.hw, vc):
		x.kind = core.KindVM
	default:
		x.kind = core.KindUnknown
	}
	s.identifyPosition(x)
	return true
}

func (s *Server) vmMatch(hw, vendorClass []byte) bool {
	for _, p := range s.vmPrefixes {
		if bytes.HasPrefix(hw, p) {
			return true
		}
	}
	for _, v := range s.vmVendors {
		if len(vendorClass) > 0 && bytes.HasPrefix(vendorClass, v) {
			return true
		}
	}
	return false
}

// stepDevice records what the request says about its device. Only lease
// holders get a record: a client that was merely offered an address (or
// asked for nothing) is counted by the packet metrics, never stored, so
// made-up hardware addresses cannot fill the store.
func (s *Server) stepDevice(x *exchange) bool {
	leased := x.reply.msgType == msgAck && x.b != nil
	s.touchDevice(x, leased)
	if x.fresh {
		s.deviceLeased(x, x.b)
	}
	return true
}

func (s *Server) stepLease(x *exchange) bool {
	x.b, x.commit, x.withLease, x.nakReason, x.fresh = nil, false, false, "", false
	x.reply = reply{flags: x.req.Flags}
	switch x.mt {
	case msgDiscover:
		return s.offer(x)
	case msgRequest:
		return s.request(x)
	case msgDecline:
		s.decline(x)
		return false
	case msgRelease:
		s.releaseLease(x)
		return false
	case msgInform:
		if x.req.CIAddr == ([4]byte{}) {
			s.metrics.dropMalformed.Inc()
			return false
		}
		x.reply.msgType = msgAck
		x.reply.ciaddr = x.req.CIAddr
		return true
	}
	return false
}

// offer answers DISCOVER. The address is held in memory for OfferHold;
// nothing is written for an offer.
func (s *Server) offer(x *exchange) bool {
	b := s.allocate(x)
	if b == nil {
		s.exhausted(x)
		return false
	}
	b.hold = x.now.Add(s.offerHold)
	x.b, x.withLease, x.lease = b, true, x.sn.leaseTime
	x.reply.msgType = msgOffer
	x.reply.yiaddr = b4(b.ip)
	return true
}

func (s *Server) exhausted(x *exchange) {
	sn := x.sn
	s.metrics.exhaustedTotal.WithLabelValues(sn.name).Inc()
	s.metrics.dropExhausted.Inc()
	if x.now.Sub(sn.lastWarn) >= 10*time.Second {
		sn.lastWarn = x.now
		s.log.Warn("address pool exhausted: DISCOVER left unanswered", "subnet", sn.name,
			"mac", macText(x.hw), "interface", x.ifc.name)
		s.event(x, "dhcp.exhausted", "no free address in the subnet", 0)
	}
}

// request answers REQUEST per RFC 2131 §4.3.2: SELECTING (server id and
// requested address), INIT-REBOOT (requested address only), RENEWING and
// REBINDING (ciaddr only).
func (s *Server) request(x *exchange) bool {
	req := x.req
	sid, hasSID := req.optIP(optServerID)
	var ip uint32
	switch {
	case hasSID:
		if !s.ourServerID(sid) {
			// The client took another server's offer: free ours, say nothing.
			if b := s.lookupClient(x); b != nil {
				b.hold = time.Time{}
				if b.unbound() {
					s.forget(b)
				}
			}
			s.metrics.dropNotOurs.Inc()
			return false
		}
		switch {
		case x.hasRequested:
			ip = u32(x.requested)
		case req.CIAddr != [4]byte{}:
			ip = u32(req.CIAddr)
		default:
			s.metrics.dropMalformed.Inc()
			return false
		}
	case x.hasRequested && req.CIAddr == [4]byte{}:
		ip = u32(x.requested)
		if !x.sn.contains(ip) {
			return s.nak(x, "requested address is not on this network")
		}
		if s.lookupClient(x) == nil && (x.res == nil || x.res.ip != ip) {
			// No record of this client: RFC 2131 says stay silent, unless
			// we know the address is someone else's.
			if o := s.byIP[ip]; o != nil && o.busy(x.now) {
				return s.nak(x, "requested address is in use")
			}
			s.metrics.dropUnknown.Inc()
			s.logDrop(x, "client "+macText(x.hw),
				"client asks to keep an address ztpd has no lease of (a lease from another server, or from a store that was reset): left unanswered as RFC 2131 requires; the client falls back to DISCOVER after its own timeout",
				"mac", macText(x.hw), "requested", addrOf(ip), "subnet", x.sn.name)
			return false
		}
	case req.CIAddr != [4]byte{}:
		ip = u32(req.CIAddr)
	default:
		s.metrics.dropMalformed.Inc()
		return false
	}
	if req.GIAddr == ([4]byte{}) && x.sn != x.ifc.direct {
		// Not relayed, yet for an address of another subnet (a unicast
		// renewal): only the client holding that address renews it. A
		// host on the link gets no new lease in a relayed subnet by
		// naming one of its addresses.
		if b := s.lookupClient(x); b == nil || b.ip != ip {
			s.metrics.dropUnknown.Inc()
			return false
		}
	}
	b := s.claim(x, ip)
	if b == nil {
		return s.nak(x, "requested address is not available")
	}
	if r := x.resByMAC && x.res.ip == ip; b.reserved != r {
		// Only a reservation by hardware address marks the lease reserved
		// (what approval rules take as network proof).
		b.reserved = r
		s.markDirty(b)
	}
	x.b, x.withLease, x.lease = b, true, x.sn.leaseTime
	x.reply.msgType = msgAck
	x.reply.ciaddr = req.CIAddr
	x.reply.yiaddr = b4(ip)
	if rest, ok := s.cachedLease(x, b); ok {
		x.lease = rest // already durable: no write, no wait
		return true
	}
	fresh := s.bind(x, b, x.sn.leaseTime)
	x.commit = true
	if fresh {
		x.fresh = true // stepDevice records the lease on the device
		s.event(x, "dhcp.ack", "lease granted", ip)
	}
	return true
}

// cachedLease returns the remaining time of b's durable lease when it can
// answer this REQUEST as is (dhcplease.Cached: no write, no wait).
func (s *Server) cachedLease(x *exchange, b *binding) (time.Duration, bool) {
	if b.state != core.LeaseActive || b.dirty || b.key != string(x.key) {
		return 0, false
	}
	rest, ok := dhcplease.Cached(b.durable, x.now, x.sn.leaseTime)
	if ok {
		b.hold = time.Time{}
	}
	return rest, ok
}

func (s *Server) nak(x *exchange, why string) bool {
	x.reply = reply{msgType: msgNak, flags: x.req.Flags}
	if x.req.GIAddr != ([4]byte{}) {
		// RFC 2131 §4.3.2: a relay must broadcast the NAK to the client.
		x.reply.flags |= flagBroadcast
	}
	x.nakReason = why
	s.event(x, "dhcp.nak", why, 0)
	return true
}

// decline quarantines an address a client found in use (ARP).
func (s *Server) decline(x *exchange) {
	if sid, ok := x.req.optIP(optServerID); ok && !s.ourServerID(sid) {
		s.metrics.dropNotOurs.Inc()
		return
	}
	if !x.hasRequested {
		s.metrics.dropMalformed.Inc()
		return
	}
	ip := u32(x.requested)
	b := s.byIP[ip]
	if b == nil || b.key != string(x.key) {
		s.metrics.dropUnknown.Inc()
		return
	}
	s.disown(b)
	b.state = core.LeaseDeclined
	b.expiry = x.now.Add(s.quarantine)
	b.hold = time.Time{}
	s.markDirty(b)
	s.log.Warn("client declined its address; quarantined", "ip", addrOf(ip), "mac", macText(x.hw),
		"until", b.expiry.Format(time.RFC3339))
	s.event(x, "dhcp.decline", "address declined, quarantined", ip)
}

// releaseLease frees the client's address; the client keeps its affinity
// to it while nobody else takes it.
func (s *Server) releaseLease(x *exchange) {
	ip := u32(x.req.CIAddr)
	b := s.byIP[ip]
	if b == nil || b.key != string(x.key) || b.state != core.LeaseActive {
		s.metrics.dropUnknown.Inc()
		return
	}
	b.state = core.LeaseReleased
	b.expiry = x.now
	b.hold = time.Time{}
	s.markDirty(b)
	s.release(b.sn, ip)
	s.event(x, "dhcp.release", "address released", ip)
}

func (s *Server) ourServerID(a [4]byte) bool {
	for _, ifc := range s.ifaces {
		if ifc.addr == a {
			return true
		}
	}
	return false
}

// stepOptions builds the option list: message type and server id, the
// lease times, the echoed client id, then the class's (or reservation's)
// options in the client's parameter-request-list order, cut to the
// client's maximum message size.
func (s *Server) stepOptions(x *exchange) bool {
	req := x.req
	x.mtBuf[0] = x.reply.msgType
	opts := append(x.opts[:0], option{optMessageType, x.mtBuf[:]}, option{optServerID, x.ifc.addr[:]})
	if x.reply.msgType == msgNak {
		opts = append(opts, option{optMessage, []byte(x.nakReason)})
		if len(x.clientID) > 0 {
			opts = append(opts, option{optClientID, x.clientID})
		}
		x.opts = opts
		return true
	}
	if x.withLease {
		secs := uint32(x.lease / time.Second)
		binary.BigEndian.PutUint32(x.dyn[0][:], secs)
		binary.BigEndian.PutUint32(x.dyn[1][:], secs/2)
		binary.BigEndian.PutUint32(x.dyn[2][:], secs/8*7)
		opts = append(opts, option{optLeaseTime, x.dyn[0][:]}, option{optRenewalTime, x.dyn[1][:]},
			option{optRebindingTime, x.dyn[2][:]})
	}
	if len(x.clientID) > 0 {
		opts = append(opts, option{optClientID, x.clientID}) // RFC 6842
	}
	keep := len(opts)
	if x.slot != nil {
		// The position's name, over any configured host name; cut before
		// the options the client asked for when the reply is too long.
		opts = append(opts, option{optHostname, x.slot.host})
	}
	set := x.sn.opts[classOf(x.kind)]
	if x.res != nil && (x.b == nil || x.b.ip == x.res.ip) {
		set = x.res.opts[classOf(x.kind)]
	}
	prl, _ := req.Opt(optParamRequest)
	extra := 0
	if v, ok := req.Opt(optRelayAgent); ok {
		extra = optionWireLen(v)
	}
	if x.withLease { // configured T1/T2 replace the computed ones
		if v, ok := set.get(optRenewalTime); ok {
			opts[3].val = v
		}
		if v, ok := set.get(optRebindingTime); ok {
			opts[4].val = v
		}
	}
	var dropped int
	x.opts, dropped = orderOptions(opts, keep, set, prl, extra, req.MaxMessage())
	if dropped > 0 {
		s.log.Debug("reply options cut to the client's maximum message size", "mac", macText(x.hw),
			"dropped", dropped, "max", req.MaxMessage())
	}
	return true
}

// stepDestination applies RFC 2131 §4.1 and encodes the reply.
func (s *Server) stepDestination(x *exchange) bool {
	x.dst = replyDest(x.req, &x.reply)
	x.out = encodeReply(x.out[:cap(x.out)], x.req, &x.reply, x.opts)
	return true
}
