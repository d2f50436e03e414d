package dhcp

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// harness drives the request path of a Server without sockets: packets are
// built and read back with github.com/insomniacslk/dhcp/dhcpv4 (an
// independent codec) and leases land in a real bbolt store.
type harness struct {
	t    testing.TB
	opt  Options // resolved settings, without store, devices and log
	s    *Server
	st   *boltstore.Store
	devs *devices.Service
	dir  string
	ifc  *iface
	now  time.Time
	logs *syncBuffer
	// src is the source address of the packets sent; unset, a relayed
	// packet comes from its giaddr and any other from 0.0.0.0.
	src netip.Addr
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var serverIP = net.IPv4(10, 99, 0, 1).To4()

// testOptions serves 10.99.0.0/24 on "test0" (pool .100-.199, router .1)
// and the relayed 10.99.5.0/24 (pool .10-.20), with the configuration's
// default timers, as the app would resolve them.
func testOptions(t testing.TB) Options {
	t.Helper()
	opt := Options{Interfaces: []string{"test0"}, OfferHold: 30 * time.Second, DeclineQuarantine: 10 * time.Minute,
		Subnets: []Subnet{
			{Name: "lab", Prefix: prefix("10.99.0.0/24"), Interface: "test0", Pools: pools("10.99.0.100-10.99.0.199"),
				Router: addr("10.99.0.1"), DNS: addrs("10.99.0.53"), Domain: "lab.example", LeaseTime: time.Hour},
			{Name: "relayed", Prefix: prefix("10.99.5.0/24"), Pools: pools("10.99.5.10-10.99.5.20"), Router: addr("10.99.5.1"),
				LeaseTime: time.Hour},
		},
		// The relays the tests send through, each from its giaddr; 10.99.77.1
		// relays from a subnet nobody configured.
		Relays: []Relay{{Sources: addrs("10.99.5.1"), GIAddrs: addrs("10.99.5.1")},
			{Sources: addrs("10.99.77.1"), GIAddrs: addrs("10.99.77.1")}, {Sources: addrs("10.64.0.1"), GIAddrs: addrs("10.64.0.1")}}}
	withEndpoints(t, &opt, "10.99.0.1", "10.99.0.1:8080")
	return opt
}

// withEndpoints sets the advertised address and the URLs handed out as the
// app resolves them from advertise_addr and http.addr.
func withEndpoints(t testing.TB, opt *Options, advertise, httpAddr string) {
	t.Helper()
	ep, err := endpoints.New(advertise, httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	opt.Advertise, opt.ZTPJSONURL, opt.ONIEInstallerURL = ep.Advertise(), ep.ZTPJSON(netip.Addr{}), ep.ONIEInstaller(netip.Addr{})
}

func newHarness(t testing.TB, mutate func(*Options)) *harness {
	t.Helper()
	opt := testOptions(t)
	if mutate != nil {
		mutate(&opt)
	}
	h := &harness{t: t, opt: opt, dir: t.TempDir(), now: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC), logs: &syncBuffer{}}
	h.open()
	t.Cleanup(func() { h.st.Close() })
	return h
}

// open (re)creates the server on the harness's store directory, as a
// restart would.
func (h *harness) open() {
	h.t.Helper()
	h.st = storetest.OpenIn(h.t, h.dir).Store
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.devs = devices.New(devices.Options{Store: h.st, Log: log})
	h.t.Cleanup(func() { h.devs.Close() })
	opt := h.opt
	opt.Store, opt.Devices, opt.Log = h.st, h.devs, log
	s, err := New(opt)
	if err != nil {
		h.t.Fatal(err)
	}
	h.s = s
	h.ifc = &iface{name: "test0", addr: [4]byte{10, 99, 0, 1}, raw: -1, direct: s.subnets[0]}
	s.ifaces = []*iface{h.ifc}
	if err := s.load(h.now); err != nil {
		h.t.Fatal(err)
	}
}

// restart simulates kill -9: in-memory state is dropped without a flush.
func (h *harness) restart() {
	h.t.Helper()
	h.st.Close()
	h.open()
}

// exchange sends one request and returns the reply (nil for none). An ACK
// is returned only after its commit, as the committer would send it.
func (h *harness) exchange(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, dest) {
	h.t.Helper()
	out, d := h.raw(req.ToBytes())
	if out == nil {
		return nil, d
	}
	rep, err := dhcpv4.FromBytes(out)
	if err != nil {
		h.t.Fatalf("reply does not parse: %v", err)
	}
	return rep, d
}

// raw runs one packet through the path and returns the encoded reply.
func (h *harness) raw(b []byte) ([]byte, dest) {
	h.t.Helper()
	x := &exchange{ifc: h.ifc, req: &Packet{}, out: make([]byte, 0, 1500)}
	if err := x.req.Parse(b); err != nil {
		return nil, dest{}
	}
	x.now = h.now
	switch {
	case h.src.IsValid():
		x.src = h.src
	case x.req.GIAddr != [4]byte{}:
		x.src = netip.AddrFrom4(x.req.GIAddr)
	default:
		x.src = netip.IPv4Unspecified()
	}
	if !h.s.decide(x) {
		return nil, dest{}
	}
	if !x.commit {
		return append([]byte(nil), x.out...), x.dst
	}
	acks := h.commit()
	for _, a := range acks {
		if a.b == x.b {
			return a.pkt, a.dst
		}
	}
	h.t.Fatalf("ACK decided but not released by the commit")
	return nil, dest{}
}

// commit runs one committer cycle without sockets and returns the ACKs it
// released.
func (h *harness) commit() []pendingAck {
	h.t.Helper()
	var acks []pendingAck
	for more := true; more; {
		snap := &snapshot{}
		h.s.mu.Lock()
		h.s.take(snap, h.now)
		h.s.mu.Unlock()
		more = h.s.handOver(snap)
		if err := h.s.commitSnapshot(snap); err != nil {
			h.t.Fatal(err)
		}
		acks = append(acks, snap.acks...)
	}
	h.devs.Flush()
	return acks
}

func (h *harness) sweep() {
	h.s.mu.Lock()
	h.s.sweep(h.now)
	h.s.mu.Unlock()
}

func (h *harness) lease(ip string) (core.Lease, bool) {
	h.t.Helper()
	var l core.Lease
	var ok bool
	err := h.st.View(func(tx core.Tx) error {
		var err error
		l, err = tx.Leases().Get(ip)
		ok = err == nil
		if errors.Is(err, core.ErrNotFound) {
			err = nil
		}
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return l, ok
}

func (h *harness) device(id string) core.Device {
	h.t.Helper()
	var d core.Device
	err := h.st.View(func(tx core.Tx) error {
		var err error
		d, err = tx.Devices().Get(id)
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

func mac(i int) net.HardwareAddr {
	return net.HardwareAddr{0x52, 0x54, 0x00, 0x10, byte(i >> 8), byte(i)}
}

func discover(hw net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	d, err := dhcpv4.NewDiscovery(hw, mods...)
	if err != nil {
		panic(err)
	}
	return d
}

func requestFor(offer *dhcpv4.DHCPv4, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	r, err := dhcpv4.NewRequestFromOffer(offer, mods...)
	if err != nil {
		panic(err)
	}
	return r
}

// dora runs DISCOVER/OFFER/REQUEST/ACK and returns the ACK.
func (h *harness) dora(hw net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	h.t.Helper()
	offer, _ := h.exchange(discover(hw, mods...))
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer {
		h.t.Fatalf("no OFFER for %s: %v", hw, offer)
	}
	ack, _ := h.exchange(requestFor(offer, mods...))
	if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
		h.t.Fatalf("no ACK for %s: %v", hw, ack)
	}
	if !ack.YourIPAddr.Equal(offer.YourIPAddr) {
		h.t.Fatalf("ACK %s differs from OFFER %s", ack.YourIPAddr, offer.YourIPAddr)
	}
	return ack
}

func generic(code uint8, v []byte) dhcpv4.Modifier {
	return dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(code), v))
}

// replyCodes lists the option codes of an encoded reply in wire order.
func replyCodes(b []byte) []uint8 {
	var out []uint8
	for i := 240; i < len(b); {
		c := b[i]
		if c == optPad {
			i++
			continue
		}
		if c == optEnd || i+1 >= len(b) {
			break
		}
		out = append(out, c)
		i += 2 + int(b[i+1])
	}
	return out
}

func ip(s string) net.IP { return net.ParseIP(s).To4() }

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = addr(a)
	}
	return out
}

func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s).Masked() }

// pools parses "A-B" ranges.
func pools(s ...string) []Range {
	out := make([]Range, len(s))
	for i, r := range s {
		a, b, ok := strings.Cut(r, "-")
		if !ok {
			panic("pool " + r)
		}
		out[i] = Range{addr(a), addr(b)}
	}
	return out
}

// optionText encodes option values given as configuration text.
func optionText(t testing.TB, text map[uint8]string) OptionValues {
	t.Helper()
	o := OptionValues{}
	for code, v := range text {
		b, err := EncodeOption(code, v)
		if err != nil {
			t.Fatalf("option %d: %v", code, err)
		}
		o[code] = b
	}
	return o
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
