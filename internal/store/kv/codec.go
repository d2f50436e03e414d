package kv

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/jsontext"
)

// Leases, devices and events are written on the hot path, tens of thousands
// a second. They are encoded here without reflection into exactly the JSON
// encoding/json produces (codec_test.go compares them byte for byte), so
// records stay readable by any JSON decoder and by older versions.

// appendJSONTime writes t as encoding/json does. The times stored here come
// from the clock, always inside MarshalJSON's range; one outside it is
// written as it formats, as before.
func appendJSONTime(b []byte, t time.Time) []byte {
	b, _ = jsontext.AppendTime(b, t)
	return b
}

func appendOptional(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, key...)
	return jsontext.AppendString(b, v)
}

// appendDevice encodes d; devices with labels (rare) take encoding/json.
func appendDevice(b []byte, d *core.Device) []byte {
	if len(d.Labels) > 0 || d.SerialConflict != nil || d.CablingMismatch != nil {
		raw, _ := json.Marshal(d)
		return append(b, raw...)
	}
	b = append(b, `{"id":`...)
	b = jsontext.AppendString(b, d.ID)
	b = append(b, `,"kind":`...)
	b = jsontext.AppendString(b, string(d.Kind))
	b = append(b, `,"mac":`...)
	b = jsontext.AppendString(b, d.MAC)
	for _, f := range [...]struct{ k, v string }{
		{`,"serial":`, d.Serial}, {`,"product":`, d.Product}, {`,"platform":`, d.Platform},
		{`,"hostname":`, d.Hostname}, {`,"client_id":`, d.ClientID}, {`,"vendor_class":`, d.VendorClass},
		{`,"sonic_version":`, d.SONiCVer}, {`,"ip":`, d.IP}, {`,"subnet":`, d.Subnet},
		{`,"relay_addr":`, d.RelayAddr}, {`,"circuit_id":`, d.CircuitID}, {`,"remote_id":`, d.RemoteID},
		{`,"position":`, d.Position},
		{`,"base_mac":`, d.BaseMAC}, {`,"fixed_ip":`, d.FixedIP},
	} {
		b = appendOptional(b, f.k, f.v)
	}
	b = append(b, `,"state":`...)
	b = jsontext.AppendString(b, string(d.State))
	if d.Approved {
		b = append(b, `,"approved":true`...)
	}
	b = appendOptional(b, `,"cluster":`, d.Cluster)
	b = appendOptional(b, `,"role":`, d.Role)
	b = appendOptional(b, `,"profile":`, d.Profile)
	if r := &d.Refusal; *r != (core.Refusal{}) {
		b = append(b, `,"refusal":{"what":`...)
		b = jsontext.AppendString(b, r.What)
		b = append(b, `,"kind":`...)
		b = jsontext.AppendString(b, r.Kind)
		b = append(b, `,"reason":`...)
		b = jsontext.AppendString(b, r.Reason)
		b = append(b, `,"at":`...)
		b = appendJSONTime(b, r.At)
		b = append(b, '}')
	}
	b = append(b, `,"first_seen":`...)
	b = appendJSONTime(b, d.FirstSeen)
	b = append(b, `,"last_seen":`...)
	b = appendJSONTime(b, d.LastSeen)
	b = append(b, `,"updated_at":`...)
	b = appendJSONTime(b, d.UpdatedAt)
	return append(b, '}')
}

func appendLease(b []byte, l *core.Lease) []byte {
	b = append(b, `{"ip":`...)
	b = jsontext.AppendString(b, l.IP)
	b = append(b, `,"mac":`...)
	b = jsontext.AppendString(b, l.MAC)
	b = appendOptional(b, `,"client_id":`, l.ClientID)
	b = appendOptional(b, `,"hostname":`, l.Hostname)
	b = append(b, `,"subnet":`...)
	b = jsontext.AppendString(b, l.Subnet)
	b = append(b, `,"state":`...)
	b = jsontext.AppendString(b, string(l.State))
	b = append(b, `,"start":`...)
	b = appendJSONTime(b, l.Start)
	b = append(b, `,"expiry":`...)
	b = appendJSONTime(b, l.Expiry)
	if l.Reserved {
		b = append(b, `,"reserved":true`...)
	}
	b = append(b, `,"updated_at":`...)
	b = appendJSONTime(b, l.UpdatedAt)
	return append(b, '}')
}

func appendEvent(b []byte, e *core.Event) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"time":`...)
	b = appendJSONTime(b, e.Time)
	b = append(b, `,"type":`...)
	b = jsontext.AppendString(b, e.Type)
	b = appendOptional(b, `,"device":`, e.Device)
	b = appendOptional(b, `,"cluster":`, e.Cluster)
	b = appendOptional(b, `,"message":`, e.Message)
	if len(e.Fields) > 0 {
		b = append(b, `,"fields":`...)
		b = jsontext.AppendStringMap(b, e.Fields)
	}
	return append(b, '}')
}

// leaseRecordMAC reads the MAC of a stored lease record from its head, as
// appendLease and encoding/json lay it out (`{"ip":"…","mac":"…",`), without
// decoding the rest: every renewal rewrites its lease, and what the old
// record's MAC was is all the write needs of it (the leases-by-MAC index).
// ok is false, and the caller decodes, for anything a decoder could read
// otherwise: another layout, an escape anywhere after the ip key, a MAC
// that is not valid UTF-8, or a second key that folds to "mac".
func leaseRecordMAC(raw []byte) (mac string, ok bool) {
	const ipKey, macKey = `{"ip":"`, `","mac":"`
	rest, ok := bytes.CutPrefix(raw, []byte(ipKey))
	if !ok || bytes.IndexByte(rest, '\\') >= 0 {
		return "", false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 {
		return "", false
	}
	if rest, ok = bytes.CutPrefix(rest[i:], []byte(macKey)); !ok {
		return "", false
	}
	j := bytes.IndexByte(rest, '"')
	if j < 0 || !utf8.Valid(rest[:j]) || hasMACKey(rest[j:]) {
		return "", false
	}
	return string(rest[:j]), true
}

// hasMACKey reports whether b holds "mac" in quotes, in any case (how
// encoding/json matches a key to the MAC field).
func hasMACKey(b []byte) bool {
	for i := 0; i+5 <= len(b); i++ {
		if b[i] == '"' && b[i+4] == '"' && b[i+1]|0x20 == 'm' && b[i+2]|0x20 == 'a' && b[i+3]|0x20 == 'c' {
			return true
		}
	}
	return false
}
