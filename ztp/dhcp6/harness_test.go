package dhcp6

import (
	"bytes"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// harness drives a Server's request path without sockets: packets are
// built and read back with insomniacslk's dhcpv6 (an independent codec),
// leases land in a real bbolt store, and replies that wait for their
// commit are sent by the committer as in service.
type harness struct {
	t    testing.TB
	opt  Options
	s    *Server
	st   *boltstore.Store
	devs *devices.Service
	dir  string
	ifc  *iface
	conn *fakeConn
	logs *syncBuffer
	src  netip.AddrPort // where packets come from
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

// fakeConn keeps what the server sends.
type fakeConn struct {
	mu   sync.Mutex
	sent []sent
}

type sent struct {
	dst netip.AddrPort
	pkt []byte
}

func (c *fakeConn) ReadFromUDPAddrPort([]byte) (int, netip.AddrPort, error) {
	return 0, netip.AddrPort{}, net.ErrClosed
}

func (c *fakeConn) WriteToUDPAddrPort(b []byte, a netip.AddrPort) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, sent{a, append([]byte(nil), b...)})
	return len(b), nil
}

func (c *fakeConn) Close() error { return nil }

func (c *fakeConn) take() []sent {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sent
	c.sent = nil
	return s
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// testOptions serve fd99:0:0:1::/64 on "test0" (pool ::100-::1ff) and the
// relayed fd99:0:0:5::/64 (pool ::10-::20), declared relay fd99:0:0:5::1.
func testOptions() Options {
	return Options{Interfaces: []string{"test0"}, OfferHold: 30 * time.Second, DeclineQuarantine: 10 * time.Minute,
		Subnets: []Subnet{
			{Name: "lab6", Prefix: netip.MustParsePrefix("fd99:0:0:1::/64"), Interface: "test0",
				Pools: []Range{{addr("fd99:0:0:1::100"), addr("fd99:0:0:1::1ff")}}, DNS: []netip.Addr{addr("fd99:0:0:1::53")},
				Domains: []string{"lab.example"}, LeaseTime: time.Hour, RapidCommit: true},
			{Name: "relayed6", Prefix: netip.MustParsePrefix("fd99:0:0:5::/64"),
				Pools: []Range{{addr("fd99:0:0:5::10"), addr("fd99:0:0:5::20")}}, LeaseTime: time.Hour},
		},
		Relays:           []Relay{{Sources: []netip.Addr{addr("fd99:0:0:5::1")}, LinkAddrs: []netip.Addr{addr("fd99:0:0:5::1")}}},
		ZTPJSONURL:       "http://[fd99:0:0:1::1]:8080/ztp/ztp.json",
		ONIEInstallerURL: "http://[fd99:0:0:1::1]:8080/onie-installer",
		VMMACPrefixes:    []net.HardwareAddr{{0x1e, 0x00}},
	}
}

func newHarness(t testing.TB, mutate func(*Options)) *harness {
	t.Helper()
	opt := testOptions()
	if mutate != nil {
		mutate(&opt)
	}
	h := &harness{t: t, opt: opt, dir: t.TempDir(), logs: &syncBuffer{},
		src: netip.AddrPortFrom(addr("fe80::1"), 546)}
	h.open()
	t.Cleanup(func() { h.st.Close() })
	return h
}

// open (re)creates the server on the harness's store, as a restart would.
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
	h.conn = &fakeConn{}
	h.ifc = &iface{name: "test0", mac: []byte{2, 0, 0, 0, 0, 1}, conn: h.conn}
	h.ifc.direct = s.directSubnet(h.ifc)
	s.ifaces = []*iface{h.ifc}
	if err := s.loadDUID(time.Now()); err != nil {
		h.t.Fatal(err)
	}
	if err := s.load(time.Now()); err != nil {
		h.t.Fatal(err)
	}
}

// restart drops memory without a flush, as kill -9 would.
func (h *harness) restart() {
	h.t.Helper()
	h.st.Close()
	h.open()
}

// raw sends one packet and returns the reply, after its commit when it
// waits for one (nil: none).
func (h *harness) raw(b []byte) []byte {
	h.t.Helper()
	x := newExchange(h.ifc)
	x.src = h.src
	if out := h.s.handle(x, b); out != nil {
		if x.dst != h.src {
			h.t.Fatalf("reply to %s, want %s", x.dst, h.src)
		}
		return append([]byte(nil), out...)
	}
	var last time.Time
	h.s.flush(&snapshot{}, &last)
	got := h.conn.take()
	switch len(got) {
	case 0:
		return nil
	case 1:
		return got[0].pkt
	}
	h.t.Fatalf("%d replies to one packet", len(got))
	return nil
}

// exchange sends a client message and decodes the reply.
func (h *harness) exchange(m dhcpv6.DHCPv6) *dhcpv6.Message {
	h.t.Helper()
	out := h.raw(m.ToBytes())
	if out == nil {
		return nil
	}
	r, err := dhcpv6.MessageFromBytes(out)
	if err != nil {
		h.t.Fatalf("reply does not parse: %v", err)
	}
	return r
}

// client is one DHCPv6 client of the tests, a DUID-LL of its MAC.
type client struct {
	mac  net.HardwareAddr
	duid dhcpv6.DUID
	iaid [4]byte
	mods []dhcpv6.Modifier
}

func newClient(mac string, mods ...dhcpv6.Modifier) *client {
	hw, _ := net.ParseMAC(mac)
	return &client{mac: hw, duid: &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: hw}, iaid: [4]byte{0, 0, 0, 1}, mods: mods}
}

func (c *client) msg(t dhcpv6.MessageType, mods ...dhcpv6.Modifier) *dhcpv6.Message {
	m, err := dhcpv6.NewMessage()
	if err != nil {
		panic(err)
	}
	m.MessageType = t
	m.AddOption(dhcpv6.OptClientID(c.duid))
	m.AddOption(dhcpv6.OptElapsedTime(0))
	for _, f := range c.mods {
		f(m)
	}
	for _, f := range mods {
		f(m)
	}
	return m
}

func (c *client) ia(addrs ...string) dhcpv6.Modifier {
	return func(d dhcpv6.DHCPv6) {
		o := &dhcpv6.OptIANA{IaId: c.iaid}
		for _, a := range addrs {
			o.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP(a), PreferredLifetime: time.Hour, ValidLifetime: time.Hour})
		}
		d.AddOption(o)
	}
}

func serverID(id dhcpv6.DUID) dhcpv6.Modifier { return dhcpv6.WithServerID(id) }

// addrOf is the (first) address an IA_NA of the reply grants, or "".
func addrOf(r *dhcpv6.Message) string {
	if r == nil {
		return ""
	}
	ia := r.Options.OneIANA()
	if ia == nil {
		return ""
	}
	for _, a := range ia.Options.Addresses() {
		if a.ValidLifetime > 0 {
			return a.IPv6Addr.String()
		}
	}
	return ""
}

// dora runs Solicit, Advertise, Request, Reply and returns the reply.
func (h *harness) dora(c *client, mods ...dhcpv6.Modifier) *dhcpv6.Message {
	h.t.Helper()
	adv := h.exchange(c.msg(dhcpv6.MessageTypeSolicit, append([]dhcpv6.Modifier{c.ia()}, mods...)...))
	if adv == nil || adv.MessageType != dhcpv6.MessageTypeAdvertise {
		h.t.Fatalf("Solicit: got %v, want an Advertise", adv)
	}
	a := addrOf(adv)
	if a == "" {
		h.t.Fatalf("Advertise without an address: %s", adv.Summary())
	}
	rep := h.exchange(c.msg(dhcpv6.MessageTypeRequest, append([]dhcpv6.Modifier{c.ia(a), serverID(adv.Options.ServerID())}, mods...)...))
	if rep == nil || rep.MessageType != dhcpv6.MessageTypeReply || addrOf(rep) != a {
		h.t.Fatalf("Request for %s: got %v", a, rep)
	}
	return rep
}

func (h *harness) storedLease(ip string) (core.Lease, bool) {
	h.t.Helper()
	var l core.Lease
	var found bool
	err := h.st.View(func(tx core.Tx) error {
		var err error
		l, err = tx.Leases().Get(ip)
		found = err == nil
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return l, found
}

func (h *harness) leaseCount() int {
	h.t.Helper()
	n := 0
	_ = h.st.View(func(tx core.Tx) error {
		return tx.Leases().List("", func(core.Lease) (bool, error) { n++; return true, nil })
	})
	return n
}
