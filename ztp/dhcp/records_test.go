package dhcp

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// fillAll sets every field of the struct v points to (strings, bools,
// times, numbers, string maps) so a test notices fields the fast encoders
// do not know.
func fillAll(v any, s string) {
	rv := reflect.ValueOf(v).Elem()
	for i := 0; i < rv.NumField(); i++ {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(s + "-" + rv.Type().Field(i).Name)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Uint64, reflect.Uint32, reflect.Int:
			f.SetUint(42)
		case reflect.Struct:
			f.Set(reflect.ValueOf(time.Date(2031, 2, 3, 4, 5, 6, 789, time.UTC)))
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]string{"interface": "eth0", "ip": "10.99.0.5", "relay": "10.99.0.2", "subnet": "lab"}))
		}
	}
}

// recFromLease is the inverse of leaseRec.lease, for tests.
func recFromLease(l core.Lease) leaseRec {
	a := netip.MustParseAddr(l.IP)
	hw, _ := parseHexColon(l.MAC)
	var cid []byte
	if l.ClientID != "" {
		cid = parseClientIDText(l.ClientID)
	}
	return leaseRec{ip: u32Addr(a), hw: string(hw), clientID: string(cid), hostname: l.Hostname, subnet: l.Subnet,
		state: l.State, start: l.Start, expiry: l.Expiry, updatedAt: l.UpdatedAt, reserved: l.Reserved}
}

// The records are encoded by the store (internal/store/kv/codec_test.go
// compares its encoders with encoding/json); here: the compact in-memory
// records convert to exactly the core values they stand for.

func TestLeaseRecordIsTheLease(t *testing.T) {
	var full core.Lease
	fillAll(&full, "x")
	full.IP, full.MAC, full.ClientID = "10.1.2.3", "52:54:00:00:00:01", "SONiC##a##b"
	cases := []core.Lease{
		full,
		{IP: "10.99.0.5", MAC: "52:54:00:00:00:01", Subnet: "lab", State: core.LeaseActive,
			Start: time.Now(), Expiry: time.Now().Add(time.Hour), UpdatedAt: time.Now().In(time.FixedZone("x", 3600))},
		{IP: "10.99.0.6", MAC: "aa", ClientID: "01:52:54", Hostname: `we<ird>"&\` + "\x01é\u2028", Subnet: "s"},
	}
	for _, l := range cases {
		r := recFromLease(l)
		if back := r.lease(); !reflect.DeepEqual(back, l) {
			t.Errorf("leaseRec.lease() = %+v, want %+v", back, l)
		}
	}
}

func TestEventRecordIsTheEvent(t *testing.T) {
	var full core.Event
	fillAll(&full, "x")
	full.Seq = 42
	cases := []struct {
		e   core.Event
		rec eventRec
	}{
		{full, eventRec{time: full.Time, typ: full.Type, device: full.Device, msg: full.Message,
			iface: "eth0", ip: u32([4]byte{10, 99, 0, 5}), relay: [4]byte{10, 99, 0, 2}, subnet: "lab"}},
		{core.Event{Seq: 7, Time: full.Time, Type: "dhcp.nak", Fields: map[string]string{"subnet": "lab"}},
			eventRec{time: full.Time, typ: "dhcp.nak", subnet: "lab"}},
		{core.Event{Seq: 8, Time: full.Time, Type: "dhcp.x"}, eventRec{time: full.Time, typ: "dhcp.x"}},
	}
	for _, c := range cases {
		if c.e.Cluster != "" {
			c.e.Cluster = "" // DHCP events have no cluster
		}
		c.e.Seq = 0 // the store numbers events
		if got := c.rec.event(); !reflect.DeepEqual(got, c.e) {
			t.Errorf("eventRec.event() = %+v, want %+v", got, c.e)
		}
	}
}
