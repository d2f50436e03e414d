package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
)

// The rollback mode (-fail-pct): that share of the workers, picked by
// -seed, fail their kubelet restart after the agent's upgrade time; their
// agents run the operation's rollback step (the kubelet back at the old
// version, Ready after the node's ready time), and the rollout, started
// with rollback auto and on_failure continue, goes on. The floor is the
// same: a failing node takes the same steps (cordon, drain, the agent's
// upgrade time, the Ready time).

// pickFailing chooses the failing workers' devices.
func pickFailing(c config) map[string]bool {
	out := map[string]bool{}
	workers := c.nodes - c.controlPlanes
	n := int(float64(workers)*c.failPct/100 + 0.5)
	if c.failPct > 0 && n == 0 {
		n = 1
	}
	rng := rand.New(rand.NewPCG(c.seed, 36))
	for _, i := range rng.Perm(workers)[:n] {
		out[deviceID(c.controlPlanes+i)] = true
	}
	return out
}

// failAndRollBack is a failing node's agent: its upgrade step fails after
// the upgrade time, then it runs the operation's rollback step.
func (a *agents) failAndRollBack(ctx context.Context, dev, node string, addr netip.Addr, op *desired.DocumentOp, st desired.DocumentStep) {
	a.cl.mu.Lock()
	d := a.cl.nodes[node].steps.agent
	a.cl.mu.Unlock()
	time.Sleep(d)
	rep := desired.Report{Operation: op.ID, Step: st.Name, State: core.StepFailed, ExitCode: 1, AgentVersion: "rolloutbench",
		Output: "Job for kubelet.service failed (-fail-pct)"}
	if err := a.des.AgentReport(ctx, dev, addr, rep); err != nil {
		a.fail(dev, "report failed", err)
		return
	}
	for _, rb := range op.Steps {
		if rb.Action != core.ActionRollback {
			continue
		}
		rep := desired.Report{Operation: op.ID, Step: rb.Name, State: core.StepRunning, AgentVersion: "rolloutbench"}
		if err := a.des.AgentReport(ctx, dev, addr, rep); err != nil {
			a.fail(dev, "report rollback running", err)
			return
		}
		a.cl.upgraded(node, fromVersion)
		rep.State, rep.Output = core.StepSucceeded, "kubelet and kubeadm restored"
		if err := a.des.AgentReport(ctx, dev, addr, rep); err != nil {
			a.fail(dev, "report rollback succeeded", err)
		}
	}
}

// verifyRolledBack checks a failing node ended rolled-back, Ready at the
// old version and schedulable; the rest is verify's.
func verifyRolledBack(n core.RolloutNode, sn *simNode) string {
	switch {
	case n.Phase != core.NodeRolledBack:
		return fmt.Sprintf("%s (%s) should have failed and been rolled back, ended %s: %s", n.NodeName, n.Device, n.Phase, n.Reason)
	case sn == nil:
		return n.NodeName + ": no such Node"
	case sn.version != fromVersion || time.Now().Before(sn.readyAt) || sn.unschedulable:
		return fmt.Sprintf("%s: rolled back but Node at %s, Ready %v, unschedulable %v", n.NodeName, sn.version, !time.Now().Before(sn.readyAt), sn.unschedulable)
	}
	return ""
}

// rollbackTimes are, for each rolled-back node, the time from its failed
// step's report to the agent's rollback reported (the agent's part), and
// from the failure to the node recorded rolled-back (detected, rolled
// back, Ready again at the old version, uncordoned).
func rollbackTimes(r core.Rollout, des *desired.Service) (agentPart, total []time.Duration, err error) {
	for _, n := range r.Nodes {
		if n.Phase != core.NodeRolledBack {
			continue
		}
		d, err := des.Get(n.Device)
		if err != nil {
			return nil, nil, err
		}
		op := d.Operation
		if op == nil {
			continue
		}
		var failed, rolled time.Time
		for _, st := range op.Steps {
			switch {
			case st.State == core.StepFailed:
				failed = st.Finished
			case st.Action == core.ActionRollback && st.State == core.StepSucceeded:
				rolled = st.Finished
			}
		}
		if failed.IsZero() || rolled.IsZero() {
			continue
		}
		agentPart = append(agentPart, rolled.Sub(failed))
		total = append(total, n.Finished.Sub(failed))
	}
	slices.Sort(agentPart)
	slices.Sort(total)
	return agentPart, total, nil
}

func printRollbacks(r core.Rollout, des *desired.Service, failing map[string]bool) error {
	agentPart, total, err := rollbackTimes(r, des)
	if err != nil {
		return err
	}
	fmt.Printf("rollback mode: %d workers failed their kubelet restart and were rolled back (rollback auto, on_failure continue); rollout %s: %s\n",
		len(failing), r.State, r.Reason)
	fmt.Printf("  failure -> agent's rollback reported: p50 %s, max %s\n", ms(pct(agentPart, 50)), ms(pct(agentPart, 100)))
	fmt.Printf("  failure -> node rolled-back (detected, rolled back, Ready at %s again, uncordoned): p50 %s, mean %s, max %s\n",
		fromVersion, ms(pct(total, 50)), ms(avg(total)), ms(pct(total, 100)))
	fmt.Printf("rollback figures: failed=%d rollback_p50_s=%.2f rollback_max_s=%.2f\n", len(failing), pct(total, 50).Seconds(), pct(total, 100).Seconds())
	return nil
}
