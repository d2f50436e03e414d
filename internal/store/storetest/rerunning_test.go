package storetest_test

import (
	"errors"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// The first run's writes are thrown away and the second commits: fn runs
// twice, and what it wrote is there once.
func TestRerunningRunsTwiceCommitsOnce(t *testing.T) {
	st := storetest.Rerunning(storetest.Store(t))
	for name, write := range map[string]func(func(core.Tx) error) error{"Update": st.Update, "Batch": st.Batch} {
		t.Run(name, func(t *testing.T) {
			runs := 0
			var seen []int
			err := write(func(tx core.Tx) error {
				runs++
				n, err := tx.Events().Count(core.AuditEvents)
				if err != nil {
					return err
				}
				seen = append(seen, n)
				_, err = tx.Events().Append(core.Event{Type: "apikey.created", Message: name})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if runs != 2 || seen[0] != seen[1] {
				t.Fatalf("runs %d, events seen by each run %v: want 2 runs on the same state", runs, seen)
			}
			var n int
			storetest.View(t, st, func(tx core.Tx) (err error) {
				n, err = tx.Events().Count(core.AuditEvents)
				return err
			})
			if n != seen[0]+1 {
				t.Fatalf("%d audit events after the rerun, want %d (the first run's write discarded)", n, seen[0]+1)
			}
		})
	}
}

// fn's own error ends the transaction after one run, as on a store that
// does not retry a failed transaction, and comes back as it was.
func TestRerunningErrorRunsOnce(t *testing.T) {
	st := storetest.Rerunning(storetest.Store(t))
	refused := errors.New("refused")
	runs := 0
	err := st.Update(func(tx core.Tx) error {
		runs++
		if err := tx.Settings().Put("x", "1"); err != nil {
			return err
		}
		return refused
	})
	if err != refused || runs != 1 {
		t.Fatalf("err %v after %d runs, want %v after 1", err, runs, refused)
	}
	storetest.View(t, st, func(tx core.Tx) error {
		if v, ok, err := tx.Settings().Get("x"); err != nil || ok {
			t.Fatalf("setting of a failed transaction stored: %q %v %v", v, ok, err)
		}
		return nil
	})
}

// The wrapped store's write counts stay visible.
func TestRerunningForwardsGenerations(t *testing.T) {
	st := storetest.Rerunning(storetest.Store(t))
	g, ok := st.(core.Generations)
	if !ok {
		t.Fatal("Rerunning over bbolt does not implement core.Generations")
	}
	before := g.Generation(core.AggSettings)
	storetest.Update(t, st, func(tx core.Tx) error { return tx.Settings().Put("x", "1") })
	if after := g.Generation(core.AggSettings); after <= before {
		t.Fatalf("generation %d after a write, was %d", after, before)
	}
}
