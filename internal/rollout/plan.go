package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/semver"
)

// DrainPredictor is a NodeOps that can tell, without evicting anything,
// which pods a drain of each of nodes would have refused right now (by
// node; nodes without any left out).
type DrainPredictor interface {
	DrainBlockers(ctx context.Context, cluster string, nodes []string) (map[string][]DrainBlock, error)
}

// DrainBlock is a pod whose eviction a PodDisruptionBudget refuses now.
type DrainBlock struct {
	Pod     string `json:"pod"`    // namespace/name
	Budget  string `json:"budget"` // the budgets selecting it, comma-separated
	Allowed int32  `json:"allowed_disruptions"`
}

// Plan is what a rollout would do if started now.
type Plan struct {
	Cluster        string           `json:"cluster,omitempty"`
	Kind           core.RolloutKind `json:"kind"`
	Target         string           `json:"target,omitempty"`
	MaxUnavailable int              `json:"max_unavailable"`
	Canary         core.RolloutCanary
	Gate           core.RolloutGate
	// Batches are the nodes in the order they go, a batch at a time:
	// each control plane alone, then workers MaxUnavailable at once (the
	// canary's first, then its gate, then the others).
	Batches []PlanBatch
	// Skipped are the cluster's devices the rollout leaves alone, with why.
	Skipped []PlanNode
	// Estimate is the wall time from the measured node times of earlier
	// rollouts of the kind (0: none measured yet), the soak included.
	Estimate      time.Duration
	EstimateBasis string
	Fingerprint   string
	// Warnings are what the plan could not read (a cluster unreachable):
	// the plan is then not what a start would do.
	Warnings []string
}

// PlanBatch is nodes that go at the same time.
type PlanBatch struct {
	Canary bool
	Nodes  []PlanNode
}

// PlanNode is one node of a plan.
type PlanNode struct {
	Device, NodeName, Role string
	// Current is the kubelet version (kubernetes), the image ztpd last
	// set (image) or the membership (remove); Target what it moves to.
	Current, Target string
	Ready           bool
	Skip            string // why it is left alone ("" : it goes)
	Canary          bool
	Hooks           map[string]string // phase -> script
	Steps           []string          // the agent's steps, in order
	Blocks          []DrainBlock      // PodDisruptionBudgets that block its drain now
	Estimate        time.Duration
}

// Skip reasons.
const (
	SkipAtTarget    = "already Ready at the target"
	SkipNotSelected = "not selected"
)

// Plan answers what Start(spec) would do now, without doing any of it.
func (e *Engine) Plan(ctx context.Context, spec Spec) (Plan, error) {
	e.defaults(&spec)
	if err := e.checkSpec(spec); err != nil {
		return Plan{}, err
	}
	return e.plan(ctx, spec, true)
}

// plan builds the plan; blocks: with the drains' PodDisruptionBudgets
// (a start does without: they are no part of the fingerprint).
func (e *Engine) plan(ctx context.Context, spec Spec, blocks bool) (Plan, error) {
	p := Plan{Cluster: spec.Cluster, Kind: spec.Kind, Target: spec.Target, MaxUnavailable: spec.MaxUnavailable,
		Canary: spec.Canary, Gate: spec.Gate}
	var (
		ms      []member
		others  []PlanNode
		hist    []core.Rollout
		current = map[string]string{} // device -> image ztpd last set
	)
	err := e.st.View(func(tx core.Tx) error {
		var err error
		if ms, err = plan(tx, spec); err != nil {
			return err
		}
		ms = markCanary(tx, spec, ms)
		in := map[string]bool{}
		for _, m := range ms {
			in[m.device] = true
		}
		if spec.Cluster != "" {
			err := tx.Memberships().Roster(spec.Cluster, func(device, role string) (bool, error) {
				if in[device] {
					return true, nil
				}
				why := SkipNotSelected + " (not among the devices named)"
				if len(spec.Devices) == 0 {
					why = fmt.Sprintf("%s (labels do not match %s)", SkipNotSelected, labelText(spec.Selector))
				}
				n := PlanNode{Device: device, Role: role, Skip: why}
				if ms, err := tx.Memberships().Get(device); err == nil {
					n.NodeName = ms.NodeName
				}
				others = append(others, n)
				return true, nil
			})
			if err != nil {
				return err
			}
		}
		for _, m := range ms {
			if ds, err := tx.Desired().Get(m.device); err == nil {
				current[m.device] = ds.Image
			}
		}
		return tx.Rollouts().List("", func(r core.Rollout) (bool, error) {
			if r.Kind == spec.Kind && r.State.Ended() {
				hist = append(hist, r)
			}
			return true, nil
		})
	})
	if err != nil {
		return p, err
	}
	times := measured(hist)
	var going []PlanNode
	for _, m := range ms {
		n := PlanNode{Device: m.device, NodeName: m.node, Role: m.role, Canary: m.canary, Target: spec.Target}
		switch spec.Kind {
		case core.RolloutImage:
			n.Current = current[m.device]
		case core.RolloutRemove:
			n.Current, n.Target = "member", "left"
			if spec.Mode == core.ModeStandalone {
				n.Target = "standalone"
			}
		}
		if m.node != "" && spec.Cluster != "" && e.opts.Nodes != nil {
			info, ok, err := e.opts.Nodes.Node(ctx, spec.Cluster, m.node)
			switch {
			case err != nil:
				p.Warnings = append(p.Warnings, fmt.Sprintf("read Node %s: %v", m.node, err))
			case !ok:
				n.Current = "(no Node)"
			default:
				n.Ready = info.Ready
				if spec.Kind == core.RolloutKubernetes {
					n.Current = info.KubeletVersion
					if info.KubeletVersion == spec.Target && info.Ready && !info.Unschedulable {
						n.Skip = SkipAtTarget
					}
				}
			}
		}
		if m.manual {
			n.Skip = clusters.ManualUpgradeReason
		}
		if n.Skip != "" {
			p.Skipped = append(p.Skipped, n)
			continue
		}
		n.Hooks, n.Steps = e.planSteps(spec, m)
		n.Estimate = times.of(m.role)
		going = append(going, n)
	}
	if pr, ok := e.opts.Nodes.(DrainPredictor); ok && blocks && spec.Cluster != "" && len(going) > 0 {
		var names []string
		for _, n := range going {
			if n.NodeName != "" && n.Current != "(no Node)" && slices.Contains(n.Steps, "drain") {
				names = append(names, n.NodeName)
			}
		}
		if len(names) > 0 {
			got, err := pr.DrainBlockers(ctx, spec.Cluster, names)
			if err != nil {
				p.Warnings = append(p.Warnings, fmt.Sprintf("PodDisruptionBudgets: %v", err))
			}
			for i := range going {
				going[i].Blocks = got[going[i].NodeName]
			}
		}
	}
	// Devices outside the rollout, for the skew rules: their Node's
	// version as it is.
	for i, n := range others {
		if n.NodeName != "" && spec.Kind == core.RolloutKubernetes && e.opts.Nodes != nil {
			if info, ok, err := e.opts.Nodes.Node(ctx, spec.Cluster, n.NodeName); err == nil && ok {
				others[i].Current, others[i].Ready = info.KubeletVersion, info.Ready
			}
		}
	}
	p.Skipped = append(p.Skipped, others...)
	if spec.Kind == core.RolloutKubernetes {
		if err := checkSkew(spec.Target, going, p.Skipped); err != nil {
			return p, err
		}
	}
	p.Batches = batches(going, spec.MaxUnavailable)
	p.Estimate, p.EstimateBasis = estimate(p.Batches, times, spec.Gate, !spec.Canary.IsZero())
	p.Fingerprint = fingerprint(spec, p)
	return p, nil
}

// defaults fills what a spec leaves to the engine.
func (e *Engine) defaults(spec *Spec) {
	if spec.MaxUnavailable <= 0 {
		spec.MaxUnavailable = 1
	}
	if spec.DrainTimeout <= 0 {
		spec.DrainTimeout = e.opts.DrainTimeout
	}
	if spec.StepTimeout <= 0 {
		spec.StepTimeout = e.opts.StepTimeout
	}
	if !spec.Canary.IsZero() && spec.Gate.Mode == "" {
		spec.Gate.Mode = core.GateManual
	}
	if spec.Gate.Mode != "" && spec.Gate.Timeout <= 0 {
		spec.Gate.Timeout = core.Duration(DefaultGateCheckTimeout)
	}
}

// checkSpec refuses what a rollout cannot do as asked: a gate without a
// canary, an unknown gate mode, a script outside the scripts directory.
func (e *Engine) checkSpec(spec Spec) error {
	g := spec.Gate
	switch g.Mode {
	case "":
		if g.URL != "" || g.Script != "" || g.Soak != 0 {
			return core.Errorf(core.KindInvalid, "gate checks without a canary: name one (canary count or selector)")
		}
		return nil
	case core.GateManual, core.GateAuto:
	default:
		return core.Errorf(core.KindInvalid, "gate %q: want manual or auto", g.Mode)
	}
	if spec.Canary.IsZero() {
		return core.Errorf(core.KindInvalid, "a gate follows a canary: name one (canary count or selector)")
	}
	if spec.Canary.Count < 0 || g.Soak < 0 || g.Timeout < 0 {
		return core.Errorf(core.KindInvalid, "canary count, soak and check timeout are not negative")
	}
	if g.URL != "" && !strings.HasPrefix(g.URL, "http://") && !strings.HasPrefix(g.URL, "https://") {
		return core.Errorf(core.KindInvalid, "gate url %q: want http:// or https://", g.URL)
	}
	if g.Script != "" {
		if e.opts.GateScripts == "" {
			return core.Errorf(core.KindInvalid, "gate script %q: this appliance has no gate script directory (rollout.gate_scripts)", g.Script)
		}
		if filepath.Base(g.Script) != g.Script || strings.HasPrefix(g.Script, ".") {
			return core.Errorf(core.KindInvalid, "gate script %q: name a file in %s, without a path", g.Script, e.opts.GateScripts)
		}
	}
	if g.Mode == core.GateManual && (g.URL != "" || g.Script != "" || g.Soak != 0) {
		return core.Errorf(core.KindInvalid, "gate checks and soak are for gate auto; gate manual waits for an approval")
	}
	return nil
}

func labelText(sel map[string]string) string {
	var parts []string
	for k, v := range sel {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// markCanary marks the canary's members and orders them first after the
// nodes that must go before any other (control planes).
func markCanary(tx core.Tx, spec Spec, ms []member) []member {
	c := spec.Canary
	if c.IsZero() {
		return ms
	}
	if len(c.Selector) > 0 {
		for i := range ms {
			if ms[i].role == "control-plane" {
				ms[i].canary = true
				continue
			}
			if d, err := tx.Devices().Get(ms[i].device); err == nil && selected(tx, d, c.Selector) {
				ms[i].canary = true
			}
		}
		rank := func(m member) int {
			switch {
			case m.role == "control-plane":
				return 0
			case m.canary:
				return 1
			}
			return 2
		}
		slices.SortStableFunc(ms, func(a, b member) int { return rank(a) - rank(b) })
		return ms
	}
	left := c.Count
	for i := range ms {
		if left > 0 && !ms[i].manual {
			ms[i].canary = true
			left--
		}
	}
	return ms
}

// planSteps are the hooks and the agent's steps a node gets.
func (e *Engine) planSteps(spec Spec, m member) (map[string]string, []string) {
	hooks := map[string]string{}
	hook := func(phase string) []string {
		name := spec.Hooks[phase]
		if name == "" && e.opts.Agents != nil {
			if d, err := e.opts.Agents.Get(m.device); err == nil {
				name = d.Hooks[phase]
			}
		}
		if name == "" {
			return nil
		}
		hooks[phase] = name
		return []string{phase + " hook " + name}
	}
	var steps []string
	cordon := m.node != ""
	switch spec.Kind {
	case core.RolloutKubernetes:
		upgrade := "kubeadm upgrade node"
		if m.first {
			upgrade = "kubeadm upgrade apply " + spec.Target
		}
		steps = append(steps, "cordon", "drain")
		steps = append(steps, hook(core.HookPreUpgrade)...)
		steps = append(steps, upgrade)
		steps = append(steps, hook(core.HookPostUpgrade)...)
		steps = append(steps, "wait Ready at "+spec.Target, "uncordon")
	case core.RolloutImage:
		if cordon {
			steps = append(steps, "cordon", "drain")
		}
		steps = append(steps, hook(core.HookPreUpgrade)...)
		if cordon {
			steps = append(steps, hook(core.HookPreLeave)...)
			steps = append(steps, "kubeadm reset", "delete Node")
		}
		steps = append(steps, "install "+spec.Target, "reboot")
		if cordon {
			steps = append(steps, "join")
			steps = append(steps, hook(core.HookPostJoin)...)
		}
		steps = append(steps, hook(core.HookPostUpgrade)...)
		if cordon {
			steps = append(steps, "wait Ready")
		}
	case core.RolloutRemove:
		if cordon {
			steps = append(steps, "cordon", "drain")
		}
		steps = append(steps, hook(core.HookPreLeave)...)
		steps = append(steps, "kubeadm reset")
		if cordon {
			steps = append(steps, "delete Node")
		}
		steps = append(steps, "leave")
	}
	if len(hooks) == 0 {
		hooks = nil
	}
	return hooks, steps
}

// batches groups the nodes as the engine starts them: each control plane
// alone, then workers max at once; the canary's workers apart from the
// others (the gate is between them).
func batches(nodes []PlanNode, max int) []PlanBatch {
	var out []PlanBatch
	var cur *PlanBatch
	for _, n := range nodes {
		if n.Role == "control-plane" {
			out = append(out, PlanBatch{Canary: n.Canary, Nodes: []PlanNode{n}})
			cur = nil
			continue
		}
		if cur == nil || len(cur.Nodes) >= max || cur.Canary != n.Canary {
			out = append(out, PlanBatch{Canary: n.Canary})
			cur = &out[len(out)-1]
		}
		cur.Nodes = append(cur.Nodes, n)
	}
	return out
}

// nodeTimes are measured node durations by role.
type nodeTimes struct {
	cp, worker time.Duration
	count      int
}

func (t nodeTimes) of(role string) time.Duration {
	if role == "control-plane" && t.cp > 0 {
		return t.cp
	}
	if t.worker > 0 {
		return t.worker
	}
	return t.cp
}

// historyDepth is how many earlier rollouts of a kind the estimate
// measures.
const historyDepth = 10

// measured is the median time a node took, from its start to done, in
// the newest rollouts of the kind.
func measured(hist []core.Rollout) nodeTimes {
	slices.SortFunc(hist, func(a, b core.Rollout) int { return b.Created.Compare(a.Created) })
	if len(hist) > historyDepth {
		hist = hist[:historyDepth]
	}
	var cp, wk []time.Duration
	for _, r := range hist {
		for _, n := range r.Nodes {
			if n.Phase != core.NodeDone || n.Started.IsZero() || n.Finished.Before(n.Started) {
				continue
			}
			d := n.Finished.Sub(n.Started)
			if n.Role == "control-plane" {
				cp = append(cp, d)
			} else {
				wk = append(wk, d)
			}
		}
	}
	median := func(ds []time.Duration) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	return nodeTimes{cp: median(cp), worker: median(wk), count: len(cp) + len(wk)}
}

// estimate is the wall time of the batches one after the other, each as
// long as its slowest node, plus the gate's soak.
func estimate(bs []PlanBatch, t nodeTimes, g core.RolloutGate, canary bool) (time.Duration, string) {
	if t.count == 0 {
		return 0, "no node of this kind measured yet"
	}
	var total time.Duration
	for _, b := range bs {
		var longest time.Duration
		for _, n := range b.Nodes {
			longest = max(longest, n.Estimate)
		}
		total += longest
	}
	basis := fmt.Sprintf("median of %d node(s) measured in earlier rollouts of this kind", t.count)
	if canary && g.Mode == core.GateAuto {
		total += time.Duration(g.Soak)
		basis += ", plus the gate's soak"
	} else if canary {
		basis += ", not counting the wait for the approval"
	}
	return total, basis
}

// fingerprint sums what the plan depends on: the nodes, their order,
// state, skips and the rollout's shape. PodDisruptionBudgets' allowances
// are left out: they change as pods restart, and the drain meets them as
// they are.
func fingerprint(spec Spec, p Plan) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%s|%d|%d|%s|%s|%s\n", p.Cluster, p.Kind, p.Target, p.MaxUnavailable, spec.Canary.Count,
		labelText(spec.Canary.Selector), spec.Gate.Mode, spec.Mode)
	for _, b := range p.Batches {
		fmt.Fprintf(h, "batch %v\n", b.Canary)
		for _, n := range b.Nodes {
			fmt.Fprintf(h, "%s|%s|%s|%s|%v|%s\n", n.Device, n.NodeName, n.Role, n.Current, n.Ready, strings.Join(n.Steps, ","))
		}
	}
	for _, n := range p.Skipped {
		fmt.Fprintf(h, "skip %s|%s|%s|%s\n", n.Device, n.NodeName, n.Current, n.Skip)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// maxKubeletSkew is how many minor versions a kubelet may be older than
// the API server (Kubernetes' version skew policy since 1.28).
const maxKubeletSkew = 3

// checkSkew refuses a Kubernetes upgrade that would leave the cluster
// outside the version skew policy: kubeadm upgrades a control plane one
// minor version at a time and never down; a kubelet may not be newer
// than any API server nor more than maxKubeletSkew minors older; API
// servers stay within one minor of each other.
func checkSkew(target string, going, staying []PlanNode) error {
	tv, err := kubeVersion(target)
	if err != nil {
		return core.Errorf(core.KindInvalid, "target %q: %v", target, err)
	}
	refuse := func(format string, args ...any) error {
		return core.Errorf(core.KindState, "version skew: "+format, args...)
	}
	type node struct {
		name, role string
		after      semver.Version
	}
	var all []node
	for _, n := range going {
		cv, err := kubeVersion(n.Current)
		if err != nil {
			all = append(all, node{planName(n), n.Role, tv})
			continue
		}
		if tv.Less(cv) {
			return refuse("%s runs %s, newer than the target %s: kubeadm does not downgrade", planName(n), n.Current, target)
		}
		if n.Role == "control-plane" && tv.Minor > cv.Minor+1 && tv.Major == cv.Major {
			return refuse("control plane %s runs %s: kubeadm upgrades one minor version at a time, not to %s", planName(n), n.Current, target)
		}
		all = append(all, node{planName(n), n.Role, tv})
	}
	for _, n := range staying {
		if cv, err := kubeVersion(n.Current); err == nil {
			all = append(all, node{planName(n), n.Role, cv})
		}
	}
	var apiLow, apiHigh *node
	for i, n := range all {
		if n.role != "control-plane" {
			continue
		}
		if apiLow == nil || n.after.Less(apiLow.after) {
			apiLow = &all[i]
		}
		if apiHigh == nil || apiHigh.after.Less(n.after) {
			apiHigh = &all[i]
		}
	}
	if apiLow == nil {
		return nil // no control plane known here: nothing to hold the kubelets to
	}
	if apiHigh.after.Minor > apiLow.after.Minor+1 {
		return refuse("API servers would be %s (%s) and %s (%s), more than one minor version apart",
			apiHigh.after.Tag(), apiHigh.name, apiLow.after.Tag(), apiLow.name)
	}
	for _, n := range all {
		if n.role == "control-plane" {
			continue
		}
		if apiLow.after.Less(n.after) && n.after.Minor != apiLow.after.Minor {
			return refuse("the kubelet of %s would be %s, newer than the API server of %s (%s): upgrade the control planes first",
				n.name, n.after.Tag(), apiLow.name, apiLow.after.Tag())
		}
		if apiHigh.after.Minor-n.after.Minor > maxKubeletSkew {
			return refuse("the kubelet of %s would stay %s, more than %d minor versions older than the API server (%s)",
				n.name, n.after.Tag(), maxKubeletSkew, apiHigh.after.Tag())
		}
	}
	return nil
}

func planName(n PlanNode) string {
	if n.NodeName != "" {
		return n.NodeName
	}
	return n.Device
}

// errChanged is a start whose plan fingerprint is not the cluster's now.
func errChanged(want string, now Plan) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the cluster changed since the plan (fingerprint %s, now %s): plan again; now:", want, now.Fingerprint)
	n := 0
	for _, bt := range now.Batches {
		for _, x := range bt.Nodes {
			if n < 8 {
				fmt.Fprintf(&b, " %s %s->%s;", planName(x), dashIfEmpty(x.Current), x.Target)
			}
			n++
		}
	}
	for _, x := range now.Skipped {
		if n < 8 {
			fmt.Fprintf(&b, " %s skipped (%s);", planName(x), x.Skip)
		}
		n++
	}
	if n > 8 {
		fmt.Fprintf(&b, " and %d more", n-8)
	}
	return core.Errorf(core.KindConflict, "%s", strings.TrimSuffix(b.String(), ";"))
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// kubeVersion parses a version tag as Kubernetes shows it (v1.37.2, a
// build suffix after - or + ignored).
func kubeVersion(s string) (semver.Version, error) {
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	return semver.Parse(s)
}
