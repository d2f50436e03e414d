package consoletest

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/browser"
)

// TestConsoleGateAndPlan: a rollout's page shows its canary gate and the
// checks live as the engine stores them (soaking, a check failing, then
// waiting for an approval), and its Approve button opens the gate through
// REST; a cluster's page plans an upgrade before starting it (Plan), and
// "Start this plan" starts the rollout with the plan's fingerprint.
func TestConsoleGateAndPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := browser.Path(); err != nil {
		t.Skip(err)
	}
	z := serveZtpd(t, func(tx core.Tx) error { return nil })
	admin := z.Key("admin", "ops")
	z.MustJSON(&struct{}{}, "kube-version", "add", "--semver", "1.36.3", "--url", z.Base+"/isos/v1.36.3.iso")
	var cl restCluster
	z.MustJSON(&cl, "cluster", "create", "gated", "--version", "1.36.3", "--size", "2")
	now := time.Now().UTC()
	r := core.Rollout{ID: "ro-" + now.Format("20060102T150405") + "-gate", Cluster: cl.ID, Kind: core.RolloutKubernetes,
		State: core.RolloutRunning, Target: "v1.37.2", MaxUnavailable: 1, DrainTimeout: core.Duration(time.Minute), StepTimeout: core.Duration(time.Minute),
		Canary: core.RolloutCanary{Count: 1}, Gate: core.RolloutGate{Mode: core.GateAuto, Soak: core.Duration(10 * time.Minute), URL: "http://10.99.0.1/ready"},
		GateStatus: &core.GateStatus{Phase: core.GateSoaking, Since: now, Until: now.Add(10 * time.Minute), Checks: []core.GateCheck{
			{Name: "nodes-ready", OK: true, Detail: "1 Node(s) Ready", Checked: now}, {Name: "url", OK: true, Detail: "2xx", Checked: now}}},
		CreatedBy: "ops", Created: now, UpdatedAt: now,
		Nodes: []core.RolloutNode{{Device: "1e:00:00:00:18:01", NodeName: "g-1", Role: "worker", Phase: core.NodeDone, Canary: true},
			{Device: "1e:00:00:00:18:02", NodeName: "g-2", Role: "worker", Phase: core.NodePending}}}
	if err := z.App.Store.Update(func(tx core.Tx) error { return tx.Rollouts().Put(r) }); err != nil {
		t.Fatal(err)
	}
	ro := &storedRollout{t: t, z: z, id: r.ID}
	shots := shotDir(t)
	b := browser.New(t)
	tab := b.Tab(t)
	if err := tab.SignIn(z.Base, admin.APIKey, admin.SecretKey); err != nil {
		t.Fatal(err)
	}
	open(t, tab, z.Base, "/rollouts/"+r.ID)
	if _, err := tab.WaitText("#rollout-gate-phase", "soaking"); err != nil {
		t.Fatal(err)
	}
	if txt, _ := tab.TextOf("#rollout-gate"); !strings.Contains(txt, "auto: every check for 10m0s") || !strings.Contains(txt, "http://10.99.0.1/ready") {
		t.Errorf("the gate's facts: %q", txt)
	}
	if txt, _ := tab.TextOf(`#rollout-gate-checks tr[data-check="url"]`); !strings.Contains(txt, "ok") {
		t.Errorf("the url check: %q", txt)
	}
	shoot(t, tab, shots, "rollout-gate-soaking")
	loadedAt, _ := tab.LoadedAt()

	// A check fails: shown live, without a reload.
	ro.update("gate failed", func(r *core.Rollout) {
		r.GateStatus.Phase, r.GateStatus.Reason = core.GateFailed, "url: answered 503 Service Unavailable"
		r.GateStatus.Checks[1] = core.GateCheck{Name: "url", Detail: "answered 503 Service Unavailable", Checked: time.Now().UTC()}
	})
	if _, err := tab.WaitText(`#rollout-gate-checks tr[data-check="url"]`, "answered 503"); err != nil {
		t.Fatal(err)
	}
	if txt, _ := tab.TextOf("#rollout-gate-phase"); txt != "failed" {
		t.Errorf("gate phase %q, want failed", txt)
	}
	if ok, _ := tab.Exists(`#rollout-gate-checks tr[data-check="url"][data-ok="false"]`); !ok {
		t.Error("the failed check is not marked")
	}
	// Waiting for an approval: Approve opens it through REST.
	ro.update("canary done; waiting for an approval", func(r *core.Rollout) {
		r.State, r.Reason = core.RolloutPaused, "canary done; waiting for an approval"
		r.Gate = core.RolloutGate{Mode: core.GateManual}
		r.GateStatus = &core.GateStatus{Phase: core.GateApproval, Since: time.Now().UTC()}
	})
	if _, err := tab.WaitText("#rollout-gate-phase", "approval"); err != nil {
		t.Fatal(err)
	}
	checkPage(t, tab, "/rollouts/{id} (gate)", 1)
	if err := tab.Do(chromedp.Click(chromedp.CSS("#rollout-approve"))); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitText("#rollout-gate-phase", "approved"); err != nil {
		t.Fatal(err)
	}
	if txt, _ := tab.TextOf("#rollout-gate"); !strings.Contains(txt, "ops") {
		t.Errorf("approved by: %q", txt)
	}
	if ok, _ := browser.Eval[bool](tab, `performance.getEntriesByType("navigation").length === 1`); !ok {
		t.Error("the rollout's page reloaded")
	}
	_ = loadedAt

	// The cluster's page: Plan, then Start this plan.
	ro.update("aborted", func(r *core.Rollout) { r.State, r.Finished = core.RolloutAborted, time.Now().UTC() })
	open(t, tab, z.Base, "/clusters/"+cl.ID)
	if err := tab.Do(chromedp.Click(chromedp.CSS("#cluster-upgrade-plan"))); err != nil {
		t.Fatal(err)
	}
	summary, err := tab.WaitText("#upgrade-plan-summary", "kubernetes to v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := tab.TextOf("#upgrade-plan-fingerprint")
	if !strings.Contains(summary, "estimated duration") || !strings.HasPrefix(fp, "Fingerprint ") {
		t.Errorf("the plan: %q %q", summary, fp)
	}
	shoot(t, tab, shots, "cluster-upgrade-plan")
	if err := tab.Do(chromedp.Click(chromedp.CSS("#upgrade-plan-start"))); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitJS(`location.pathname.startsWith("/rollouts/ro-") && !location.pathname.endsWith("-gate") && document.body.dataset.loaded ? "y" : ""`, "the started rollout's page"); err != nil {
		t.Fatal(err)
	}
	var started core.Rollout
	z.App.Rollouts.List(func(x core.Rollout) bool {
		if x.ID != r.ID {
			started = x
		}
		return started.ID == ""
	})
	if started.Fingerprint == "" || !strings.Contains(fp, started.Fingerprint) {
		t.Errorf("the started rollout's fingerprint %q, the plan's %q", started.Fingerprint, fp)
	}
}
