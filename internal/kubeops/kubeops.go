// Package kubeops is what ztpd does to the Nodes of a cluster it onboarded
// for day-2 operations: cordon, drain (policy/v1 evictions that
// respect PodDisruptionBudgets), wait for a Node to come back Ready at a new
// kubelet version, uncordon, delete. It works through any
// kubernetes.Interface; the rights it needs are RBAC() (the operator
// identity). The upgrade itself is the device agent's.
package kubeops

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// FieldManager is the manager of ztpd's writes (as the watch's label
// patches), so a Node's managed fields show what ztpd set.
const FieldManager = "ztpd"

// nodePoll is how often WaitNode and WaitNodeGone read the Node.
const nodePoll = 500 * time.Millisecond

// Operator runs node operations against one cluster.
type Operator struct {
	client kubernetes.Interface
}

// New returns an Operator working through client.
func New(client kubernetes.Interface) *Operator {
	return &Operator{client: client}
}

// Cordon marks the Node unschedulable (spec.unschedulable, as kubectl
// cordon) and reports whether that changed anything.
func (o *Operator) Cordon(ctx context.Context, node string) (changed bool, err error) {
	return o.setUnschedulable(ctx, node, true)
}

// Uncordon makes the Node schedulable again and reports whether that
// changed anything. It does not know who cordoned the Node: a caller that
// must not undo an operator's cordon checks that before.
func (o *Operator) Uncordon(ctx context.Context, node string) (changed bool, err error) {
	return o.setUnschedulable(ctx, node, false)
}

func (o *Operator) setUnschedulable(ctx context.Context, node string, on bool) (bool, error) {
	verb := "uncordon"
	if on {
		verb = "cordon"
	}
	changed := false
	// The patch carries the resourceVersion read, so "changed" is exact
	// even when someone else cordons at the same time (a conflict reads
	// again).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := o.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Spec.Unschedulable == on {
			changed = false
			return nil
		}
		value := "null" // the field's default, as kubectl uncordon leaves it
		if on {
			value = "true"
		}
		patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"unschedulable":%s}}`, n.ResourceVersion, value)
		if _, err := o.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("%s node %s: %w", verb, node, err)
	}
	return changed, nil
}

// DeleteNode deletes the Node object; one already gone is no error.
func (o *Operator) DeleteNode(ctx context.Context, node string) error {
	err := o.client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %s: %w", node, err)
	}
	return nil
}

// WaitNodeGone waits, until ctx ends, for the Node object to be gone.
func (o *Operator) WaitNodeGone(ctx context.Context, node string) error {
	return o.WaitNode(ctx, node, nil)
}

// NodeCheck tells whether a Node is as wanted and, either way, what it
// shows against what is wanted, for the error when it never is (e.g.
// "kubelet v1.36.3, Ready=True; want v1.37.2 Ready"). A nil Node means
// the Node does not exist.
type NodeCheck func(n *corev1.Node) (ok bool, shows string)

// NodeReadyAt holds when the Node is Ready (condition True) and its
// kubelet reports version (status.nodeInfo.kubeletVersion): a Node back
// from an upgrade.
func NodeReadyAt(version string) NodeCheck {
	return func(n *corev1.Node) (bool, string) {
		want := "; want " + version + " Ready"
		if n == nil {
			return false, "not found" + want
		}
		ready := "no Ready condition"
		ok := false
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = "Ready=" + string(c.Status)
				ok = c.Status == corev1.ConditionTrue
			}
		}
		have := n.Status.NodeInfo.KubeletVersion
		return ok && have == version, fmt.Sprintf("kubelet %s, %s%s", have, ready, want)
	}
}

// WaitNode reads the Node every 500 ms until check holds, or ctx ends with
// an error that says what the Node last showed. A nil check waits for the
// Node to be gone.
func (o *Operator) WaitNode(ctx context.Context, node string, check NodeCheck) error {
	if check == nil {
		check = func(n *corev1.Node) (bool, string) {
			if n == nil {
				return true, "gone"
			}
			return false, "still present"
		}
	}
	begin := time.Now()
	shows := "not read yet"
	for {
		n, err := o.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err == nil:
			var ok bool
			if ok, shows = check(n); ok {
				return nil
			}
		case apierrors.IsNotFound(err):
			var ok bool
			if ok, shows = check(nil); ok {
				return nil
			}
		case ctx.Err() == nil:
			shows = "reading it: " + err.Error()
		}
		t := time.NewTimer(nodePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("node %s: %s (after %s: %w)", node, shows, time.Since(begin).Round(time.Millisecond), ctx.Err())
		case <-t.C:
		}
	}
}
