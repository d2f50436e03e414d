package dhcp

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Leases, devices and events are written on the hot path, tens of
// thousands a second. They are encoded here without reflection into exactly
// the JSON encoding/json produces for core.Lease, core.Device and
// core.Event (records_test.go compares them byte for byte, every field),
// and handed to the store as json.RawMessage.

// eventRec is a pending core.Event of this server; its fields become the
// event's Fields map.
type eventRec struct {
	time             time.Time
	typ, device, msg string
	subnet, iface    string
	ip               uint32  // 0: none
	relay            [4]byte // zero: not relayed
}

// leaseRec is a binding as the committer writes it: copies of its fields,
// formatted only when encoded.
type leaseRec struct {
	ip                       uint32
	hw, clientID, hostname   string
	subnet                   string
	state                    core.LeaseState
	start, expiry, updatedAt time.Time
	reserved                 bool
}

func recOf(b *binding, now time.Time) leaseRec {
	return leaseRec{ip: b.ip, hw: b.hw, clientID: b.clientID, hostname: b.hostname, subnet: b.sn.name,
		state: b.state, start: b.start, expiry: b.expiry, updatedAt: now, reserved: b.reserved}
}

// lease is the record as a core.Lease.
func (r *leaseRec) lease() core.Lease {
	return core.Lease{IP: addrOf(r.ip).String(), MAC: macText([]byte(r.hw)), ClientID: clientIDText([]byte(r.clientID)),
		Hostname: r.hostname, Subnet: r.subnet, State: r.state, Start: r.start, Expiry: r.expiry,
		Reserved: r.reserved, UpdatedAt: r.updatedAt}
}

// appendLeaseJSON encodes r as encoding/json encodes r.lease().
func appendLeaseJSON(b []byte, r *leaseRec) []byte {
	b = append(b, `{"ip":"`...)
	b = addrOf(r.ip).AppendTo(b)
	b = append(b, `","mac":"`...)
	b = appendHexColon(b, r.hw)
	b = append(b, '"')
	if r.clientID != "" {
		b = append(b, `,"client_id":`...)
		if isPrintable(r.clientID) {
			b = appendJSONString(b, r.clientID)
		} else {
			b = append(b, '"')
			b = appendHexColon(b, r.clientID)
			b = append(b, '"')
		}
	}
	if r.hostname != "" {
		b = append(b, `,"hostname":`...)
		b = appendJSONString(b, r.hostname)
	}
	b = append(b, `,"subnet":`...)
	b = appendJSONString(b, r.subnet)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(r.state))
	b = append(b, `,"start":`...)
	b = appendJSONTime(b, r.start)
	b = append(b, `,"expiry":`...)
	b = appendJSONTime(b, r.expiry)
	if r.reserved {
		b = append(b, `,"reserved":true`...)
	}
	b = append(b, `,"updated_at":`...)
	b = appendJSONTime(b, r.updatedAt)
	return append(b, '}')
}

// appendEventJSON encodes the core.Event with sequence seq.
func appendEventJSON(b []byte, seq uint64, e *eventRec) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"time":`...)
	b = appendJSONTime(b, e.time)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.typ)
	if e.device != "" {
		b = append(b, `,"device":`...)
		b = appendJSONString(b, e.device)
	}
	if e.msg != "" {
		b = append(b, `,"message":`...)
		b = appendJSONString(b, e.msg)
	}
	// Fields, in the sorted key order encoding/json uses for maps.
	sep := byte('{')
	b = append(b, `,"fields":`...)
	field := func(k string) {
		b = append(b, sep, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
		sep = ','
	}
	if e.iface != "" {
		field("interface")
		b = appendJSONString(b, e.iface)
	}
	if e.ip != 0 {
		field("ip")
		b = append(b, '"')
		b = addrOf(e.ip).AppendTo(b)
		b = append(b, '"')
	}
	if e.relay != ([4]byte{}) {
		field("relay")
		b = append(b, '"')
		b = netip.AddrFrom4(e.relay).AppendTo(b)
		b = append(b, '"')
	}
	if e.subnet != "" {
		field("subnet")
		b = appendJSONString(b, e.subnet)
	}
	if sep == '{' {
		return append(b[:len(b)-len(`,"fields":`)], '}')
	}
	return append(b, '}', '}')
}

// fields is e's Fields map as core.Event carries it.
func (e *eventRec) fields() map[string]string {
	m := map[string]string{}
	if e.iface != "" {
		m["interface"] = e.iface
	}
	if e.ip != 0 {
		m["ip"] = addrOf(e.ip).String()
	}
	if e.relay != ([4]byte{}) {
		m["relay"] = ip4String(e.relay)
	}
	if e.subnet != "" {
		m["subnet"] = e.subnet
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// putEvent stores e like core.AppendEvent does: under the bucket's next
// sequence number, keyed by core.EventKey.
func putEvent(tx core.Tx, e *eventRec, buf []byte) ([]byte, error) {
	seq, err := tx.NextSequence(core.BucketEvents)
	if err != nil {
		return buf, err
	}
	buf = appendEventJSON(buf[:0], seq, e)
	return buf, tx.Put(core.BucketEvents, core.EventKey(seq), json.RawMessage(buf))
}

func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendJSONString writes s as encoding/json does; anything beyond plain
// printable ASCII takes encoding/json itself, so escaping stays identical.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendDeviceJSON(b []byte, d *core.Device) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, d.ID)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, string(d.Kind))
	b = append(b, `,"mac":`...)
	b = appendJSONString(b, d.MAC)
	for _, f := range [...]struct{ k, v string }{
		{`,"serial":`, d.Serial}, {`,"product":`, d.Product}, {`,"platform":`, d.Platform},
		{`,"hostname":`, d.Hostname}, {`,"client_id":`, d.ClientID}, {`,"vendor_class":`, d.VendorClass},
		{`,"sonic_version":`, d.SONiCVer}, {`,"ip":`, d.IP}, {`,"subnet":`, d.Subnet},
		{`,"relay_addr":`, d.RelayAddr}, {`,"circuit_id":`, d.CircuitID}, {`,"remote_id":`, d.RemoteID},
		{`,"base_mac":`, d.BaseMAC}, {`,"fixed_ip":`, d.FixedIP},
	} {
		if f.v != "" {
			b = append(b, f.k...)
			b = appendJSONString(b, f.v)
		}
	}
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(d.State))
	if d.Approved {
		b = append(b, `,"approved":true`...)
	}
	for _, f := range [...]struct{ k, v string }{{`,"cluster":`, d.Cluster}, {`,"role":`, d.Role}, {`,"profile":`, d.Profile}} {
		if f.v != "" {
			b = append(b, f.k...)
			b = appendJSONString(b, f.v)
		}
	}
	b = append(b, `,"first_seen":`...)
	b = appendJSONTime(b, d.FirstSeen)
	b = append(b, `,"last_seen":`...)
	b = appendJSONTime(b, d.LastSeen)
	b = append(b, `,"updated_at":`...)
	b = appendJSONTime(b, d.UpdatedAt)
	return append(b, '}')
}

// fastTx lets core.PutDevice keep its index logic while the device record
// itself is encoded by appendDeviceJSON (devices with labels take
// encoding/json).
type fastTx struct {
	core.Tx
	buf []byte
}

func (t *fastTx) Put(b core.Bucket, key string, v any) error {
	if d, ok := v.(core.Device); ok && b == core.BucketDevices && len(d.Labels) == 0 {
		t.buf = appendDeviceJSON(t.buf[:0], &d)
		return t.Tx.Put(b, key, json.RawMessage(t.buf))
	}
	return t.Tx.Put(b, key, v)
}

const hexDigits = "0123456789abcdef"

func appendHexColon(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hexDigits[s[i]>>4], hexDigits[s[i]&15])
	}
	return b
}

func isPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
