package rest

import (
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

// TestRESTRolloutPlanAndGate: dry_run answers the plan and starts
// nothing; a start with another fingerprint is refused 409; the start
// with the plan's stops at its canary's gate and goes on once approved.
func TestRESTRolloutPlanAndGate(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.fabric()
	e.runAgents(dayDevice(0), dayDevice(1), dayDevice(2))
	a := e.rest(e.admin.APIKey, e.adminSec)
	u := e.rest(e.user.APIKey, e.userSec)
	body := map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "v1.37.2", "max_unavailable": 2,
		"canary": map[string]any{"count": 1}, "gate": map[string]any{"mode": "manual"}}

	var p client.RolloutPlan
	r := a.Do("POST", "/api/v1/rollouts?dry_run=true", body)
	into(t, r, &p)
	if r.Status != 200 || len(p.Batches) == 0 || !p.Batches[0].Canary || p.Fingerprint == "" || p.Batches[0].Nodes[0].Target != "v1.37.2" {
		t.Fatalf("plan: %d %s", r.Status, r.Raw)
	}
	var page client.Page[client.Rollout]
	if into(t, a.Do("GET", "/api/v1/rollouts", nil), &page); len(page.Items) != 0 {
		t.Fatalf("a dry run started a rollout: %+v", page.Items)
	}
	if r := u.Do("POST", "/api/v1/rollouts?dry_run=true", body); r.Status != 403 {
		t.Fatalf("a user key plans: %d", r.Status)
	}
	if r := a.Do("POST", "/api/v1/rollouts?dry_run=maybe", body); r.Status != 400 {
		t.Fatalf("dry_run=maybe: %d", r.Status)
	}
	body["plan_fingerprint"] = "0000000000000000"
	if r := a.Do("POST", "/api/v1/rollouts", body); r.Status != 409 || errCode(t, r) != "conflict" ||
		!strings.Contains(errMessage(r), "changed since the plan") {
		t.Fatalf("start with a stale fingerprint: %d %s", r.Status, r.Raw)
	}
	body["plan_fingerprint"] = p.Fingerprint
	var ro client.Rollout
	r = a.Do("POST", "/api/v1/rollouts", body)
	into(t, r, &ro)
	if r.Status != 202 || ro.Fingerprint != p.Fingerprint || ro.Canary == nil || ro.Canary.Count != 1 || ro.Gate == nil ||
		ro.Gate.Mode != "manual" || ro.GateStatus == nil || !ro.Nodes[0].Canary {
		t.Fatalf("start: %d %s", r.Status, r.Raw)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		into(t, a.Do("GET", "/api/v1/rollouts/"+ro.ID, nil), &ro)
		if ro.State == core.RolloutPaused || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ro.State != core.RolloutPaused || ro.GateStatus.Phase != core.GateApproval {
		t.Fatalf("at the gate: %s %+v", ro.State, ro.GateStatus)
	}
	if r := u.Do("POST", "/api/v1/rollouts/"+ro.ID+"/approve", nil); r.Status != 403 && r.Status != 404 {
		t.Fatalf("a user key approves: %d", r.Status)
	}
	r = a.Do("POST", "/api/v1/rollouts/"+ro.ID+"/approve", nil)
	if into(t, r, &ro); r.Status != 200 || ro.GateStatus.Phase != core.GateApproved {
		t.Fatalf("approve: %d %s", r.Status, r.Raw)
	}
	if got := e.waitRollout(ro.ID); got.State != core.RolloutSucceeded {
		t.Fatalf("after the approval: %s %s", got.State, got.Reason)
	}
	if r := a.Do("POST", "/api/v1/rollouts/"+ro.ID+"/approve", nil); r.Status != 409 {
		t.Fatalf("approve an ended rollout: %d", r.Status)
	}
}
