package etcdstore_test

// Regression tests for defects the engine tests found in the conflict
// detection (fixed): coarse compares missing deletions, false conflicts
// across clusters, a write during a scan.

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
)

// BUG 1: past MaxTxnOps/2 reads, compares() compares each read bucket as
// one range "nothing modified since the snapshot". A deletion modifies no
// key in that range, so a transaction that read a record another appliance
// deleted meanwhile commits on the stale read.
func TestCoarseComparesSeeDeletions(t *testing.T) {
	m := embeddedMember(t)
	const maxOps, n = 40, 25 // 25 reads > 40/2: the coarse compares
	a, b := appliances(t, m.Client, maxOps)
	for i := 0; i < n; i += 5 {
		update(t, b, func(tx core.Tx) error {
			for j := i; j < i+5; j++ {
				if err := tx.Devices().Put(device(j, core.StateLeased)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	runs := 0
	update(t, a, func(tx core.Tx) error {
		runs++
		present := 0
		for i := range n {
			if _, err := tx.Devices().Get(mac(i)); err == nil {
				present++
			}
		}
		if runs == 1 {
			if err := b.Update(func(tx core.Tx) error { return tx.Devices().Delete(mac(3)) }); err != nil {
				return fmt.Errorf("the other appliance's delete: %w", err)
			}
		}
		return tx.Settings().Put("present", strconv.Itoa(present))
	})
	if got := setting(t, b, "present"); got != strconv.Itoa(n-1) || runs != 2 {
		t.Fatalf("committed present=%s after %d run(s); want %d after 2 (the read device was deleted before the commit)", got, runs, n-1)
	}
}

// BUG 2 (false conflicts): a delete marker is per bucket and FIRST key
// segment, so every index deletion under "pool/" moves the one marker
// _del/index/pool that a scan of any cluster's pool compares: a join on
// one cluster (Pool, then PoolRemove) and a join on another cluster at
// another appliance run each other again. Likewise rosters ("member/").
func TestScanIgnoresOtherClustersDeletes(t *testing.T) {
	m := embeddedMember(t)
	cases := []struct {
		name   string
		scan   func(core.Tx) (int, error)
		change func(core.Tx) error
	}{
		{"Pool", func(tx core.Tx) (int, error) {
			n := 0
			err := tx.Tokens().Pool("c1", func(string) (bool, error) { n++; return true, nil })
			return n, err
		}, func(tx core.Tx) error { return tx.Tokens().PoolRemove("c2", "u1") }},
		{"Roster", func(tx core.Tx) (int, error) {
			n := 0
			err := tx.Memberships().Roster("c1", func(string, string) (bool, error) { n++; return true, nil })
			return n, err
		}, func(tx core.Tx) error { return tx.Memberships().Delist("c2", mac(5)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := appliances(t, m.Client, etcdstore.EmbeddedMaxTxnOps)
			update(t, b, func(tx core.Tx) error {
				for _, p := range []struct{ cluster, id string }{{"c1", "t1"}, {"c1", "t2"}, {"c2", "u1"}} {
					if err := tx.Tokens().PoolAdd(p.cluster, p.id); err != nil {
						return err
					}
				}
				for i, cl := range []string{"c1", "c1", "c2", "c2", "c2", "c2"} {
					if err := tx.Memberships().Enlist(cl, mac(i), "worker"); err != nil {
						return err
					}
				}
				return nil
			})
			runs := 0
			update(t, a, func(tx core.Tx) error {
				runs++
				n, err := c.scan(tx)
				if err != nil {
					return err
				}
				if runs == 1 {
					if err := b.Update(c.change); err != nil {
						return err
					}
				}
				return tx.Settings().Put("n", strconv.Itoa(n))
			})
			if runs != 1 {
				t.Fatalf("a scan of cluster c1 ran %d times: a deletion in cluster c2 conflicted", runs)
			}
			if got := setting(t, b, "n"); got != "2" {
				t.Fatalf("committed %s, want 2", got)
			}
		})
	}
}

// BUG 3 (panic): a write into the bucket a scan is walking, to a stored
// key the scan has not reached yet, makes the scan's overlay merge take
// the new write for one of its pending ones: pending = pending[1:] on an
// empty list, "slice bounds out of range", and the process dies (bbolt
// only leaves the cursor's later keys unspecified).
func TestWriteDuringScanDoesNotPanic(t *testing.T) {
	m := embeddedMember(t)
	st := openOn(t, m.Client, true, etcdstore.EmbeddedMaxTxnOps)
	update(t, st, func(tx core.Tx) error {
		for _, id := range []string{"j1", "j2", "j3"} {
			if err := tx.Jobs().Put(core.Job{ID: id, Command: "c"}); err != nil {
				return err
			}
		}
		return nil
	})
	var visited []string
	update(t, st, func(tx core.Tx) error {
		visited = visited[:0]
		return tx.Jobs().List(func(j core.Job) (bool, error) {
			visited = append(visited, j.ID)
			if j.ID == "j1" {
				return true, tx.Jobs().Put(core.Job{ID: "j3", Command: "changed"})
			}
			return true, nil
		})
	})
	if len(visited) != 3 {
		t.Fatalf("the scan visited %q, want the three jobs", visited)
	}
	err := st.View(func(tx core.Tx) error {
		j, err := tx.Jobs().Get("j3")
		if err == nil && j.Command != "changed" {
			err = fmt.Errorf("j3's command is %q, want the write made during the scan", j.Command)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
