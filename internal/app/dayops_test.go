package app

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/clusters/clusterstest"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// The cluster operations as the app wires them (rollout.ClusterMembership:
// the joiner, the rollout engine, the clusters service) over Nodes and agents
// that are fakes: the real API server and agent are in the lab tests.

// fakeClusterNodes is rollout.NodeOps over Nodes in memory; a drain of
// blocked fails as a PodDisruptionBudget makes it fail.
type fakeClusterNodes struct {
	mu      sync.Mutex
	nodes   map[string]*fakeClusterNode
	blocked string
}

type fakeClusterNode struct {
	cordoned, deleted bool
}

func (f *fakeClusterNodes) Node(_ context.Context, _, node string) (rollout.NodeInfo, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[node]
	if !ok || n.deleted {
		return rollout.NodeInfo{}, false, nil
	}
	return rollout.NodeInfo{KubeletVersion: "v1.36.3", Ready: true, Unschedulable: n.cordoned}, true, nil
}

func (f *fakeClusterNodes) Cordon(_ context.Context, _, node, _ string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes[node].cordoned = true
	return true, nil
}

func (f *fakeClusterNodes) Uncordon(_ context.Context, _, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes[node].cordoned = false
	return nil
}

func (f *fakeClusterNodes) Drain(_ context.Context, _, node string, _ time.Duration) error {
	if node == f.blocked {
		return fmt.Errorf("drain of node %s: Cannot evict pod default/db-0: it would violate the pod's disruption budget db-pdb", node)
	}
	return nil
}

func (f *fakeClusterNodes) WaitReady(context.Context, string, string, string, time.Duration) error {
	return nil
}

func (f *fakeClusterNodes) DeleteNode(_ context.Context, _, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes[node].deleted = true
	return nil
}

func (f *fakeClusterNodes) CordonOwner(_ context.Context, _, node string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nodes[node].cordoned {
		return "stop", nil
	}
	return "", nil
}

// clustersOverFakes is a clusters service wired as the app wires it (the
// joiner's memberships, rollout.ClusterMembership), with a rollout engine
// of its own over nodes and agents that finish every operation at once.
func clustersOverFakes(t *testing.T, a *App, nodes *fakeClusterNodes) *clusters.Service {
	t.Helper()
	eng, err := rollout.New(a.Store, rollout.Options{Nodes: nodes, Agents: doneAgents{}, Members: a.Joiner,
		DrainTimeout: time.Second, StepTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := clusters.New(a.Store, rollout.NewClusterMembership(a.Joiner, eng, nodes, a.Log), clusters.Options{Log: a.Log, Appliance: a.applianceName()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs.Close(ctx)
	})
	return cs
}

// doneAgents is rollout.Agents whose agents finish every operation at once.
type doneAgents struct{}

func (doneAgents) Assign(context.Context, string, string, core.AgentOperation, func(*core.DesiredState)) error {
	return nil
}

func (doneAgents) WaitOperation(_ context.Context, _, opID string) (*core.AgentOperation, error) {
	return &core.AgentOperation{ID: opID, State: core.StepSucceeded}, nil
}

func (doneAgents) Withdraw(context.Context, string, string, string) error { return nil }

func (doneAgents) Get(device string) (core.DesiredState, error) {
	return core.DesiredState{Device: device}, nil
}

// TestDeleteForceAbandonsWhatTheRemoveRolloutLeaves: a delete of a
// cluster whose worker's drain a PodDisruptionBudget blocks fails without
// force (the other members taken out, the cluster in Alert, its CA kept);
// with force the remove rollout is tried again, fails again, and the
// cluster is destroyed all the same: the job and a cluster.abandoned event
// name the blocked member, its Node is left as it was, its membership
// ended and its agent credential revoked with the CA.
func TestDeleteForceAbandonsWhatTheRemoveRolloutLeaves(t *testing.T) {
	a, err := New(keysTestConfig(t), NewLogger(io.Discard, "error", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	nodes := &fakeClusterNodes{nodes: map[string]*fakeClusterNode{}, blocked: "worker-1"}
	a.Clusters = clustersOverFakes(t, a, nodes)
	ctx := context.Background()
	c := clusterstest.Cluster(t, a.Clusters, "http://10.99.42.1:8080", "1.36.3", "prod", 2)
	if err := a.Clusters.ObserveHealth(c.ID, clusters.Health{APIReachable: true, Nodes: 3, ReadyNodes: 3,
		ControlPlanes: 1, ReadyControlPlanes: 1}); err != nil {
		t.Fatal(err)
	}
	// Three members with Nodes and agent credentials: the first control
	// plane and two workers.
	dev := func(i int) string { return fmt.Sprintf("02:00:00:00:01:%02x", i) }
	threeMembers(t, a, c.ID, nodes, dev, false)
	waitJob := func(j core.Job, err error) core.Job {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		done, err := a.Clusters.WaitJob(wctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	clusterState := func() core.ClusterState {
		var st core.ClusterState
		a.Store.View(func(tx core.Tx) error {
			cl, err := tx.Clusters().Get(c.ID)
			st = cl.State
			if err != nil {
				st = "gone"
			}
			return nil
		})
		return st
	}

	// Without force: the rollout fails on worker-1, so does the job.
	j := waitJob(a.Clusters.DeleteCluster(ctx, clusters.LocalAdmin, "prod", clusters.DeleteOptions{}))
	if j.Status != core.JobFailed || !strings.Contains(j.Error, "disruption budget db-pdb") || clusterState() != core.ClusterAlert {
		t.Fatalf("delete without force: %+v, cluster %s", j, clusterState())
	}
	if _, err := a.Joiner.CAHash(c.ID); err != nil {
		t.Fatalf("the CA went with a failed delete: %v", err)
	}
	// The members the rollout could take out are out.
	if !nodes.nodes["cp-0"].deleted || !nodes.nodes["worker-2"].deleted || nodes.nodes["worker-1"].deleted {
		t.Fatalf("Nodes after the failed delete: cp-0 %+v worker-1 %+v worker-2 %+v",
			*nodes.nodes["cp-0"], *nodes.nodes["worker-1"], *nodes.nodes["worker-2"])
	}

	// With force: tried again, failed again, destroyed all the same.
	j = waitJob(a.Clusters.DeleteCluster(ctx, clusters.LocalAdmin, "prod", clusters.DeleteOptions{Force: true}))
	if j.Status != core.JobSucceeded || clusterState() != "gone" {
		t.Fatalf("forced delete: %+v, cluster %s", j, clusterState())
	}
	if len(j.Abandoned) != 1 || j.Abandoned[0].Device != dev(1) || j.Abandoned[0].Node != "worker-1" ||
		!strings.Contains(j.Abandoned[0].Reason, "disruption budget db-pdb") {
		t.Fatalf("abandoned: %+v", j.Abandoned)
	}
	if _, err := a.Joiner.CAHash(c.ID); err == nil {
		t.Fatal("the CA survived the forced delete")
	}
	if n := nodes.nodes["worker-1"]; n.deleted || !n.cordoned {
		t.Fatalf("the abandoned Node was not left as the rollout left it (cordoned): %+v", *n)
	}
	var events []core.Event
	err = a.Store.View(func(tx core.Tx) error {
		ms, err := tx.Memberships().Get(dev(1))
		if err != nil || ms.State != core.StateLeft {
			return fmt.Errorf("abandoned member: %+v %v", ms, err)
		}
		tok, err := tx.Tokens().Get(string(tokens.KindAgent), "agentworker-1")
		if err != nil || !tok.Revoked {
			return fmt.Errorf("abandoned member's agent credential: %+v %v", tok, err)
		}
		return tx.Events().List(core.AuditEvents, 0, func(e core.Event) (bool, error) {
			if e.Type == "cluster.abandoned" {
				events = append(events, e)
			}
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Cluster != c.ID || events[0].Fields["devices"] != dev(1) || events[0].Fields["nodes"] != "worker-1" ||
		!strings.Contains(events[0].Message, "worker-1 (device "+dev(1)+"): drain of node worker-1") {
		t.Fatalf("cluster.abandoned events: %+v", events)
	}
}

// mustJoinState is the cluster's join state with first as its first
// control plane (the rollout takes it first).
func mustJoinState(tx core.Tx, cluster, first string) core.JoinState {
	js, _ := tx.Clusters().JoinState(cluster)
	js.FirstControlPlane = first
	return js
}

// TestScaleDownByName: scaleKubernetesCluster with nodeids takes out the
// named worker, not the newest: drained, its Node deleted, its membership
// left, its agent credential revoked, the size one less; control planes,
// strangers and a last worker are refused before anything changes.
func TestScaleDownByName(t *testing.T) {
	a, err := New(keysTestConfig(t), NewLogger(io.Discard, "error", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	nodes := &fakeClusterNodes{nodes: map[string]*fakeClusterNode{}}
	a.Clusters = clustersOverFakes(t, a, nodes)
	ctx := context.Background()
	c := clusterstest.Cluster(t, a.Clusters, "http://10.99.43.1:8080", "1.36.3", "prod", 2)
	if err := a.Clusters.ObserveHealth(c.ID, clusters.Health{APIReachable: true, Nodes: 3, ReadyNodes: 3,
		ControlPlanes: 1, ReadyControlPlanes: 1}); err != nil {
		t.Fatal(err)
	}
	dev := func(i int) string { return fmt.Sprintf("02:00:00:00:02:%02x", i) }
	threeMembers(t, a, c.ID, nodes, dev, true)
	for _, bad := range [][]string{{dev(0)}, {"02:00:00:00:09:99"}, {dev(1), dev(1)}, {dev(1), dev(2)}} {
		if _, err := a.Clusters.ScaleCluster(ctx, clusters.LocalAdmin, "prod", 0, "", bad...); core.KindOf(err) != core.KindInvalid {
			t.Fatalf("scale-down naming %v: %v", bad, err)
		}
	}
	if _, err := a.Clusters.ScaleCluster(ctx, clusters.LocalAdmin, "prod", 2, "", dev(1)); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("a size that disagrees with the nodes named: %v", err)
	}
	j, err := a.Clusters.ScaleCluster(ctx, clusters.LocalAdmin, "prod", 0, "", strings.ToUpper(dev(1)))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if j, err = a.Clusters.WaitJob(wctx, j.ID); err != nil || j.Status != core.JobSucceeded {
		t.Fatalf("scale-down by name: %+v %v", j, err)
	}
	if !nodes.nodes["worker-1"].deleted || nodes.nodes["worker-2"].deleted || nodes.nodes["cp-0"].deleted {
		t.Fatalf("Nodes deleted: worker-1 %v worker-2 %v cp-0 %v", nodes.nodes["worker-1"].deleted, nodes.nodes["worker-2"].deleted, nodes.nodes["cp-0"].deleted)
	}
	a.Store.View(func(tx core.Tx) error {
		m, _ := tx.Memberships().Get(dev(1))
		tok, _ := tx.Tokens().Get(string(tokens.KindAgent), "agentworker-1")
		cl, _ := tx.Clusters().Get(c.ID)
		js, _ := tx.Clusters().JoinState(c.ID)
		if m.State != core.StateLeft || !tok.Revoked || cl.Size != 1 || js.Workers != 1 {
			t.Errorf("after: membership %s, agent token revoked %v, size %d, workers %d", m.State, tok.Revoked, cl.Size, js.Workers)
		}
		return nil
	})
}

// threeMembers stores a first control plane (cp-0) and two workers
// (worker-1, worker-2, in joining order) of cluster with Nodes in nodes and
// agent credentials; counted in the join state when counted.
func threeMembers(t *testing.T, a *App, cluster string, nodes *fakeClusterNodes, dev func(int) string, counted bool) {
	t.Helper()
	err := a.Store.Update(func(tx core.Tx) error {
		js := mustJoinState(tx, cluster, dev(0))
		if counted {
			js.ControlPlanes, js.Workers = 1, 2
		}
		if err := tx.Clusters().PutJoinState(cluster, js); err != nil {
			return err
		}
		for i, name := range []string{"cp-0", "worker-1", "worker-2"} {
			role := "worker"
			if i == 0 {
				role = "control-plane"
			}
			if err := tx.Devices().Put(core.Device{ID: dev(i), MAC: dev(i), Kind: core.KindVM, State: core.StateJoined, Cluster: cluster}); err != nil {
				return err
			}
			agent := "agent" + name
			if err := tx.Tokens().Put(core.Token{ID: agent, Kind: string(tokens.KindAgent), Cluster: cluster, Device: dev(i),
				SecretHash: "00", Created: time.Now()}); err != nil {
				return err
			}
			if err := tx.Memberships().Put(core.Membership{Device: dev(i), Cluster: cluster, Role: role, State: core.StateJoined,
				NodeName: name, AgentID: agent, Created: time.Unix(int64(i+1), 0)}); err != nil {
				return err
			}
			if err := tx.Memberships().Enlist(cluster, dev(i), role); err != nil {
				return err
			}
			nodes.nodes[name] = &fakeClusterNode{}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
