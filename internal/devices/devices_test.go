package devices

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func count(t *testing.T, st core.Store, s core.EventStream) (n int) {
	t.Helper()
	storetest.View(t, st, func(tx core.Tx) error {
		var err error
		n, err = tx.Events().Count(s)
		return err
	})
	return n
}

// TestRetentionRunsWithoutDHCP guards against a past bug: events.keep was
// enforced only by the DHCP sweep, so with DHCP off the event log grew
// without limit. Here no DHCP server exists at all: content-style progress
// records and refusals arrive through the Service, and its retention alone
// trims the log to events.keep, while it keeps running.
func TestRetentionRunsWithoutDHCP(t *testing.T) {
	st := storetest.Store(t)
	s := New(Options{Store: st, Log: quiet(), Keep: 50, AuditKeep: 1000, RetentionEvery: 20 * time.Millisecond})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	report := func(n int) {
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("52:54:00:00:%02x:%02x", i>>8&0xff, i&0xff)
			s.Progress(Progress{Device: core.Device{ID: id, MAC: id, Kind: core.KindSONiC}, Next: core.StateZTPServed,
				Event: core.Event{Time: time.Now().UTC(), Type: "ztp.json.served", Device: id}})
			s.Progress(Progress{Event: core.Event{Time: time.Now().UTC(), Type: "ztp.refused", Device: id}})
		}
		s.Flush()
	}
	report(300)
	// Retention starts after the first count: a tick between Flush and the
	// count would trim what the count is meant to see.
	if n := count(t, st, core.DeviceEvents); n < 600 {
		t.Fatalf("%d device events stored, want the 600 reported", n)
	}
	go func() { done <- s.Run(ctx) }()
	waitFor(t, func() bool { return count(t, st, core.DeviceEvents) == 50 }, "event log trimmed to events.keep = 50")
	// And again: retention keeps running, not once at start.
	report(100)
	waitFor(t, func() bool { return count(t, st, core.DeviceEvents) == 50 }, "event log trimmed again after more events")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting: %s", what)
}

// TestDeviceNoiseNeverEvictsTheAuditTrail: a flood of device events (here
// 5,000 refusals, with no DHCP running) is trimmed to events.keep, while
// every audit event written before, between and after survives; and the two
// streams still share one sequence.
func TestDeviceNoiseNeverEvictsTheAuditTrail(t *testing.T) {
	st := storetest.Store(t)
	add := func(typ string, n int) {
		t.Helper()
		storetest.Update(t, st, func(tx core.Tx) error {
			for i := 0; i < n; i++ {
				if _, err := tx.Events().Append(core.Event{Type: typ, Device: fmt.Sprint(i)}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	add("apikey.created", 3)
	add("ztp.refused", 2500)
	add("cluster.created", 2)
	add("ztp.refused", 2500)
	add("kubeconfig.issued", 1)
	s := New(Options{Store: st, Log: quiet(), Keep: 100, AuditKeep: 1000})
	defer s.Close()
	s.Prune(context.Background())
	if n := count(t, st, core.DeviceEvents); n != 100 {
		t.Fatalf("%d device events kept, want events.keep = 100", n)
	}
	if n := count(t, st, core.AuditEvents); n != 6 {
		t.Fatalf("%d audit events, want all 6", n)
	}
	// The oldest device event kept is newer than the last audit event
	// before it: retention dropped the oldest first.
	var first core.Event
	storetest.View(t, st, func(tx core.Tx) error {
		return tx.Events().List(core.DeviceEvents, 0, func(e core.Event) (bool, error) { first = e; return false, nil })
	})
	if first.Seq != 5006-100 {
		t.Fatalf("oldest device event kept has seq %d, want %d", first.Seq, 5006-100)
	}
	// The audit stream has its own bound.
	s2 := New(Options{Store: st, Log: quiet(), Keep: 100, AuditKeep: 4})
	defer s2.Close()
	s2.Prune(context.Background())
	if n := count(t, st, core.AuditEvents); n != 4 {
		t.Fatalf("%d audit events after audit_keep 4", n)
	}
}

func device(t *testing.T, st core.Store, id string) core.Device {
	t.Helper()
	var d core.Device
	storetest.View(t, st, func(tx core.Tx) error {
		var err error
		d, err = tx.Devices().Get(id)
		return err
	})
	return d
}

// TestMergeKeepsEveryPartsFacts: DHCP's view, content's progress and an
// operator's approval meet in one record; none undoes another.
func TestMergeKeepsEveryPartsFacts(t *testing.T) {
	st := storetest.Store(t)
	s := New(Options{Store: st, Log: quiet()})
	defer s.Close()
	const id = "52:54:00:00:00:01"
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s.ObserveDHCP(core.Device{ID: id, MAC: id, Kind: core.KindSONiC, Serial: "S1", Hostname: "sw1", IP: "10.99.0.10",
		FirstSeen: t0, LastSeen: t0}, true)
	s.Flush()
	d := device(t, st, id)
	if d.State != core.StateLeased || d.Serial != "S1" || d.IP != "10.99.0.10" || !d.FirstSeen.Equal(t0) {
		t.Fatalf("after DHCP: %+v", d)
	}
	// An operator approves it inside a transaction of their own.
	storetest.Update(t, st, func(tx core.Tx) error {
		_, err := s.Change(tx, id, t0, func(d *core.Device) error { d.Approved, d.Cluster = true, "c1"; return nil })
		return err
	})
	// Content serves it: its state moves forward, a stated serial does not
	// replace the recorded one, the SONiC version follows the device.
	seen := core.Device{ID: id, MAC: id, Kind: core.KindSONiC, Serial: "OTHER", Product: "P1", SONiCVer: "SONiC.1", IP: "10.99.0.10"}
	s.Progress(Progress{Device: seen, Profile: "leaf", Next: core.StateZTPServed,
		Event: core.Event{Time: t0.Add(time.Minute), Type: "ztp.json.served", Device: id}})
	// A later DHCP renewal does not move it back to leased.
	s.ObserveDHCP(core.Device{ID: id, MAC: id, Kind: core.KindSONiC, Hostname: "sw1b", IP: "10.99.0.10",
		FirstSeen: t0, LastSeen: t0.Add(2 * time.Minute)}, true)
	s.Flush()
	d = device(t, st, id)
	if d.State != core.StateZTPServed || d.Serial != "S1" || d.Product != "P1" || d.SONiCVer != "SONiC.1" ||
		d.Profile != "leaf" || !d.Approved || d.Cluster != "c1" || d.Hostname != "sw1b" {
		t.Fatalf("merged record: %+v", d)
	}
	var evs []core.Event
	storetest.View(t, st, func(tx core.Tx) error {
		return tx.Events().List(core.DeviceEvents, 0, func(e core.Event) (bool, error) { evs = append(evs, e); return true, nil })
	})
	// The contradicting serial is an event, not a silent drop.
	if len(evs) != 2 || evs[0].Fields["state"] != string(core.StateZTPServed) ||
		evs[1].Type != EventFactConflict || evs[1].Fields["fact"] != "serial" || evs[1].Fields["stated"] != "OTHER" {
		t.Fatalf("events: %+v", evs)
	}
}

// TestCarriedBatch: a commit another part runs (DHCP's lease commit) can
// carry the queued records; Flush waits for it.
func TestCarriedBatch(t *testing.T) {
	st := storetest.Store(t)
	s := New(Options{Store: st, Log: quiet()})
	defer s.Close()
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("52:54:00:00:00:%02x", i)
		s.ObserveDHCP(core.Device{ID: id, MAC: id, Kind: core.KindVM, LastSeen: time.Now()}, true)
		s.Event(core.Event{Type: "dhcp.ack", Device: id})
	}
	var b Batch
	if more := s.Take(&b, 4, 100); !more || len(b.items) != 4 || len(b.events) != 10 {
		t.Fatalf("took %d devices, %d events (more %v)", len(b.items), len(b.events), more)
	}
	s.Done(&b, st.Batch(b.Write))
	s.Flush()
	n := 0
	storetest.View(t, st, func(tx core.Tx) error { var err error; n, err = tx.Devices().Count(); return err })
	if n != 10 || count(t, st, core.DeviceEvents) != 10 {
		t.Fatalf("%d devices, %d events stored", n, count(t, st, core.DeviceEvents))
	}
}

// TestRecorderInCallersTransaction: the joiner's changes land in its own
// transaction: a record it changes must exist, one it may create starts as
// NewRecord, an error from its change writes nothing, and its events are
// appended with it.
func TestRecorderInCallersTransaction(t *testing.T) {
	st := storetest.Store(t)
	s := New(Options{Store: st, Log: quiet()})
	defer s.Close()
	const id = "52:54:00:00:00:02"
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	storetest.View(t, st, func(tx core.Tx) error {
		if _, err := s.Change(tx, id, t0, func(*core.Device) error { return nil }); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("Change of a device without a record: %v", err)
		}
		return nil
	})
	refused := errors.New("refused")
	if err := st.Update(func(tx core.Tx) error {
		_, err := s.ChangeOrCreate(tx, id, t0, func(d *core.Device) error { d.Cluster = "c1"; return refused })
		return err
	}); !errors.Is(err, refused) {
		t.Fatalf("refused change: %v", err)
	}
	storetest.View(t, st, func(tx core.Tx) error {
		if _, err := tx.Devices().Get(id); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("a refused change was stored: %v", err)
		}
		return nil
	})
	storetest.Update(t, st, func(tx core.Tx) error {
		d, err := s.ChangeOrCreate(tx, id, t0, func(d *core.Device) error { d.Cluster = "c1"; return nil })
		want := NewRecord(id, t0)
		want.Cluster, want.UpdatedAt = "c1", t0
		if err != nil || !reflect.DeepEqual(d, want) {
			t.Fatalf("created %+v, %v; want %+v", d, err, want)
		}
		return s.Record(tx, core.Event{Time: t0, Type: "join.issued", Device: id})
	})
	if d := device(t, st, id); d.Cluster != "c1" || d.State != core.StateDiscovered || d.Kind != core.KindUnknown || !d.FirstSeen.Equal(t0) {
		t.Fatalf("stored %+v", d)
	}
	if n := count(t, st, core.AuditEvents); n != 1 {
		t.Fatalf("%d events", n)
	}
}
