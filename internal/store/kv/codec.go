package kv

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Leases, devices and events are written on the hot path, tens of thousands
// a second. They are encoded here without reflection into exactly the JSON
// encoding/json produces (codec_test.go compares them byte for byte), so
// records stay readable by any JSON decoder and by older versions.

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

func appendOptional(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, key...)
	return appendJSONString(b, v)
}

// appendDevice encodes d; devices with labels (rare) take encoding/json.
func appendDevice(b []byte, d *core.Device) []byte {
	if len(d.Labels) > 0 {
		raw, _ := json.Marshal(d)
		return append(b, raw...)
	}
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
		b = appendOptional(b, f.k, f.v)
	}
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(d.State))
	if d.Approved {
		b = append(b, `,"approved":true`...)
	}
	b = appendOptional(b, `,"cluster":`, d.Cluster)
	b = appendOptional(b, `,"role":`, d.Role)
	b = appendOptional(b, `,"profile":`, d.Profile)
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
	b = appendJSONString(b, l.IP)
	b = append(b, `,"mac":`...)
	b = appendJSONString(b, l.MAC)
	b = appendOptional(b, `,"client_id":`, l.ClientID)
	b = appendOptional(b, `,"hostname":`, l.Hostname)
	b = append(b, `,"subnet":`...)
	b = appendJSONString(b, l.Subnet)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(l.State))
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
	b = appendJSONString(b, e.Type)
	b = appendOptional(b, `,"device":`, e.Device)
	b = appendOptional(b, `,"cluster":`, e.Cluster)
	b = appendOptional(b, `,"message":`, e.Message)
	if len(e.Fields) > 0 {
		b = append(b, `,"fields":`...)
		var keys [8]string
		ks := keys[:0]
		for k := range e.Fields {
			ks = append(ks, k)
		}
		slices.Sort(ks) // encoding/json's map order
		for i, k := range ks {
			if i == 0 {
				b = append(b, '{')
			} else {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, e.Fields[k])
		}
		b = append(b, '}')
	}
	return append(b, '}')
}
