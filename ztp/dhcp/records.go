package dhcp

import (
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Leases and events are kept in memory as compact records until their
// commit, then handed to the store (leases) and the devices service
// (events) as core values; the store encodes them (internal/store/kv).

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

// event is the record as a core.Event.
func (e *eventRec) event() core.Event {
	return core.Event{Time: e.time, Type: e.typ, Device: e.device, Message: e.msg, Fields: e.fields()}
}

// fields is e's Fields map as core.Event carries it.
func (e *eventRec) fields() map[string]string {
	m := make(map[string]string, 4)
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
