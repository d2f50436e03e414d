package kubeletsim

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// nodeIdentity is what a kubelet reads from its machine: stable per node
// name (machine-id, product UUID) or per process (boot id).
type nodeIdentity struct {
	machineID, systemUUID, bootID string
	kernel, osImage               string
}

func newNodeIdentity(name string) nodeIdentity {
	sum := sha256.Sum256([]byte("kubeletsim machine " + name))
	u := hex.EncodeToString(sum[16:])
	var boot [16]byte
	_, _ = rand.Read(boot[:])
	b := hex.EncodeToString(boot[:])
	return nodeIdentity{
		machineID:  hex.EncodeToString(sum[:16]),
		systemUUID: u[0:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:32],
		bootID:     b[0:8] + "-" + b[8:12] + "-" + b[12:16] + "-" + b[16:20] + "-" + b[20:32],
		kernel:     hostKernel(),
		osImage:    hostOSImage(),
	}
}

var (
	hostInfoOnce sync.Once
	hostKernelV  = "6.1.0"
	hostOSImageV = "Debian GNU/Linux 12 (bookworm)"
)

func loadHostInfo() {
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		hostKernelV = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				hostOSImageV = strings.Trim(v, `"`)
			}
		}
	}
}

func hostKernel() string  { hostInfoOnce.Do(loadHostInfo); return hostKernelV }
func hostOSImage() string { hostInfoOnce.Do(loadHostInfo); return hostOSImageV }

// The simulated machine: 4 CPUs, 8 GiB, a 60 GiB root disk, the kubelet's
// default maxPods and hard eviction thresholds (memory.available 100Mi,
// nodefs.available 10%) taken off allocatable.
var (
	capCPU       = resource.MustParse("4")
	capMemory    = resource.MustParse("8131204Ki")
	allocMemory  = resource.MustParse("8028804Ki")
	capPods      = resource.MustParse("110")
	capEphemeral = resource.MustParse("61202244Ki")
	// 90% of capEphemeral, in bytes, as the kubelet writes it.
	allocEphemeral = resource.MustParse("56403987978")
	zero           = resource.MustParse("0")
)

// initialNode is the kubelet's initialNode: default labels, --node-labels
// over them, taints, the attach/detach annotation and a full status.
func (k *Kubelet) initialNode() *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: k.cfg.NodeName,
			Labels: map[string]string{
				corev1.LabelHostname:      k.cfg.Hostname,
				corev1.LabelOSStable:      "linux",
				corev1.LabelArchStable:    "amd64",
				"beta.kubernetes.io/os":   "linux",
				"beta.kubernetes.io/arch": "amd64",
			},
			Annotations: map[string]string{
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
	}
	for key, v := range k.cfg.Labels {
		n.Labels[key] = v
	}
	if len(k.cfg.Taints) > 0 {
		n.Spec.Taints = append([]corev1.Taint(nil), k.cfg.Taints...)
	}
	k.setNodeStatus(n)
	return n
}

// setNodeStatus runs the kubelet's status setters that matter without a
// runtime: addresses, machine info, version info, daemon endpoints, Go
// runtime, runtime handlers and features, then the pressure and Ready
// conditions (Ready last, as the kubelet keeps it).
func (k *Kubelet) setNodeStatus(n *corev1.Node) {
	now := metav1.NewTime(time.Now())
	s := &n.Status
	var addrs []corev1.NodeAddress
	if k.cfg.InternalIP != "" {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: k.cfg.InternalIP})
	}
	s.Addresses = append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: k.cfg.Hostname})
	s.Capacity = corev1.ResourceList{
		corev1.ResourceCPU:              capCPU,
		corev1.ResourceMemory:           capMemory,
		corev1.ResourcePods:             capPods,
		corev1.ResourceEphemeralStorage: capEphemeral,
		"hugepages-1Gi":                 zero,
		"hugepages-2Mi":                 zero,
	}
	s.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU:              capCPU,
		corev1.ResourceMemory:           allocMemory,
		corev1.ResourcePods:             capPods,
		corev1.ResourceEphemeralStorage: allocEphemeral,
		"hugepages-1Gi":                 zero,
		"hugepages-2Mi":                 zero,
	}
	s.NodeInfo.MachineID = k.identity.machineID
	s.NodeInfo.SystemUUID = k.identity.systemUUID
	s.NodeInfo.BootID = k.identity.bootID
	s.NodeInfo.KernelVersion = k.identity.kernel
	s.NodeInfo.OSImage = k.identity.osImage
	s.NodeInfo.ContainerRuntimeVersion = k.cfg.ContainerRuntimeVersion
	s.NodeInfo.KubeletVersion = k.kubeletVersion()
	s.NodeInfo.OperatingSystem = "linux"
	s.NodeInfo.Architecture = "amd64"
	s.DaemonEndpoints.KubeletEndpoint.Port = 10250
	s.Features = &corev1.NodeFeatures{SupplementalGroupsPolicy: ptrTo(true)}
	features := &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptrTo(true), UserNamespaces: ptrTo(true)}
	s.RuntimeHandlers = []corev1.NodeRuntimeHandler{{Name: "", Features: features}, {Name: "runc", Features: features}}

	setPressure(s, corev1.NodeMemoryPressure, now, "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
	setPressure(s, corev1.NodeDiskPressure, now, "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
	setPressure(s, corev1.NodePIDPressure, now, "KubeletHasSufficientPID", "kubelet has sufficient PID available")

	ready := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: now,
	}
	if !k.ready.Load() {
		ready.Status, ready.Reason = corev1.ConditionFalse, "KubeletNotReady"
		ready.Message = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type != corev1.NodeReady {
			continue
		}
		ready.LastTransitionTime = s.Conditions[i].LastTransitionTime
		if s.Conditions[i].Status != ready.Status {
			ready.LastTransitionTime = now
		}
		s.Conditions[i] = ready
		return
	}
	ready.LastTransitionTime = now
	s.Conditions = append(s.Conditions, ready)
}

// setPressure is the kubelet's pressure setter for a node under no pressure.
func setPressure(s *corev1.NodeStatus, t corev1.NodeConditionType, now metav1.Time, reason, msg string) {
	for i := range s.Conditions {
		c := &s.Conditions[i]
		if c.Type != t {
			continue
		}
		c.LastHeartbeatTime = now
		if c.Status != corev1.ConditionFalse {
			c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionFalse, reason, msg, now
		}
		return
	}
	s.Conditions = append(s.Conditions, corev1.NodeCondition{
		Type: t, Status: corev1.ConditionFalse, Reason: reason, Message: msg,
		LastHeartbeatTime: now, LastTransitionTime: now,
	})
}

func ptrTo[T any](v T) *T { return &v }

// nodeLoop is one run of the kubelet's node side (Start, or Restart).
type nodeLoop struct {
	lister             corelisters.NodeLister
	lastReport         time.Time
	delayAfterChange   time.Duration
	lastStatusErrShown bool
	lease              *leaseState
}

// startNode starts the node informer, registers the Node and starts the
// status and lease loops.
func (k *Kubelet) startNode() error {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return fmt.Errorf("node %s: stopped", k.cfg.NodeName)
	}
	ctx, stop := context.WithCancel(k.ctx)
	k.runStop = stop
	// The kubelet's node informer: a watch on its own Node only.
	factory := informers.NewSharedInformerFactoryWithOptions(k.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(metav1.ObjectNameField, k.cfg.NodeName).String()
		}))
	k.factory = factory
	inf := factory.Core().V1().Nodes()
	loop := &nodeLoop{lister: inf.Lister(), lease: &leaseState{}}
	k.nodeLoop = loop
	k.mu.Unlock()

	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(any) {
			k.nodeDeleted.Store(true)
			k.log.Warn("Node was deleted from the API server; a kubelet re-registers only when it restarts, so this one keeps heartbeating against a missing Node")
		},
		AddFunc: func(any) {
			if k.nodeDeleted.Swap(false) {
				k.log.Info("Node exists again (created by someone else)")
			}
		},
	})
	factory.Start(ctx.Done())

	start := time.Now()
	if err := k.register(ctx); err != nil {
		stop()
		return err
	}
	first := false
	select {
	case <-k.registered:
	default:
		k.registerTook = time.Since(start)
		first = true
	}
	k.log.Info("Successfully registered node", "took", time.Since(start).Round(time.Millisecond), "ready", k.ready.Load())
	if first {
		close(k.registered)
	}

	k.runWG.Add(2)
	go func() {
		defer k.runWG.Done()
		k.every(ctx, k.cfg.StatusEvery, k.statusKick, func() { k.syncNodeStatus(ctx, loop) })
	}()
	go func() {
		defer k.runWG.Done()
		k.every(ctx, k.cfg.LeaseEvery, nil, func() { k.syncLease(ctx, loop.lease) })
	}()
	if k.cfg.RunPods {
		k.startPods(ctx)
	}
	return nil
}

// stopNode ends the current run and waits for its loops.
func (k *Kubelet) stopNode() {
	k.mu.Lock()
	stop, factory, tr := k.runStop, k.factory, k.transport
	k.runStop, k.factory = nil, nil
	k.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	k.runWG.Wait()
	factory.Shutdown()
	tr.CloseIdleConnections()
	k.log.Info("kubelet stopped: no more status updates or lease renewals; the Node stays")
}

// every is wait.JitterUntil with sliding=true: f, then a jittered pause,
// cut short by a kick (nil: none).
func (k *Kubelet) every(ctx context.Context, period time.Duration, kick <-chan struct{}, f func()) {
	for {
		f()
		t := time.NewTimer(jitter(period, heartbeatJitter))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// register is the kubelet's registerWithAPIServer: create the Node; if it
// exists, reconcile the default labels onto it. It retries with the
// kubelet's backoff (100 ms doubling to 7 s) until RegisterTimeout.
func (k *Kubelet) register(ctx context.Context) error {
	deadline := time.Now().Add(k.cfg.RegisterTimeout)
	step := 100 * time.Millisecond
	var lastErr error
	for {
		if err := k.tryRegister(ctx); err == nil {
			return nil
		} else {
			lastErr = err
			k.log.Info("Unable to register node with API server", "err", err)
		}
		step = min(2*step, maxBackoff)
		if time.Now().Add(step).After(deadline) {
			return fmt.Errorf("node %s: not registered within %s: %w", k.cfg.NodeName, k.cfg.RegisterTimeout, lastErr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: stopped before registration: %w (last error: %v)", k.cfg.NodeName, ctx.Err(), lastErr)
		case <-time.After(step):
		}
	}
}

func (k *Kubelet) tryRegister(ctx context.Context) error {
	node := k.initialNode()
	_, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	switch {
	case apierrors.IsAlreadyExists(err):
	case apierrors.IsForbidden(err):
		// The kubelet then looks for an existing Node; keep the refusal
		// (often NodeRestriction refusing a label) if there is none.
		existing, gerr := k.client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("creating the Node was refused: %w", err)
		}
		return k.reconcileExisting(ctx, node, existing)
	default:
		return fmt.Errorf("creating the Node: %w", err)
	}
	existing, err := k.client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting the existing Node: %w", err)
	}
	k.log.Info("Node was previously registered")
	return k.reconcileExisting(ctx, node, existing)
}

// reconcileExisting is the kubelet's reconciliation of a Node that was
// already there: the attach/detach annotation, default labels and default
// resources, patched through nodes/status.
func (k *Kubelet) reconcileExisting(ctx context.Context, initial, existing *corev1.Node) error {
	orig := existing.DeepCopy()
	changed := false
	const cmad = "volumes.kubernetes.io/controller-managed-attach-detach"
	if existing.Annotations[cmad] != initial.Annotations[cmad] {
		if existing.Annotations == nil {
			existing.Annotations = map[string]string{}
		}
		existing.Annotations[cmad] = initial.Annotations[cmad]
		changed = true
	}
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for _, l := range []string{corev1.LabelHostname, corev1.LabelOSStable, corev1.LabelArchStable, "beta.kubernetes.io/os", "beta.kubernetes.io/arch"} {
		if v, ok := initial.Labels[l]; ok && existing.Labels[l] != v {
			existing.Labels[l] = v
			changed = true
		}
	}
	if existing.Status.Capacity == nil {
		existing.Status.Capacity = initial.Status.Capacity.DeepCopy()
		changed = true
	}
	if existing.Status.Allocatable == nil {
		existing.Status.Allocatable = initial.Status.Allocatable.DeepCopy()
		changed = true
	}
	if !changed {
		return nil
	}
	_, err := k.patchNodeStatus(ctx, orig, existing)
	return err
}

// syncNodeStatus is the kubelet's updateNodeStatus: up to five tries, the
// first from the informer's cache, the rest from the API server.
func (k *Kubelet) syncNodeStatus(ctx context.Context, loop *nodeLoop) {
	var err error
	for i := 0; i < statusUpdateRetries; i++ {
		if err = k.tryUpdateNodeStatus(ctx, loop, i); err == nil {
			if loop.lastStatusErrShown {
				k.log.Info("node status updates work again")
				loop.lastStatusErrShown = false
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
	k.heartbeatFails.Add(1)
	// One line per failure streak: 500 kubelets against a deleted Node
	// must not flood the log every 10 s.
	if !loop.lastStatusErrShown {
		k.log.Warn("Unable to update node status (update node status exceeds retry count)", "err", err)
		loop.lastStatusErrShown = true
	}
}

func (k *Kubelet) tryUpdateNodeStatus(ctx context.Context, loop *nodeLoop, try int) error {
	var orig *corev1.Node
	var err error
	if try == 0 {
		orig, err = loop.lister.Get(k.cfg.NodeName)
	} else {
		orig, err = k.heartbeat.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("error getting node %q: %w", k.cfg.NodeName, err)
	}
	node := orig.DeepCopy()
	labelsMissing := false
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for l, v := range map[string]string{corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"} {
		if node.Labels[l] != v {
			node.Labels[l] = v
			labelsMissing = true
		}
	}
	k.setNodeStatus(node)
	changed := labelsMissing || nodeStatusHasChanged(&orig.Status, &node.Status)
	if !changed && time.Since(loop.lastReport) < k.cfg.StatusReportEvery+loop.delayAfterChange {
		return nil
	}
	// The kubelet spreads the periodic reports of a changed node by up to
	// half the report period either way.
	if changed || loop.lastReport.IsZero() {
		loop.delayAfterChange = time.Duration(float64(k.cfg.StatusReportEvery) * (-0.5 + mrand.Float64()))
	} else {
		loop.delayAfterChange = 0
	}
	if _, err := k.patchNodeStatus(ctx, orig, node); err != nil {
		return err
	}
	loop.lastReport = time.Now()
	k.statusPatches.Add(1)
	return nil
}

// nodeStatusHasChanged compares statuses ignoring the heartbeat times.
func nodeStatusHasChanged(a, b *corev1.NodeStatus) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	for _, s := range []*corev1.NodeStatus{a, b} {
		for i := range s.Conditions {
			s.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
	}
	return !equality.Semantic.DeepEqual(a, b)
}

// patchNodeStatus is component-helpers' PatchNodeStatus: a strategic merge
// patch of nodes/status from the old to the new object (spec excluded).
// Addresses never change here, so its address fix-up is not needed.
func (k *Kubelet) patchNodeStatus(ctx context.Context, oldNode, newNode *corev1.Node) (*corev1.Node, error) {
	oldData, err := json.Marshal(oldNode)
	if err != nil {
		return nil, err
	}
	diff := newNode.DeepCopy()
	diff.Spec = oldNode.Spec
	newData, err := json.Marshal(diff)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, corev1.Node{})
	if err != nil {
		return nil, fmt.Errorf("node status patch: %w", err)
	}
	n, err := k.heartbeat.CoreV1().Nodes().Patch(ctx, k.cfg.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("failed to patch status for node %q: %w", k.cfg.NodeName, err)
	}
	return n, nil
}
