package kubeletsim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// podStopDelay caps how long a deleted pod's containers take to "stop":
// long enough that the pod is seen Terminating, short enough for tests.
const podStopDelay = 200 * time.Millisecond

// podRunner is the pod side of one run of a kubelet (Config.RunPods): the
// informer on the pods bound to the Node and what it started for each.
type podRunner struct {
	k   *Kubelet
	ctx context.Context

	mu     sync.Mutex
	acting map[podAction]bool // started once per pod and action
}

type podAction struct {
	uid  types.UID
	stop bool // false: report Running; true: finish the deletion
}

// startPods starts the kubelet's pod watch: the pods with spec.nodeName
// of this Node (the selector the Node authorizer requires of a node's
// list and watch), for the length of the run.
func (k *Kubelet) startPods(ctx context.Context) {
	r := &podRunner{k: k, ctx: ctx, acting: map[podAction]bool{}}
	inf := coreinformers.NewFilteredPodInformer(k.client, metav1.NamespaceAll, 0, cache.Indexers{},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.NodeName).String()
		})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.saw,
		UpdateFunc: func(_, obj any) { r.saw(obj) },
		DeleteFunc: r.gone,
	})
	// The informer's Run returns only after its handlers did, so the
	// goroutines they add to runWG are added while it holds a count.
	k.runWG.Add(1)
	go func() {
		defer k.runWG.Done()
		inf.Run(ctx.Done())
	}()
}

// saw acts on a pod's newest state, once per pod and action: a pod being
// deleted is finished, a pending one is reported running.
func (r *podRunner) saw(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	switch {
	case pod.DeletionTimestamp != nil:
		r.once(podAction{pod.UID, true}, func() { r.remove(pod) })
	case pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "":
		r.once(podAction{pod.UID, false}, func() { r.run(pod) })
	}
}

func (r *podRunner) gone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.mu.Lock()
	delete(r.acting, podAction{pod.UID, false})
	delete(r.acting, podAction{pod.UID, true})
	r.mu.Unlock()
}

func (r *podRunner) once(a podAction, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.acting[a] {
		return
	}
	r.acting[a] = true
	r.k.runWG.Add(1)
	go func() {
		defer r.k.runWG.Done()
		f()
	}()
}

// run reports the pod running as the kubelet's status manager does once
// its containers started: phase Running, every container running and
// ready, init containers completed, the pod Ready.
func (r *podRunner) run(pod *corev1.Pod) {
	patch, err := json.Marshal(map[string]any{"status": r.runningStatus(pod)})
	if err != nil {
		r.k.log.Error("pod status patch", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return
	}
	err = r.retry(func(ctx context.Context) error {
		_, err := r.k.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	})
	if err == nil {
		r.k.podsStarted.Add(1)
	} else if r.ctx.Err() == nil && !apierrors.IsNotFound(err) {
		r.k.log.Warn("Failed to update the pod status", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

func (r *podRunner) runningStatus(pod *corev1.Pod) corev1.PodStatus {
	now := metav1.Now()
	st := corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now}
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized,
		corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	if ip := r.k.cfg.InternalIP; ip != "" {
		st.HostIP, st.HostIPs = ip, []corev1.HostIP{{IP: ip}}
		if pod.Spec.HostNetwork {
			st.PodIP, st.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		}
	}
	containerID := func(name string) string {
		sum := sha256.Sum256([]byte(string(pod.UID) + "/" + name))
		return "containerd://" + hex.EncodeToString(sum[:])
	}
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ContainerID: containerID(c.Name), Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: containerID(c.Name)}},
		})
	}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ContainerID: containerID(c.Name), Ready: true, Started: ptrTo(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return st
}

// remove finishes a deletion as the kubelet does once the containers
// stopped: a delete with grace period 0 and the pod's UID as a
// precondition, so a replacement of the same name is left alone.
func (r *podRunner) remove(pod *corev1.Pod) {
	stop := podStopDelay
	if g := pod.DeletionGracePeriodSeconds; g != nil {
		stop = min(stop, time.Duration(*g)*time.Second)
	}
	select {
	case <-r.ctx.Done():
		return
	case <-time.After(stop):
	}
	err := r.retry(func(ctx context.Context) error {
		return r.k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptrTo(int64(0)),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
	})
	switch {
	case err == nil:
		r.k.podsRemoved.Add(1)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err) || r.ctx.Err() != nil:
		// Gone already, or replaced: nothing left of this pod to remove.
	default:
		r.k.log.Warn("Failed to delete the terminated pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// retry calls f up to five times, 200 ms apart and doubling, while the
// error is one a retry can cure.
func (r *podRunner) retry(f func(ctx context.Context) error) error {
	step := 200 * time.Millisecond
	var err error
	for try := 0; try < 5; try++ {
		if err = f(r.ctx); err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) ||
			apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			return err
		}
		select {
		case <-r.ctx.Done():
			return fmt.Errorf("%w (last error: %v)", r.ctx.Err(), err)
		case <-time.After(step):
		}
		step *= 2
	}
	return err
}
