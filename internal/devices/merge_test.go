package devices

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// TestMergeKindTable: every pair of recorded and stated kind, from every
// source. A device (DHCP, content, agent) refines unknown to anything and
// ONIE to SONiC; every other change it states is a conflict and the record
// keeps its kind. A join request classifies only an unknown device and
// never conflicts. An operator's declaration sets the kind.
func TestMergeKindTable(t *testing.T) {
	const (
		none  = core.DeviceKind("")
		unk   = core.KindUnknown
		onie  = core.KindONIE
		sonic = core.KindSONiC
		vm    = core.KindVM
	)
	kinds := []core.DeviceKind{none, unk, onie, sonic, vm}
	type want struct {
		kind     core.DeviceKind
		conflict bool
	}
	// device[old][stated], for the device's own statements.
	device := map[core.DeviceKind]map[core.DeviceKind]want{
		none:  {none: {unk, false}, unk: {unk, false}, onie: {onie, false}, sonic: {sonic, false}, vm: {vm, false}},
		unk:   {none: {unk, false}, unk: {unk, false}, onie: {onie, false}, sonic: {sonic, false}, vm: {vm, false}},
		onie:  {none: {onie, false}, unk: {onie, false}, onie: {onie, false}, sonic: {sonic, false}, vm: {onie, true}},
		sonic: {none: {sonic, false}, unk: {sonic, false}, onie: {sonic, true}, sonic: {sonic, false}, vm: {sonic, true}},
		vm:    {none: {vm, false}, unk: {vm, false}, onie: {vm, true}, sonic: {vm, true}, vm: {vm, false}},
	}
	join := map[core.DeviceKind]map[core.DeviceKind]want{
		none:  {none: {unk, false}, unk: {unk, false}, onie: {onie, false}, sonic: {sonic, false}, vm: {vm, false}},
		unk:   {none: {unk, false}, unk: {unk, false}, onie: {onie, false}, sonic: {sonic, false}, vm: {vm, false}},
		onie:  {none: {onie, false}, unk: {onie, false}, onie: {onie, false}, sonic: {onie, false}, vm: {onie, false}},
		sonic: {none: {sonic, false}, unk: {sonic, false}, onie: {sonic, false}, sonic: {sonic, false}, vm: {sonic, false}},
		vm:    {none: {vm, false}, unk: {vm, false}, onie: {vm, false}, sonic: {vm, false}, vm: {vm, false}},
	}
	operator := map[core.DeviceKind]map[core.DeviceKind]want{
		none:  {none: {unk, false}, unk: {unk, false}, onie: {onie, false}, sonic: {sonic, false}, vm: {vm, false}},
		unk:   {none: {unk, false}, unk: {unk, false}, onie: {onie, false}, sonic: {sonic, false}, vm: {vm, false}},
		onie:  {none: {onie, false}, unk: {onie, false}, onie: {onie, false}, sonic: {sonic, false}, vm: {vm, false}},
		sonic: {none: {sonic, false}, unk: {sonic, false}, onie: {onie, false}, sonic: {sonic, false}, vm: {vm, false}},
		vm:    {none: {vm, false}, unk: {vm, false}, onie: {onie, false}, sonic: {sonic, false}, vm: {vm, false}},
	}
	bySource := map[Source]map[core.DeviceKind]map[core.DeviceKind]want{
		SourceDHCP: device, SourceContent: device, SourceAgent: device, SourceJoin: join, SourceOperator: operator,
	}
	if len(bySource) != len(Sources) {
		t.Fatalf("the table covers %d of %d sources", len(bySource), len(Sources))
	}
	for _, src := range Sources {
		table := bySource[src]
		for _, old := range kinds {
			for _, stated := range kinds {
				w := table[old][stated]
				if k, c := MergeKind(old, stated, src); k != w.kind || c != w.conflict {
					t.Errorf("%s: recorded %q, stated %q: got %q (conflict %v), want %q (conflict %v)", src, old, stated, k, c, w.kind, w.conflict)
				}
				// Merge applies the same rule, a declared kind as the
				// operator's.
				d := core.Device{ID: "m", Kind: old}
				bad := Merge(&d, &Facts{Source: src, Kind: stated})
				if d.Kind != w.kind || bad.Has(FactKind) != w.conflict {
					t.Errorf("Merge %s: recorded %q, stated %q: got %q (contradicts %v), want %q (conflict %v)", src, old, stated, d.Kind, bad, w.kind, w.conflict)
				}
				d = core.Device{ID: "m", Kind: old}
				w = operator[old][stated]
				if Merge(&d, &Facts{Source: src, Kind: stated, KindDeclared: true}); d.Kind != w.kind {
					t.Errorf("declared by %s: recorded %q, stated %q: got %q, want %q", src, old, stated, d.Kind, w.kind)
				}
			}
		}
	}
}

// TestMergeFacts: identity facts fill in and never replace (a
// contradiction is reported, the record keeps its value; a platform's
// revision suffix is no contradiction); the rest follow the device.
func TestMergeFacts(t *testing.T) {
	d := core.Device{ID: "m", Kind: core.KindSONiC, Serial: "S1", Platform: "x86_64-accton_as7326_56x", Hostname: "old", IP: "10.0.0.1"}
	bad := Merge(&d, &Facts{Source: SourceContent, Serial: "S2", Product: "P1", Platform: "x86_64-accton_as7326_56x-r0",
		BaseMAC: "02:00:00:00:00:01", Hostname: "new", SONiCVer: "SONiC.1", IP: "10.0.0.2"})
	want := core.Device{ID: "m", MAC: "m", Kind: core.KindSONiC, Serial: "S1", Product: "P1", Platform: "x86_64-accton_as7326_56x",
		BaseMAC: "02:00:00:00:00:01", Hostname: "new", SONiCVer: "SONiC.1", IP: "10.0.0.2"}
	if bad != FactSerial || !reflect.DeepEqual(d, want) {
		t.Fatalf("merged %+v (contradicts %b), want %+v (serial)", d, bad, want)
	}
	if bad := Contradicts(&d, &Facts{Product: "P2", BaseMAC: "02:00:00:00:00:02", Platform: "other", Kind: core.KindVM}); bad != FactKind|FactProduct|FactPlatform|FactBaseMAC {
		t.Fatalf("contradicts %b", bad)
	}
}

// TestFactsCheck: each stated fact is checked by core's character sets; a
// failing one is cleared and reported, the others kept.
func TestFactsCheck(t *testing.T) {
	f := Facts{Serial: "S1", Product: "bad\nproduct", Hostname: "-bad", SONiCVer: "SONiC.1", Platform: "x86_64-a"}
	var refused []string
	err := f.Check(func(fact string, err error) { refused = append(refused, fact) })
	var fe *core.FactError
	if !errors.As(err, &fe) || fe.Fact != "product" {
		t.Fatalf("first failure %v", err)
	}
	if !slices.Equal(refused, []string{"product", "hostname"}) || f.Product != "" || f.Hostname != "" ||
		f.Serial != "S1" || f.SONiCVer != "SONiC.1" || f.Platform != "x86_64-a" {
		t.Fatalf("refused %v, left %+v", refused, f)
	}
	if err := (&Facts{Serial: "S1"}).Check(nil); err != nil {
		t.Fatal(err)
	}
}

func events(t *testing.T, st core.Store, typ string) []core.Event {
	t.Helper()
	var evs []core.Event
	storetest.View(t, st, func(tx core.Tx) error {
		return tx.Events().List(core.DeviceEvents, 0, func(e core.Event) (bool, error) {
			if e.Type == typ {
				evs = append(evs, e)
			}
			return true, nil
		})
	})
	return evs
}

// TestEstablishedSONiCNeverBecomesONIEByDHCP: a lease exchange that states
// ONIE (or a different platform) for an established SONiC switch changes
// neither; each contradiction is an event. ONIE refined to SONiC is not.
func TestEstablishedSONiCNeverBecomesONIEByDHCP(t *testing.T) {
	st := storetest.Store(t)
	reg := prometheus.NewRegistry()
	s := New(Options{Store: st, Log: quiet(), Registerer: reg})
	defer s.Close()
	const id = "52:54:00:00:00:31"
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s.ObserveDHCP(core.Device{ID: id, MAC: id, Kind: core.KindONIE, Platform: "x86_64-accton_as7326_56x", Hostname: "sw",
		FirstSeen: t0, LastSeen: t0}, true)
	s.Flush()
	s.ObserveDHCP(core.Device{ID: id, MAC: id, Kind: core.KindSONiC, LastSeen: t0.Add(time.Minute)}, true)
	s.Flush()
	if d := device(t, st, id); d.Kind != core.KindSONiC {
		t.Fatalf("ONIE was not refined to SONiC: %+v", d)
	}
	if evs := events(t, st, EventFactConflict); len(evs) != 0 {
		t.Fatalf("a refinement is not a conflict: %+v", evs)
	}
	s.ObserveDHCP(core.Device{ID: id, MAC: id, Kind: core.KindONIE, Platform: "x86_64-evil_platform", Hostname: "sw",
		LastSeen: t0.Add(2 * time.Minute)}, true)
	s.Flush()
	d := device(t, st, id)
	if d.Kind != core.KindSONiC || d.Platform != "x86_64-accton_as7326_56x" {
		t.Fatalf("a DHCP statement overwrote an established record: %+v", d)
	}
	evs := events(t, st, EventFactConflict)
	var facts []string
	for _, e := range evs {
		facts = append(facts, e.Fields["fact"]+"="+e.Fields["stated"])
	}
	slices.Sort(facts)
	if want := []string{"kind=onie", "platform=x86_64-evil_platform"}; !slices.Equal(facts, want) {
		t.Fatalf("conflict events %v, want %v", facts, want)
	}
	// Each contradiction is counted, on the registry the Service was given.
	if got := conflictsCounted(t, reg); got != "kind=1 platform=1" {
		t.Fatalf("ztpd_device_fact_conflicts_total: %q, want kind=1 platform=1", got)
	}
	// The same revision of a platform with its suffix is no conflict.
	s.ObserveDHCP(core.Device{ID: id, MAC: id, Platform: "x86_64-accton_as7326_56x-r0", LastSeen: t0.Add(3 * time.Minute)}, true)
	s.Flush()
	if n := len(events(t, st, EventFactConflict)); n != 2 {
		t.Fatalf("%d conflict events after a revision suffix, want 2", n)
	}
}

// conflictsCounted is ztpd_device_fact_conflicts_total in reg, as
// "fact=count" by fact, sorted.
func conflictsCounted(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "ztpd_device_fact_conflicts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "fact" {
					got = append(got, fmt.Sprintf("%s=%v", l.GetValue(), m.GetCounter().GetValue()))
				}
			}
		}
	}
	slices.Sort(got)
	return strings.Join(got, " ")
}

// TestStatedSerialNeverMovesTheIndex: device B states device A's serial
// (a ZTP header from B's own lease). The serial stays A's, B does not take
// it, both records carry the conflict, each gets one event, and resolving
// the serial is refused naming both devices.
func TestStatedSerialNeverMovesTheIndex(t *testing.T) {
	st := storetest.Store(t)
	reg := prometheus.NewRegistry()
	s := New(Options{Store: st, Log: quiet(), Registerer: reg})
	defer s.Close()
	const a, b = "52:54:00:00:00:0a", "52:54:00:00:00:0b"
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s.ObserveDHCP(core.Device{ID: a, MAC: a, Kind: core.KindSONiC, Serial: "VICTIM01", IP: "10.99.0.10", FirstSeen: t0, LastSeen: t0}, true)
	s.ObserveDHCP(core.Device{ID: b, MAC: b, IP: "10.99.0.11", FirstSeen: t0, LastSeen: t0}, true)
	s.Flush()
	for i := range 2 { // a second statement adds nothing
		s.Progress(Progress{Device: core.Device{ID: b, MAC: b, Kind: core.KindSONiC, Serial: "VICTIM01", IP: "10.99.0.11"},
			Profile: "leaf", Next: core.StateZTPServed,
			Event: core.Event{Time: t0.Add(time.Duration(i+1) * time.Minute), Type: "ztp.json.served", Device: b}})
		s.Flush()
	}
	storetest.View(t, st, func(tx core.Tx) error {
		holder, held, err := tx.Devices().SerialHolder("VICTIM01")
		if err != nil || !held || holder != a {
			t.Fatalf("serial holder %q (%v, %v), want %s", holder, held, err, a)
		}
		_, err = tx.Devices().BySerial("VICTIM01")
		if core.KindOf(err) != core.KindConflict || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) ||
			!strings.Contains(err.Error(), "10.99.0.11") {
			t.Fatalf("ambiguous serial resolved: %v", err)
		}
		return nil
	})
	da, db := device(t, st, a), device(t, st, b)
	if da.Serial != "VICTIM01" || da.SerialConflict == nil || !slices.Equal(da.SerialConflict.With, []string{b}) {
		t.Fatalf("holder's record: %+v", da)
	}
	if db.Serial != "" || db.SerialConflict == nil || db.SerialConflict.Serial != "VICTIM01" || !slices.Equal(db.SerialConflict.With, []string{a}) {
		t.Fatalf("claimant's record: %+v (serial conflict %+v)", db, db.SerialConflict)
	}
	evs := events(t, st, EventSerialConflict)
	if len(evs) != 2 || evs[0].Device == evs[1].Device {
		t.Fatalf("serial conflict events: %+v", evs)
	}
	if got := conflictsCounted(t, reg); got != "serial=1" {
		t.Fatalf("ztpd_device_fact_conflicts_total: %q, want serial=1", got)
	}
	// A serial nobody else holds is taken as before.
	s.Progress(Progress{Device: core.Device{ID: b, MAC: b, Serial: "OWN01"}, Next: core.StateZTPServed,
		Event: core.Event{Time: t0.Add(5 * time.Minute), Type: "ztp.json.served", Device: b}})
	s.Flush()
	storetest.View(t, st, func(tx core.Tx) error {
		if d, err := tx.Devices().BySerial("OWN01"); err != nil || d.ID != b {
			t.Fatalf("own serial: %+v, %v", d, err)
		}
		return nil
	})
}

// TestUnleasedRecordsPruned: records that never got past a lease expire
// after UnleasedExpiry and are capped at MaxUnleased, oldest first; a
// device holding a lease, served content, approved or labelled stays, and
// a pruned device leaves no serial index or conflict naming it.
func TestUnleasedRecordsPruned(t *testing.T) {
	st := storetest.Store(t)
	s := New(Options{Store: st, Log: quiet(), UnleasedExpiry: time.Hour, MaxUnleased: 5})
	defer s.Close()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mac := func(i int) string { return fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256) }
	storetest.Update(t, st, func(tx core.Tx) error {
		for i := range 20 { // unleased, seen a minute apart
			d := core.Device{ID: mac(i), MAC: mac(i), Kind: core.KindUnknown, State: core.StateLeased,
				IP: fmt.Sprintf("10.99.0.%d", 100+i), FirstSeen: t0, LastSeen: t0.Add(time.Duration(i) * time.Minute)}
			if i == 0 {
				d.Serial = "S0"
			}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
		}
		keep := []core.Device{
			{ID: mac(100), State: core.StateLeased, IP: "10.99.0.200"}, // holds an active lease
			{ID: mac(101), State: core.StateZTPServed},                 // fetched content
			{ID: mac(102), State: core.StateLeased, Approved: true},    // approved
			{ID: mac(103), State: core.StateDiscovered, Labels: map[string]string{"rack": "1"}},
			{ID: mac(104), State: core.StateLeased, IP: "10.99.0.204"}, // a lease without an expiry holds
		}
		for _, d := range keep {
			d.MAC, d.Kind, d.FirstSeen, d.LastSeen = d.ID, core.KindSONiC, t0, t0
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
		}
		if err := tx.Leases().Put(core.Lease{IP: "10.99.0.204", MAC: mac(104), Subnet: "lab", State: core.LeaseActive}); err != nil {
			return err
		}
		return tx.Leases().Put(core.Lease{IP: "10.99.0.200", MAC: mac(100), Subnet: "lab", State: core.LeaseActive,
			Start: t0, Expiry: t0.Add(48 * time.Hour)})
	})
	// Device 0's serial is stated by a kept device: a conflict on both.
	s.Progress(Progress{Device: core.Device{ID: mac(101), Serial: "S0"}, Next: core.StateZTPServed,
		Event: core.Event{Time: t0, Type: "ztp.json.served", Device: mac(101)}})
	s.Flush()
	if d := device(t, st, mac(101)); d.SerialConflict == nil {
		t.Fatalf("no conflict recorded: %+v", d)
	}
	ids := func() []string {
		var out []string
		storetest.View(t, st, func(tx core.Tx) error {
			return tx.Devices().List("", func(d core.Device) (bool, error) { out = append(out, d.ID); return true, nil })
		})
		return out
	}
	// Within the expiry: only the cap applies, the oldest go first.
	if n := s.PruneDevices(context.Background(), t0.Add(30*time.Minute)); n != 15 {
		t.Fatalf("pruned %d over the cap, want 15", n)
	}
	want := []string{mac(15), mac(16), mac(17), mac(18), mac(19), mac(100), mac(101), mac(102), mac(103), mac(104)}
	if got := ids(); !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	storetest.View(t, st, func(tx core.Tx) error {
		if _, ok, err := tx.Devices().SerialHolder("S0"); ok || err != nil {
			t.Fatalf("a pruned device's serial is still indexed (%v)", err)
		}
		return nil
	})
	if d := device(t, st, mac(101)); d.SerialConflict != nil {
		t.Fatalf("a kept record still names a pruned device: %+v", d.SerialConflict)
	}
	// Past the expiry of all of them: every unleased record goes.
	if n := s.PruneDevices(context.Background(), t0.Add(3*time.Hour)); n != 5 {
		t.Fatalf("pruned %d expired, want 5", n)
	}
	if got, want := ids(), []string{mac(100), mac(101), mac(102), mac(103), mac(104)}; !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
}

// TestReportersHandFacts: a lease report and a fetch's facts reach the
// record through the one merge; a declared kind is the operator's, each
// contradiction names the source that stated it.
func TestReportersHandFacts(t *testing.T) {
	st := storetest.Store(t)
	s := New(Options{Store: st, Log: quiet()})
	defer s.Close()
	const id = "52:54:00:00:00:41"
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s.ObserveLease(Lease{Device: id, FirstSeen: t0, LastSeen: t0, New: true,
		Facts: Facts{Source: SourceDHCP, Kind: core.KindONIE, Platform: "x86_64-accton_as7326_56x", Hostname: "sw"}})
	s.Flush()
	if d := device(t, st, id); d.Kind != core.KindONIE || d.State != core.StateLeased || d.Platform != "x86_64-accton_as7326_56x" ||
		d.Hostname != "sw" || d.MAC != id || !d.FirstSeen.Equal(t0) {
		t.Fatalf("after the lease: %+v", d)
	}
	// A reservation declares the kind: it is set, not a conflict.
	s.ObserveLease(Lease{Device: id, LastSeen: t0.Add(time.Minute),
		Facts: Facts{Source: SourceDHCP, Kind: core.KindVM, KindDeclared: true}})
	s.Flush()
	if d := device(t, st, id); d.Kind != core.KindVM {
		t.Fatalf("a declared kind was not set: %+v", d)
	}
	s.Progress(Progress{Device: core.Device{ID: id}, Facts: Facts{Source: SourceContent, Kind: core.KindSONiC, Serial: "S1", SONiCVer: "SONiC.1"},
		Next: core.StateZTPServed, Event: core.Event{Time: t0.Add(2 * time.Minute), Type: "ztp.json.served", Device: id}})
	s.Flush()
	d := device(t, st, id)
	if d.Kind != core.KindVM || d.Serial != "S1" || d.SONiCVer != "SONiC.1" || d.State != core.StateZTPServed {
		t.Fatalf("after the fetch: %+v", d)
	}
	evs := events(t, st, EventFactConflict)
	if len(evs) != 1 || evs[0].Fields["fact"] != "kind" || evs[0].Fields["stated"] != "sonic" || evs[0].Fields["source"] != "ztp" {
		t.Fatalf("conflict events: %+v", evs)
	}
}

// TestFactsUpdate: a coalescing reporter keeps the latest statement of
// each fact; a statement of none keeps the earlier one.
func TestFactsUpdate(t *testing.T) {
	f := Facts{Source: SourceDHCP, Kind: core.KindVM, KindDeclared: true, Serial: "S1", Hostname: "a", IP: "10.0.0.1"}
	f.Update(&Facts{Source: SourceDHCP, Kind: core.KindSONiC, Serial: "S2", Product: "P1"})
	want := Facts{Source: SourceDHCP, Kind: core.KindSONiC, Serial: "S2", Product: "P1", Hostname: "a", IP: "10.0.0.1"}
	if f != want {
		t.Fatalf("updated %+v, want %+v", f, want)
	}
}
