package app

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/ztpd/ztpd/internal/boltstore"
	"github.com/ztpd/ztpd/internal/core"
)

// TestDeviceNoiseNeverEvictsTheAuditTrail: a flood of device events (here
// 5,000 refusals, with no DHCP running) is trimmed to events.keep, while
// every audit event written before, between and after survives; and the two
// streams still share one sequence.
func TestDeviceNoiseNeverEvictsTheAuditTrail(t *testing.T) {
	st, err := boltstore.Open(t.TempDir(), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	add := func(typ string, n int) {
		t.Helper()
		err := st.Update(func(tx core.Tx) error {
			for i := 0; i < n; i++ {
				if _, err := core.AppendEvent(tx, core.Event{Type: typ, Device: fmt.Sprint(i)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	add("apikey.created", 3)
	add("ztp.refused", 2500)
	add("cluster.created", 2)
	add("ztp.refused", 2500)
	add("kubeconfig.issued", 1)
	pruneEvents(context.Background(), st, 100, 1000, NewLogger(io.Discard, "error", "text"))
	count := func(b core.Bucket) (n int) {
		st.View(func(tx core.Tx) error { n, err = tx.Count(b); return err })
		return n
	}
	if n := count(core.BucketEvents); n != 100 {
		t.Fatalf("%d device events kept, want events.keep = 100", n)
	}
	if n := count(core.BucketAudit); n != 6 {
		t.Fatalf("%d audit events, want all 6", n)
	}
	// The oldest device event kept is newer than the last audit event
	// before it: retention dropped the oldest first.
	var first core.Event
	st.View(func(tx core.Tx) error {
		return tx.Scan(core.BucketEvents, "", func(_ string, v []byte) (bool, error) {
			return false, core.Decode(v, &first)
		})
	})
	if first.Seq != 5006-100 {
		t.Fatalf("oldest device event kept has seq %d, want %d", first.Seq, 5006-100)
	}
	// The audit stream has its own bound.
	pruneEvents(context.Background(), st, 100, 4, NewLogger(io.Discard, "error", "text"))
	if n := count(core.BucketAudit); n != 4 {
		t.Fatalf("%d audit events after audit_keep 4", n)
	}
}
