package kubeletsim

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leaseState is the lease controller's memory: the Lease it last wrote,
// so a renewal is one PUT without a GET.
type leaseState struct {
	latest      *coordinationv1.Lease
	errorShown  bool
	ownerErrors int
}

// syncLease is component-helpers' lease controller sync as the kubelet
// runs it (holder and name = node name, namespace kube-node-lease, owner
// reference to the Node set once the Node can be read).
func (k *Kubelet) syncLease(ctx context.Context, st *leaseState) {
	if st.latest != nil {
		if err := k.retryUpdateLease(ctx, st, st.latest); err == nil {
			return
		} else if ctx.Err() == nil {
			k.log.Info("failed to update lease using latest lease, fallback to ensure lease", "err", err)
		}
	}
	lease, created := k.backoffEnsureLease(ctx, st)
	st.latest = lease
	if !created && lease != nil {
		if err := k.retryUpdateLease(ctx, st, lease); err != nil && ctx.Err() == nil {
			k.log.Warn("Will retry updating lease", "interval", k.cfg.LeaseEvery, "err", err)
		}
	}
}

// backoffEnsureLease retries ensureLease with backoff (200 ms doubling to
// 7 s) until it succeeds or ctx ends.
func (k *Kubelet) backoffEnsureLease(ctx context.Context, st *leaseState) (*coordinationv1.Lease, bool) {
	sleep := 100 * time.Millisecond
	for {
		lease, created, err := k.ensureLease(ctx, st)
		if err == nil {
			return lease, created
		}
		if ctx.Err() != nil {
			return nil, false
		}
		sleep = min(2*sleep, maxBackoff)
		k.heartbeatFails.Add(1)
		k.log.Warn("Failed to ensure lease exists, will retry", "interval", sleep, "err", err)
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(sleep):
		}
	}
}

func (k *Kubelet) ensureLease(ctx context.Context, st *leaseState) (*coordinationv1.Lease, bool, error) {
	leases := k.heartbeat.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		fresh, err := k.newLease(ctx, st, nil)
		if err != nil {
			// As the controller does: no Lease without its owner; the
			// next tick tries again.
			return nil, false, nil
		}
		lease, err := leases.Create(ctx, fresh, metav1.CreateOptions{})
		if err != nil {
			return nil, false, err
		}
		k.leaseRenewals.Add(1)
		return lease, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return lease, false, nil
}

func (k *Kubelet) retryUpdateLease(ctx context.Context, st *leaseState, base *coordinationv1.Lease) error {
	leases := k.heartbeat.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	for i := 0; i < leaseUpdateRetries; i++ {
		next, err := k.newLease(ctx, st, base)
		if err != nil {
			return err
		}
		updated, err := leases.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			st.latest = updated
			k.leaseRenewals.Add(1)
			if st.errorShown {
				k.log.Info("lease renewals work again")
				st.errorShown = false
			}
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		if !st.errorShown {
			k.log.Warn("Failed to update lease", "err", err)
			st.errorShown = true
		}
		k.heartbeatFails.Add(1)
		if apierrors.IsNotFound(err) {
			// Deleted (the Node's deletion garbage-collects it): the
			// caller falls back to ensureLease.
			return err
		}
		if apierrors.IsConflict(err) {
			if base, _ = k.backoffEnsureLease(ctx, st); base == nil {
				return err
			}
		}
	}
	return fmt.Errorf("failed %d attempts to update lease", leaseUpdateRetries)
}

// newLease builds the Lease to create (base nil) or a renewal of base. An
// error means the Node's owner reference could not be set: that blocks a
// create, not a renewal.
func (k *Kubelet) newLease(ctx context.Context, st *leaseState, base *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	var lease *coordinationv1.Lease
	if base == nil {
		name := k.cfg.NodeName
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &name},
		}
	} else {
		lease = base.DeepCopy()
	}
	secs := int32(k.cfg.LeaseDuration / time.Second)
	lease.Spec.LeaseDurationSeconds = &secs
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if len(lease.OwnerReferences) == 0 {
		node, err := k.heartbeat.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			st.ownerErrors++
			if base == nil {
				if st.ownerErrors == 1 && ctx.Err() == nil {
					k.log.Warn("Failed to get node when trying to set owner ref to the node lease", "err", err)
				}
				return nil, err
			}
		} else {
			st.ownerErrors = 0
			lease.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: k.cfg.NodeName, UID: node.UID,
			}}
		}
	}
	return lease, nil
}
