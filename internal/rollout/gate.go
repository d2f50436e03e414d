package rollout

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// PodHealth is a NodeOps that can tell which pods on a Node are crash
// looping (a container waiting in CrashLoopBackOff), as namespace/name.
type PodHealth interface {
	CrashLooping(ctx context.Context, cluster, node string) ([]string, error)
}

// Gate defaults.
const (
	DefaultGateCheckTimeout = 10 * time.Second
	DefaultGateInterval     = 5 * time.Second
	DefaultGonePoll         = 10 * time.Second
)

// Approve opens the gate of a rollout that waits for an approval after
// its canary; the rollout goes on.
func (e *Engine) Approve(id, by string) (core.Rollout, error) {
	return e.control(id, by, "approved", func(r *core.Rollout) error {
		if r.GateStatus == nil || r.GateStatus.Phase != core.GateApproval {
			phase := "no gate"
			if r.GateStatus != nil {
				phase = "gate " + r.GateStatus.Phase
			}
			return core.Errorf(core.KindState, "rollout %s does not wait for an approval (%s, %s)", r.ID, r.State, phase)
		}
		approve(r, by)
		return nil
	})
}

func approve(r *core.Rollout, by string) {
	r.GateStatus.Phase, r.GateStatus.By, r.GateStatus.Reason = core.GateApproved, by, "approved by "+by
	r.State, r.Reason = core.RolloutRunning, ""
}

// gated reports whether only the canary's nodes may start.
func gated(r core.Rollout) bool { return r.GateStatus != nil && !r.GateStatus.Open() }

// gateDue reports whether the canary is over and the gate has to decide.
func gateDue(r core.Rollout) bool {
	if r.GateStatus == nil || r.GateStatus.Phase != core.GateWaiting {
		return false
	}
	for _, n := range r.Nodes {
		if n.Canary && n.Phase == core.NodePending {
			return false
		}
	}
	return true
}

func (e *Engine) gateInterval() time.Duration {
	if e.opts.GateInterval > 0 {
		return e.opts.GateInterval
	}
	return DefaultGateInterval
}

// setGate changes the rollout's gate (and its state), with an event.
func (e *Engine) setGate(id string, fn func(r *core.Rollout) string) error {
	return e.update(id, func(r *core.Rollout) (string, error) {
		if r.GateStatus == nil {
			return "", nil
		}
		return fn(r), nil
	})
}

// gate decides, once the canary is done: a manual gate pauses the
// rollout for an approval; an auto gate runs the checks until the soak
// time passed. It returns why the rollout fails ("" : it goes on, or
// was paused or aborted meanwhile).
func (e *Engine) gate(ctx context.Context, id string, rn *run) string {
	r, err := e.Get(id)
	if err != nil {
		return err.Error()
	}
	now := e.now()
	if r.Gate.Mode != core.GateAuto {
		e.setGate(id, func(r *core.Rollout) string {
			r.GateStatus.Phase, r.GateStatus.Since = core.GateApproval, now
			r.GateStatus.Reason = "canary done: approve with ztpd rollout approve " + r.ID
			r.State, r.Reason = core.RolloutPaused, "canary done; waiting for an approval"
			return "canary done; waiting for an approval"
		})
		return ""
	}
	soak := time.Duration(r.Gate.Soak)
	until := now.Add(soak)
	e.setGate(id, func(r *core.Rollout) string {
		r.GateStatus.Phase, r.GateStatus.Since, r.GateStatus.Until, r.GateStatus.Reason = core.GateSoaking, now, until, ""
		return fmt.Sprintf("canary done; gate checks for %s", soak)
	})
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-rn.wake:
			cur, err := e.Get(id)
			if err != nil {
				return err.Error()
			}
			if cur.State != core.RolloutRunning {
				// Paused or aborted: a resume soaks again from the start.
				e.setGate(id, func(r *core.Rollout) string {
					r.GateStatus.Phase, r.GateStatus.Until, r.GateStatus.Reason = core.GateWaiting, time.Time{}, "soak interrupted: "+string(cur.State)
					return ""
				})
				return ""
			}
			continue
		}
		r, err := e.Get(id)
		if err != nil {
			return err.Error()
		}
		checks := e.gateChecks(ctx, r, rn)
		var failed []string
		for _, c := range checks {
			if !c.OK {
				failed = append(failed, c.Name+": "+c.Detail)
			}
		}
		passed := len(failed) == 0 && !e.now().Before(until)
		e.setGate(id, func(r *core.Rollout) string {
			r.GateStatus.Checks = checks
			switch {
			case len(failed) > 0:
				r.GateStatus.Phase, r.GateStatus.Reason = core.GateFailed, strings.Join(failed, "; ")
				return "gate failed: " + r.GateStatus.Reason
			case passed:
				r.GateStatus.Phase, r.GateStatus.Reason = core.GatePassed, fmt.Sprintf("checks held for %s", soak)
				return "gate passed: " + r.GateStatus.Reason
			}
			return ""
		})
		if len(failed) > 0 {
			return "canary gate failed: " + strings.Join(failed, "; ")
		}
		if passed {
			return ""
		}
		tick.Reset(min(e.gateInterval(), max(time.Until(until), time.Millisecond)))
	}
}

// crashBaseline records the pods already crash looping on the canary's
// Nodes before the rollout touched them: only new ones fail the gate.
func (e *Engine) crashBaseline(ctx context.Context, r core.Rollout, rn *run) {
	ph, ok := e.opts.Nodes.(PodHealth)
	if !ok || r.GateStatus == nil || r.Cluster == "" {
		return
	}
	rn.crashBase = map[string]bool{}
	for _, n := range r.Nodes {
		if n.Canary && n.Phase != core.NodePending {
			// Resumed after the canary started: what crash loops now may
			// be its doing, so every crash loop counts (the stricter way).
			clear(rn.crashBase)
			return
		}
	}
	for _, n := range r.Nodes {
		if !n.Canary || n.NodeName == "" {
			continue
		}
		pods, err := ph.CrashLooping(ctx, r.Cluster, n.NodeName)
		if err != nil {
			e.opts.Log.Warn("crash looping pods before the rollout", "rollout", r.ID, "node", n.NodeName, "err", err)
		}
		for _, p := range pods {
			rn.crashBase[n.NodeName+"/"+p] = true
		}
	}
}

// gateChecks runs the gate's checks over the canary's nodes once.
func (e *Engine) gateChecks(ctx context.Context, r core.Rollout, rn *run) []core.GateCheck {
	var canary []core.RolloutNode
	for _, n := range r.Nodes {
		if n.Canary {
			canary = append(canary, n)
		}
	}
	var out []core.GateCheck
	add := func(name string, problems []string, ok string) {
		c := core.GateCheck{Name: name, OK: len(problems) == 0, Detail: ok, Checked: e.now()}
		if len(problems) > 0 {
			c.Detail = strings.Join(problems, "; ")
		}
		out = append(out, c)
	}

	// Every upgraded Node Ready (at the target, for Kubernetes).
	var problems []string
	count := 0
	for _, n := range canary {
		switch {
		case n.Phase == core.NodeFailed:
			problems = append(problems, fmt.Sprintf("%s failed: %s", nodeName(r, n.Device), n.Reason))
			continue
		case n.NodeName == "" || r.Kind == core.RolloutRemove || r.Cluster == "":
			continue
		}
		count++
		info, ok, err := e.opts.Nodes.Node(ctx, r.Cluster, n.NodeName)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", n.NodeName, err))
		case !ok:
			problems = append(problems, n.NodeName+" is gone from the cluster")
		case !info.Ready:
			problems = append(problems, n.NodeName+" is not Ready")
		case r.Kind == core.RolloutKubernetes && info.KubeletVersion != r.Target:
			problems = append(problems, fmt.Sprintf("%s runs %s, not %s", n.NodeName, info.KubeletVersion, r.Target))
		}
	}
	add("nodes-ready", problems, fmt.Sprintf("%d Node(s) Ready", count))

	// No new crash looping pods on them.
	if ph, ok := e.opts.Nodes.(PodHealth); ok && r.Cluster != "" && r.Kind != core.RolloutRemove {
		problems = nil
		for _, n := range canary {
			if n.NodeName == "" || n.Phase != core.NodeDone {
				continue
			}
			pods, err := ph.CrashLooping(ctx, r.Cluster, n.NodeName)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", n.NodeName, err))
			}
			for _, p := range pods {
				if !rn.crashBase[n.NodeName+"/"+p] {
					problems = append(problems, fmt.Sprintf("%s crash loops on %s", p, n.NodeName))
				}
			}
		}
		add("no-crashloops", problems, "none new")
	}

	// The post hooks' exit status, as the agents reported them.
	problems = nil
	hooks := 0
	for _, n := range canary {
		d, err := e.opts.Agents.Get(n.Device)
		if err != nil || d.Operation == nil || d.Operation.Rollout != r.ID {
			continue
		}
		for _, st := range d.Operation.Steps {
			if st.Action != "hook" || (st.Name != core.HookPostUpgrade && st.Name != core.HookPostJoin) {
				continue
			}
			hooks++
			if st.State != core.StepSucceeded || st.ExitCode != 0 {
				problems = append(problems, fmt.Sprintf("%s hook on %s: %s, exit status %d", st.Name, nodeName(r, n.Device), st.State, st.ExitCode))
			}
		}
	}
	add("post-hooks", problems, fmt.Sprintf("%d hook(s) exited 0", hooks))

	timeout := time.Duration(r.Gate.Timeout)
	if timeout <= 0 {
		timeout = DefaultGateCheckTimeout
	}
	if r.Gate.URL != "" {
		problems = nil
		if err := checkURL(ctx, r.Gate.URL, timeout); err != nil {
			problems = append(problems, err.Error())
		}
		add("url", problems, "2xx")
	}
	if r.Gate.Script != "" {
		problems = nil
		if err := e.checkScript(ctx, r, timeout); err != nil {
			problems = append(problems, err.Error())
		}
		add("script", problems, "exit status 0")
	}
	return out
}

// checkURL GETs the operator's check URL: 2xx within timeout passes.
func checkURL(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s", timeout)
	}
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// checkScript runs the operator's check script from the gate script
// directory with the rollout in its environment: exit 0 within timeout
// passes.
func (e *Engine) checkScript(ctx context.Context, r core.Rollout, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var canary []string
	for _, n := range r.Nodes {
		if n.Canary {
			canary = append(canary, nodeName(r, n.Device))
		}
	}
	slices.Sort(canary)
	cmd := exec.CommandContext(ctx, filepath.Join(e.opts.GateScripts, r.Gate.Script))
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ZTPD_ROLLOUT=" + r.ID,
		"ZTPD_CLUSTER=" + r.Cluster, "ZTPD_TARGET=" + r.Target, "ZTPD_CANARY_NODES=" + strings.Join(canary, " ")}
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s did not end within %s", r.Gate.Script, timeout)
	}
	if err != nil {
		return fmt.Errorf("%s: %v: %s", r.Gate.Script, err, lastLine(string(out)))
	}
	return nil
}

// gonePoll is how often a node's Node is looked for while it is worked on.
func (e *Engine) gonePoll() time.Duration {
	if e.opts.GonePoll > 0 {
		return e.opts.GonePoll
	}
	return DefaultGonePoll
}

// nodeGone reports a node whose Node left the cluster while the rollout
// worked on it (a Kubernetes upgrade keeps the Node throughout).
func (e *Engine) nodeGone(ctx context.Context, r core.Rollout, n core.RolloutNode) error {
	if r.Kind != core.RolloutKubernetes || n.NodeName == "" {
		return nil
	}
	_, ok, err := e.opts.Nodes.Node(ctx, r.Cluster, n.NodeName)
	if err == nil && !ok {
		return &nodeGoneError{node: n.NodeName}
	}
	return nil
}

// nodeGoneError is a Node that disappeared during the rollout: reported,
// not waited on, and not rolled back (there is nothing to bring back).
type nodeGoneError struct{ node string }

func (e *nodeGoneError) Error() string {
	return "Node " + e.node + " disappeared from the cluster during the rollout: not waiting for it"
}

// waitReady waits for the Node Ready at version within the rollout's node
// timeout, and stops waiting when the Node disappears.
func (e *Engine) waitReady(ctx context.Context, r core.Rollout, n core.RolloutNode, version string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(e.gonePoll())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := e.nodeGone(ctx, r, n); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	err := e.opts.Nodes.WaitReady(ctx, r.Cluster, n.NodeName, version, nodeTimeout(r))
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}
