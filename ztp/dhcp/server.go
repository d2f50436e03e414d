package dhcp

import (
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

// LeaseFinder is what other parts may ask the running DHCP server without
// importing it (the app wires it in): the lease an address holds right now.
// Acknowledged leases are also in the store (tx.Leases()), which is the
// durable truth; this answers from memory.
type LeaseFinder interface {
	LeaseByIP(ip netip.Addr) (core.Lease, bool)
}

// Server is the DHCPv4 server for every configured interface. It is one
// app.Runner.
type Server struct {
	metrics    *metrics
	interfaces []string
	offerHold  time.Duration // how long an offered address stays held
	quarantine time.Duration // how long a DECLINEd address is not offered
	store      core.Store
	devices    *devices.Service
	log        *slog.Logger
	subnets    []*subnet
	urls       urls
	advertise  netip.Addr
	vmPrefixes [][]byte
	vmVendors  [][]byte
	relays     relayTable
	workers    int

	mu       sync.Mutex // guards everything below and all bindings
	byIP     map[uint32]*binding
	dirty    []*binding
	acks     []pendingAck
	devs     map[string]*device // by raw hardware address
	devQueue []*device
	events   []eventRec
	plan     *positions.Plan // the cabling plan (SetPlan); nil without one
	slots    map[*positions.Position]*slot

	ifaces    []*iface // set by Listen, read-only afterwards
	listening bool
	kick      chan struct{}
	pacer     *pacer
	sendWarn  rate.Sometimes // rate-limits the send-failure warning
	// dropLog rate-limits, per key, the info lines for requests left
	// unanswered for a reason the operator can act on.
	dropLog *ratelimit.Keyed

	// part, feed and blocks are set when several appliances share the
	// store (loadbalance.go); blocks claims the address blocks new addresses
	// come from.
	part    dhcpgroup.Partition
	feed    dhcpgroup.LeaseFeed
	feedRev int64
	blocks  *dhcpgroup.Blocks
}

var (
	_ LeaseFinder       = (*Server)(nil)
	_ core.DeviceFinder = (*Server)(nil)
)

// Options are what a Server is built from: values the app resolved from
// the configuration once.
type Options struct {
	// Interfaces are served directly; relayed subnets are reached through
	// them too.
	Interfaces []string
	// OfferHold is how long an offered address stays held for its client;
	// DeclineQuarantine how long a DECLINEd address is not offered.
	OfferHold, DeclineQuarantine time.Duration
	// Subnets are the networks served, directly or through relays.
	Subnets []Subnet
	// GlobalOptions apply to every reply, then ClassOptions by the client's
	// kind (sonic, onie, vm, unknown); each subnet's fields and options
	// override both.
	GlobalOptions OptionValues
	ClassOptions  map[core.DeviceKind]OptionValues

	Store   core.Store
	Devices *devices.Service // device records and events are reported here
	Log     *slog.Logger
	// Registerer takes the server's metrics (nil: kept, not exported).
	Registerer prometheus.Registerer
	// Advertise is the appliance address handed out (server identifier of
	// the URLs, option 66 for SONiC).
	Advertise netip.Addr
	// ZTPJSONURL and ONIEInstallerURL are handed out as options 67 (SONiC)
	// and 114 (ONIE): the app's Endpoints.
	ZTPJSONURL, ONIEInstallerURL string
	// VMMACPrefixes and VMVendorClasses (option 60 prefixes) mark
	// CloudStack VMs without a reservation.
	VMMACPrefixes   []net.HardwareAddr
	VMVendorClasses []string
	// Relays are the relay agents whose packets may set giaddr and carry
	// relay agent information; relayed packets from anyone else are
	// dropped.
	Relays []Relay

	// Partition and Feed, together, make this server one of several
	// appliances sharing the store (loadbalance.go); nil on one box.
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
	if !opt.Advertise.IsValid() {
		return nil, errors.New("dhcp: no address to advertise (advertise_addr)")
	}
	if opt.OfferHold <= 0 || opt.DeclineQuarantine < 0 {
		return nil, fmt.Errorf("dhcp: offer hold %s must be positive and decline quarantine %s not negative",
			opt.OfferHold, opt.DeclineQuarantine)
	}
	s := &Server{
		metrics:    newMetrics(opt.Registerer),
		interfaces: slices.Clone(opt.Interfaces), offerHold: opt.OfferHold, quarantine: opt.DeclineQuarantine,
		store: opt.Store, devices: opt.Devices, log: log.With("component", "dhcp"),
		byIP: map[uint32]*binding{}, devs: map[string]*device{}, kick: make(chan struct{}, 1), pacer: newPacer(),
		sendWarn: rate.Sometimes{Interval: 10 * time.Second},
		dropLog:  ratelimit.New(1, dropLogEvery, 4096),
		workers:  max(1, runtime.GOMAXPROCS(0)),
		part:     opt.Partition, feed: opt.Feed,
	}
	if (opt.Partition == nil) != (opt.Feed == nil) {
		return nil, errors.New("dhcp: a partition and a lease feed go together")
	}
	s.advertise = opt.Advertise
	s.urls = urls{ztpJSON: opt.ZTPJSONURL, onie: opt.ONIEInstallerURL, advertise: opt.Advertise.String()}
	for _, p := range opt.VMMACPrefixes {
		s.vmPrefixes = append(s.vmPrefixes, []byte(p))
	}
	for _, v := range opt.VMVendorClasses {
		s.vmVendors = append(s.vmVendors, []byte(v))
	}
	var err error
	if s.relays, err = buildRelays(opt.Relays); err != nil {
		return nil, err
	}
	for i := range opt.Subnets {
		sn, err := buildSubnet(&opt, i, s.urls)
		if err != nil {
			return nil, err
		}
		s.subnets = append(s.subnets, sn)
	}
	if len(s.subnets) == 0 {
		return nil, errors.New("dhcp: no subnet configured")
	}
	if s.part != nil {
		s.blocks = dhcpgroup.NewBlocks(s.part, &s.mu, s.groupPools(), s.log, s.metrics.blocksClaimed)
	}
	hint := 0
	for _, sn := range s.subnets {
		hint += sn.poolSize()
	}
	hint = min(hint, maxMapHint)
	s.byIP, s.devs = make(map[uint32]*binding, hint), make(map[string]*device, hint)
	return s, nil
}

// Name implements app.Runner.
func (s *Server) Name() string { return "dhcp" }

// Listen opens every interface (taking its single-instance lock) and loads
// the leases from the store. Call it in the network namespace of the
// interfaces; Run calls it when it has not been called.
func (s *Server) Listen() error {
	if s.listening {
		return nil
	}
	if s.store == nil || s.devices == nil {
		return errors.New("dhcp: a store and a devices service are required")
	}
	for _, name := range s.interfaces {
		ifc, err := openIface(name, s.advertise)
		if err != nil {
			s.closeIfaces()
			return err
		}
		for _, sn := range s.subnets {
			if sn.iface == name {
				ifc.direct = sn
			}
		}
		if ifc.direct == nil {
			ifc.direct = s.subnetFor(ifc.addr)
		}
		s.ifaces = append(s.ifaces, ifc)
		s.log.Info("serving DHCP", "interface", name, "server_id", netip.AddrFrom4(ifc.addr),
			"subnet", subnetName(ifc.direct), "raw_replies", ifc.raw >= 0)
	}
	s.warnRelayedWithoutRelays()
	if err := s.load(time.Now()); err != nil {
		s.closeIfaces()
		return err
	}
	s.listening = true
	return nil
}

// warnRelayedWithoutRelays says at start which subnets no request can
// reach: a subnet served through relays while no relay is declared (every
// relayed packet is then dropped), as after an upgrade from a release that
// believed any giaddr.
func (s *Server) warnRelayedWithoutRelays() {
	if len(s.relays) > 0 {
		return
	}
	for _, sn := range s.subnets {
		direct := false
		for _, ifc := range s.ifaces {
			direct = direct || ifc.direct == sn
		}
		if !direct {
			s.log.Warn("subnet is served through relays but no relay is declared: its requests will be dropped; declare each relay (its source address, giaddr and interface) under dhcp.relays",
				"subnet", sn.name)
		}
	}
}

func subnetName(sn *subnet) string {
	if sn == nil {
		return "(relayed only)"
	}
	return sn.name
}

func (s *Server) closeIfaces() {
	for _, ifc := range s.ifaces {
		ifc.close()
	}
	s.ifaces = nil
}

// load rebuilds the bindings from the stored leases: the store is the
// durable truth, memory is an index over it.
func (s *Server) load(now time.Time) error {
	if s.feed != nil {
		rev, err := s.loadFeed(now)
		s.feedRev = rev
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n loadCount
	err := s.store.View(func(tx core.Tx) error {
		return tx.Leases().List("", func(l core.Lease) (bool, error) {
			n.add(s.adoptStored(l, now))
			return true, nil
		})
	})
	// A record that cannot be decoded costs only itself: its address is
	// not bound at start (a client asking for it gets a fresh offer), and
	// the operator reads which keys in the log.
	var corrupt *core.CorruptError
	if errors.As(err, &corrupt) {
		n.bad += corrupt.Count
		s.log.Warn("unreadable lease records skipped", "count", corrupt.Count, "first", corrupt.Keys, "err", corrupt.Err)
		err = nil
	}
	if err != nil {
		return fmt.Errorf("dhcp: load leases: %w", err)
	}
	s.log.Info("leases loaded", "leases", n.loaded, "outside_subnets", n.outside, "unreadable", n.bad)
	return nil
}

// loadFeed loads every stored lease from the feed (several appliances),
// replacing what memory holds, and returns the feed's revision.
func (s *Server) loadFeed(now time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n loadCount
	rev, err := s.feed.Load(func(l core.Lease) {
		if a, err := netip.ParseAddr(l.IP); err == nil && a.Is4() {
			if s.keepsLiveDecision(s.byIP[u32Addr(a)], &l) {
				return
			}
		}
		n.add(s.adoptStored(l, now))
	})
	if err != nil {
		return 0, fmt.Errorf("dhcp: load leases: %w", err)
	}
	s.log.Info("leases loaded", "leases", n.loaded, "outside_subnets", n.outside, "unreadable", n.bad, "revision", rev)
	return rev, nil
}

// loadCount counts what a load did with the stored leases.
type loadCount struct{ loaded, outside, bad int }

func (n *loadCount) add(r adoptResult) {
	switch r {
	case adoptOtherFamily:
	case adoptBad:
		n.bad++
	case adoptOutside:
		n.outside++
	default:
		n.loaded++
	}
}

type adoptResult int

const (
	adopted adoptResult = iota
	adoptBad
	adoptOutside
	adoptOtherFamily
)

// adoptStored binds a stored lease in memory (the caller holds s.mu).
func (s *Server) adoptStored(l core.Lease, now time.Time) adoptResult {
	a, err := netip.ParseAddr(l.IP)
	if err != nil {
		return adoptBad
	}
	if !a.Is4() {
		return adoptOtherFamily // the DHCPv6 server's (ztp/dhcp6), same store
	}
	sn := s.subnetFor(a.As4())
	if sn == nil {
		return adoptOutside
	}
	if cur := s.byIP[u32Addr(a)]; cur != nil {
		s.disown(cur)
		delete(s.byIP, cur.ip)
	}
	s.adopt(sn, l, now)
	return adopted
}

// adopt makes a stored lease the binding of its address in sn.
func (s *Server) adopt(sn *subnet, l core.Lease, now time.Time) {
	a, _ := netip.ParseAddr(l.IP)
	hw, _ := parseHexColon(l.MAC)
	var cid []byte
	if l.ClientID != "" {
		cid = parseClientIDText(l.ClientID)
	}
	b := &binding{ip: u32Addr(a), sn: sn, hw: string(hw), clientID: string(cid), hostname: l.Hostname,
		state: l.State, start: l.Start, expiry: l.Expiry, reserved: l.Reserved}
	if l.State == core.LeaseActive {
		b.durable = l.Expiry
	}
	if s.part != nil {
		b.stored = &l
	}
	s.byIP[b.ip] = b
	var key string
	switch {
	case len(cid) > 0:
		key = "i" + string(cid)
	case len(hw) > 0:
		key = "h" + string(hw)
	}
	if key != "" && l.State != core.LeaseDeclined {
		if cur := sn.clients[key]; cur == nil || cur.start.Before(b.start) || !cur.busy(now) {
			if cur != nil {
				s.disown(cur)
			}
			b.key = key
			sn.clients[key] = b
			sn.byHW[b.hw] = b
		}
	}
	if b.busy(now) {
		s.occupy(sn, b.ip)
	} else {
		s.release(sn, b.ip)
	}
}

// Run serves until ctx ends, then stops reading, commits what is pending,
// and releases the interfaces.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	// With one P (ztpd pinned to one CPU), the committer sitting in fsync
	// holds it until the runtime's monitor notices, which can stall packet
	// handling for milliseconds. A second P lets the workers run meanwhile.
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	s.mu.Lock()
	s.sweep(time.Now())
	s.mu.Unlock()

	commitCtx, stopCommit := context.WithCancel(context.Background())
	commitDone, stopPacer, pacerDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go s.commitLoop(commitCtx, commitDone)
	go s.pacer.run(s, stopPacer, pacerDone)
	sweepDone := make(chan struct{})
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
	close(stopPacer)
	<-pacerDone
	<-sweepDone
	<-followDone
	<-blocksDone
	s.closeIfaces()
	s.listening = false
	return nil
}

// worker reads and answers packets of one interface. Workers per interface
// are bounded (GOMAXPROCS); the kernel's socket buffer absorbs bursts.
func (s *Server) worker(ifc *iface) {
	buf := make([]byte, 65536)
	x := &exchange{ifc: ifc, req: &Packet{}, out: make([]byte, 0, 1500), opts: make([]option, 0, 64)}
	w := &sender{}
	for {
		n, from, err := ifc.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Debug("read failed", "interface", ifc.name, "err", err)
			continue
		}
		x.src = from.Addr().Unmap()
		s.handle(x, w, buf[:n])
	}
}

// handle answers one packet. No packet can take the server down: parsing is
// bounds-checked (and fuzzed), and a bug found by a packet anyway is logged
// with the packet and counted, not fatal.
func (s *Server) handle(x *exchange, w *sender, b []byte) {
	defer func() {
		if r := recover(); r != nil {
			s.metrics.dropMalformed.Inc()
			s.log.Error("bug: panic while handling a DHCP packet", "panic", r, "packet", hex.EncodeToString(b))
		}
	}()
	if err := x.req.Parse(b); err != nil {
		s.metrics.dropMalformed.Inc()
		return
	}
	x.now = time.Now()
	if !s.decide(x) {
		return
	}
	if !x.commit {
		w.send(s, x.ifc, x.dst, x.out, x.reply.msgType)
	}
}

// sweepEvery paces lease expiry and pool gauges. (Event retention is the
// app's, whatever is enabled.)
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
// The caller holds s.mu.
func (s *Server) activeBinding(ip netip.Addr) *binding {
	if !ip.Is4() {
		return nil
	}
	b := s.byIP[u32Addr(ip)]
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
	if b == nil || s.devs[b.hw] == nil {
		return core.Device{}, false
	}
	d := s.devs[b.hw].d
	d.Labels = maps.Clone(d.Labels)
	if d.State == "" {
		d.State = core.StateLeased
	}
	return d, true
}

// LeaseByIP implements LeaseFinder: the active lease of ip, if any.
func (s *Server) LeaseByIP(ip netip.Addr) (core.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.activeBinding(ip)
	if b == nil {
		return core.Lease{}, false
	}
	r := recOf(b, time.Time{})
	return r.lease(), true
}
