package joiner

import (
	"reflect"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
)

// TestLearnStated: a join request fills in facts and never replaces a
// recorded serial or product (it is refused instead); the kind counts only
// for a device nothing classified.
func TestLearnStated(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	join := func(f devices.Facts) *devices.Facts { f.Source = devices.SourceJoin; return &f }
	cur := core.Device{ID: "m", MAC: "m", Kind: core.KindONIE, Serial: "S1", Hostname: "old", IP: "10.99.0.9"}
	before := cur
	if learnStated(&cur, join(devices.Facts{Kind: core.KindSONiC, Serial: "S2"}), now) || !reflect.DeepEqual(cur, before) {
		t.Fatalf("a contradicting serial was learnt: %+v", cur)
	}
	if learnStated(&cur, join(devices.Facts{Product: "P2"}), now) != true || cur.Product != "P2" {
		t.Fatalf("a missing product was not learnt: %+v", cur)
	}
	if learnStated(&cur, join(devices.Facts{Product: "P3"}), now) || cur.Product != "P2" {
		t.Fatalf("a contradicting product was learnt: %+v", cur)
	}
	ok := learnStated(&cur, join(devices.Facts{Kind: core.KindSONiC, Serial: "S1", Hostname: "new", SONiCVer: "SONiC.2", IP: "10.99.0.10"}), now)
	if !ok || cur.Kind != core.KindONIE || cur.Hostname != "new" || cur.SONiCVer != "SONiC.2" || cur.IP != "10.99.0.10" ||
		!cur.LastSeen.Equal(now) || !cur.UpdatedAt.Equal(now) {
		t.Fatalf("learnt %+v", cur)
	}
	fresh := devices.NewRecord("m2", now)
	if !learnStated(&fresh, join(devices.Facts{Kind: core.KindSONiC}), now) || fresh.Kind != core.KindSONiC {
		t.Fatalf("an unclassified device did not take the stated kind: %+v", fresh)
	}
}
