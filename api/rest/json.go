package rest

import (
	"strconv"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/jsontext"
)

// Hand-written JSON for the REST views of the big, often uncached pages
// (devices, leases, events): encoding/json's reflection was most of the
// cost of rendering them. Each appender writes exactly the bytes
// json.Marshal writes for the view type (field order, omitempty, HTML-safe
// escaping, sorted map keys, RFC 3339 times): TestJSONAppendersMatchEncodingJSON,
// TestAppendPageMatchesCollect and TestMergedEventsPage hold them to it.
// The API's JSON is the API's own: these know the view types, not the
// storage format.

// appendPage appends one page of a listing as JSON, as json.Marshal
// writes the client.Page[V] collect returns: up to limit records that keep
// accepts (nil: all), each written by write (its view's appender), without
// building the page in memory. When a record is visited past a full page,
// next_cursor is the position of the last record visited before it.
func appendPage[T any](buf []byte, list func(after string, fn core.Visit[T]) error, after string, limit int,
	pos func(T) string, keep func(T) bool, write func([]byte, T) ([]byte, error)) ([]byte, error) {
	buf = append(buf, `{"items":[`...)
	n := 0
	var last string
	more := false
	err := list(after, func(rec T) (bool, error) {
		if n == limit {
			more = true
			return false, nil
		}
		last = pos(rec)
		if keep != nil && !keep(rec) {
			return true, nil
		}
		if n > 0 {
			buf = append(buf, ',')
		}
		n++
		var err error
		buf, err = write(buf, rec)
		return err == nil, err
	})
	if err != nil {
		return buf, err
	}
	return appendPageEnd(buf, more, last), nil
}

// The writers of appendPage: a record as its REST view. The view is passed
// by value, so it stays on the stack.
func AppendDeviceView(buf []byte, d core.Device) ([]byte, error) {
	return appendDeviceJSON(buf, restDeviceOf(d))
}
func appendLeaseView(buf []byte, l core.Lease) ([]byte, error) {
	return appendLeaseJSON(buf, restLeaseOf(l))
}
func AppendEventView(buf []byte, e core.Event) ([]byte, error) {
	return appendEventJSON(buf, restEventOf(e))
}

func appendPageEnd(buf []byte, more bool, last string) []byte {
	buf = append(buf, ']')
	if more {
		buf = append(buf, `,"next_cursor":`...)
		buf = jsontext.AppendString(buf, cursorOf(last))
	}
	return append(buf, '}')
}

func appendDeviceJSON(buf []byte, d client.Device) ([]byte, error) {
	buf = append(buf, `{"id":`...)
	buf = jsontext.AppendString(buf, d.ID)
	buf = append(buf, `,"kind":`...)
	buf = jsontext.AppendString(buf, string(d.Kind))
	buf = append(buf, `,"mac":`...)
	buf = jsontext.AppendString(buf, d.MAC)
	buf = appendOptString(buf, `,"serial":`, d.Serial)
	buf = appendOptString(buf, `,"product":`, d.Product)
	buf = appendOptString(buf, `,"platform":`, d.Platform)
	buf = appendOptString(buf, `,"hostname":`, d.Hostname)
	buf = appendOptString(buf, `,"client_id":`, d.ClientID)
	buf = appendOptString(buf, `,"vendor_class":`, d.VendorClass)
	buf = appendOptString(buf, `,"sonic_version":`, d.SONiCVer)
	buf = appendOptString(buf, `,"ip":`, d.IP)
	buf = appendOptString(buf, `,"subnet":`, d.Subnet)
	buf = appendOptString(buf, `,"relay_addr":`, d.RelayAddr)
	buf = appendOptString(buf, `,"circuit_id":`, d.CircuitID)
	buf = appendOptString(buf, `,"remote_id":`, d.RemoteID)
	buf = appendOptString(buf, `,"position":`, d.Position)
	buf = appendOptString(buf, `,"base_mac":`, d.BaseMAC)
	buf = appendOptString(buf, `,"fixed_ip":`, d.FixedIP)
	buf = append(buf, `,"state":`...)
	buf = jsontext.AppendString(buf, string(d.State))
	if d.Approved {
		buf = append(buf, `,"approved":true`...)
	}
	buf = appendOptString(buf, `,"cluster":`, d.Cluster)
	buf = appendOptString(buf, `,"role":`, d.Role)
	buf = appendOptString(buf, `,"profile":`, d.Profile)
	if len(d.Labels) > 0 {
		buf = append(buf, `,"labels":`...)
		buf = jsontext.AppendStringMap(buf, d.Labels)
	}
	var err error
	if r := &d.Refusal; *r != (client.Refusal{}) {
		buf = append(buf, `,"refusal":{"what":`...)
		buf = jsontext.AppendString(buf, r.What)
		buf = append(buf, `,"kind":`...)
		buf = jsontext.AppendString(buf, r.Kind)
		buf = append(buf, `,"reason":`...)
		buf = jsontext.AppendString(buf, r.Reason)
		if buf, err = appendTimeField(buf, `,"at":`, r.At); err != nil {
			return buf, err
		}
		buf = append(buf, '}')
	}
	if c := d.SerialConflict; c != nil {
		buf = append(buf, `,"serial_conflict":{"serial":`...)
		buf = jsontext.AppendString(buf, c.Serial)
		buf = append(buf, `,"with":[`...)
		for i, w := range c.With {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = jsontext.AppendString(buf, w)
		}
		buf = append(buf, "]}"...)
	}
	if c := d.CablingMismatch; c != nil {
		buf = append(buf, `,"cabling_mismatch":{"position":`...)
		buf = jsontext.AppendString(buf, c.Position)
		buf = append(buf, `,"mismatches":[`...)
		for i, m := range c.Mismatches {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = jsontext.AppendString(buf, m)
		}
		buf = append(buf, ']')
		if buf, err = appendTimeField(buf, `,"at":`, c.At); err != nil {
			return buf, err
		}
		buf = append(buf, '}')
	}
	if buf, err = appendTimeField(buf, `,"first_seen":`, d.FirstSeen); err != nil {
		return buf, err
	}
	if buf, err = appendTimeField(buf, `,"last_seen":`, d.LastSeen); err != nil {
		return buf, err
	}
	if buf, err = appendTimeField(buf, `,"updated_at":`, d.UpdatedAt); err != nil {
		return buf, err
	}
	return append(buf, '}'), nil
}

func appendLeaseJSON(buf []byte, l client.Lease) ([]byte, error) {
	buf = append(buf, `{"ip":`...)
	buf = jsontext.AppendString(buf, l.IP)
	buf = append(buf, `,"mac":`...)
	buf = jsontext.AppendString(buf, l.MAC)
	buf = appendOptString(buf, `,"client_id":`, l.ClientID)
	buf = appendOptString(buf, `,"hostname":`, l.Hostname)
	buf = append(buf, `,"subnet":`...)
	buf = jsontext.AppendString(buf, l.Subnet)
	buf = append(buf, `,"state":`...)
	buf = jsontext.AppendString(buf, string(l.State))
	var err error
	if buf, err = appendTimeField(buf, `,"start":`, l.Start); err != nil {
		return buf, err
	}
	if buf, err = appendTimeField(buf, `,"expiry":`, l.Expiry); err != nil {
		return buf, err
	}
	if l.Reserved {
		buf = append(buf, `,"reserved":true`...)
	}
	if buf, err = appendTimeField(buf, `,"updated_at":`, l.UpdatedAt); err != nil {
		return buf, err
	}
	return append(buf, '}'), nil
}

func appendEventJSON(buf []byte, e client.Event) ([]byte, error) {
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendUint(buf, e.Seq, 10)
	var err error
	if buf, err = appendTimeField(buf, `,"time":`, e.Time); err != nil {
		return buf, err
	}
	buf = append(buf, `,"type":`...)
	buf = jsontext.AppendString(buf, e.Type)
	buf = appendOptString(buf, `,"device":`, e.Device)
	buf = appendOptString(buf, `,"cluster":`, e.Cluster)
	buf = appendOptString(buf, `,"message":`, e.Message)
	if len(e.Fields) > 0 {
		buf = append(buf, `,"fields":`...)
		buf = jsontext.AppendStringMap(buf, e.Fields)
	}
	return append(buf, '}'), nil
}

// appendOptString appends name and s unless s is empty (omitempty).
func appendOptString(buf []byte, name, s string) []byte {
	if s == "" {
		return buf
	}
	return jsontext.AppendString(append(buf, name...), s)
}

// appendTimeField appends name and t as time.Time.MarshalJSON writes it,
// refusing what it refuses.
func appendTimeField(buf []byte, name string, t time.Time) ([]byte, error) {
	return jsontext.AppendTime(append(buf, name...), t)
}
