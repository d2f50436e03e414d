package dhcp6

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/internal/ratelimit"
	"github.com/ztpd/ztpd/ztp/dhcpgroup"
)

// Server is the DHCPv6 server for every configured interface. It is one
// app.Runner.
type Server struct {
	metrics    *metrics
	interfaces []string
	offerHold  time.Duration
	quarantine time.Duration
	store      core.Store
	devices    *devices.Service
	log        *slog.Logger
	subnets    []*subnet
	vmPrefixes [][]byte
	vmVendors  [][]byte
	relays     []Relay
	plan       *positions.Plan // the cabling plan (SetPlan); nil without one
	slots      map[*positions.Position]*slot
	workers    int
	duid       []byte // the server identifier, stored
	// part, feed and blocks are set when several appliances share the
	// store (group.go); blocks claims the address blocks new addresses
	// come from.
	part    dhcpgroup.Partition
	feed    dhcpgroup.LeaseFeed
	feedRev int64
	blocks  *dhcpgroup.Blocks

	mu       sync.Mutex // guards everything below and all bindings
	byIP     map[netip.Addr]*binding
	dirty    []*binding
	replies  []pendingReply
	pktFree  [][]byte           // reply buffers sent, for reuse (freePkt)
	devs     map[string]*device // by raw MAC
	devQueue []*device
	events   []core.Event

	ifaces    []*iface
	listening bool
	kick      chan struct{}
	sendWarn  rate.Sometimes
	dropLog   *ratelimit.Keyed
}

var _ core.DeviceFinder = (*Server)(nil)

// Options are what a Server is built from: values the app resolved from
// the configuration once.
type Options struct {
	// Interfaces are served directly; relayed subnets are reached through
	// them too.
	Interfaces []string
	// OfferHold is how long an advertised address stays held for its
	// client; DeclineQuarantine how long a declined address is not offered.
	OfferHold, DeclineQuarantine time.Duration
	Subnets                      []Subnet

	Store      core.Store
	Devices    *devices.Service
	Log        *slog.Logger
	Registerer prometheus.Registerer
	// ZTPJSONURL and ONIEInstallerURL are handed out as option 59 to SONiC
	// and ONIE clients, their host an IPv6 literal in brackets.
	ZTPJSONURL, ONIEInstallerURL string
	// VMMACPrefixes mark CloudStack VMs without a reservation (by the MAC a
	// DUID or a relay tells).
	VMMACPrefixes []net.HardwareAddr
	// VMVendorClasses (dhcp.vm.vendor_classes) mark VMs whose vendor class
	// (16) data starts with one of them.
	VMVendorClasses []string
	// Relays are the relay agents whose Relay-Forw messages are served;
	// relayed messages from anyone else are dropped.
	Relays []Relay
	// Partition and Feed, together, make this server one of several
	// appliances sharing the store (group.go).
	Partition dhcpgroup.Partition
	Feed      dhcpgroup.LeaseFeed
}

// New builds the server. It opens no socket and reads no lease; Listen
// does.
func New(opt Options) (*Server, error) {
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	if opt.OfferHold <= 0 || opt.DeclineQuarantine < 0 {
		return nil, fmt.Errorf("dhcp6: offer hold %s must be positive and decline quarantine %s not negative",
			opt.OfferHold, opt.DeclineQuarantine)
	}
	s := &Server{
		metrics:    newMetrics(opt.Registerer),
		interfaces: slices.Clone(opt.Interfaces), offerHold: opt.OfferHold, quarantine: opt.DeclineQuarantine,
		store: opt.Store, devices: opt.Devices, log: log.With("component", "dhcp6"),
		byIP: map[netip.Addr]*binding{}, devs: map[string]*device{}, kick: make(chan struct{}, 1),
		sendWarn: rate.Sometimes{Interval: 10 * time.Second},
		dropLog:  ratelimit.New(1, dropLogEvery, 4096),
		workers:  max(1, runtime.GOMAXPROCS(0)),
		part:     opt.Partition, feed: opt.Feed,
	}
	if (opt.Partition == nil) != (opt.Feed == nil) {
		return nil, errors.New("dhcp6: a partition and a lease feed go together")
	}
	for _, p := range opt.VMMACPrefixes {
		s.vmPrefixes = append(s.vmPrefixes, []byte(p))
	}
	for _, v := range opt.VMVendorClasses {
		s.vmVendors = append(s.vmVendors, []byte(v))
	}
	for i, r := range opt.Relays {
		if len(r.Sources) == 0 || len(r.LinkAddrs) == 0 {
			return nil, fmt.Errorf("dhcp6: relay %d: needs a source address and a link address", i)
		}
		for _, a := range append(slices.Clone(r.Sources), r.LinkAddrs...) {
			if !a.Is6() || a.Is4In6() || a.IsUnspecified() {
				return nil, fmt.Errorf("dhcp6: relay %d: %s is not an IPv6 address", i, a)
			}
		}
		s.relays = append(s.relays, r)
	}
	u := urls{ztpJSON: opt.ZTPJSONURL, onie: opt.ONIEInstallerURL}
	for i := range opt.Subnets {
		sn, err := buildSubnet(&opt, i, u)
		if err != nil {
			return nil, err
		}
		s.subnets = append(s.subnets, sn)
	}
	if len(s.subnets) == 0 {
		return nil, errors.New("dhcp6: no subnet configured")
	}
	if s.part != nil {
		s.blocks = dhcpgroup.NewBlocks(s.part, &s.mu, s.groupPools(), s.log, s.metrics.blocksClaimed)
	}
	return s, nil
}

// Name implements app.Runner.
func (s *Server) Name() string { return "dhcp6" }

// ServerDUID is the server identifier this server answers with (set by
// Listen).
func (s *Server) ServerDUID() []byte { return slices.Clone(s.duid) }

// Listen opens every interface (taking its single-instance lock), loads
// the server's DUID and the leases from the store. Call it in the network
// namespace of the interfaces; Run calls it when it has not been called.
func (s *Server) Listen() error {
	if s.listening {
		return nil
	}
	if s.store == nil || s.devices == nil {
		return errors.New("dhcp6: a store and a devices service are required")
	}
	for _, name := range s.interfaces {
		ifc, err := openIface(name)
		if err != nil {
			s.closeIfaces()
			return err
		}
		ifc.direct = s.directSubnet(ifc)
		s.ifaces = append(s.ifaces, ifc)
		name := "(relayed only)"
		if ifc.direct != nil {
			name = ifc.direct.name
		}
		s.log.Info("serving DHCPv6", "interface", ifc.name, "subnet", name)
	}
	if err := s.loadDUID(time.Now()); err != nil {
		s.closeIfaces()
		return err
	}
	if err := s.load(time.Now()); err != nil {
		s.closeIfaces()
		return err
	}
	s.listening = true
	return nil
}

// directSubnet is the subnet served on ifc itself: the one naming it, else
// the one holding one of its addresses.
func (s *Server) directSubnet(ifc *iface) *subnet {
	for _, sn := range s.subnets {
		if sn.iface == ifc.name {
			return sn
		}
	}
	for _, a := range ifc.addrs {
		if sn := s.subnetFor(a); sn != nil {
			return sn
		}
	}
	return nil
}

func (s *Server) subnetFor(a netip.Addr) *subnet {
	for _, sn := range s.subnets {
		if sn.prefix.Contains(a) {
			return sn
		}
	}
	return nil
}

func (s *Server) closeIfaces() {
	for _, ifc := range s.ifaces {
		ifc.close()
	}
	s.ifaces = nil
}

// serverDUIDSetting is where the server's DUID is kept, so clients see the
// same server after a restart (RFC 8415 §11: a DUID must not change).
const serverDUIDSetting = "dhcp6.server_duid"

// loadDUID reads the stored server DUID, or makes a DUID-LLT from the first
// interface's MAC (else a DUID-LL of a random local MAC) and stores it.
func (s *Server) loadDUID(now time.Time) error {
	return s.store.Update(func(tx core.Tx) error {
		v, ok, err := tx.Settings().Get(serverDUIDSetting)
		if err != nil {
			return fmt.Errorf("dhcp6: read server DUID: %w", err)
		}
		if ok {
			if d, good := parseHexColon(v); good && len(d) >= 4 && len(d) <= maxDUID {
				s.duid = d
				return nil
			}
		}
		s.duid = newDUID(s.ifaces, now)
		return tx.Settings().Put(serverDUIDSetting, hexColon(s.duid))
	})
}

// duidEpoch is DUID-LLT's time origin (RFC 8415 §11.2).
var duidEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func newDUID(ifaces []*iface, now time.Time) []byte {
	for _, ifc := range ifaces {
		if len(ifc.mac) == 6 {
			t := uint32(now.Sub(duidEpoch) / time.Second)
			return append([]byte{0, 1, 0, 1, byte(t >> 24), byte(t >> 16), byte(t >> 8), byte(t)}, ifc.mac...)
		}
	}
	mac := make([]byte, 6)
	copy(mac, randomBytes(6))
	mac[0] = mac[0]&^1 | 2 // locally administered, unicast
	return append([]byte{0, 3, 0, 1}, mac...)
}

// load rebuilds the bindings from the stored IPv6 leases.
func (s *Server) load(now time.Time) error {
	if s.feed != nil {
		rev, err := s.loadFeed(now)
		s.feedRev = rev
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	loaded, outside := 0, 0
	err := s.store.View(func(tx core.Tx) error {
		return tx.Leases().List("", func(l core.Lease) (bool, error) {
			a, err := netip.ParseAddr(l.IP)
			if err != nil || !a.Is6() || a.Is4In6() {
				return true, nil // the DHCPv4 server's
			}
			sn := s.subnetFor(a)
			if sn == nil {
				outside++
				return true, nil
			}
			s.adopt(sn, a, l, now)
			if p := sn.poolFor(a); p != nil {
				// New addresses follow the highest one stored, not the
				// pool's start: a restart after a storm scans no leases.
				if off := p.offset(a); off < p.size && off >= p.next {
					p.next = (off + 1) % p.size
				}
			}
			loaded++
			return true, nil
		})
	})
	var corrupt *core.CorruptError
	if errors.As(err, &corrupt) {
		s.log.Warn("unreadable lease records skipped", "count", corrupt.Count, "first", corrupt.Keys, "err", corrupt.Err)
		err = nil
	}
	if err != nil {
		return fmt.Errorf("dhcp6: load leases: %w", err)
	}
	s.log.Info("leases loaded", "leases", loaded, "outside_subnets", outside)
	return nil
}

// adopt makes a stored lease the binding of its address.
func (s *Server) adopt(sn *subnet, a netip.Addr, l core.Lease, now time.Time) {
	duid, _ := parseHexColon(l.ClientID)
	mac, _ := parseHexColon(l.MAC)
	b := &binding{ip: a, sn: sn, duid: string(duid), mac: string(mac), hostname: l.Hostname, state: l.State,
		start: l.Start, expiry: l.Expiry, reserved: l.Reserved}
	if l.State == core.LeaseActive {
		b.durable = l.Expiry
	}
	if s.part != nil {
		b.stored = &l
	}
	if cur := s.byIP[a]; cur != nil {
		s.disown(cur)
	}
	s.byIP[a] = b
	if len(duid) > 0 && l.State != core.LeaseDeclined {
		if cur := sn.clients[b.duid]; cur == nil || cur.start.Before(b.start) || !cur.busy(now) {
			if cur != nil {
				s.disown(cur)
			}
			sn.clients[b.duid] = b
			b.owned = true
		}
	}
}

// Run serves until ctx ends, then stops reading, commits what is pending
// and releases the interfaces.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	commitCtx, stopCommit := context.WithCancel(context.Background())
	commitDone, sweepDone := make(chan struct{}), make(chan struct{})
	go s.commitLoop(commitCtx, commitDone)
	go s.sweepLoop(ctx, sweepDone)
	followDone, blocksDone := make(chan struct{}), make(chan struct{})
	if s.part != nil {
		go s.follow(ctx, s.feedRev, followDone)
		go s.blocks.Keep(ctx, blocksDone)
	} else {
		close(followDone)
		close(blocksDone)
	}
	var wg sync.WaitGroup
	for _, ifc := range s.ifaces {
		for range s.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.worker(ifc)
			}()
		}
	}
	<-ctx.Done()
	for _, ifc := range s.ifaces {
		ifc.conn.Close()
	}
	wg.Wait()
	stopCommit()
	<-commitDone
	<-sweepDone
	<-followDone
	<-blocksDone
	s.closeIfaces()
	s.listening = false
	return nil
}

func (s *Server) worker(ifc *iface) {
	buf := make([]byte, 65536)
	x := newExchange(ifc)
	for {
		n, from, err := ifc.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		x.src = from
		if out := s.handle(x, buf[:n]); out != nil {
			s.send(ifc, x.dst, out)
		}
	}
}

// send writes one reply; a failure is logged now and then (the client
// retransmits).
func (s *Server) send(ifc *iface, dst netip.AddrPort, pkt []byte) {
	if _, err := ifc.conn.WriteToUDPAddrPort(pkt, dst); err != nil {
		s.metrics.sendErrors.Inc()
		s.sendWarn.Do(func() { s.log.Warn("send failed", "interface", ifc.name, "to", dst, "err", err) })
	}
}

// handle answers one packet: the reply to send now, or nil (none, or one
// that waits for its commit). No packet takes the server down: parsing is
// bounds-checked and fuzzed, and a bug a packet finds anyway is logged
// with the packet.
func (s *Server) handle(x *exchange, b []byte) (out []byte) {
	defer func() {
		if r := recover(); r != nil {
			s.metrics.dropped.WithLabelValues("malformed").Inc()
			s.log.Error("bug: panic while handling a DHCPv6 packet", "panic", r, "packet", hex.EncodeToString(b))
			out = nil
		}
	}()
	if err := x.req.Parse(b); err != nil {
		s.metrics.dropped.WithLabelValues("malformed").Inc()
		return nil
	}
	x.now = time.Now()
	if !s.decide(x) || x.commit {
		return nil
	}
	return x.out
}

// sweepEvery paces lease expiry.
const sweepEvery = 5 * time.Second

func (s *Server) sweepLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.mu.Lock()
			s.sweep(now)
			s.mu.Unlock()
		}
	}
}

// activeBinding is the binding holding an active, unexpired lease of ip.
func (s *Server) activeBinding(ip netip.Addr) *binding {
	b := s.byIP[ip.WithZone("")]
	if b == nil || b.state != core.LeaseActive || !b.expiry.After(time.Now()) {
		return nil
	}
	return b
}

// DeviceByIP implements core.DeviceFinder: the device that holds the active
// lease of ip, as this server knows it (possibly not yet committed).
func (s *Server) DeviceByIP(ip netip.Addr) (core.Device, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.activeBinding(ip)
	if b == nil || s.devs[b.mac] == nil {
		return core.Device{}, false
	}
	d := s.devs[b.mac].d
	d.Labels = maps.Clone(d.Labels)
	if d.State == "" {
		d.State = core.StateLeased
	}
	return d, true
}

// LeaseByIP is the active lease of ip, if any.
func (s *Server) LeaseByIP(ip netip.Addr) (core.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.activeBinding(ip)
	if b == nil {
		return core.Lease{}, false
	}
	return b.lease(time.Time{}), true
}

// trusted reports whether a relayed message may be served: it arrived from
// a declared relay's address, on its interface, stating one of its link
// addresses.
func (s *Server) trusted(src netip.Addr, ifname string, link netip.Addr) bool {
	src = src.WithZone("")
	for _, r := range s.relays {
		if r.Interface != "" && r.Interface != ifname {
			continue
		}
		if slices.Contains(r.Sources, src) && slices.Contains(r.LinkAddrs, link) {
			return true
		}
	}
	return false
}

func (s *Server) vmMatch(mac, vendorClass []byte) bool {
	for _, p := range s.vmPrefixes {
		if len(mac) > 0 && bytes.HasPrefix(mac, p) {
			return true
		}
	}
	if len(s.vmVendors) == 0 || len(vendorClass) == 0 {
		return false
	}
	return classData(vendorClass, 4, func(b []byte) bool {
		for _, v := range s.vmVendors {
			if bytes.HasPrefix(b, v) {
				return true
			}
		}
		return false
	})
}
