package rest

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/caller"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/rollout"
)

// Plans before actions: POST /rollouts?dry_run=true answers what the
// rollout would do; a start naming the plan's fingerprint is refused when
// the plan differs now; a rollout waiting at its gate is approved.

func (s *Door) planRollout(c *gin.Context, spec rollout.Spec) {
	p, err := s.rollouts.Plan(c.Request.Context(), spec)
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restPlanOf(p))
}

func (s *Door) approveRollout(c *gin.Context) {
	id := c.Param("id")
	if _, ok := s.rolloutFor(c, id); !ok {
		return
	}
	r, err := s.rollouts.Approve(id, caller.AccountName(credOf(c)))
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restRolloutOf(r))
}

// gateSpec reads a start request's canary, gate and fingerprint.
func gateSpec(spec *rollout.Spec, req client.RolloutStart) error {
	spec.Fingerprint = req.PlanFingerprint
	if req.Canary != nil {
		spec.Canary = core.RolloutCanary{Count: req.Canary.Count, Selector: req.Canary.Selector}
		if spec.Canary.Count < 0 {
			return core.Errorf(core.KindInvalid, "canary count must be 1 or more")
		}
	}
	if g := req.Gate; g != nil {
		spec.Gate = core.RolloutGate{Mode: g.Mode, URL: g.URL, Script: g.Script}
		for _, d := range []struct {
			name, v string
			to      *core.Duration
		}{{"gate soak", g.Soak, &spec.Gate.Soak}, {"gate timeout", g.Timeout, &spec.Gate.Timeout}} {
			if d.v == "" {
				continue
			}
			v, err := time.ParseDuration(d.v)
			if err != nil || v < 0 {
				return core.Errorf(core.KindInvalid, "%s %q: want a duration such as 10m", d.name, d.v)
			}
			*d.to = core.Duration(v)
		}
	}
	return nil
}

func restCanaryOf(c core.RolloutCanary) *client.RolloutCanary {
	if c.IsZero() {
		return nil
	}
	return &client.RolloutCanary{Count: c.Count, Selector: c.Selector}
}

func restGateOf(g core.RolloutGate) *client.RolloutGate {
	if g.Mode == "" {
		return nil
	}
	out := &client.RolloutGate{Mode: g.Mode, URL: g.URL, Script: g.Script}
	if g.Soak > 0 {
		out.Soak = time.Duration(g.Soak).String()
	}
	if g.Timeout > 0 {
		out.Timeout = time.Duration(g.Timeout).String()
	}
	return out
}

func restGateStatusOf(g *core.GateStatus) *client.GateStatus {
	if g == nil {
		return nil
	}
	out := &client.GateStatus{Phase: g.Phase, Reason: g.Reason, Since: g.Since, Until: g.Until, By: g.By, Checks: []client.GateCheck{}}
	for _, c := range g.Checks {
		out.Checks = append(out.Checks, client.GateCheck{Name: c.Name, OK: c.OK, Detail: c.Detail, Checked: c.Checked})
	}
	return out
}

func restPlanNodeOf(n rollout.PlanNode) client.PlanNode {
	out := client.PlanNode{Device: n.Device, NodeName: n.NodeName, Role: n.Role, Current: n.Current, Target: n.Target, Ready: n.Ready,
		Skip: n.Skip, Hooks: n.Hooks, Steps: n.Steps}
	for _, b := range n.Blocks {
		out.Blocks = append(out.Blocks, client.DrainBlock{Pod: b.Pod, Budget: b.Budget, AllowedDisruptions: b.Allowed})
	}
	if n.Estimate > 0 {
		out.Estimate = n.Estimate.String()
	}
	return out
}

func restPlanOf(p rollout.Plan) client.RolloutPlan {
	out := client.RolloutPlan{Cluster: p.Cluster, Kind: string(p.Kind), Target: p.Target, MaxUnavailable: p.MaxUnavailable,
		Canary: restCanaryOf(p.Canary), Gate: restGateOf(p.Gate), Batches: []client.PlanBatch{}, Skipped: []client.PlanNode{},
		Estimate: p.Estimate.String(), EstimateSeconds: p.Estimate.Seconds(), EstimateBasis: p.EstimateBasis,
		Fingerprint: p.Fingerprint, Warnings: p.Warnings}
	for _, b := range p.Batches {
		rb := client.PlanBatch{Canary: b.Canary, Nodes: []client.PlanNode{}}
		for _, n := range b.Nodes {
			rb.Nodes = append(rb.Nodes, restPlanNodeOf(n))
		}
		out.Batches = append(out.Batches, rb)
	}
	for _, n := range p.Skipped {
		out.Skipped = append(out.Skipped, restPlanNodeOf(n))
	}
	return out
}
