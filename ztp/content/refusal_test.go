package content

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// TestRefusalsOfHoldersAreOnTheirRecord: a device that holds its address
// and matches no profile keeps the refusal on its record (listed by
// "device list --state unmatched"), its state untouched, until it is
// served.
func TestRefusalsOfHoldersAreOnTheirRecord(t *testing.T) {
	ctx := context.Background()
	vm := core.Device{ID: "1e:00:49:00:00:02", MAC: "1e:00:49:00:00:02", Kind: core.KindVM, IP: "10.99.49.6"}
	e := newEnv(t, nil, "")
	e.putDevice(t, vm, "10.99.49.6")
	c := &Client{Addr: netip.MustParseAddr("10.99.49.6"), Transport: "http"}
	if _, err := e.svc.Metadata(ctx, c, "instance-id"); err == nil {
		t.Fatal("a VM no profile matches was served")
	}
	d := e.device(t, vm.ID)
	if r := d.Refusal; r.What != "meta-data" || r.Kind != "no-profile" || r.At.IsZero() || d.State != core.StateLeased {
		t.Fatalf("record after the refusal: %+v", d)
	}
	if _, list := e.svc.RecentRefusals(); len(list) != 0 {
		t.Errorf("a holder's refusal went to the table of addresses without a lease: %+v", list)
	}
}

// TestRecentRefusalsOfAddressesWithoutLease: refusals of addresses that
// hold no lease are never stored, but the running server keeps the recent
// ones by address (count, first, last, reason), newest first, bounded.
func TestRecentRefusalsOfAddressesWithoutLease(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	before := e.countDevices(t)
	since, list := e.svc.RecentRefusals()
	if since.IsZero() || len(list) != 0 {
		t.Fatalf("before any request: since %v, %d refusals", since, len(list))
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tick := 0
	e.svc.now = func() time.Time { tick++; return t0.Add(time.Duration(tick) * time.Second) }
	for range 3 {
		_, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.43.7", "FAKE", "", "", ""))
		wantRefusal(t, "no lease", err, 403, RefusedNoHolder)
	}
	_, err := e.svc.Metadata(ctx, &Client{Addr: netip.MustParseAddr("10.99.43.8"), Transport: "tftp"}, "instance-id")
	wantRefusal(t, "no lease", err, 403, RefusedNoHolder)
	_, list = e.svc.RecentRefusals()
	if len(list) != 2 {
		t.Fatalf("%d addresses, want 2: %+v", len(list), list)
	}
	if r := list[0]; r.Addr != "10.99.43.8" || r.What != "meta-data" || r.Transport != "tftp" || r.Count != 1 {
		t.Errorf("newest first: %+v", r)
	}
	if r := list[1]; r.Addr != "10.99.43.7" || r.What != "ztp.json" || r.Kind != RefusedNoHolder || r.Count != 3 ||
		!r.Last.After(r.First) || r.Reason == "" {
		t.Errorf("three refusals of one address: %+v", r)
	}
	if n := e.countDevices(t); n != before {
		t.Errorf("%d device records, want %d: refusals of addresses without a lease are not stored", n, before)
	}

	// Bounded: the addresses refused longest ago make room.
	e.svc.recent.max = 5
	for i := range 20 {
		_, err := e.svc.ZTPJSON(ctx, sonicClient(fmt.Sprintf("10.99.44.%d", i), "", "", "", ""))
		wantRefusal(t, "no lease", err, 403, RefusedNoHolder)
	}
	_, list = e.svc.RecentRefusals()
	if len(list) != 5 || list[0].Addr != "10.99.44.19" || list[4].Addr != "10.99.44.15" {
		t.Fatalf("bounded table: %+v", list)
	}
}

// TestRecentRefusalsNotRecordedOffline: a content service whose profiles
// were never loaded (offline CLI use) says it records nothing.
func TestRecentRefusalsNotRecordedOffline(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if since, list := s.RecentRefusals(); !since.IsZero() || len(list) != 0 {
		t.Fatalf("since %v, %d refusals", since, len(list))
	}
}
