package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// Day-2 commands against a serving ztpd: "device desired get|set"
// and "rollout list|show|start|pause|resume|abort|watch". The cluster, its
// member and the images are put in the server's store directly (nothing
// here runs a real control plane or a device agent): a rollout the engine
// starts over a switch whose agent never answers fails at its step
// timeout, and "rollout watch" follows recorded rollouts as the store
// changes under it.
func TestDayOpsCommands(t *testing.T) {
	for _, v := range []string{"ZTPD_API_URL", "ZTPD_API_KEY", "ZTPD_SECRET_KEY", "ZTPD_API_CA"} {
		t.Setenv(v, "")
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	base, cfg, ztpd := inproc.ServeApp(t, nil)
	dd := "--data-dir=" + cfg.DataDir
	newKey := func(role string) (string, string) {
		t.Helper()
		out, err := runCLI(t, dd, "apikey", "create", "--role", role, "--name", role+"-key", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var key struct {
			APIKey    string `json:"api_key"`
			SecretKey string `json:"secret_key"`
		}
		if err := json.Unmarshal([]byte(out), &key); err != nil {
			t.Fatal(err)
		}
		return key.APIKey, key.SecretKey
	}
	adminKey, adminSecret := newKey("admin")
	userKey, userSecret := newKey("user")
	as := func(key, secret string, args ...string) (string, error) {
		t.Helper()
		return runCLI(t, append(append([]string{}, args...), dd, "--api-url", base, "--api-key", key, "--secret-key", secret)...)
	}
	cli := func(args ...string) (string, error) { t.Helper(); return as(adminKey, adminSecret, args...) }
	mustJSON := func(v any, args ...string) {
		t.Helper()
		out, err := cli(append(args, "-o", "json")...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		reflect.ValueOf(v).Elem().SetZero() // not merged into the last answer
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("%v: output %q: %v", args, out, err)
		}
	}
	mustFail := func(want string, args ...string) {
		t.Helper()
		if out, err := cli(args...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v (output %q), want one with %q", args, err, out, want)
		}
	}

	const member, standalone, cluster = "02:00:00:00:0e:01", "02:00:00:00:0e:02", "c-fab"
	dayOpsFixture(t, ztpd, cluster, member, standalone)

	// device desired get / set.
	var d desiredView
	mustJSON(&d, "device", "desired", "get", standalone)
	if d.Device != standalone || d.Generation != 0 || d.Labels == nil {
		t.Fatalf("desired get: %+v", d)
	}
	var res desiredResult
	mustJSON(&res, "device", "desired", "set", standalone, "--image", "sonic-202411.bin", "--kubernetes-version", "1.37.2",
		"--label", "rack=7", "--label", "row=b", "--hook", "pre_upgrade=snap.sh")
	if d = res.Desired; res.Rollout != nil || d.Generation != 1 || d.Image != "sonic-202411.bin" || d.KubernetesVersion != "v1.37.2" ||
		d.Labels["rack"] != "7" || d.Labels["row"] != "b" || d.Hooks["pre_upgrade"] != "snap.sh" || d.UpdatedBy != "admin-key" {
		t.Fatalf("desired set: %+v", res)
	}
	// --label adds to what the device has; --clear-* start from nothing.
	mustJSON(&res, "device", "desired", "set", standalone, "--label", "rack=8")
	if l := res.Desired.Labels; len(l) != 2 || l["rack"] != "8" || l["row"] != "b" {
		t.Fatalf("--label merges: %v", l)
	}
	mustJSON(&res, "device", "desired", "set", standalone, "--clear-labels", "--label", "site=a", "--clear-hooks", "--image", "")
	if d = res.Desired; len(d.Labels) != 1 || d.Labels["site"] != "a" || len(d.Hooks) != 0 || d.Image != "" || d.KubernetesVersion != "v1.37.2" {
		t.Fatalf("--clear-labels --clear-hooks --image \"\": %+v", d)
	}
	// A device that is no member switches mode by record: no rollout.
	mustJSON(&res, "device", "desired", "set", standalone, "--mode", "standalone")
	if res.Rollout != nil || res.Desired.Mode != "standalone" {
		t.Fatalf("--mode standalone of a non-member: %+v", res)
	}
	out, err := cli("device", "desired", "get", standalone)
	if err != nil || !strings.Contains(out, "site=a") || !strings.Contains(out, "standalone") || !strings.Contains(out, "never heard from") {
		t.Fatalf("desired get (table): %v\n%s", err, out)
	}
	mustFail("not in the image store", "device", "desired", "set", standalone, "--image", "nope.bin")
	mustFail(`--mode "hybrid"`, "device", "desired", "set", standalone, "--mode", "hybrid")
	mustFail("nothing to change", "device", "desired", "set", standalone)
	mustFail(`--label "rack"`, "device", "desired", "set", standalone, "--label", "rack")
	mustFail("--hook pre_flight", "device", "desired", "set", standalone, "--hook", "pre_flight=snap.sh")
	mustFail("not found", "device", "desired", "get", "02:00:00:00:ff:ff")
	if _, err := as(userKey, userSecret, "device", "desired", "set", standalone, "--role", "worker"); err == nil || !strings.Contains(err.Error(), "admin") {
		t.Fatalf("user key sets: %v", err)
	}

	// rollout start: what is refused says why; what starts fails here
	// (the switch has no agent) and watch exits non-zero with the reason.
	mustFail(`cluster "nowhere" not found`, "rollout", "start", "--cluster", "nowhere", "--kind", "image", "--target", "sonic-202411.bin")
	mustFail(`--kind "reboot"`, "rollout", "start", "--cluster", "fab", "--kind", "reboot")
	mustFail("is not registered", "rollout", "start", "--cluster", "fab", "--kind", "kubernetes", "--target", "v1.99.0")
	mustFail("--hook", "rollout", "start", "--cluster", "fab", "--kind", "image", "--target", "sonic-202411.bin", "--hook", "snap.sh")
	var started rolloutView
	mustJSON(&started, "rollout", "start", "--kind", "image", "--target", "sonic-202411.bin", "--devices", standalone, "--step-timeout", "1s",
		"--hook", "post_upgrade=snap.sh")
	if started.ID == "" || started.Kind != "image" || started.State != "running" || started.StepTimeout != "1s" || len(started.Nodes) != 1 ||
		started.Hooks["post_upgrade"] != "snap.sh" || started.CreatedBy != "admin-key" {
		t.Fatalf("rollout start: %+v", started)
	}
	out, err = cli("rollout", "watch", started.ID, "--interval", "200ms")
	if err == nil || !strings.Contains(err.Error(), "rollout "+started.ID+" failed") || !strings.Contains(err.Error(), "no result within") ||
		!strings.Contains(out, "agent") || !strings.Contains(out, "failed") {
		t.Fatalf("watch of a failing rollout: %v\n%s", err, out)
	}

	// A rollout recorded as running on the cluster: pause, resume, abort.
	now := time.Now().UTC()
	rec := core.Rollout{ID: "ro-29990101T000000-recorded", Cluster: cluster, Kind: core.RolloutKubernetes, State: core.RolloutRunning,
		Target: "v1.37.2", MaxUnavailable: 1, DrainTimeout: core.Duration(time.Minute), StepTimeout: core.Duration(time.Minute),
		Created: now.Add(time.Hour), UpdatedAt: now, CreatedBy: "ops",
		Nodes: []core.RolloutNode{{Device: member, NodeName: "leaf-1", Role: "worker", Phase: core.NodeDone, Reason: "Ready at v1.37.2"}}}
	putRollout(t, ztpd, rec)
	var ro rolloutView
	mustJSON(&ro, "rollout", "pause", rec.ID)
	if ro.State != "paused" || ro.ClusterName != "fab" {
		t.Fatalf("pause: %+v", ro)
	}
	mustFail("not running", "rollout", "pause", rec.ID)
	mustJSON(&ro, "rollout", "resume", rec.ID)
	if ro.State != "running" {
		t.Fatalf("resume: %+v", ro)
	}
	mustFail("pass --yes", "rollout", "abort", rec.ID)
	mustJSON(&ro, "rollout", "abort", rec.ID, "--yes")
	if ro.State != "aborted" {
		t.Fatalf("abort: %+v", ro)
	}
	mustFail("has ended", "rollout", "abort", rec.ID, "--yes")
	if _, err := as(userKey, userSecret, "rollout", "pause", started.ID); err == nil {
		t.Fatal("a user key paused a rollout")
	}

	// list and show.
	var list []rolloutView
	mustJSON(&list, "rollout", "list")
	if len(list) != 2 || list[0].ID != rec.ID || list[1].ID != started.ID {
		t.Fatalf("rollout list: %+v", list)
	}
	mustJSON(&list, "rollout", "list", "--cluster", "fab")
	if len(list) != 1 || list[0].ID != rec.ID {
		t.Fatalf("rollout list --cluster: %+v", list)
	}
	mustJSON(&list, "rollout", "list", "--state", "failed")
	if len(list) != 1 || list[0].ID != started.ID {
		t.Fatalf("rollout list --state failed: %+v", list)
	}
	out, err = cli("rollout", "list")
	if err != nil || !strings.Contains(out, "PROGRESS") || !strings.Contains(out, "1/1 done") || !strings.Contains(out, "fab") {
		t.Fatalf("rollout list (table): %v\n%s", err, out)
	}
	out, err = cli("rollout", "show", rec.ID)
	if err != nil || !strings.Contains(out, "leaf-1") || !strings.Contains(out, "Ready at v1.37.2") || !strings.Contains(out, "aborted by admin-key") ||
		!strings.Contains(out, "PHASE") {
		t.Fatalf("rollout show (table): %v\n%s", err, out)
	}
	mustFail("not found", "rollout", "show", "ro-nope")

	// watch follows a rollout as it moves: a line per phase change, and
	// exit 0 when it succeeds.
	moving := core.Rollout{ID: "ro-29990101T000001-moving", Cluster: cluster, Kind: core.RolloutKubernetes, State: core.RolloutRunning,
		Target: "v1.37.2", MaxUnavailable: 1, Created: now.Add(2 * time.Hour), UpdatedAt: now,
		Nodes: []core.RolloutNode{{Device: member, NodeName: "leaf-1", Role: "worker", Phase: core.NodePending}}}
	putRollout(t, ztpd, moving)
	go func() {
		for _, step := range []func(r *core.Rollout){
			func(r *core.Rollout) { r.Nodes[0].Phase = core.NodeCordoned },
			func(r *core.Rollout) { r.Nodes[0].Phase = core.NodeAgent },
			func(r *core.Rollout) {
				r.Nodes[0].Phase, r.Nodes[0].Reason = core.NodeDone, "Ready at v1.37.2, uncordoned"
				r.State, r.Finished = core.RolloutSucceeded, time.Now().UTC()
			},
		} {
			time.Sleep(300 * time.Millisecond)
			step(&moving)
			putRollout(t, ztpd, moving)
		}
	}()
	out, err = cli("rollout", "watch", moving.ID, "--interval", "50ms")
	if err != nil {
		t.Fatalf("watch of a succeeding rollout: %v\n%s", err, out)
	}
	var phases []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[1] == "leaf-1" {
			phases = append(phases, f[4])
		}
	}
	if strings.Join(phases, ",") != "pending,cordoned,agent,done" || !strings.Contains(out, "rollout "+moving.ID+" succeeded") ||
		!strings.Contains(out, "Ready at v1.37.2, uncordoned") {
		t.Fatalf("watch lines (phases %v):\n%s", phases, out)
	}
}

// dayOpsFixture stores cluster "fab" with one SONiC member (leaf-1), a
// SONiC switch that is no member, the image sonic-202411.bin, the hook
// script snap.sh and the version v1.37.2.
func dayOpsFixture(t *testing.T, a *app.App, cluster, member, standalone string) {
	t.Helper()
	now := time.Now().UTC()
	err := a.Store.Update(func(tx core.Tx) error {
		if err := tx.Clusters().Put(core.Cluster{ID: cluster, Name: "fab", State: core.ClusterRunning, Account: core.AdminAccount,
			Created: now, UpdatedAt: now}); err != nil {
			return err
		}
		for _, id := range []string{member, standalone} {
			d := core.Device{ID: id, MAC: id, Kind: core.KindSONiC, State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now}
			if id == member {
				d.State, d.Cluster, d.Role = core.StateJoined, cluster, "worker"
			}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
		}
		if err := tx.Memberships().Put(core.Membership{Device: member, Cluster: cluster, Role: "worker", State: core.StateJoined,
			NodeName: "leaf-1", Created: now, UpdatedAt: now}); err != nil {
			return err
		}
		if err := tx.Memberships().Enlist(cluster, member, "worker"); err != nil {
			return err
		}
		for _, im := range []core.Image{
			{SHA256: strings.Repeat("a1", 32), Name: "sonic-202411.bin", Kind: "sonic-installer", Size: 1 << 20, Created: now},
			{SHA256: strings.Repeat("b2", 32), Name: "snap.sh", Kind: "file", Size: 64, Created: now}} {
			if err := tx.Images().Put(im); err != nil {
				return err
			}
			if err := tx.Images().SetName(im.Name, im.SHA256); err != nil {
				return err
			}
		}
		return tx.Versions().Put(core.Version{ID: "ver-1372", Name: "v1.37.2", SemVer: "1.37.2", State: "Enabled", Created: now, UpdatedAt: now})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func putRollout(t *testing.T, a *app.App, r core.Rollout) {
	if err := a.Store.Update(func(tx core.Tx) error { return tx.Rollouts().Put(r) }); err != nil {
		t.Error(err)
	}
}
