package rest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// TestDeviceEventsThroughTheIndexAnswerAsTheScan: ?device= pages and tails
// read through the device index are byte for byte what the whole-log scan
// answered (items, next_cursor, last_seq), for every device (hostile IDs,
// one that prefixes another, an unknown one), stream set, limit, cursor and
// filter, also when the log ends with another device's event or with the
// device's own.
func TestDeviceEventsThroughTheIndexAnswerAsTheScan(t *testing.T) {
	f := storetest.Open(t)
	s := &Door{st: f.Store, queries: devices.NewQueries(f.Store)}
	devices := append(hostileStrings(), "aa:01", "aa:01/x", "aa:0")
	appendEvents := func(from, to int) {
		storetest.Update(t, f.Store, func(tx core.Tx) error {
			for i := from; i < to; i++ {
				typ := "dhcp.ack"
				if i%3 == 0 || i%7 == 0 {
					typ = "api.write" // the audit stream
				}
				e := core.Event{Type: typ, Device: devices[(i*5)%len(devices)], Fields: map[string]string{"i": fmt.Sprint(i)}}
				if _, err := tx.Events().Append(e); err != nil {
					return err
				}
			}
			return nil
		})
	}
	streamSets := [][]core.EventStream{{core.DeviceEvents, core.AuditEvents}, {core.DeviceEvents}, {core.AuditEvents}}
	check := func() {
		t.Helper()
		for _, device := range append(devices, "bb:99") {
			if device == "" {
				continue // no filter
			}
			byDevice := func(e core.Event) bool { return e.Device == device }
			acks := func(e core.Event) bool { return e.Device == device && e.Type == "dhcp.ack" }
			for _, keep := range []func(core.Event) bool{byDevice, acks} {
				for _, streams := range streamSets {
					for _, after := range []uint64{0, 1, 7, 30, 59, 60, 100} {
						for _, limit := range []int{1, 2, 3, 5, 60} {
							got, err := s.appendEventsPage(nil, streams, device, limit, after, keep)
							want, werr := s.appendEventsPage(nil, streams, "", limit, after, keep)
							if err != nil || werr != nil || !bytes.Equal(got, want) {
								t.Fatalf("page device %q streams %v limit %d after %d: %v %v\ngot  %s\nwant %s", device, streams, limit, after, err, werr, got, want)
							}
							got, err = s.appendEventsTail(nil, streams, device, limit, after, keep)
							want, werr = s.appendEventsTail(nil, streams, "", limit, after, keep)
							if err != nil || werr != nil || !bytes.Equal(got, want) {
								t.Fatalf("tail device %q streams %v n %d after %d: %v %v\ngot  %s\nwant %s", device, streams, limit, after, err, werr, got, want)
							}
						}
					}
				}
			}
		}
	}
	appendEvents(0, 60)
	check()
	// The log ending with one device's events, then with a device-less one.
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		for _, typ := range []string{"dhcp.ack", "api.write", "dhcp.ack"} {
			if _, err := tx.Events().Append(core.Event{Type: typ, Device: "aa:01"}); err != nil {
				return err
			}
		}
		return nil
	})
	check()
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		_, err := tx.Events().Append(core.Event{Type: "dhcp.ack"})
		return err
	})
	check()
}
