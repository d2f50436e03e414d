// Package rollout runs operations over a cluster's nodes a few at a time:
// a Kubernetes upgrade, a SONiC image upgrade, or taking
// members out (scale-down, delete, a switch going standalone). Control
// planes go first, one by one; then workers, MaxUnavailable at once. Per
// node: cordon and drain the Node through the cluster's API server (the
// eviction API, so PodDisruptionBudgets hold), hand the device's agent its
// operation (hooks, kubeadm upgrade, image install and reboot, reset),
// wait for the agent's steps and then for the Node Ready at the target (or
// gone), uncordon. A failed node stops the rollout with the reason; it can
// be paused, resumed and aborted. The rollout record is the one place its
// progress is kept: every phase change is stored and is an event.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// NodeOps is what the engine does to a cluster's Nodes, as ztpd's operator
// identity in that cluster.
type NodeOps interface {
	// Node is the Node as the cluster shows it (ok false: no such Node).
	Node(ctx context.Context, cluster, node string) (n NodeInfo, ok bool, err error)
	// Cordon marks the Node unschedulable for owner (a rollout); ours
	// reports whether ztpd cordoned it (now or in an earlier rollout), so
	// only those are uncordoned.
	Cordon(ctx context.Context, cluster, node, owner string) (ours bool, err error)
	Uncordon(ctx context.Context, cluster, node string) error
	// Drain evicts the Node's pods through the eviction API, within
	// timeout; a PodDisruptionBudget that does not allow it is an error
	// naming the pod and the budget.
	Drain(ctx context.Context, cluster, node string, timeout time.Duration) error
	// WaitReady waits until the Node is Ready with kubelet version
	// version ("" any), within timeout.
	WaitReady(ctx context.Context, cluster, node, version string, timeout time.Duration) error
	DeleteNode(ctx context.Context, cluster, node string) error
}

// NodeInfo is what the engine reads of a Node.
type NodeInfo struct {
	KubeletVersion string
	Ready          bool
	Unschedulable  bool
}

// Agents hands operations to device agents and waits for them (the
// desired-state owner).
type Agents interface {
	// Get is the device's desired state (its hooks, when a rollout names
	// none).
	Get(device string) (core.DesiredState, error)
	Assign(ctx context.Context, by, device string, op core.AgentOperation, mutate func(*core.DesiredState)) error
	WaitOperation(ctx context.Context, device, opID string) (*core.AgentOperation, error)
	Withdraw(ctx context.Context, device, opID, reason string) error
}

// Members ends memberships and credentials (the joiner).
type Members interface {
	MemberLeft(ctx context.Context, device, reason string) error
	RevokeAgent(ctx context.Context, device, reason string) error
	ResetDevice(ctx context.Context, device string) (core.Device, error)
}

// Options configure the engine.
type Options struct {
	// Appliance names this appliance when several share the store: its
	// rollouts carry it, and a restart resumes only its own.
	Appliance string
	Nodes     NodeOps
	Agents    Agents
	Members   Members
	// Binaries says where agents fetch a version's kubeadm and kubelet
	// (the appliance's HTTP copy of them, read from the version's ISO) by
	// version tag: the URL they hang off (url + "/kubeadm") and their
	// sha256s by name when known. An empty url: none (the agent upgrades
	// with the kubeadm the node has); an error fails the node before it
	// is cordoned. nil: none.
	Binaries func(version string) (url string, sha256 map[string]string, err error)
	// DrainTimeout and StepTimeout are a Spec's when it names none
	// (default DefaultDrainTimeout, DefaultStepTimeout).
	DrainTimeout, StepTimeout time.Duration
	// GateScripts is the directory of the scripts a gate may run as its
	// operator check ("": none may).
	GateScripts string
	// GateInterval is how often a soaking gate runs its checks (default
	// DefaultGateInterval); GonePoll how often a node's Node is looked
	// for while its agent works (default DefaultGonePoll).
	GateInterval, GonePoll time.Duration
	// NodeTimeout is a Spec's when it names none (zero: its StepTimeout).
	NodeTimeout time.Duration
	Now         func() time.Time
	Log         *slog.Logger
	// Registerer takes the engine's metrics (nil: kept, not exported).
	Registerer prometheus.Registerer
}

// Defaults.
const (
	DefaultDrainTimeout = 5 * time.Minute
	DefaultStepTimeout  = 15 * time.Minute
)

// Engine runs rollouts; one per appliance (in a group, the
// leader adopts the rollouts of an appliance that is gone).
type Engine struct {
	st      core.Store
	opts    Options
	metrics *metrics

	mu   sync.Mutex
	runs map[string]*run

	// involved counts, per device, the rollouts running here that have
	// not finished its node (pending or in flight): Involved answers
	// every agent poll from it, so it has a lock of its own.
	involvedMu sync.RWMutex
	involved   map[string]int
	// upcoming counts the same for the devices next in a rollout (in
	// flight, or among the next to start): Upcoming, under involvedMu.
	upcoming map[string]int
}

// run is a rollout running in this process.
type run struct {
	wake chan struct{} // pause, resume, abort
	done chan struct{} // closed when the rollout ended
	// unfinished are its devices whose node has not finished, upcoming
	// those next (both guarded by Engine.involvedMu).
	unfinished, upcoming map[string]bool
	// crashBase are the pods crash looping on the canary's Nodes before
	// the rollout (node/namespace/name).
	crashBase map[string]bool
}

// New builds the engine. The rollouts of this appliance that a restart
// interrupted carry on from where their records say they were (resume):
// nodes done stay done, nodes in flight go on from their phase, a paused
// rollout stays paused. Nodes of ended rollouts that were rolling back go
// on rolling back (resumeRollbacks).
func New(st core.Store, opts Options) (*Engine, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.StepTimeout <= 0 {
		opts.StepTimeout = DefaultStepTimeout
	}
	e := &Engine{st: st, opts: opts, metrics: newMetrics(opts.Registerer), runs: map[string]*run{}, involved: map[string]int{},
		upcoming: map[string]int{}}
	mine := func(r core.Rollout) bool { return r.Appliance == opts.Appliance }
	if opts.Agents == nil {
		// Without agents nothing in flight can be awaited.
		if _, err := e.failUnfinished(mine, "interrupted by a restart of ztpd, which runs no device agents; start it again to continue"); err != nil {
			return nil, err
		}
		return e, nil
	}
	mineNow, err := e.toResume(mine)
	if err != nil {
		return nil, err
	}
	for _, r := range mineNow {
		if err := e.resume(r, "resumed after a restart of ztpd", "restart"); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// AdoptOrphans takes over the rollouts of appliances that are gone
// (several appliances share the store; the group's leader calls it): each
// unfinished one, and each ended one with a node rolling back, is
// recorded as this appliance's in one transaction that only succeeds
// while the gone appliance still holds it (so two leaders never both run
// it), then resumed as after a restart. It returns how many it took.
func (e *Engine) AdoptOrphans(alive func(appliance string) bool) (int, error) {
	orphan := func(r core.Rollout) bool {
		return r.Appliance != "" && r.Appliance != e.opts.Appliance && !alive(r.Appliance)
	}
	if e.opts.Agents == nil {
		return e.failUnfinished(orphan, "the appliance running it stopped; start it again to continue")
	}
	orphans, err := e.toResume(orphan)
	if err != nil {
		return 0, err
	}
	took := 0
	for _, o := range orphans {
		var adopted core.Rollout
		err := e.update(o.ID, func(r *core.Rollout) (string, error) {
			if r.Appliance != o.Appliance {
				return "", errTaken // another leader adopted it, or its appliance came back
			}
			r.Appliance = e.opts.Appliance
			adopted = *r
			return fmt.Sprintf("adopted by appliance %s: appliance %s, which ran it, is gone", e.opts.Appliance, o.Appliance), nil
		})
		if errors.Is(err, errTaken) {
			continue
		}
		if err != nil {
			return took, err
		}
		took++
		e.opts.Log.Info("rollout adopted", "rollout", o.ID, "from", o.Appliance, "state", adopted.State)
		if err := e.resume(adopted, "adopted from appliance "+o.Appliance+", which is gone", "adopted"); err != nil {
			return took, err
		}
	}
	return took, nil
}

// toResume lists those of whose rollouts a run must carry on: the
// unfinished ones, and the ended ones with a node rolling back.
func (e *Engine) toResume(whose func(core.Rollout) bool) ([]core.Rollout, error) {
	var rs []core.Rollout
	err := e.List(func(r core.Rollout) bool {
		if whose(r) && (!r.State.Ended() || rollingBack(r)) {
			rs = append(rs, r)
		}
		return true
	})
	return rs, err
}

// errTaken: the rollout is no longer the gone appliance's.
var errTaken = errors.New("rollout taken over")

// rollingBack reports whether a node of r is rolling back.
func rollingBack(r core.Rollout) bool {
	for _, n := range r.Nodes {
		if n.Phase == core.NodeRollingBack {
			return true
		}
	}
	return false
}

// resume carries on with r, this appliance's now, after the process that
// ran it stopped: an unfinished rollout runs again from its record (its
// nodes in flight resume from their phase: resumeNode); an ended one
// brings back the nodes it left rolling back.
func (e *Engine) resume(r core.Rollout, why, how string) error {
	if r.State.Ended() {
		e.resumeRollbacks(r)
		return nil
	}
	e.mu.Lock()
	running := e.runs[r.ID] != nil
	e.mu.Unlock()
	if running {
		return nil
	}
	err := e.update(r.ID, func(cur *core.Rollout) (string, error) {
		// A soak the stop interrupted starts again: its checks ran in
		// the process that stopped.
		if g := cur.GateStatus; g != nil && g.Phase == core.GateSoaking {
			g.Phase, g.Until, g.Reason = core.GateWaiting, time.Time{}, "soak interrupted: "+why
		}
		r = *cur
		return why, nil
	})
	if err != nil {
		return err
	}
	e.metrics.rolloutsResumed.WithLabelValues(how).Inc()
	e.opts.Log.Info("rollout "+why, "rollout", r.ID, "kind", r.Kind, "state", r.State, "summary", summary(r))
	e.launch(r)
	return nil
}

// failUnfinished records the unfinished rollouts match picks as failed
// (running one again skips the nodes already done): an engine without
// agents cannot await what their nodes were doing.
func (e *Engine) failUnfinished(match func(core.Rollout) bool, why string) (int, error) {
	var stale []string
	err := e.st.View(func(tx core.Tx) error {
		return tx.Rollouts().List("", func(r core.Rollout) (bool, error) {
			if !r.State.Ended() && match(r) {
				stale = append(stale, r.ID)
			}
			return true, nil
		})
	})
	if err != nil {
		return 0, err
	}
	for _, id := range stale {
		if err := e.update(id, func(r *core.Rollout) (string, error) {
			r.State, r.Reason, r.Finished = core.RolloutFailed, why, e.now()
			return why, nil
		}); err != nil {
			return 0, err
		}
	}
	return len(stale), nil
}

func (e *Engine) now() time.Time { return e.opts.Now().UTC() }

// Spec is a rollout to start.
type Spec struct {
	Cluster string
	Kind    core.RolloutKind
	// Target is the version tag (kubernetes) or image ref (image);
	// TargetID its record's ID.
	Target, TargetID string
	// Devices names the devices (all the cluster's members when empty).
	Devices []string
	// Selector keeps only the devices whose labels (their record's and
	// their desired state's) include all of these.
	Selector              map[string]string
	Mode                  core.DeviceMode // remove: standalone keeps the device managed
	MaxUnavailable        int
	DrainTimeout          time.Duration
	StepTimeout           time.Duration
	Hooks                 map[string]string
	ContinueOnHookFailure bool
	// Canary is done first, then Gate decides whether the rest follows.
	Canary core.RolloutCanary
	Gate   core.RolloutGate
	// Fingerprint, when set, is the plan's the operator was shown: the
	// start is refused when the plan now differs.
	Fingerprint string
	// Rollback (default manual) and OnFailure (default stop): see
	// core.Rollout.
	Rollback  core.RollbackPolicy
	OnFailure core.FailurePolicy
	// NodeTimeout bounds a node's return to Ready (default StepTimeout).
	NodeTimeout time.Duration
	Job         string
	By          string
}

// member is one device in the plan.
type member struct {
	device, node, role string
	first              bool // the cluster's first control plane: kubeadm upgrade apply
	sonic              bool
	// manual: a Kubernetes upgrade leaves it out (the cluster's
	// ManualUpgrade), shown skipped with why.
	manual bool
	canary bool // done before the gate
}

// Start plans and starts a rollout.
func (e *Engine) Start(ctx context.Context, spec Spec) (core.Rollout, error) {
	e.defaults(&spec)
	if err := e.checkSpec(spec); err != nil {
		return core.Rollout{}, err
	}
	// The plan as an operator would see it now: its skew rules hold, and
	// it is the one shown when the start names its fingerprint.
	p, err := e.plan(ctx, spec, false)
	if err != nil {
		return core.Rollout{}, err
	}
	if spec.Fingerprint != "" && spec.Fingerprint != p.Fingerprint {
		return core.Rollout{}, errChanged(spec.Fingerprint, p)
	}
	if spec.NodeTimeout <= 0 {
		spec.NodeTimeout = e.opts.NodeTimeout
	}
	if spec.NodeTimeout <= 0 {
		spec.NodeTimeout = spec.StepTimeout
	}
	switch spec.Rollback {
	case "":
		spec.Rollback = core.RollbackManual
	case core.RollbackManual, core.RollbackAuto:
	default:
		return core.Rollout{}, core.Errorf(core.KindInvalid, "rollback %q: want auto or manual", spec.Rollback)
	}
	switch spec.OnFailure {
	case "":
		spec.OnFailure = core.OnFailureStop
	case core.OnFailureStop, core.OnFailureContinue:
	default:
		return core.Rollout{}, core.Errorf(core.KindInvalid, "on_failure %q: want stop or continue", spec.OnFailure)
	}
	if spec.Rollback == core.RollbackAuto && spec.Kind != core.RolloutImage && spec.Kind != core.RolloutKubernetes {
		return core.Rollout{}, core.Errorf(core.KindInvalid, "rollback auto: only image and kubernetes rollouts roll back")
	}
	id, err := randomName(10)
	if err != nil {
		return core.Rollout{}, err
	}
	now := e.now()
	r := core.Rollout{ID: "ro-" + now.Format("20060102T150405") + "-" + id, Appliance: e.opts.Appliance, Cluster: spec.Cluster, Kind: spec.Kind,
		State: core.RolloutRunning, Target: spec.Target, TargetID: spec.TargetID, Mode: spec.Mode,
		MaxUnavailable: spec.MaxUnavailable, DrainTimeout: core.Duration(spec.DrainTimeout), StepTimeout: core.Duration(spec.StepTimeout),
		Hooks: spec.Hooks, Selector: spec.Selector, ContinueOnHookFailure: spec.ContinueOnHookFailure, Job: spec.Job, CreatedBy: spec.By,
		Canary: spec.Canary, Gate: spec.Gate, Fingerprint: p.Fingerprint,
		Rollback: spec.Rollback, OnFailure: spec.OnFailure, NodeTimeout: core.Duration(spec.NodeTimeout),
		Created: now, UpdatedAt: now}
	if !spec.Canary.IsZero() {
		r.GateStatus = &core.GateStatus{Phase: core.GateWaiting, Since: now}
	}
	err = e.st.Update(func(tx core.Tx) error {
		r.Nodes = nil // fn may run again (a shared store): plan afresh
		ms, err := plan(tx, spec)
		if err != nil {
			return err
		}
		ms = markCanary(tx, spec, ms)
		for _, m := range ms {
			n := core.RolloutNode{Device: m.device, NodeName: m.node, Role: m.role, Phase: core.NodePending, Canary: m.canary}
			if m.manual {
				n.Phase, n.Reason, n.Finished = core.NodeSkipped, clusters.ManualUpgradeReason, now
			}
			r.Nodes = append(r.Nodes, n)
		}
		if err := busy(tx, r); err != nil {
			return err
		}
		if err := tx.Rollouts().Put(r); err != nil {
			return err
		}
		_, err = tx.Events().Append(core.Event{Type: "rollout.started", Cluster: r.Cluster, Time: now,
			Message: fmt.Sprintf("rollout %s (%s %s) started by %s over %d nodes, %d at a time", r.ID, r.Kind, r.Target, spec.By,
				len(r.Nodes), r.MaxUnavailable), Fields: map[string]string{"rollout": r.ID}})
		return err
	})
	if err != nil {
		return core.Rollout{}, err
	}
	e.launch(r)
	return r, nil
}

// busy refuses a second rollout over the same cluster, or over a device
// of another (standalone switches), while one runs.
func busy(tx core.Tx, r core.Rollout) error {
	mine := map[string]bool{}
	for _, n := range r.Nodes {
		if n.Phase == core.NodePending {
			mine[n.Device] = true
		}
	}
	return tx.Rollouts().List("", func(o core.Rollout) (bool, error) {
		if o.State.Ended() {
			return true, nil
		}
		if r.Cluster != "" && o.Cluster == r.Cluster {
			return false, core.Errorf(core.KindState, "rollout %s (%s) is %s on this cluster; pause, resume or abort it first", o.ID, o.Kind, o.State)
		}
		for _, n := range o.Nodes {
			if mine[n.Device] {
				return false, core.Errorf(core.KindState, "rollout %s (%s) is %s over device %s; pause, resume or abort it first",
					o.ID, o.Kind, o.State, n.Device)
			}
		}
		return true, nil
	})
}

// plan lists the rollout's members: control planes first (the first one
// first), then workers, each group in device order.
func plan(tx core.Tx, spec Spec) ([]member, error) {
	first := ""
	var cl core.Cluster
	if spec.Cluster != "" {
		var err error
		if cl, err = tx.Clusters().Get(spec.Cluster); err != nil {
			return nil, err
		}
		if js, err := tx.Clusters().JoinState(spec.Cluster); err == nil {
			first = js.FirstControlPlane
		}
	}
	devs := spec.Devices
	if len(devs) == 0 {
		if spec.Cluster == "" {
			return nil, core.Errorf(core.KindInvalid, "a rollout names a cluster or devices")
		}
		err := tx.Memberships().Roster(spec.Cluster, func(device, _ string) (bool, error) {
			devs = append(devs, device)
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	var out []member
	for _, id := range devs {
		d, err := tx.Devices().Get(id)
		if errors.Is(err, core.ErrNotFound) {
			return nil, core.Errorf(core.KindInvalid, "device %s not found", id)
		}
		if err != nil {
			return nil, err
		}
		m := member{device: d.ID, sonic: d.Kind == core.KindSONiC, first: d.ID == first,
			manual: spec.Kind == core.RolloutKubernetes && clusters.IsManualUpgrade(cl, d.ID)}
		ms, err := tx.Memberships().Get(d.ID)
		switch {
		case err == nil && (spec.Cluster == "" || ms.Cluster == spec.Cluster) && ms.State != core.StateLeft:
			m.node, m.role = ms.NodeName, ms.Role
		case (spec.Kind == core.RolloutImage || spec.Kind == core.RolloutJoin) && (err == nil || errors.Is(err, core.ErrNotFound)):
			// A standalone switch: hooks and image only, or its join.
		case err != nil && !errors.Is(err, core.ErrNotFound):
			return nil, err
		default:
			return nil, core.Errorf(core.KindInvalid, "device %s is not a member of cluster %s", d.ID, spec.Cluster)
		}
		if !selected(tx, d, spec.Selector) {
			continue
		}
		if m.role == "etcd" && spec.Kind == core.RolloutKubernetes {
			// An etcd node (external etcd) runs no Kubernetes release:
			// a version upgrade leaves it as it is.
			continue
		}
		if spec.Kind == core.RolloutImage && !m.sonic {
			return nil, core.Errorf(core.KindInvalid, "device %s is not a SONiC switch", d.ID)
		}
		out = append(out, m)
	}
	if len(out) == 0 && len(spec.Selector) > 0 {
		return nil, core.Errorf(core.KindInvalid, "no device of the rollout has the labels %v", spec.Selector)
	}
	if len(out) == 0 && len(spec.Devices) > 0 {
		return nil, core.Errorf(core.KindInvalid, "the rollout has no nodes")
	}
	// A cluster without members has nothing to roll out: the rollout
	// succeeds at once (an upgrade of a cluster no device joined yet).
	rank := func(m member) int {
		switch {
		case m.first:
			return 0
		case m.role == "control-plane":
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(a, b member) int { return rank(a) - rank(b) })
	return out, nil
}

// selected reports whether device d carries every label of sel, on its
// record or in its desired state.
func selected(tx core.Tx, d core.Device, sel map[string]string) bool {
	if len(sel) == 0 {
		return true
	}
	var want map[string]string
	if ds, err := tx.Desired().Get(d.ID); err == nil {
		want = ds.Labels
	}
	for k, v := range sel {
		if d.Labels[k] != v && want[k] != v {
			return false
		}
	}
	return true
}

// Get is one rollout.
func (e *Engine) Get(id string) (core.Rollout, error) {
	var r core.Rollout
	err := e.st.View(func(tx core.Tx) error {
		var err error
		r, err = tx.Rollouts().Get(id)
		if errors.Is(err, core.ErrNotFound) {
			return core.Errorf(core.KindNotFound, "rollout %s not found", id)
		}
		return err
	})
	return r, err
}

// List visits rollouts, newest first.
func (e *Engine) List(fn func(core.Rollout) bool) error {
	var all []core.Rollout
	err := e.st.View(func(tx core.Tx) error {
		return tx.Rollouts().List("", func(r core.Rollout) (bool, error) { all = append(all, r); return true, nil })
	})
	if err != nil {
		return err
	}
	slices.SortFunc(all, func(a, b core.Rollout) int { return b.Created.Compare(a.Created) })
	for _, r := range all {
		if !fn(r) {
			break
		}
	}
	return nil
}

// Pause stops starting nodes; nodes underway finish.
func (e *Engine) Pause(id, by string) (core.Rollout, error) {
	return e.control(id, by, "paused", func(r *core.Rollout) error {
		if r.State != core.RolloutRunning {
			return core.Errorf(core.KindState, "rollout %s is %s, not running", r.ID, r.State)
		}
		r.State, r.Reason = core.RolloutPaused, "paused by "+by
		return nil
	})
}

// Resume continues a paused rollout.
func (e *Engine) Resume(id, by string) (core.Rollout, error) {
	return e.control(id, by, "resumed", func(r *core.Rollout) error {
		if r.State != core.RolloutPaused {
			return core.Errorf(core.KindState, "rollout %s is %s, not paused", r.ID, r.State)
		}
		r.State, r.Reason = core.RolloutRunning, ""
		if r.GateStatus != nil && r.GateStatus.Phase == core.GateApproval {
			approve(r, by) // resuming past a waiting gate approves it
		}
		return nil
	})
}

// Abort ends a rollout: no node starts, operations handed out but not yet
// started by their agents are withdrawn, nodes underway finish their
// current phase and are left as they are (cordoned ones stay cordoned).
func (e *Engine) Abort(id, by string) (core.Rollout, error) {
	return e.control(id, by, "aborted", func(r *core.Rollout) error {
		if r.State.Ended() {
			return core.Errorf(core.KindState, "rollout %s has ended (%s)", r.ID, r.State)
		}
		r.State, r.Reason = core.RolloutAborted, "aborted by "+by
		return nil
	})
}

func (e *Engine) control(id, by, what string, fn func(*core.Rollout) error) (core.Rollout, error) {
	var out core.Rollout
	err := e.update(id, func(r *core.Rollout) (string, error) {
		if err := fn(r); err != nil {
			return "", err
		}
		out = *r
		return what + " by " + by, nil
	})
	if err != nil {
		return out, err
	}
	e.mu.Lock()
	if rn := e.runs[id]; rn != nil {
		select {
		case rn.wake <- struct{}{}:
		default:
		}
	}
	e.mu.Unlock()
	e.opts.Log.Info("rollout "+what, "rollout", id, "by", by)
	return out, nil
}

// Wait waits until the rollout has ended and returns it.
func (e *Engine) Wait(ctx context.Context, id string) (core.Rollout, error) {
	e.mu.Lock()
	rn := e.runs[id]
	e.mu.Unlock()
	if rn != nil {
		select {
		case <-rn.done:
		case <-ctx.Done():
			return core.Rollout{}, ctx.Err()
		}
	}
	return e.Get(id)
}

// update changes a stored rollout in one transaction; event (when fn
// returns one) is recorded with it.
func (e *Engine) update(id string, fn func(*core.Rollout) (event string, err error)) error {
	return e.st.Update(func(tx core.Tx) error {
		r, err := tx.Rollouts().Get(id)
		if err != nil {
			return err
		}
		ev, err := fn(&r)
		if err != nil {
			return err
		}
		r.UpdatedAt = e.now()
		if err := tx.Rollouts().Put(r); err != nil {
			return err
		}
		if ev == "" {
			return nil
		}
		_, err = tx.Events().Append(core.Event{Type: "rollout.progress", Cluster: r.Cluster, Time: r.UpdatedAt,
			Message: fmt.Sprintf("rollout %s: %s", r.ID, ev), Fields: map[string]string{"rollout": r.ID, "state": string(r.State)}})
		return err
	})
}

// setNode changes one node's record (and says so in the event log). The
// change is logged and counted once committed: fn may run again (a shared
// store).
func (e *Engine) setNode(id, device string, fn func(n *core.RolloutNode) string) error {
	var (
		ev, name string
		x        core.RolloutNode
		kind     core.RolloutKind
	)
	err := e.update(id, func(r *core.Rollout) (string, error) {
		ev = ""
		for i := range r.Nodes {
			if r.Nodes[i].Device == device {
				if ev = fn(&r.Nodes[i]); ev == "" {
					return "", nil
				}
				x, kind = r.Nodes[i], r.Kind
				name = x.NodeName
				if name == "" {
					name = device
				}
				return fmt.Sprintf("%s (%s): %s", name, device, ev), nil
			}
		}
		return "", fmt.Errorf("rollout %s has no device %s", id, device)
	})
	if err != nil || ev == "" {
		return err
	}
	e.opts.Log.Info("rollout node", "rollout", id, "node", name, "device", device, "phase", x.Phase, "what", ev)
	if !x.Finished.IsZero() {
		e.metrics.nodesEnded.WithLabelValues(string(kind), x.Phase).Inc()
		if x.Phase == core.NodeDone && !x.Started.IsZero() {
			e.metrics.nodeSeconds.WithLabelValues(string(kind)).Observe(x.Finished.Sub(x.Started).Seconds())
		}
	}
	return nil
}

func (e *Engine) launch(r core.Rollout) {
	rn := &run{wake: make(chan struct{}, 1), done: make(chan struct{}), unfinished: map[string]bool{}, upcoming: map[string]bool{}}
	e.involvedMu.Lock()
	for _, n := range r.Nodes {
		if (n.Phase == core.NodePending || underway(n.Phase)) && !rn.unfinished[n.Device] {
			rn.unfinished[n.Device] = true
			e.involved[n.Device]++
		}
	}
	e.involvedMu.Unlock()
	e.mu.Lock()
	e.runs[r.ID] = rn
	e.mu.Unlock()
	e.metrics.rolloutsRunning.Inc()
	go func() {
		defer close(rn.done)
		defer e.metrics.rolloutsRunning.Dec()
		e.loop(r.ID, rn)
		e.markUpcoming(rn, core.Rollout{}, nil, true)
		e.involvedMu.Lock()
		for device := range rn.unfinished {
			e.release(rn, device)
		}
		e.involvedMu.Unlock()
		e.mu.Lock()
		delete(e.runs, r.ID)
		e.mu.Unlock()
	}()
}

// Involved reports whether device is a node of a rollout running in this
// process that has not finished it (pending, or in flight): its agent is
// told to poll fast (desired.Options.FastPoll). A map lookup: it answers
// every agent poll.
func (e *Engine) Involved(device string) bool {
	e.involvedMu.RLock()
	defer e.involvedMu.RUnlock()
	return e.involved[device] > 0
}

// Upcoming reports whether device's node is next in a rollout running
// here: in flight, or among the next max_unavailable to start. Its agent
// is told to poll every second (desired.Options.NextPoll): the engine
// hands it its operation within about a node's time, and its agent has
// learnt the pace by then. A map lookup, as Involved.
func (e *Engine) Upcoming(device string) bool {
	e.involvedMu.RLock()
	defer e.involvedMu.RUnlock()
	return e.upcoming[device] > 0
}

// markUpcoming records the rollout's upcoming devices: those in flight
// and, unless it is stopping (or paused: an approval may take hours),
// the next MaxUnavailable pending ones in the order they start, a canary
// gate's soak included (they start when it passes).
func (e *Engine) markUpcoming(rn *run, r core.Rollout, inFlight map[string]bool, stopping bool) {
	want := map[string]bool{}
	for device := range inFlight {
		want[device] = true
	}
	if !stopping {
		k := r.MaxUnavailable
		for _, n := range r.Nodes {
			if k <= 0 {
				break
			}
			if n.Phase == core.NodePending && !inFlight[n.Device] {
				want[n.Device] = true
				k--
			}
		}
	}
	e.involvedMu.Lock()
	defer e.involvedMu.Unlock()
	for device := range rn.upcoming {
		if !want[device] {
			delete(rn.upcoming, device)
			if e.upcoming[device]--; e.upcoming[device] <= 0 {
				delete(e.upcoming, device)
			}
		}
	}
	for device := range want {
		if !rn.upcoming[device] {
			rn.upcoming[device] = true
			e.upcoming[device]++
		}
	}
}

// nodeFinished: the rollout is done with device's node (whatever the
// outcome).
func (e *Engine) nodeFinished(rn *run, device string) {
	e.involvedMu.Lock()
	e.release(rn, device)
	e.involvedMu.Unlock()
}

// release drops device from the run's unfinished nodes; involvedMu held.
func (e *Engine) release(rn *run, device string) {
	if !rn.unfinished[device] {
		return
	}
	delete(rn.unfinished, device)
	if e.involved[device]--; e.involved[device] <= 0 {
		delete(e.involved, device)
	}
}

// nodeResult is how one node's work ended.
type nodeResult struct {
	device string
	err    error
	hook   bool // the failure was an operator hook's
}

// takenOver reports whether another appliance has adopted the rollout
// (this one was taken for gone), and which.
func (e *Engine) takenOver(id string) (string, bool) {
	r, err := e.Get(id)
	return r.Appliance, err == nil && r.Appliance != e.opts.Appliance
}

// underway reports whether a node in phase is in flight: between its
// start and its end.
func underway(phase string) bool {
	switch phase {
	case core.NodeCordoned, core.NodeDrained, core.NodeAgent, core.NodeWaiting, core.NodeRollingBack:
		return true
	}
	return false
}

// loop schedules the rollout's nodes until it ends. Nodes its record
// shows underway (a rollout resumed after a restart, or adopted) carry on
// from their phase first.
func (e *Engine) loop(id string, rn *run) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := e.Get(id)
	if err != nil {
		e.opts.Log.Error("rollout lost", "rollout", id, "err", err)
		return
	}
	// Buffered: a loop that stops (its rollout taken over) leaves no
	// node's goroutine blocked on its result.
	results := make(chan nodeResult, len(r.Nodes))
	inFlight := map[string]bool{}
	var failure string
	e.crashBaseline(ctx, r, rn)
	report := func(device string, err error) {
		var he *hookError
		results <- nodeResult{device: device, err: err, hook: errors.As(err, &he)}
	}
	for _, n := range r.Nodes {
		if underway(n.Phase) {
			inFlight[n.Device] = true
			go func(n core.RolloutNode) { report(n.Device, e.resumeNode(ctx, r, n)) }(n)
		}
	}
	for {
		r, err := e.Get(id)
		if err != nil {
			e.opts.Log.Error("rollout lost", "rollout", id, "err", err)
			return
		}
		if owner, taken := e.takenOver(id); taken {
			// Another appliance adopted it (this one was taken for
			// gone): it runs it from now on.
			e.opts.Log.Warn("rollout taken over by another appliance", "rollout", id, "appliance", owner)
			return
		}
		stopping := r.State != core.RolloutRunning || failure != ""
		if !stopping {
			for _, n := range e.next(r, inFlight) {
				inFlight[n.Device] = true
				go func(n core.RolloutNode) { report(n.Device, e.node(ctx, r, n)) }(n)
			}
		}
		e.markUpcoming(rn, r, inFlight, stopping)
		if len(inFlight) == 0 && !stopping && gateDue(r) {
			failure = e.gate(ctx, id, rn)
			continue
		}
		if len(inFlight) == 0 {
			if r.State == core.RolloutPaused && failure == "" {
				<-rn.wake
				continue
			}
			e.finish(id, failure)
			return
		}
		select {
		case res := <-results:
			delete(inFlight, res.device)
			e.nodeFinished(rn, res.device)
			if owner, taken := e.takenOver(id); taken {
				// The node's outcome is the adopter's to record.
				e.opts.Log.Warn("rollout taken over by another appliance", "rollout", id, "appliance", owner)
				return
			}
			var rb *rolledBackError
			if errors.As(res.err, &rb) {
				// Recorded rolled-back by the node; back Ready where it was.
				if r.OnFailure != core.OnFailureContinue && failure == "" {
					failure = fmt.Sprintf("node %s %s", nodeName(r, res.device), rb.msg)
				}
				continue
			}
			if res.err != nil {
				msg := res.err.Error()
				e.setNode(id, res.device, func(n *core.RolloutNode) string {
					n.Phase, n.Reason, n.Finished = core.NodeFailed, msg, e.now()
					return "failed: " + msg
				})
				if !(res.hook && r.ContinueOnHookFailure) && failure == "" {
					failure = fmt.Sprintf("node %s failed: %s", nodeName(r, res.device), msg)
				}
			}
		case <-rn.wake:
		}
	}
}

// next is the nodes to start now: control planes one at a time before
// any worker, then workers up to MaxUnavailable in flight.
func (e *Engine) next(r core.Rollout, inFlight map[string]bool) []core.RolloutNode {
	var out []core.RolloutNode
	cpBusy := false
	cpLeft := false
	for _, n := range r.Nodes {
		if n.Role == "control-plane" && (inFlight[n.Device] || n.Phase == core.NodePending) {
			cpLeft = true
			cpBusy = cpBusy || inFlight[n.Device]
		}
	}
	room := r.MaxUnavailable - len(inFlight)
	for _, n := range r.Nodes {
		if n.Phase != core.NodePending || inFlight[n.Device] || room <= 0 || (gated(r) && !n.Canary) {
			continue
		}
		if n.Role == "control-plane" {
			if cpBusy {
				continue
			}
			cpBusy = true
		} else if cpLeft {
			continue
		}
		out = append(out, n)
		room--
		if n.Role == "control-plane" {
			break
		}
	}
	return out
}

// finish records how the rollout ended.
func (e *Engine) finish(id, failure string) {
	e.update(id, func(r *core.Rollout) (string, error) {
		r.Finished = e.now()
		if g := r.GateStatus; g != nil && failure != "" && !g.Open() && g.Phase != core.GateFailed {
			g.Phase, g.Reason = core.GateFailed, failure
		}
		switch {
		case r.State == core.RolloutAborted:
			return fmt.Sprintf("aborted (%s)", summary(*r)), nil
		case failure != "":
			r.State, r.Reason = core.RolloutFailed, failure
			return fmt.Sprintf("failed: %s (%s)", failure, summary(*r)), nil
		}
		r.State = core.RolloutSucceeded
		rolledBack := 0
		for _, n := range r.Nodes {
			switch n.Phase {
			case core.NodeFailed:
				r.Reason = "done; some devices failed their hooks and were left cordoned"
			case core.NodeRolledBack:
				rolledBack++
			}
		}
		if rolledBack > 0 && r.Reason == "" {
			r.Reason = fmt.Sprintf("done; %d nodes failed and were rolled back", rolledBack)
		}
		return fmt.Sprintf("succeeded (%s)", summary(*r)), nil
	})
	r, _ := e.Get(id)
	e.metrics.rolloutsEnded.WithLabelValues(string(r.Kind), string(r.State)).Inc()
	e.opts.Log.Info("rollout ended", "rollout", id, "kind", r.Kind, "state", r.State, "reason", r.Reason, "summary", summary(r))
}

func summary(r core.Rollout) string {
	counts := map[string]int{}
	for _, n := range r.Nodes {
		counts[n.Phase]++
	}
	var parts []string
	for _, p := range []string{core.NodeDone, core.NodeSkipped, core.NodeRolledBack, core.NodeFailed, core.NodePending, core.NodeWithdrawn} {
		if counts[p] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[p], p))
		}
	}
	return strings.Join(parts, ", ")
}

func nodeName(r core.Rollout, device string) string {
	for _, n := range r.Nodes {
		if n.Device == device && n.NodeName != "" {
			return n.NodeName
		}
	}
	return device
}

// hookError is a failed operator hook (ContinueOnHookFailure may let the
// rollout go on).
type hookError struct{ msg string }

func (e *hookError) Error() string { return e.msg }
