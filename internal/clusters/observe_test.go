package clusters

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/testenv/logcount"
)

// TestObservedStates walks Starting -> Running -> Alert -> Running from
// observations alone, with the alert time honoured in both directions.
//
// Its transactions run twice (storetest.Rerunning): each move is logged
// once.
func TestObservedStates(t *testing.T) {
	logs := &logcount.Handler{}
	s, _ := observedClusterOver(t, storetest.Rerunning(storetest.Store(t)), slog.New(logs))
	ctx := context.Background()
	var err error
	get := func() core.Cluster {
		t.Helper()
		var c core.Cluster
		s.st.View(func(tx core.Tx) error { c, err = ByRef(tx, "k"); return err })
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	_, _, err = s.Kubeconfig(ctx, user, "k")
	if core.KindOf(err) != core.KindUnavailable || !strings.Contains(err.Error(), "is Starting (waiting for its first control plane") {
		t.Fatalf("kubeconfig while Starting: %v", err)
	}
	t0 := time.Now()
	obs := func(h Health) core.Cluster {
		t.Helper()
		if err := s.ObserveHealth(get().ID, h); err != nil {
			t.Fatal(err)
		}
		return get()
	}
	// API down: still Starting, and it says why.
	c := obs(Health{Err: "dial tcp 10.99.0.5:6443: connection refused", At: t0})
	if c.State != core.ClusterStarting || !strings.Contains(StartingReason(c), "connection refused") {
		t.Fatalf("api down: %s %q", c.State, StartingReason(c))
	}
	// API up, no control-plane Node yet (for longer than the alert time:
	// it only counts from Running).
	c = obs(Health{APIReachable: true, At: t0.Add(time.Second)})
	c = obs(Health{APIReachable: true, At: t0.Add(time.Second)})
	if c.State != core.ClusterStarting || !strings.Contains(StartingReason(c), "0 of 1 registered and Ready") {
		t.Fatalf("no nodes: %s %q", c.State, StartingReason(c))
	}
	_, _, err = s.Kubeconfig(ctx, user, "k")
	if err == nil || !strings.Contains(err.Error(), "0 of 1 registered and Ready") {
		t.Fatalf("kubeconfig error says what it waits for: %v", err)
	}
	// Control plane Ready, 90 s after the first look: Running, though the
	// workers are still joining; the alert clock starts now.
	c = obs(Health{APIReachable: true, Nodes: 1, ReadyNodes: 1, ControlPlanes: 1, ReadyControlPlanes: 1, At: t0.Add(90 * time.Second)})
	if c.State != core.ClusterRunning || c.Observed == nil || !c.Observed.UnhealthySince.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("control plane ready: %+v", c)
	}
	t0 = t0.Add(88 * time.Second) // the rest of the test runs from here
	// Fewer Ready than desired, but not for longer than AlertAfter.
	c = obs(Health{APIReachable: true, Nodes: 1, ReadyNodes: 1, ControlPlanes: 1, ReadyControlPlanes: 1, At: t0.Add(30 * time.Second)})
	if c.State != core.ClusterRunning {
		t.Fatalf("within the alert time: %s", c.State)
	}
	// Healthy clears the clock.
	c = obs(Health{APIReachable: true, Nodes: 3, ReadyNodes: 3, ControlPlanes: 1, ReadyControlPlanes: 1, At: t0.Add(40 * time.Second)})
	if c.State != core.ClusterRunning || !c.Observed.UnhealthySince.IsZero() || !c.Observed.LastSeen.Equal(t0.Add(40*time.Second)) {
		t.Fatalf("healthy: %+v", c.Observed)
	}
	// API server gone for longer than AlertAfter: Alert, saying why.
	obs(Health{Err: "connection refused", At: t0.Add(50 * time.Second)})
	c = obs(Health{Err: "connection refused", At: t0.Add(50*time.Second + 30*time.Second)})
	if c.State != core.ClusterRunning {
		t.Fatalf("30 s down: %s", c.State)
	}
	c = obs(Health{Err: "connection refused", At: t0.Add(50*time.Second + 61*time.Second)})
	if c.State != core.ClusterAlert || c.Observed.APIReachable || !c.Observed.LastSeen.Equal(t0.Add(40*time.Second)) {
		t.Fatalf("61 s down: %s %+v", c.State, c.Observed)
	}
	// Back and healthy: Running again.
	c = obs(Health{APIReachable: true, Nodes: 3, ReadyNodes: 3, ControlPlanes: 1, ReadyControlPlanes: 1, At: t0.Add(2 * time.Minute)})
	if c.State != core.ClusterRunning {
		t.Fatalf("recovered: %s", c.State)
	}
	// Every move is an event.
	var moves []string
	s.st.View(func(tx core.Tx) error {
		return tx.Events().List(core.StreamOf("cluster.state"), 0, func(e core.Event) (bool, error) {
			if e.Type == "cluster.state" && e.Cluster == c.ID {
				moves = append(moves, e.Fields["from"]+">"+e.Fields["to"])
			}
			return true, nil
		})
	})
	if got := strings.Join(moves, " "); got != "Created>Starting Starting>Running Running>Alert Alert>Running" {
		t.Fatalf("state events: %s", got)
	}
	if n := logs.Count("cluster state from its API server"); n != 3 {
		t.Fatalf("%d observed moves logged, want 3", n)
	}
}

// TestObservedErrorTextIsStoredAtMostEvery30s: an unreachable API server's
// error text changes from probe to probe; each change alone is written at
// most every storeSeenEvery (every write of a cluster re-renders the
// cluster listings), while a change of reachability is written at once.
func TestObservedErrorTextIsStoredAtMostEvery30s(t *testing.T) {
	s, c := observedCluster(t)
	var err error
	stored := func() string {
		t.Helper()
		var got core.Cluster
		if err := s.st.View(func(tx core.Tx) error { got, err = tx.Clusters().Get(c.ID); return err }); err != nil {
			t.Fatal(err)
		}
		if got.Observed == nil {
			return ""
		}
		return got.Observed.Error
	}
	t0 := time.Now()
	errs := []string{"dial tcp 10.99.0.5:6443: i/o timeout", "watch: failed to list *v1.Node: context deadline exceeded"}
	for i := 0; i < 10; i++ { // every 2 s for 20 s
		if err := s.ObserveHealth(c.ID, Health{Err: errs[i%2], At: t0.Add(time.Duration(2*i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := stored(); got != errs[0] {
		t.Fatalf("within 30 s of the first error, stored %q; want the first, %q", got, errs[0])
	}
	if err := s.ObserveHealth(c.ID, Health{Err: errs[1], At: t0.Add(31 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := stored(); got != errs[1] {
		t.Fatalf("31 s after: stored %q, want %q", got, errs[1])
	}
	// Reachable again: at once.
	if err := s.ObserveHealth(c.ID, Health{APIReachable: true, At: t0.Add(32 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := stored(); got != "" {
		t.Fatalf("reachable again: error %q still stored", got)
	}
}

// observedCluster is a Service (alert time 1 minute) with user's cluster
// "k" (1 control plane, 2 workers), created and Starting.
func observedCluster(t *testing.T) (*Service, core.Cluster) {
	t.Helper()
	return observedClusterOver(t, storetest.Store(t), nil)
}

// observedClusterOver is observedCluster over st, logging to log (nil:
// nowhere).
func observedClusterOver(t *testing.T, st core.Store, log *slog.Logger) (*Service, core.Cluster) {
	t.Helper()
	s, err := New(st, nil, Options{AlertAfter: time.Minute, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	v := addVersion(t, s, "1.30.2")
	c, j, err := s.CreateCluster(context.Background(), user, ClusterSpec{Name: "k", ZoneID: s.Zone().ID, VersionID: v.ID,
		ServiceOfferingID: Offerings[0].ID, Size: 2, ControlNodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Cluster == nil || j.Cluster.State != core.ClusterStarting {
		t.Fatalf("create job ends Starting: %+v", j)
	}
	return s, c
}
