package api

import (
	"errors"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ztpd/ztpd/internal/core"
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
// writes the page[V] collect returns: up to limit records that keep
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
func appendDeviceView(buf []byte, d core.Device) ([]byte, error) {
	return restDeviceOf(d).appendJSON(buf)
}
func appendLeaseView(buf []byte, l core.Lease) ([]byte, error) { return restLeaseOf(l).appendJSON(buf) }
func appendEventView(buf []byte, e core.Event) ([]byte, error) { return restEventOf(e).appendJSON(buf) }

func appendPageEnd(buf []byte, more bool, last string) []byte {
	buf = append(buf, ']')
	if more {
		buf = append(buf, `,"next_cursor":`...)
		buf = appendJSONString(buf, cursorOf(last))
	}
	return append(buf, '}')
}

func (d restDevice) appendJSON(buf []byte) ([]byte, error) {
	buf = append(buf, `{"id":`...)
	buf = appendJSONString(buf, d.ID)
	buf = append(buf, `,"kind":`...)
	buf = appendJSONString(buf, string(d.Kind))
	buf = append(buf, `,"mac":`...)
	buf = appendJSONString(buf, d.MAC)
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
	buf = appendOptString(buf, `,"base_mac":`, d.BaseMAC)
	buf = appendOptString(buf, `,"fixed_ip":`, d.FixedIP)
	buf = append(buf, `,"state":`...)
	buf = appendJSONString(buf, string(d.State))
	if d.Approved {
		buf = append(buf, `,"approved":true`...)
	}
	buf = appendOptString(buf, `,"cluster":`, d.Cluster)
	buf = appendOptString(buf, `,"role":`, d.Role)
	buf = appendOptString(buf, `,"profile":`, d.Profile)
	if len(d.Labels) > 0 {
		buf = append(buf, `,"labels":`...)
		buf = appendStringMap(buf, d.Labels)
	}
	var err error
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

func (l restLease) appendJSON(buf []byte) ([]byte, error) {
	buf = append(buf, `{"ip":`...)
	buf = appendJSONString(buf, l.IP)
	buf = append(buf, `,"mac":`...)
	buf = appendJSONString(buf, l.MAC)
	buf = appendOptString(buf, `,"client_id":`, l.ClientID)
	buf = appendOptString(buf, `,"hostname":`, l.Hostname)
	buf = append(buf, `,"subnet":`...)
	buf = appendJSONString(buf, l.Subnet)
	buf = append(buf, `,"state":`...)
	buf = appendJSONString(buf, string(l.State))
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

func (e restEvent) appendJSON(buf []byte) ([]byte, error) {
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendUint(buf, e.Seq, 10)
	var err error
	if buf, err = appendTimeField(buf, `,"time":`, e.Time); err != nil {
		return buf, err
	}
	buf = append(buf, `,"type":`...)
	buf = appendJSONString(buf, e.Type)
	buf = appendOptString(buf, `,"device":`, e.Device)
	buf = appendOptString(buf, `,"cluster":`, e.Cluster)
	buf = appendOptString(buf, `,"message":`, e.Message)
	if len(e.Fields) > 0 {
		buf = append(buf, `,"fields":`...)
		buf = appendStringMap(buf, e.Fields)
	}
	return append(buf, '}'), nil
}

// appendOptString appends name and s unless s is empty (omitempty).
func appendOptString(buf []byte, name, s string) []byte {
	if s == "" {
		return buf
	}
	return appendJSONString(append(buf, name...), s)
}

// appendStringMap appends m as a JSON object with sorted keys, as
// encoding/json writes a map[string]string.
func appendStringMap(buf []byte, m map[string]string) []byte {
	var stack [16]string
	keys := stack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	buf = append(buf, '{')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSONString(buf, k)
		buf = append(buf, ':')
		buf = appendJSONString(buf, m[k])
	}
	return append(buf, '}')
}

// appendTimeField appends name and t as time.Time.MarshalJSON writes it
// (RFC 3339 with nanoseconds, trailing zeros trimmed), refusing what it
// refuses: a year outside 0..9999 or a zone offset of 24 hours or more.
func appendTimeField(buf []byte, name string, t time.Time) ([]byte, error) {
	buf = append(buf, name...)
	buf = append(buf, '"')
	n0 := len(buf)
	buf = t.AppendFormat(buf, time.RFC3339Nano)
	b := buf[n0:]
	if len(b) < len("2006-01-02T15:04:05Z") || b[4] != '-' {
		return buf, errors.New("json: error calling MarshalJSON for type time.Time: Time.MarshalJSON: year outside of range [0,9999]")
	}
	if b[len(b)-1] != 'Z' {
		c := b[len(b)-len("Z07:00")]
		if ('0' <= c && c <= '9') || 10*(b[len(b)-5]-'0')+(b[len(b)-4]-'0') >= 24 {
			return buf, errors.New("json: error calling MarshalJSON for type time.Time: Time.MarshalJSON: timezone hour outside of range [0,23]")
		}
	}
	return append(buf, '"'), nil
}

const hexDigits = "0123456789abcdef"

// jsonSafe marks the ASCII bytes a JSON string holds as they are (HTML-safe).
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

// appendJSONString appends s as a JSON string exactly as encoding/json
// writes it with HTML escaping (its default): ", \ and control characters
// escaped (\b \f \n \r \t by name), <, > and & as \u003c \u003e \u0026,
// U+2028 and U+2029 escaped, invalid UTF-8 replaced by \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
