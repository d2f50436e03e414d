package rest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/core"
)

// The day-2 routes run over the real desired-state owner and rollout
// engine on the test's store; the cluster's Nodes are fakes (testNodes:
// every Node Ready) and the devices' agents are loops (runAgents) that
// read their documents and report every step succeeded, through the
// calls the agent endpoints make.

func (e *env) runAgents(devices ...string) { e.fx.RunAgents(e.t, devices...) }

const (
	labID    = apitest.LabID
	imageSHA = apitest.ImageSHA
	hookSHA  = apitest.HookSHA
)

func dayDevice(i int) string { return apitest.DayDevice(i) }

func (e *env) fabric() { e.fx.Fabric(e.t) }

func (e *env) waitRollout(id string) core.Rollout {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := e.rollouts.Wait(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// errCode is an error answer's code.
func errCode(t *testing.T, r apitest.RESTResp) string {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string }
	}
	into(t, r, &body)
	return body.Error.Code
}

// errMessage is an error answer's message ("" for an answer that is not
// an error).
func errMessage(r apitest.RESTResp) string {
	var body struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(r.Raw, &body)
	return body.Error.Message
}

// into decodes r into a zeroed *v: decoding over an earlier answer would
// keep the fields this one leaves out.
func into[T any](t *testing.T, r apitest.RESTResp, v *T) apitest.RESTResp {
	t.Helper()
	var zero T
	*v = zero
	r.Decode(t, v)
	return r
}

func TestRESTDesiredStateGetAndSet(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.fabric()
	a := e.rest(e.admin.APIKey, e.adminSec)
	dev := dayDevice(1)

	var d client.Desired
	r := a.Do("GET", "/api/v1/devices/"+dev+"/desired", nil)
	into(t, r, &d)
	if r.Status != 200 || d.Device != dev || d.Generation != 0 || d.Labels == nil || d.Operation != nil || d.Agent != nil {
		t.Fatalf("desired state nobody set: %d %s", r.Status, r.Raw)
	}
	// By serial too, like the device.
	if r := a.Do("GET", "/api/v1/devices/SN-D1/desired", nil); r.Status != 200 {
		t.Fatalf("by serial: %d %s", r.Status, r.Raw)
	}

	var put struct {
		Desired client.Desired
		Rollout *client.Rollout
	}
	r = a.Do("PUT", "/api/v1/devices/"+dev+"/desired", map[string]any{"image": "sonic-202411.bin", "kubernetes_version": "1.37.2",
		"role": "worker", "labels": map[string]string{"rack": "7"}, "hooks": map[string]string{"pre_upgrade": "snap.sh"}})
	into(t, r, &put)
	d = put.Desired
	if r.Status != 200 || put.Rollout != nil || d.Generation != 1 || d.Image != "sonic-202411.bin" || d.KubernetesVersion != "v1.37.2" ||
		d.Labels["rack"] != "7" || d.Hooks["pre_upgrade"] != "snap.sh" || d.UpdatedBy != "ops" || d.UpdatedAt.IsZero() {
		t.Fatalf("set: %d %s", r.Status, r.Raw)
	}
	// Absent fields stay; null and "" clear.
	into(t, a.Do("PUT", "/api/v1/devices/"+dev+"/desired", map[string]any{"image": nil, "kubernetes_version": ""}), &put)
	if d = put.Desired; d.Image != "" || d.KubernetesVersion != "" || d.Labels["rack"] != "7" || d.Hooks["pre_upgrade"] != "snap.sh" || d.Generation != 2 {
		t.Fatalf("cleared image and version: %+v", d)
	}
	into(t, a.Do("PUT", "/api/v1/devices/"+dev+"/desired", map[string]any{"labels": nil, "hooks": map[string]string{}}), &put)
	if d = put.Desired; len(d.Labels) != 0 || len(d.Hooks) != 0 || d.Role != "worker" || d.Generation != 3 {
		t.Fatalf("cleared labels and hooks: %+v", d)
	}
	// A change that changes nothing is no new generation.
	into(t, a.Do("PUT", "/api/v1/devices/"+dev+"/desired", map[string]any{"role": "worker"}), &put)
	if put.Desired.Generation != 3 {
		t.Fatalf("no-op change: generation %d", put.Desired.Generation)
	}
	var ev client.Page[core.Event]
	into(t, a.Do("GET", "/api/v1/events?type=desired.changed&device="+dev, nil), &ev)
	if len(ev.Items) != 3 || ev.Items[0].Fields["by"] != "ops" {
		t.Fatalf("desired.changed events: %+v", ev.Items)
	}

	for _, c := range []struct {
		body map[string]any
		code int
		want string
	}{
		{map[string]any{"mode": "hybrid"}, 400, `mode "hybrid"`},
		{map[string]any{"image": "sonic-nope.bin"}, 400, `image "sonic-nope.bin" is not in the image store`},
		{map[string]any{"hooks": map[string]string{"pre_flight": "snap.sh"}}, 400, `hook phase "pre_flight"`},
		{map[string]any{"hooks": map[string]string{"post_join": "nope.sh"}}, 400, `image "nope.sh"`},
		{map[string]any{"role": "boss"}, 400, `role "boss"`},
		{map[string]any{"kubernetes_version": "latest"}, 400, `kubernetes version "latest"`},
		{map[string]any{"labels": map[string]string{"bad key!": "x"}}, 400, `label key "bad key!"`},
		{map[string]any{"cluster": "nowhere"}, 400, `cluster "nowhere" not found`},
		{map[string]any{"imgae": "sonic-202411.bin"}, 400, `unknown field "imgae"`},
		{map[string]any{"mode": "standalone", "cluster": "lab"}, 400, "a standalone device names no cluster"},
	} {
		r := a.Do("PUT", "/api/v1/devices/"+dev+"/desired", c.body)
		if r.Status != c.code || !strings.Contains(errMessage(r), c.want) {
			t.Errorf("%v: %d %s, want %d with %q", c.body, r.Status, r.Raw, c.code, c.want)
		}
	}
	if r := a.Do("PUT", "/api/v1/devices/02:00:00:00:ff:ff/desired", map[string]any{"role": "worker"}); r.Status != 404 {
		t.Errorf("unknown device: %d %s", r.Status, r.Raw)
	}
	if r := a.Do("GET", "/api/v1/devices/02:00:00:00:ff:ff/desired", nil); r.Status != 404 {
		t.Errorf("unknown device: %d %s", r.Status, r.Raw)
	}
	into(t, a.Do("GET", "/api/v1/devices/"+dev+"/desired", nil), &d)
	if d.Generation != 3 {
		t.Fatalf("refused changes changed the state: generation %d", d.Generation)
	}

	// A user key changes nothing and sees only its account's devices.
	u := e.rest(e.user.APIKey, e.userSec)
	if r := u.Do("PUT", "/api/v1/devices/"+dev+"/desired", map[string]any{"role": "worker"}); r.Status != 403 || errCode(t, r) != "forbidden" {
		t.Fatalf("user sets: %d %s", r.Status, r.Raw)
	}
	if r := u.Do("GET", "/api/v1/devices/"+dev+"/desired", nil); r.Status != 404 {
		t.Fatalf("user reads another account's device: %d %s", r.Status, r.Raw)
	}
}

// TestRESTDesiredModeSwitch: switching a member to standalone is a remove
// rollout, and back into a cluster a join rollout; the mode changes when
// the device has done it, the answer is 202 with the rollout. A cluster
// with a rollout underway refuses the switch and nothing changes.
func TestRESTDesiredModeSwitch(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.fabric()
	a := e.rest(e.admin.APIKey, e.adminSec)
	dev := dayDevice(2)
	e.runAgents(dev)

	// Busy cluster first: nothing changes.
	busy := core.Rollout{ID: "ro-20260101T000000-busy", Cluster: labID, Kind: core.RolloutImage, State: core.RolloutPaused,
		Created: time.Now().UTC(), UpdatedAt: time.Now().UTC(), Nodes: []core.RolloutNode{{Device: dayDevice(1), Phase: core.NodePending}}}
	if err := e.st.Update(func(tx core.Tx) error { return tx.Rollouts().Put(busy) }); err != nil {
		t.Fatal(err)
	}
	r := a.Do("PUT", "/api/v1/devices/"+dev+"/desired", map[string]any{"mode": "standalone", "role": "worker"})
	if r.Status != 409 || !strings.Contains(string(r.Raw), busy.ID) {
		t.Fatalf("switch on a busy cluster: %d %s", r.Status, r.Raw)
	}
	var d client.Desired
	into(t, a.Do("GET", "/api/v1/devices/"+dev+"/desired", nil), &d)
	if d.Generation != 0 {
		t.Fatalf("a refused switch changed the state: %+v", d)
	}
	if r := a.Do("POST", "/api/v1/rollouts/"+busy.ID+"/abort", nil); r.Status != 200 {
		t.Fatalf("abort: %d %s", r.Status, r.Raw)
	}

	var put struct {
		Desired client.Desired
		Rollout *client.Rollout
	}
	r = a.Do("PUT", "/api/v1/devices/"+dev+"/desired", map[string]any{"mode": "standalone", "labels": map[string]string{"site": "a"}})
	into(t, r, &put)
	if r.Status != 202 || put.Rollout == nil || put.Rollout.Kind != core.RolloutRemove || put.Rollout.Cluster != labID ||
		put.Rollout.Mode != core.ModeStandalone || len(put.Rollout.Nodes) != 1 || put.Rollout.Nodes[0].Device != dev ||
		r.Header.Get("Location") != "/api/v1/rollouts/"+put.Rollout.ID || put.Desired.Labels["site"] != "a" || put.Desired.Mode == core.ModeStandalone {
		t.Fatalf("switch to standalone: %d %s", r.Status, r.Raw)
	}
	if ro := e.waitRollout(put.Rollout.ID); ro.State != core.RolloutSucceeded || ro.Nodes[0].Phase != core.NodeDone {
		t.Fatalf("remove rollout: %+v", ro)
	}
	into(t, a.Do("GET", "/api/v1/devices/"+dev+"/desired", nil), &d)
	if d.Mode != core.ModeStandalone || d.Cluster != "" || d.Operation == nil || d.Operation.Kind != core.OpLeave ||
		d.Operation.State != core.StepSucceeded || d.Operation.Rollout != put.Rollout.ID || d.Agent == nil || d.Agent.BootID != "boot-1" {
		t.Fatalf("after the remove rollout: %+v", d)
	}
	for _, st := range d.Operation.Steps {
		if st.State != core.StepSucceeded || st.Attempts != 1 || st.Output == "" || st.Args["platform"] != "" {
			t.Fatalf("step %+v", st)
		}
	}

	// Back into the cluster: a join rollout.
	r = a.Do("PUT", "/api/v1/devices/"+dev+"/desired", map[string]any{"mode": "cluster"})
	if r.Status != 400 || !strings.Contains(errMessage(r), "needs the cluster it joins") {
		t.Fatalf("cluster mode without a cluster: %d %s", r.Status, r.Raw)
	}
	r = a.Do("PUT", "/api/v1/devices/"+dev+"/desired", map[string]any{"mode": "cluster", "cluster": "lab"})
	into(t, r, &put)
	if r.Status != 202 || put.Rollout == nil || put.Rollout.Kind != core.RolloutJoin || put.Rollout.Cluster != labID {
		t.Fatalf("switch to cluster: %d %s", r.Status, r.Raw)
	}
	if ro := e.waitRollout(put.Rollout.ID); ro.State != core.RolloutSucceeded {
		t.Fatalf("join rollout: %+v", ro)
	}
	into(t, a.Do("GET", "/api/v1/devices/"+dev+"/desired", nil), &d)
	if d.Mode != core.ModeCluster || d.Cluster != labID || d.Operation.Kind != core.OpJoin {
		t.Fatalf("after the join rollout: %+v", d)
	}

	// A member moves to another cluster only through standalone.
	if err := e.st.Update(func(tx core.Tx) error {
		return tx.Clusters().Put(core.Cluster{ID: "c-other", Name: "other", State: core.ClusterRunning})
	}); err != nil {
		t.Fatal(err)
	}
	r = a.Do("PUT", "/api/v1/devices/"+dayDevice(1)+"/desired", map[string]any{"mode": "cluster", "cluster": "other"})
	if r.Status != 409 || !strings.Contains(errMessage(r), "switch it to standalone first") {
		t.Fatalf("member to another cluster: %d %s", r.Status, r.Raw)
	}
}

func TestRESTRollouts(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.fabric()
	e.runAgents(dayDevice(0), dayDevice(1), dayDevice(2))
	a := e.rest(e.admin.APIKey, e.adminSec)
	u := e.rest(e.user.APIKey, e.userSec)

	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"cluster": "nowhere", "kind": "image", "target": "sonic-202411.bin"}, `cluster "nowhere" not found`},
		{map[string]any{"cluster": "lab", "kind": "reboot"}, `kind "reboot"`},
		{map[string]any{"cluster": "lab", "kind": "join"}, "kind join"},
		{map[string]any{"kind": "kubernetes", "target": "v1.37.2"}, "names its cluster"},
		{map[string]any{"cluster": "lab", "kind": "image"}, "needs a target"},
		{map[string]any{"cluster": "lab", "kind": "image", "target": "sonic-nope.bin"}, `image "sonic-nope.bin" is not in the image store`},
		{map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "1.99.0"}, `Kubernetes version "1.99.0" is not registered`},
		{map[string]any{"cluster": "lab", "kind": "remove", "target": "x"}, "no target"},
		{map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "v1.37.2", "drain_timeout": "soon"}, `drain_timeout "soon"`},
		{map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "v1.37.2", "max_unavailable": -1}, "max_unavailable"},
		{map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "v1.37.2", "hooks": map[string]string{"pre_flight": "snap.sh"}}, `hook phase "pre_flight"`},
		{map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "v1.37.2", "mode": "standalone"}, "only a remove rollout takes a mode"},
		{map[string]any{"cluster": "lab", "kind": "image", "target": "sonic-202411.bin", "devices": []string{dayDevice(0)}}, "not a SONiC switch"},
		{map[string]any{"cluster": "lab", "kind": "image", "target": "sonic-202411.bin", "devices": []string{"02:00:00:00:ff:ff"}}, "device 02:00:00:00:ff:ff not found"},
	} {
		r := a.Do("POST", "/api/v1/rollouts", c.body)
		if r.Status != 400 || !strings.Contains(errMessage(r), c.want) {
			t.Errorf("%v: %d %s, want 400 with %q", c.body, r.Status, r.Raw, c.want)
		}
	}
	if r := u.Do("POST", "/api/v1/rollouts", map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "v1.37.2"}); r.Status != 403 {
		t.Fatalf("user starts a rollout: %d %s", r.Status, r.Raw)
	}

	var ro client.Rollout
	r := a.Do("POST", "/api/v1/rollouts", map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "1.37.2",
		"max_unavailable": 2, "drain_timeout": "1m", "step_timeout": "2m", "hooks": map[string]string{"pre_upgrade": "snap.sh"}})
	into(t, r, &ro)
	if r.Status != 202 || ro.Kind != core.RolloutKubernetes || ro.Target != "v1.37.2" || ro.TargetID != "ver-1372" || ro.Cluster != labID ||
		ro.MaxUnavailable != 2 || ro.DrainTimeout != "1m0s" || ro.StepTimeout != "2m0s" || ro.Hooks["pre_upgrade"] != "snap.sh" ||
		ro.CreatedBy != "ops" || len(ro.Nodes) != 3 || ro.Nodes[0].Device != dayDevice(0) || ro.Counts[core.NodePending] != 3 ||
		r.Header.Get("Location") != "/api/v1/rollouts/"+ro.ID {
		t.Fatalf("start: %d %s", r.Status, r.Raw)
	}
	if r := a.Do("POST", "/api/v1/rollouts", map[string]any{"cluster": "lab", "kind": "image", "target": "sonic-202411.bin",
		"devices": []string{dayDevice(1)}}); r.Status != 409 || !strings.Contains(errMessage(r), ro.ID) {
		t.Errorf("a second rollout on the cluster: %d %s", r.Status, r.Raw)
	}
	e.waitRollout(ro.ID)
	r = a.Do("GET", "/api/v1/rollouts/"+ro.ID, nil)
	into(t, r, &ro)
	if r.Status != 200 || ro.State != core.RolloutSucceeded || ro.Counts[core.NodeDone] != 3 || len(ro.Counts) != 1 || ro.Finished.IsZero() {
		t.Fatalf("after: %d %s", r.Status, r.Raw)
	}
	for _, n := range ro.Nodes {
		if n.NodeName == "" || n.Operation == "" || !n.Cordoned || n.Started.IsZero() || n.Finished.IsZero() {
			t.Fatalf("node %+v", n)
		}
	}
	// The agent's operation shows the hook and upgrade arguments it may.
	var d client.Desired
	into(t, a.Do("GET", "/api/v1/devices/"+dayDevice(1)+"/desired", nil), &d)
	if d.KubernetesVersion != "v1.37.2" || d.Operation == nil || d.Operation.Rollout != ro.ID || len(d.Operation.Steps) < 2 ||
		d.Operation.Steps[0].Action != "hook" || d.Operation.Steps[0].Args["sha256"] != hookSHA {
		t.Fatalf("device after the upgrade: %+v", d)
	}

	// An ended rollout can be neither paused, resumed nor aborted.
	for _, op := range []string{"pause", "resume", "abort"} {
		if r := a.Do("POST", "/api/v1/rollouts/"+ro.ID+"/"+op, nil); r.Status != 409 || errCode(t, r) != "state" {
			t.Errorf("%s of an ended rollout: %d %s", op, r.Status, r.Raw)
		}
	}
	if r := a.Do("POST", "/api/v1/rollouts/ro-nope/pause", nil); r.Status != 404 {
		t.Errorf("pause of an unknown rollout: %d %s", r.Status, r.Raw)
	}
	if r := a.Do("GET", "/api/v1/rollouts/ro-nope", nil); r.Status != 404 {
		t.Errorf("unknown rollout: %d %s", r.Status, r.Raw)
	}

	// A rollout running elsewhere (recorded, not in this process):
	// pause, resume and abort change its record.
	now := time.Now().UTC()
	rec := core.Rollout{ID: "ro-29990101T000000-other", Cluster: "", Kind: core.RolloutImage, State: core.RolloutRunning, Target: "sonic-202411.bin",
		MaxUnavailable: 1, DrainTimeout: core.Duration(time.Minute), StepTimeout: core.Duration(time.Minute), Created: now.Add(time.Hour), UpdatedAt: now,
		Nodes: []core.RolloutNode{{Device: dayDevice(3), Phase: core.NodeAgent, Operation: "op-1"}}}
	if err := e.st.Update(func(tx core.Tx) error { return tx.Rollouts().Put(rec) }); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ op, state string }{{"pause", "paused"}, {"pause", ""}, {"resume", "running"}, {"resume", ""}, {"abort", "aborted"}, {"pause", ""}} {
		r := a.Do("POST", "/api/v1/rollouts/"+rec.ID+"/"+step.op, nil)
		if step.state == "" {
			if r.Status != 409 {
				t.Errorf("%s: %d %s, want 409", step.op, r.Status, r.Raw)
			}
			continue
		}
		var got client.Rollout
		into(t, r, &got)
		if r.Status != 200 || string(got.State) != step.state || got.Counts[core.NodeAgent] != 1 {
			t.Errorf("%s: %d %s", step.op, r.Status, r.Raw)
		}
	}

	// Lists: newest first, filtered, paged.
	var p client.Page[client.Rollout]
	into(t, a.Do("GET", "/api/v1/rollouts", nil), &p)
	if len(p.Items) != 2 || p.Items[0].ID != rec.ID || p.Items[1].ID != ro.ID || p.NextCursor != "" {
		t.Fatalf("list: %+v", p)
	}
	into(t, a.Do("GET", "/api/v1/rollouts?cluster=lab", nil), &p)
	if len(p.Items) != 1 || p.Items[0].ID != ro.ID {
		t.Fatalf("list by cluster name: %+v", p)
	}
	into(t, a.Do("GET", "/api/v1/rollouts?state=aborted", nil), &p)
	if len(p.Items) != 1 || p.Items[0].ID != rec.ID {
		t.Fatalf("list by state: %+v", p)
	}
	into(t, a.Do("GET", "/api/v1/rollouts?limit=1", nil), &p)
	if len(p.Items) != 1 || p.Items[0].ID != rec.ID || p.NextCursor != base64.RawURLEncoding.EncodeToString([]byte(rec.ID)) {
		t.Fatalf("first page: %+v", p)
	}
	into(t, a.Do("GET", "/api/v1/rollouts?limit=1&cursor="+p.NextCursor, nil), &p)
	if len(p.Items) != 1 || p.Items[0].ID != ro.ID || p.NextCursor != "" {
		t.Fatalf("second page: %+v", p)
	}
	if r := a.Do("GET", "/api/v1/rollouts?state=done", nil); r.Status != 400 {
		t.Fatalf("bad state: %d %s", r.Status, r.Raw)
	}

	// A user key sees its account's rollouts only, and controls none.
	into(t, u.Do("GET", "/api/v1/rollouts", nil), &p)
	if len(p.Items) != 0 {
		t.Fatalf("user lists: %+v", p)
	}
	if r := u.Do("GET", "/api/v1/rollouts/"+ro.ID, nil); r.Status != 404 {
		t.Fatalf("user reads another account's rollout: %d %s", r.Status, r.Raw)
	}
	if r := u.Do("POST", "/api/v1/rollouts/"+rec.ID+"/resume", nil); r.Status != 403 {
		t.Fatalf("user resumes: %d %s", r.Status, r.Raw)
	}
}

// TestAgentEndpointsMatchTheDocument: the device agents' two endpoints
// answer as openapi.json documents them (tag agent, bearer credential).
func TestAgentEndpointsMatchTheDocument(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.fabric()
	dev := dayDevice(3)
	op := core.AgentOperation{ID: "op-test", Kind: core.OpUpgradeImage, Steps: []core.AgentStep{
		{Name: "install", Action: "sonic-install", Args: map[string]string{"image": "sonic-202411.bin", "sha256": imageSHA}},
		{Name: "reboot", Action: "reboot"}}}
	if err := e.desired.Assign(context.Background(), "test", dev, op, func(d *core.DesiredState) { d.Image = "sonic-202411.bin" }); err != nil {
		t.Fatal(err)
	}
	c := e.rest("", "")
	agent := func(method, path, body string) apitest.RESTResp {
		t.Helper()
		req, _ := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+dev)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		return c.Send(req)
	}
	if r := agent("GET", "/agent/v1/desired", ""); r.Status != 200 || !strings.Contains(string(r.Raw), `"op-test"`) || !strings.Contains(string(r.Raw), imageSHA) {
		t.Fatalf("document: %d %s", r.Status, r.Raw)
	}
	if r := agent("POST", "/agent/v1/report", `{"operation":"op-test","step":"install","state":"running","boot_id":"b1","agent_version":"1"}`); r.Status != 200 {
		t.Fatalf("report: %d %s", r.Status, r.Raw)
	}
	if r := agent("POST", "/agent/v1/report", `{"operation":"op-old","step":"install","state":"running"}`); r.Status != 409 {
		t.Fatalf("stale report: %d %s", r.Status, r.Raw)
	}
	if r := agent("POST", "/agent/v1/report", `{"operation":"op-test","step":"install","state":"maybe"}`); r.Status != 400 {
		t.Fatalf("bad report: %d %s", r.Status, r.Raw)
	}
	req, _ := http.NewRequest("GET", e.ts.URL+"/agent/v1/desired", nil)
	if r := c.Send(req); r.Status != 401 {
		t.Fatalf("no credential: %d %s", r.Status, r.Raw)
	}
	// The operator sees the step running, with the arguments it may.
	var d client.Desired
	into(t, e.rest(e.admin.APIKey, e.adminSec).Do("GET", "/api/v1/devices/"+dev+"/desired", nil), &d)
	if d.Operation == nil || d.Operation.State != core.StepRunning || d.Operation.Steps[0].State != core.StepRunning ||
		d.Operation.Steps[0].Args["sha256"] != imageSHA || d.Agent == nil || d.Agent.BootID != "b1" {
		t.Fatalf("desired after the report: %+v", d)
	}
}

// TestRESTRollback: a rollout's rollback policy, failure policy and node
// timeout are taken and shown; POST /devices/{id}/rollback takes a node of
// it back (by MAC or Node name) and answers 202 with the rollout; a device
// no rollout upgraded is 404, a user key 403.
func TestRESTRollback(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.fabric()
	e.runAgents(dayDevice(0), dayDevice(1), dayDevice(2))
	a := e.rest(e.admin.APIKey, e.adminSec)
	u := e.rest(e.user.APIKey, e.userSec)
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "v1.37.2", "rollback": "sometimes"}, `rollback "sometimes"`},
		{map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "v1.37.2", "on_failure": "retry"}, `on_failure "retry"`},
		{map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "v1.37.2", "node_timeout": "-1m"}, `node_timeout "-1m"`},
	} {
		if r := a.Do("POST", "/api/v1/rollouts", c.body); r.Status != 400 || !strings.Contains(errMessage(r), c.want) {
			t.Errorf("%v: %d %s, want 400 with %q", c.body, r.Status, r.Raw, c.want)
		}
	}
	var ro client.Rollout
	r := a.Do("POST", "/api/v1/rollouts", map[string]any{"cluster": "lab", "kind": "kubernetes", "target": "v1.37.2",
		"rollback": "auto", "on_failure": "continue", "node_timeout": "1m"})
	into(t, r, &ro)
	if r.Status != 202 || ro.Rollback != "auto" || ro.OnFailure != "continue" || ro.NodeTimeout != "1m0s" {
		t.Fatalf("start: %d %s", r.Status, r.Raw)
	}
	e.waitRollout(ro.ID)
	into(t, a.Do("GET", "/api/v1/rollouts/"+ro.ID, nil), &ro)
	if ro.State != core.RolloutSucceeded || ro.Nodes[1].Previous != "v1.36.3" {
		t.Fatalf("after: %+v", ro)
	}
	if r := u.Do("POST", "/api/v1/devices/"+dayDevice(1)+"/rollback", nil); r.Status != 403 {
		t.Fatalf("user rollback: %d %s", r.Status, r.Raw)
	}
	if r := a.Do("POST", "/api/v1/devices/"+dayDevice(3)+"/rollback", nil); r.Status != 404 || !strings.Contains(errMessage(r), "nothing to roll back") {
		t.Fatalf("rollback of a device no rollout upgraded: %d %s", r.Status, r.Raw)
	}
	node := ro.Nodes[1].NodeName
	r = a.Do("POST", "/api/v1/devices/"+node+"/rollback", nil)
	into(t, r, &ro)
	if r.Status != 202 || ro.Nodes[1].Phase != core.NodeRollingBack {
		t.Fatalf("rollback: %d %s", r.Status, r.Raw)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		into(t, a.Do("GET", "/api/v1/rollouts/"+ro.ID, nil), &ro)
		if ro.Nodes[1].Phase == core.NodeRolledBack {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node after the rollback: %+v", ro.Nodes[1])
		}
	}
	if !strings.Contains(ro.Nodes[1].Reason, "rolled back to v1.36.3 after: rollback asked by ops") {
		t.Fatalf("reason %q", ro.Nodes[1].Reason)
	}
	var d client.Desired
	into(t, a.Do("GET", "/api/v1/devices/"+dayDevice(1)+"/desired", nil), &d)
	if d.Operation == nil || d.Operation.Kind != core.OpRollback || d.Operation.State != core.StepSucceeded {
		t.Fatalf("device's operation: %+v", d.Operation)
	}
}
