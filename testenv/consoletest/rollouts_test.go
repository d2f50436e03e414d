package consoletest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/browser"
)

// rolloutDevices are the three devices of the stored rollout; the third's
// node name is markup a device could have chosen.
var rolloutDevices = []struct{ id, node, role string }{
	{"1e:00:00:00:17:01", "web-cp-1", "control-plane"},
	{"1e:00:00:00:17:02", "web-w-1", "worker"},
	{"1e:00:00:00:17:03", `<img src=x onerror="window.pwned=1">web-w-2`, "worker"},
}

// storedRollout writes what the engine writes as a rollout moves: the
// record and, with each change, a rollout.* event in the same transaction.
type storedRollout struct {
	t  *testing.T
	z  *ztpd
	id string
}

func (s *storedRollout) update(what string, fn func(r *core.Rollout)) {
	s.t.Helper()
	err := s.z.App.Store.Update(func(tx core.Tx) error {
		r, err := tx.Rollouts().Get(s.id)
		if err != nil {
			return err
		}
		fn(&r)
		r.UpdatedAt = time.Now().UTC()
		if err := tx.Rollouts().Put(r); err != nil {
			return err
		}
		_, err = tx.Events().Append(core.Event{Type: "rollout.progress", Cluster: r.Cluster, Time: r.UpdatedAt,
			Message: fmt.Sprintf("rollout %s: %s", r.ID, what), Fields: map[string]string{"rollout": r.ID, "state": string(r.State)}})
		return err
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// phase moves node i to phase (reason for a failure).
func (s *storedRollout) phase(i int, phase, reason string) {
	s.t.Helper()
	s.update(fmt.Sprintf("%s (%s): %s", rolloutDevices[i].node, rolloutDevices[i].id, phase), func(r *core.Rollout) {
		n := &r.Nodes[i]
		now := time.Now().UTC()
		if n.Started.IsZero() {
			n.Started = now
		}
		n.Phase, n.Reason = phase, reason
		if phase == core.NodeAgent {
			n.Operation = fmt.Sprintf("op-%s-%d", s.id, i)
		}
		if phase == core.NodeDone || phase == core.NodeFailed {
			n.Finished = now
		}
	})
}

// agentStep records node i's agent reporting a step, as desired does.
func (s *storedRollout) agentStep(i int, cluster, step, state string) {
	s.t.Helper()
	err := s.z.App.Store.Update(func(tx core.Tx) error {
		_, err := tx.Events().Append(core.Event{Type: "agent.step", Device: rolloutDevices[i].id, Cluster: cluster, Time: time.Now().UTC(),
			Message: fmt.Sprintf("%s: step %s %s", rolloutDevices[i].id, step, state),
			Fields:  map[string]string{"operation": fmt.Sprintf("op-%s-%d", s.id, i), "step": step, "state": state, "exit_code": "0"}})
		return err
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// TestConsoleRolloutLive: a rollout over a cluster's three nodes, stored as
// the engine stores it (the in-process ztpd has no real Nodes to operate),
// shown by the console in chromium. The rollouts list shows it running,
// 0 of 3 done, and its row follows the first node's phase live; its page
// lists the nodes in order (the device-chosen markup of a node name shown
// as text), then, without a reload, each phase change as the store records
// it with its rollout.progress event, the agent's step from the agent.step
// events, Pause and Resume from its buttons (through REST with the
// session's CSRF token), and the failure that ends it with its reason.
// The cluster's page lists the rollout.
func TestConsoleRolloutLive(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := browser.Path(); err != nil {
		t.Skip(err)
	}
	z := serveZtpd(t, func(tx core.Tx) error {
		now := time.Now().UTC()
		for _, d := range rolloutDevices {
			if err := tx.Devices().Put(core.Device{ID: d.id, MAC: d.id, Kind: core.KindVM, State: core.StateJoined, Role: d.role,
				FirstSeen: now, LastSeen: now, UpdatedAt: now}); err != nil {
				return err
			}
		}
		return nil
	})
	admin := z.Key("admin", "ops")
	z.MustJSON(&struct{}{}, "kube-version", "add", "--semver", "1.36.3", "--url", z.Base+"/isos/v1.36.3.iso")
	var cl restCluster
	z.MustJSON(&cl, "cluster", "create", "web", "--version", "1.36.3", "--size", "2")
	if cl.ID == "" {
		t.Fatalf("cluster create: %+v", cl)
	}
	// The rollout, running, as Start leaves it: every node pending.
	now := time.Now().UTC()
	r := core.Rollout{ID: "ro-" + now.Format("20060102T150405") + "-console", Cluster: cl.ID, Kind: core.RolloutKubernetes,
		State: core.RolloutRunning, Target: "v1.37.2", TargetID: "ver-1372", MaxUnavailable: 1,
		DrainTimeout: core.Duration(5 * time.Minute), StepTimeout: core.Duration(15 * time.Minute), CreatedBy: "ops", Created: now, UpdatedAt: now}
	for _, d := range rolloutDevices {
		r.Nodes = append(r.Nodes, core.RolloutNode{Device: d.id, NodeName: d.node, Role: d.role, Phase: core.NodePending})
	}
	if err := z.App.Store.Update(func(tx core.Tx) error {
		if err := tx.Rollouts().Put(r); err != nil {
			return err
		}
		_, err := tx.Events().Append(core.Event{Type: "rollout.started", Cluster: cl.ID, Time: now,
			Message: fmt.Sprintf("rollout %s (kubernetes v1.37.2) started by ops over 3 nodes, 1 at a time", r.ID), Fields: map[string]string{"rollout": r.ID}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ro := &storedRollout{t: t, z: z, id: r.ID}
	shots := shotDir(t)
	b := browser.New(t)
	tab := b.Tab(t)
	if err := tab.SignIn(z.Base, admin.APIKey, admin.SecretKey); err != nil {
		t.Fatal(err)
	}

	// The list: newest first, running, 0 of 3 done; the row follows the
	// first node live.
	open(t, tab, z.Base, "/rollouts")
	row := `table#rollouts tbody tr[data-id="` + r.ID + `"]`
	if err := tab.WaitFor(row); err != nil {
		t.Fatal(err)
	}
	if txt, _ := tab.TextOf(row); !strings.Contains(txt, "web") || !strings.Contains(txt, "kubernetes") || !strings.Contains(txt, "v1.37.2") ||
		!strings.Contains(txt, "running") || !strings.Contains(txt, "0 of 3 done") {
		t.Errorf("the list's row: %q", txt)
	}
	if ok, _ := tab.Exists(`nav a[href="/rollouts"][aria-current="page"]`); !ok {
		t.Error("the nav does not mark Rollouts current")
	}
	listLoaded, _ := tab.LoadedAt()
	ro.phase(0, core.NodeCordoned, "")
	if _, err := tab.WaitText(row+" td.progress", "0 of 3 done, 1 underway"); err != nil {
		t.Fatal(err)
	}
	checkPage(t, tab, "/rollouts", 1)
	shoot(t, tab, shots, "rollouts")
	if at, _ := tab.LoadedAt(); at != listLoaded {
		t.Error("the rollouts list reloaded")
	}

	// Its page, opened from the list.
	if err := tab.Do(chromedp.Click(chromedp.CSS(row + " a[href^='/rollouts/']"))); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitJS(`location.pathname.startsWith("/rollouts/ro-") && document.body.dataset.loaded ? "y" : ""`, "the rollout's page"); err != nil {
		t.Fatal(err)
	}
	nodeRow := func(i int) string { return `#rollout-nodes tbody tr[data-device="` + rolloutDevices[i].id + `"]` }
	phaseOf := func(i int) string {
		p, _ := tab.TextOf(nodeRow(i) + " td.phase .badge")
		return p
	}
	waitPhase := func(i int, want string) {
		t.Helper()
		if _, err := tab.WaitText(nodeRow(i)+" td.phase .badge", want); err != nil {
			t.Fatalf("node %s: %v (shows %q)", rolloutDevices[i].node, err, phaseOf(i))
		}
	}
	waitPhase(0, "cordoned")
	waitPhase(1, "pending")
	waitPhase(2, "pending")
	order, err := browser.Eval[[]string](tab, `[...document.querySelectorAll("#rollout-nodes tbody tr")].map(r => r.cells[1].textContent)`)
	if err != nil || len(order) != 3 || order[0] != "web-cp-1" || order[2] != rolloutDevices[2].node {
		t.Errorf("the nodes' rows: %q %v", order, err)
	}
	if pwned, _ := browser.Eval[bool](tab, `!!window.pwned || !!document.querySelector("#rollout-nodes img, #rollout-events img")`); pwned {
		t.Error("a node name's markup became an element")
	}
	loadedAt, _ := tab.LoadedAt()

	// Device by device, live.
	ro.phase(0, core.NodeDrained, "")
	waitPhase(0, "drained")
	ro.phase(0, core.NodeAgent, "")
	ro.agentStep(0, cl.ID, "kubeadm-upgrade", core.StepRunning)
	waitPhase(0, "agent")
	if _, err := tab.WaitText(nodeRow(0)+" td.step", "kubeadm-upgrade running"); err != nil {
		t.Fatal(err)
	}
	shoot(t, tab, shots, "rollout-agent")
	ro.agentStep(0, cl.ID, "kubeadm-upgrade", core.StepSucceeded)
	ro.phase(0, core.NodeWaiting, "")
	waitPhase(0, "waiting")
	if _, err := tab.WaitText(nodeRow(0)+" td.step", "kubeadm-upgrade succeeded"); err != nil {
		t.Fatal(err)
	}
	ro.phase(0, core.NodeDone, "")
	ro.phase(1, core.NodeCordoned, "")
	waitPhase(0, "done")
	waitPhase(1, "cordoned")
	if _, err := tab.WaitText("#rollout-progress-text", "1 of 3 done, 1 underway"); err != nil {
		t.Fatal(err)
	}
	if n, _ := tab.TextOf(`#rollout-counts .stat[data-phase="done"] .n`); n != "1" {
		t.Errorf("the done count: %q", n)
	}

	// Pause and Resume from the page: the engine's answer shows at once.
	if err := tab.Do(chromedp.Click(chromedp.CSS("#rollout-pause"))); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitText("#rollout-state", "paused"); err != nil {
		t.Fatal(err)
	}
	if dis, _ := browser.Eval[[]bool](tab, `["#rollout-pause", "#rollout-resume", "#rollout-abort"].map(s => document.querySelector(s).disabled)`); len(dis) != 3 || !dis[0] || dis[1] || dis[2] {
		t.Errorf("paused: pause, resume, abort disabled = %v, want true false false", dis)
	}
	var got struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	}
	z.MustJSON(&got, "rollout", "show", r.ID)
	if got.State != "paused" || !strings.Contains(got.Reason, "paused by ops") {
		t.Errorf("after Pause on the page the rollout is %s (%s)", got.State, got.Reason)
	}
	if err := tab.Do(chromedp.Click(chromedp.CSS("#rollout-resume"))); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitText("#rollout-state", "running"); err != nil {
		t.Fatal(err)
	}

	// The second node done, the third fails: the rollout ends with it.
	ro.phase(1, core.NodeDone, "")
	ro.phase(2, core.NodeCordoned, "")
	waitPhase(1, "done")
	const reason = "drain: evicting default/web-1 is refused by PodDisruptionBudget web"
	ro.phase(2, core.NodeFailed, reason)
	ro.update("failed: "+reason, func(r *core.Rollout) {
		r.State, r.Reason, r.Finished = core.RolloutFailed, rolloutDevices[2].node+": "+reason, time.Now().UTC()
	})
	waitPhase(2, "failed")
	if _, err := tab.WaitText(nodeRow(2)+" td.reason", "PodDisruptionBudget web"); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitText("#rollout-state", "failed"); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitText("#rollout-progress-text", "2 of 3 done, 1 failed"); err != nil {
		t.Fatal(err)
	}
	if dis, _ := browser.Eval[[]bool](tab, `["#rollout-pause", "#rollout-resume", "#rollout-abort"].map(s => document.querySelector(s).disabled)`); len(dis) != 3 || !dis[0] || !dis[1] || !dis[2] {
		t.Errorf("failed: pause, resume, abort disabled = %v, want all", dis)
	}
	if at, _ := tab.LoadedAt(); at != loadedAt {
		t.Error("the rollout's page reloaded while the rollout ran")
	}
	if txt, _ := tab.TextOf("#rollout-events"); !strings.Contains(txt, "paused by ops") || !strings.Contains(txt, "kubeadm-upgrade") {
		t.Errorf("the activity list: %q", txt)
	}
	if pwned, _ := browser.Eval[bool](tab, `!!window.pwned || !!document.querySelector("main img")`); pwned {
		t.Error("a node name's markup became an element")
	}
	checkPage(t, tab, "/rollouts/"+r.ID, 8)
	shoot(t, tab, shots, "rollout")

	// The cluster's page lists it.
	open(t, tab, z.Base, "/clusters/"+cl.ID)
	if _, err := tab.WaitText(`#cluster-rollouts tbody tr[data-id="`+r.ID+`"]`, "2 of 3 done, 1 failed"); err != nil {
		t.Fatal(err)
	}
}
