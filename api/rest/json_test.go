package rest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// hostileStrings are values an appender could get wrong: every ASCII
// control character, JSON's own specials, HTML's, invalid and truncated
// UTF-8, U+2028/U+2029, non-ASCII text.
func hostileStrings() []string {
	var ctl strings.Builder
	for b := 0; b < 0x20; b++ {
		ctl.WriteByte(byte(b))
	}
	return []string{
		"", "plain", ctl.String(), "\x7f", `"quoted" \back\slash/`, "<script>alert(1)</script>&amp;",
		"\xff\xfe", "abc\xe2\x82", "\xe2\x28\xa1", "line\u2028sep\u2029para", "héllo wörld ✓ 🚀 日本語",
		"\ufffd", "\x00", "tab\there\nnewline\rcr\bbs\fff", strings.Repeat("<&>", 100), "\xed\xa0\x80", // a UTF-8 encoded surrogate
	}
}

func hostileTimes() []time.Time {
	return []time.Time{
		{}, time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC), time.Date(2026, 3, 4, 5, 6, 7, 100000000, time.UTC),
		time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("IST", 5*3600+1800)),
		time.Date(1999, 12, 31, 23, 59, 59, 1, time.FixedZone("x", -(9*3600+30*60))),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("odd", 23*3600+59*60+30)),
		time.Now(), // with a monotonic reading
	}
}

// badTimes are refused by time.Time.MarshalJSON, so by the appenders too.
func badTimes() []time.Time {
	return []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600)),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", -25*3600)),
	}
}

func hostileMaps() []map[string]string {
	many := map[string]string{}
	for i := range 40 { // more keys than the appender's stack array
		many[fmt.Sprintf("k%02d<%c>", 39-i, 'a'+i%26)] = fmt.Sprint(i, "&")
	}
	return []map[string]string{nil, {}, {"": ""}, {"rack": "7", "<row>": "b&c", "a\x00": "\u2028", "\xff": "é"},
		{"B": "1", "a": "2", "_": "3", "~": "4", "Z": "5"}, many}
}

// checkSame asserts that the hand-written encoding of a view is byte for
// byte encoding/json's, or that both refuse it.
func checkSame[V any](t *testing.T, what string, v V, appendJSON func([]byte, V) ([]byte, error)) {
	t.Helper()
	want, werr := json.Marshal(v)
	got, gerr := appendJSON(nil, v)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("%s: encoding/json error %v, appender error %v", what, werr, gerr)
	}
	if werr == nil && !bytes.Equal(got, want) {
		t.Fatalf("%s:\nappender      %s\nencoding/json %s", what, got, want)
	}
}

// checkPages asserts that appendPage writes, for every limit, start and
// filter, what encoding/json writes for the page collect
// reads.
func checkPages[T, V any](t *testing.T, what string, recs []T, pos func(T) string, view func(T) V, write func([]byte, T) ([]byte, error)) {
	t.Helper()
	list := func(after string, fn core.Visit[T]) error {
		for _, r := range recs {
			if after != "" && pos(r) <= after {
				continue
			}
			if ok, err := fn(r); !ok || err != nil {
				return err
			}
		}
		return nil
	}
	odd := func(r T) bool { return len(pos(r))%2 == 1 }
	for _, keep := range []func(T) bool{nil, odd, func(T) bool { return false }} {
		for _, limit := range []int{1, 2, 3, len(recs) - 1, len(recs), len(recs) + 1} {
			for _, after := range []string{"", pos(recs[0]), pos(recs[len(recs)/2])} {
				p, err := collect(list, after, limit, pos, keep, view)
				if err != nil {
					t.Fatal(err)
				}
				want, werr := json.Marshal(p)
				got, gerr := appendPage(nil, list, after, limit, pos, keep, write)
				if (werr != nil) != (gerr != nil) || werr == nil && !bytes.Equal(got, want) {
					t.Fatalf("%s limit %d after %q:\nappendPage    %s %v\nencoding/json %s %v", what, limit, after, got, gerr, want, werr)
				}
			}
		}
	}
}

// TestJSONAppendersMatchEncodingJSON: the hand-written encoders of the
// device, lease and event pages write what encoding/json writes for the
// view types, for ordinary, sparse and hostile values, and refuse what it
// refuses.
func TestJSONAppendersMatchEncodingJSON(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC)
	devs := []client.Device{restDeviceOf(fullDevice(t0)), restDeviceOf(core.Device{}), {Approved: true}}
	var leases []client.Lease
	events := []client.Event{{}, {Seq: math.MaxUint64, Time: t0, Type: "dhcp.ack", Fields: map[string]string{}}}
	for i, s := range hostileStrings() {
		d := restDeviceOf(fullDevice(t0))
		for _, f := range []*string{&d.ID, &d.MAC, &d.Serial, &d.Product, &d.Platform, &d.Hostname, &d.ClientID, &d.VendorClass,
			&d.SONiCVer, &d.IP, &d.Subnet, &d.RelayAddr, &d.CircuitID, &d.RemoteID, &d.BaseMAC, &d.FixedIP, &d.Cluster, &d.Role, &d.Profile} {
			*f = s
		}
		d.Kind, d.State, d.Approved = core.DeviceKind(s), core.DeviceState(s), i%2 == 0
		d.Labels = map[string]string{s: s, "x" + s: ""}
		devs = append(devs, d)
		leases = append(leases, client.Lease{IP: s, MAC: s, ClientID: s, Hostname: s, Subnet: s, State: core.LeaseState(s), Reserved: i%2 == 1})
		events = append(events, client.Event{Seq: uint64(i), Type: s, Device: s, Cluster: s, Message: s, Fields: map[string]string{s: s}})
	}
	for i, tm := range hostileTimes() {
		devs = append(devs, client.Device{FirstSeen: tm, LastSeen: tm.Add(time.Duration(i) * time.Millisecond), UpdatedAt: tm})
		leases = append(leases, client.Lease{Start: tm, Expiry: tm.Add(time.Hour), UpdatedAt: tm})
		events = append(events, client.Event{Time: tm})
	}
	for _, m := range hostileMaps() {
		devs = append(devs, client.Device{Labels: m})
		events = append(events, client.Event{Fields: m})
	}

	for i, d := range devs {
		checkSame(t, fmt.Sprintf("device %d", i), d, appendDeviceJSON)
	}
	for i, l := range leases {
		checkSame(t, fmt.Sprintf("lease %d", i), l, appendLeaseJSON)
	}
	for i, e := range events {
		checkSame(t, fmt.Sprintf("event %d", i), e, appendEventJSON)
	}
	// Values MarshalJSON refuses are refused, wherever the time is.
	for i, tm := range badTimes() {
		checkSame(t, fmt.Sprintf("device, bad time %d", i), client.Device{UpdatedAt: tm}, appendDeviceJSON)
		checkSame(t, fmt.Sprintf("lease, bad time %d", i), client.Lease{Expiry: tm}, appendLeaseJSON)
		checkSame(t, fmt.Sprintf("event, bad time %d", i), client.Event{Time: tm}, appendEventJSON)
	}
}

// TestAppendPageMatchesCollect: pages written by hand are the pages
// collect reads, encoded by encoding/json: items, filters, limits, starts
// and next_cursor, for devices, leases and events, empty pages included.
func TestAppendPageMatchesCollect(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC)
	var devs []core.Device
	var leases []core.Lease
	var events []core.Event
	for i, s := range hostileStrings() {
		d := fullDevice(t0)
		d.ID, d.Hostname, d.Labels = fmt.Sprintf("02:00:00:00:%02x:01%s", i, strings.Repeat("x", i%3)), s, map[string]string{s: s}
		devs = append(devs, d)
		leases = append(leases, core.Lease{IP: fmt.Sprintf("10.99.0.%03d%s", i, strings.Repeat("y", i%2)), MAC: d.ID, Hostname: s, Start: t0})
		events = append(events, core.Event{Seq: uint64(i + 1), Time: t0, Type: s, Message: s, Fields: map[string]string{"k": s}})
	}
	checkPages(t, "devices", devs, devicePos, restDeviceOf, AppendDeviceView)
	checkPages(t, "leases", leases, leasePos, restLeaseOf, appendLeaseView)
	checkPages(t, "events", events, func(e core.Event) string { return eventPos(e.Seq) }, restEventOf, AppendEventView)
	// A record MarshalJSON refuses fails the page.
	bad := append(devs[:1:1], core.Device{ID: "zz", UpdatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	list := func(after string, fn core.Visit[core.Device]) error {
		for _, d := range bad {
			if ok, err := fn(d); !ok || err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := appendPage(nil, list, "", 10, devicePos, nil, AppendDeviceView); err == nil {
		t.Fatal("a device with year 10000 encoded")
	}
}

// TestMergedEventsPage: the page of both streams, merged as it is
// written, is what sorting both streams' events and encoding the page with
// encoding/json gave, for every limit, start and filter.
func TestMergedEventsPage(t *testing.T) {
	f := storetest.Open(t)
	s := &Door{st: f.Store, queries: devices.NewQueries(f.Store)}
	strs := hostileStrings()
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		for i := range 60 {
			typ := "dhcp.ack"
			if i%3 == 0 || i%7 == 0 {
				typ = "api.write" // the audit stream
			}
			e := core.Event{Type: typ, Device: strs[i%len(strs)], Message: strs[(i+3)%len(strs)], Fields: map[string]string{"i": fmt.Sprint(i), "<s>": strs[i%len(strs)]}}
			if _, err := tx.Events().Append(e); err != nil {
				return err
			}
		}
		return nil
	})
	both := []core.EventStream{core.DeviceEvents, core.AuditEvents}
	// What the page was before: both streams read, sorted, cut, encoded.
	want := func(limit int, after uint64, keep func(core.Event) bool) []byte {
		var all []core.Event
		err := f.Store.View(func(tx core.Tx) error {
			for _, st := range both {
				if err := tx.Events().List(st, after, func(e core.Event) (bool, error) {
					if keep == nil || keep(e) {
						all = append(all, e)
					}
					return true, nil
				}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(all, func(a, b core.Event) int { return cmp.Compare(a.Seq, b.Seq) })
		// A page that ends the listing says how far it looked (last_seq):
		// the newest event after after, kept or not.
		var p struct {
			client.Page[client.Event]
			LastSeq *uint64 `json:"last_seq,omitempty"`
		}
		p.Items = []client.Event{}
		for i, e := range all {
			if i == limit {
				p.NextCursor = cursorOf(eventPos(all[i-1].Seq))
				break
			}
			p.Items = append(p.Items, restEventOf(e))
		}
		if p.NextCursor == "" {
			last := max(after, newestSeq(t, f.Store))
			p.LastSeq = &last
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	audit := func(e core.Event) bool { return core.IsAudit(e.Type) }
	even := func(e core.Event) bool { return e.Seq%2 == 0 }
	for _, keep := range []func(core.Event) bool{nil, audit, even, func(core.Event) bool { return false }} {
		for _, limit := range []int{1, 2, 5, 59, 60, 61, 100} {
			for _, after := range []uint64{0, 1, 30, 59, 60} {
				got, err := s.appendEventsPage(nil, both, "", limit, after, keep)
				if w := want(limit, after, keep); err != nil || !bytes.Equal(got, w) {
					t.Fatalf("limit %d after %d: %v\ngot  %s\nwant %s", limit, after, err, got, w)
				}
			}
		}
	}
}

// newestSeq is the newest event's sequence number in st (0 for none).
func newestSeq(t *testing.T, st core.Store) uint64 {
	t.Helper()
	var n uint64
	err := st.View(func(tx core.Tx) error {
		for _, es := range []core.EventStream{core.DeviceEvents, core.AuditEvents} {
			if err := tx.Events().List(es, 0, func(e core.Event) (bool, error) { n = max(n, e.Seq); return true, nil }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
