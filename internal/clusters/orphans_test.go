package clusters

import (
	"context"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// TestJobsBelongToTheirAppliance: with several appliances on one store, a
// restart recovers only the restarting appliance's unfinished jobs, and
// FailOrphans fails those of appliances that are gone, not of live ones.
func TestJobsBelongToTheirAppliance(t *testing.T) {
	st := storetest.Store(t)
	s, err := New(st, nil, Options{Appliance: "a2"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	jobs := map[string]core.Job{}
	for _, a := range []string{"a1", "a2", "a3"} {
		j := newJob("scaleKubernetesCluster", InstanceCluster, "c-"+a, user)
		j.Appliance = a
		jobs[a] = j
	}
	storetest.Update(t, st, func(tx core.Tx) error {
		for _, j := range jobs {
			if err := tx.Jobs().Put(j); err != nil {
				return err
			}
		}
		return nil
	})
	status := func() map[string]core.JobStatus {
		out := map[string]core.JobStatus{}
		storetest.View(t, st, func(tx core.Tx) error {
			return tx.Jobs().List(func(j core.Job) (bool, error) { out[j.Appliance] = j.Status; return true, nil })
		})
		return out
	}
	if n, err := s.Recover(); err != nil || n != 1 {
		t.Fatalf("recover: %d %v", n, err)
	}
	got := status()
	if got["a2"] != core.JobFailed || got["a1"] == core.JobFailed || got["a3"] == core.JobFailed {
		t.Fatalf("after a2's restart: %v", got)
	}
	n, err := s.FailOrphans(func(a string) bool { return a != "a3" })
	if err != nil || n != 1 {
		t.Fatalf("orphans: %d %v", n, err)
	}
	if got := status(); got["a3"] != core.JobFailed || got["a1"] == core.JobFailed {
		t.Fatalf("after a3 went: %v", got)
	}
}
