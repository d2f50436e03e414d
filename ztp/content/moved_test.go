package content

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
)

// TestMovedMemberGetsNoOtherSlotsIdentity: a box that is the member of
// one position and is plugged into another gets no content there (the
// other slot's name and configuration), with a reason naming both
// positions; back at its own position it is served.
func TestMovedMemberGetsNoOtherSlotsIdentity(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	relay := netip.MustParseAddr("10.99.40.1")
	pl, errs := positions.Build([]*positions.Position{
		{Name: "leaf-07d", Relay: relay, CircuitID: "Ethernet16"},
		{Name: "leaf-07e", Relay: relay, CircuitID: "Ethernet17"},
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := e.svc.SetPlan(pl); err != nil {
		t.Fatal(err)
	}
	d := core.Device{ID: "52:54:00:40:00:30", MAC: "52:54:00:40:00:30", Kind: core.KindSONiC, Serial: "LEAF0030", IP: "10.99.40.30", Position: "leaf-07e"}
	e.putDevice(t, d, "10.99.40.30")
	if err := e.db.Update(func(tx core.Tx) error {
		return tx.Memberships().Put(core.Membership{Device: d.ID, Cluster: "c1", Role: "sonic", State: core.StateJoined, NodeName: "leaf-07d"})
	}); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.40.30", "LEAF0030", "", "", ""))
	wantRefusal(t, "a moved member", err, 403, RefusedMismatch)
	for _, want := range []string{"member of position leaf-07d", "plugged into position leaf-07e", `circuit-id "Ethernet16"`} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not say %q", err, want)
		}
	}
	// Back at its own position: served.
	if err := e.db.Update(func(tx core.Tx) error {
		rec, err := tx.Devices().Get(d.ID)
		if err != nil {
			return err
		}
		rec.Position = "leaf-07d"
		return tx.Devices().Put(rec)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.40.30", "LEAF0030", "", "", "")); err != nil && strings.Contains(err.Error(), "member of position") {
		t.Fatalf("at its own position: %v", err)
	}
}
