package kv

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// The fast encoders of codec.go must produce exactly what encoding/json
// produces: stored records stay readable by any JSON decoder and by older
// versions, byte for byte.

// hostile are strings that need escaping, or that encoding/json escapes
// where a naive encoder would not (HTML characters, U+2028, invalid UTF-8).
var hostile = []string{
	"", "plain", `we<ird>"&\`, "\x01\x1f\x7f", "é\u2028\u2029", "\xff\xfe", "tab\there", "new\nline",
	"</script>", strings64(),
}

func strings64() string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = byte(0x20 + i)
	}
	return string(b)
}

// fillAll sets every field of the struct v points to (strings, bools,
// times, numbers, string maps) so the test notices a field the fast
// encoders do not know.
func fillAll(v any, s string) {
	rv := reflect.ValueOf(v).Elem()
	for i := 0; i < rv.NumField(); i++ {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(s + "-" + rv.Type().Field(i).Name)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Uint64, reflect.Uint32:
			f.SetUint(42)
		case reflect.Int, reflect.Int64:
			f.SetInt(42)
		case reflect.Struct:
			if f.Type() != reflect.TypeOf(time.Time{}) {
				fillAll(f.Addr().Interface(), s) // a nested record (core.Refusal)
				continue
			}
			f.Set(reflect.ValueOf(time.Date(2031, 2, 3, 4, 5, 6, 789, time.UTC)))
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]string{"interface": "eth0", "ip": "10.99.0.5", "relay": "10.99.0.2", "subnet": "lab"}))
		}
	}
}

func same(t *testing.T, what string, got []byte, v any) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s JSON\n got %s\nwant %s", what, got, want)
	}
}

func TestLeaseCodecMatchesEncodingJSON(t *testing.T) {
	var full core.Lease
	fillAll(&full, "x")
	now := time.Now()
	cases := []core.Lease{
		full,
		{},
		{IP: "10.99.0.5", MAC: "52:54:00:00:00:01", Subnet: "lab", State: core.LeaseActive,
			Start: now, Expiry: now.Add(time.Hour), UpdatedAt: now.In(time.FixedZone("x", 3600))},
		{IP: "10.99.0.6", MAC: "aa", ClientID: "01:52:54", Reserved: true, Start: now.Round(time.Second)},
	}
	for _, h := range hostile {
		cases = append(cases, core.Lease{IP: h, MAC: h, ClientID: h, Hostname: h, Subnet: h, State: core.LeaseState(h)})
	}
	for _, l := range cases {
		same(t, "lease", appendLease(nil, &l), l)
	}
}

func TestEventCodecMatchesEncodingJSON(t *testing.T) {
	var full core.Event
	fillAll(&full, "x")
	cases := []core.Event{
		full,
		{},
		{Seq: 7, Time: time.Now(), Type: "dhcp.nak", Fields: map[string]string{"subnet": "lab"}},
		{Seq: 8, Type: "dhcp.x", Fields: map[string]string{}}, // empty, not nil: omitted
		{Seq: 1 << 63, Type: "many", Fields: map[string]string{"k": "v", "a": "1", "z": "2", "m": "3", "b": "4",
			"y": "5", "c": "6", "x": "7", "d": "8", "w": "9"}}, // more fields than the sort buffer
	}
	for i, h := range hostile {
		cases = append(cases, core.Event{Seq: uint64(i), Type: h, Device: h, Cluster: h, Message: h,
			Fields: map[string]string{h: h, "ip" + h: "x"}})
	}
	for _, e := range cases {
		same(t, "event", appendEvent(nil, &e), e)
	}
}

func TestDeviceCodecMatchesEncodingJSON(t *testing.T) {
	var full core.Device
	fillAll(&full, "x")
	unlabelled := full
	unlabelled.Labels = nil
	cases := []core.Device{full, unlabelled, {},
		{ID: "52:54:00:00:00:01", MAC: "52:54:00:00:00:01", Kind: core.KindSONiC,
			State: core.StateLeased, Hostname: "a<b", FirstSeen: time.Now()},
		{ID: "x", Approved: true, Labels: map[string]string{}}, // empty labels: the fast path
	}
	for _, h := range hostile {
		d := core.Device{ID: h, Kind: core.DeviceKind(h), MAC: h, Serial: h, Product: h, Platform: h, Hostname: h,
			ClientID: h, VendorClass: h, SONiCVer: h, IP: h, Subnet: h, RelayAddr: h, CircuitID: h, RemoteID: h,
			BaseMAC: h, FixedIP: h, State: core.DeviceState(h), Cluster: h, Role: h, Profile: h}
		cases = append(cases, d)
		d.Refusal = core.Refusal{What: h, Kind: h, Reason: h, At: time.Now()}
		cases = append(cases, d)
		d.Labels = map[string]string{h: h}
		cases = append(cases, d)
	}
	for _, d := range cases {
		same(t, "device", appendDevice(nil, &d), d)
	}
}

func TestEventKeyIsZeroPadded(t *testing.T) {
	for _, seq := range []uint64{0, 1, 9, 10, 12345678901234567890, 1<<64 - 1} {
		if got, want := eventKey(seq), fmt.Sprintf("%020d", seq); got != want {
			t.Errorf("eventKey(%d) = %s, want %s", seq, got, want)
		}
	}
}

// leaseRecordMAC reads what a decoder reads, or declines: for every record
// the encoders write, and for records written otherwise.
func TestLeaseRecordMAC(t *testing.T) {
	now := time.Now()
	var leases []core.Lease
	for _, h := range append(hostile, "52:54:00:00:00:01") {
		leases = append(leases, core.Lease{IP: "fd99:0:0:1::10", MAC: h, ClientID: "00:03:00:01", Hostname: h,
			Subnet: "lab6", State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour), UpdatedAt: now})
	}
	decoded := 0
	for _, l := range leases {
		raw := appendLease(nil, &l)
		mac, ok := leaseRecordMAC(raw)
		if ok && mac != l.MAC {
			t.Errorf("record %s: MAC %q, want %q", raw, mac, l.MAC)
		}
		if !ok {
			decoded++
		}
	}
	if decoded == len(leases) {
		t.Fatal("no record read without decoding")
	}
	for _, raw := range []string{
		`{"ip":"a","mac":"x","MAC":"y"}`, // a decoder takes the last
		`{"ip":"a","mac":"x","m\u0061c":"y"}`,
		`{"ip":"a","mac":"\u0078"}`,
		`{"ip": "a","mac":"x"}`,
		`{"mac":"x","ip":"a"}`,
		`{"ip":"a","mac":null}`,
		"{\"ip\":\"a\",\"mac\":\"\xff\"}",
	} {
		if mac, ok := leaseRecordMAC([]byte(raw)); ok {
			t.Errorf("%s read as %q; only a decoder may read it", raw, mac)
		}
	}
}

// FuzzLeaseRecordMAC: whatever a record holds, leaseRecordMAC reads the MAC
// encoding/json decodes, or declines.
func FuzzLeaseRecordMAC(f *testing.F) {
	now := time.Date(2026, 12, 5, 15, 0, 0, 0, time.UTC)
	for _, l := range []core.Lease{
		{IP: "fd99:0:0:1::10", MAC: "52:54:00:00:00:01", ClientID: "00:03", Subnet: "lab6", State: core.LeaseActive, Start: now},
		{IP: "10.99.0.5", Hostname: `h"mac"`, State: core.LeaseReleased},
	} {
		f.Add(appendLease(nil, &l))
	}
	f.Add([]byte(`{"ip":"a","mac":"x","Mac":"y"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		mac, ok := leaseRecordMAC(raw)
		if !ok {
			return
		}
		var l core.Lease
		if err := json.Unmarshal(raw, &l); err == nil && l.MAC != mac {
			t.Fatalf("%q: read MAC %q, a decoder reads %q", raw, mac, l.MAC)
		}
	})
}
