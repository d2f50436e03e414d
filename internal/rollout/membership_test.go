package rollout

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// A cluster job waiting for its rollout outlives the job's per-call
// deadline but not its cancellation: when ztpd stops, the job's wait ends
// at once (the rollout carries on) instead of holding the stop for its
// whole grace.
func TestJobsWaitForTheirRolloutUntilCancelled(t *testing.T) {
	e := newEnv(t, 1)
	gate := make(chan struct{})
	e.nodes.mu.Lock()
	e.nodes.gateNode, e.nodes.drainGate = "node-0", gate // the rollout stays running
	e.nodes.mu.Unlock()
	defer close(gate)
	m := NewClusterMembership(nil, e.eng, nil, nil)

	job, cancelJob := context.WithCancel(context.Background())
	defer cancelJob()
	call, cancelCall := clusters.CallContext(job, 100*time.Millisecond) // clusters.Options.OpTimeout
	defer cancelCall()
	done := make(chan error, 1)
	go func() {
		done <- m.SetVersion(call, core.Cluster{ID: cluster, Name: "prod"}, core.Version{ID: "v", SemVer: "1.37.2"})
	}()
	select {
	case err := <-done:
		t.Fatalf("the job's wait ended with its call deadline, before the rollout: %v", err)
	case <-time.After(400 * time.Millisecond):
	}
	cancelJob()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled job's wait: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the job still waits for its rollout 2 s after it was cancelled")
	}
}
