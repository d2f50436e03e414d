package devices

import (
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// putCounter is a store that counts the device records written through
// it: what a report costs the store.
type putCounter struct {
	core.Store
	puts map[string]int
}

func (c *putCounter) Update(fn func(core.Tx) error) error {
	return c.Store.Update(func(tx core.Tx) error { return fn(putCountingTx{tx, c}) })
}

func (c *putCounter) Batch(fn func(core.Tx) error) error {
	return c.Store.Batch(func(tx core.Tx) error { return fn(putCountingTx{tx, c}) })
}

type putCountingTx struct {
	core.Tx
	c *putCounter
}

func (t putCountingTx) Devices() core.Devices { return putCountingDevices{t.Tx.Devices(), t.c} }

type putCountingDevices struct {
	core.Devices
	c *putCounter
}

func (d putCountingDevices) Put(dev core.Device) error {
	d.c.puts[dev.ID]++
	return d.Devices.Put(dev)
}

// TestRepeatedFetchWritesNothing: a device fetching the same content again
// (same view, same statements, same state) within lastSeenStep costs its
// event and no device record: a boot storm's store writes are one per
// change of a device, not one per request.
func TestRepeatedFetchWritesNothing(t *testing.T) {
	st := &putCounter{Store: storetest.Store(t), puts: map[string]int{}}
	s := New(Options{Store: st, Log: quiet()})
	defer s.Close()
	const id = "52:54:00:00:00:51"
	t0 := time.Now().UTC()
	s.ObserveLease(Lease{Device: id, FirstSeen: t0, LastSeen: t0, New: true,
		Facts: Facts{Source: SourceDHCP, Kind: core.KindSONiC, Hostname: "sonic", IP: "10.99.1.5", Subnet: "storm"}})
	s.Flush()
	view := device(t, st, id)
	fetch := func(at time.Time) {
		s.Progress(Progress{Device: view, Profile: "leaf", Next: core.StateZTPServed,
			Facts: Facts{Source: SourceContent, Kind: core.KindSONiC, Serial: "S51", Product: "P1", SONiCVer: "SONiC.1", IP: "10.99.1.5"},
			Event: core.Event{Time: at, Type: "ztp.json.served", Device: id}})
		s.Flush()
	}
	fetch(t0.Add(time.Second))
	if st.puts[id] != 2 {
		t.Fatalf("%d device writes for a lease and a first fetch, want 2", st.puts[id])
	}
	fetch(t0.Add(2 * time.Second))
	fetch(t0.Add(3 * time.Second))
	if st.puts[id] != 2 {
		t.Fatalf("%d device writes after the same fetch twice more, want still 2", st.puts[id])
	}
	if n := count(t, st, core.DeviceEvents); n != 3 {
		t.Fatalf("%d device events, want one per fetch (3)", n)
	}
	// Past lastSeenStep the same fetch notes the device seen.
	fetch(t0.Add(lastSeenStep + 4*time.Second))
	if st.puts[id] != 3 {
		t.Fatalf("%d device writes after a fetch past lastSeenStep, want 3", st.puts[id])
	}
}

// TestLateFetchKeepsNewerFacts: content is written behind, so the record a
// fetch was answered from can be older than what was recorded since (here
// the join's hostname, written in the joiner's own transaction before the
// fetch's record lands). The view teaches the record only what it lacks:
// it never turns a hostname (or another fact that follows the device)
// back to the view's.
func TestLateFetchKeepsNewerFacts(t *testing.T) {
	st := storetest.Store(t)
	s := New(Options{Store: st, Log: quiet()})
	defer s.Close()
	const id = "52:54:00:00:00:52"
	t0 := time.Now().UTC()
	s.ObserveLease(Lease{Device: id, FirstSeen: t0, LastSeen: t0, New: true,
		Facts: Facts{Source: SourceDHCP, Kind: core.KindSONiC, Hostname: "sonic", IP: "10.99.1.6", Subnet: "storm", VendorClass: "SONiC"}})
	s.Flush()
	view := device(t, st, id) // what config_db.json is answered from
	view.SONiCVer = "SONiC.1"
	storetest.Update(t, st, func(tx core.Tx) error {
		_, err := s.Change(tx, id, t0.Add(time.Second), func(d *core.Device) error {
			d.Hostname, d.VendorClass, d.State = "sw-storm-01", "SONiC-2", core.StateJoinIssued
			return nil
		})
		return err
	})
	s.Progress(Progress{Device: view, Profile: "leaf", Next: core.StateConfigServed,
		Facts: Facts{Source: SourceContent, Kind: core.KindSONiC, Serial: "S52", SONiCVer: "SONiC.1", IP: "10.99.1.6"},
		Event: core.Event{Time: t0.Add(2 * time.Second), Type: "ztp.config.served", Device: id}})
	s.Flush()
	d := device(t, st, id)
	if d.Hostname != "sw-storm-01" || d.VendorClass != "SONiC-2" {
		t.Fatalf("a late fetch's view replaced newer facts: hostname %q vendor class %q", d.Hostname, d.VendorClass)
	}
	if d.State != core.StateJoinIssued || d.Serial != "S52" || d.SONiCVer != "SONiC.1" || d.Profile != "leaf" || d.Subnet != "storm" {
		t.Fatalf("the fetch's own statements: %+v", d)
	}
}
