package rollout

import (
	"testing"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// TestManualUpgradeNodesAreSkipped: a Kubernetes rollout leaves out the
// members the cluster marks for manual upgrade (addNodesToKubernetesCluster
// manualupgrade=true): they are in its plan, skipped with why, never
// cordoned or handed an operation; a remove rollout still takes them.
func TestManualUpgradeNodesAreSkipped(t *testing.T) {
	e := newEnv(t, 3)
	manual := device(2)
	if err := e.st.Update(func(tx core.Tx) error {
		c, err := tx.Clusters().Get(cluster)
		if err != nil {
			return err
		}
		c.ManualUpgrade = []string{manual}
		return tx.Clusters().Put(c)
	}); err != nil {
		t.Fatal(err)
	}
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"}).ID)
	if r.State != core.RolloutSucceeded {
		t.Fatalf("rollout %s: %s", r.State, r.Reason)
	}
	for _, n := range r.Nodes {
		switch {
		case n.Device == manual && (n.Phase != core.NodeSkipped || n.Reason != clusters.ManualUpgradeReason || n.Cordoned):
			t.Fatalf("manual node: %+v", n)
		case n.Device != manual && n.Phase != core.NodeDone:
			t.Fatalf("node %+v", n)
		}
	}
	for _, l := range e.nodes.log {
		if l == "cordon node-2" {
			t.Fatalf("the manual node was cordoned: %v", e.nodes.log)
		}
	}
	if d, _ := e.des.Get(manual); d.KubernetesVersion == "v1.37.2" || d.Operation != nil {
		t.Fatalf("the manual node was handed the upgrade: %+v", d)
	}
	rm := e.wait(e.start(Spec{Kind: core.RolloutRemove, Devices: []string{manual}}).ID)
	if rm.State != core.RolloutSucceeded || len(rm.Nodes) != 1 || rm.Nodes[0].Phase != core.NodeDone {
		t.Fatalf("remove of the manual node: %s %+v", rm.State, rm.Nodes)
	}
}
