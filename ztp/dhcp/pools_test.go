package dhcp

import (
	"testing"
)

// TestPoolsCountWhatIsHeld: a reservation inside the pool is taken out of
// it, three leases are used, the router (outside the pool here, inside it
// in the second subnet) never counts as an address to hand out.
func TestPoolsCountWhatIsHeld(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Subnets[0].Reservations = []Reservation{{MAC: mac(900), IP: addr("10.99.0.150")}}
		o.Subnets[1].Pools = pools("10.99.5.1-10.99.5.20") // holds the router .1
	})
	for i := range 3 {
		h.dora(mac(i))
	}
	got := h.s.Pools()
	want := []PoolUse{
		{Name: "lab", Prefix: "10.99.0.0/24", RangeStart: "10.99.0.100", RangeEnd: "10.99.0.199", Size: 100, Used: 3, Reserved: 1, Free: 96},
		{Name: "relayed", Prefix: "10.99.5.0/24", RangeStart: "10.99.5.1", RangeEnd: "10.99.5.20", Size: 19, Free: 19},
	}
	if len(got) != len(want) {
		t.Fatalf("pools: %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("pool %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// The reserved client's lease does not make its address "used" twice.
	h.dora(mac(900))
	if u := h.s.Pools()[0]; u.Used != 3 || u.Reserved != 1 || u.Free != 96 {
		t.Errorf("after the reserved client's lease: %+v", u)
	}
}
