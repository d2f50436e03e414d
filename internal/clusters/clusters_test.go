package clusters

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// recorder is a test Membership: it records calls and fails on demand.
type recorder struct {
	mu          sync.Mutex
	calls       []string
	fail        map[string]error
	kubeconfigs []KubeconfigRequest
}

func (r *recorder) do(op string, c core.Cluster) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("%s %s size=%d version=%s", op, c.Name, c.Size, c.VersionID))
	return r.fail[op]
}

func (r *recorder) setFail(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail == nil {
		r.fail = map[string]error{}
	}
	r.fail[op] = err
}

func (r *recorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return ""
	}
	return r.calls[len(r.calls)-1]
}

func (r *recorder) Provision(_ context.Context, c core.Cluster) error { return r.do("provision", c) }
func (r *recorder) Resize(_ context.Context, c core.Cluster) error    { return r.do("resize", c) }
func (r *recorder) SetVersion(_ context.Context, c core.Cluster, v core.Version) error {
	if c.VersionID != v.ID {
		return errors.New("cluster version id not set to the new version")
	}
	return r.do("setversion", c)
}
func (r *recorder) Stop(_ context.Context, c core.Cluster) error    { return r.do("stop", c) }
func (r *recorder) Start(_ context.Context, c core.Cluster) error   { return r.do("start", c) }
func (r *recorder) Destroy(_ context.Context, c core.Cluster) error { return r.do("destroy", c) }
func (r *recorder) Kubeconfig(_ context.Context, c core.Cluster, req KubeconfigRequest) (IssuedKubeconfig, error) {
	r.mu.Lock()
	r.kubeconfigs = append(r.kubeconfigs, req)
	r.mu.Unlock()
	return IssuedKubeconfig{Config: []byte("apiVersion: v1\nkind: Config\n# " + c.Name + " " + req.User + "\n"), User: req.User, Group: req.Group,
		Serial: "0a1b", NotAfter: time.Now().Add(req.Validity)}, r.do("kubeconfig", c)
}
func (r *recorder) Approve(_ context.Context, id, cluster string) (core.Device, error) {
	return core.Device{ID: id, Approved: true, Cluster: cluster}, nil
}
func (r *recorder) RevokeToken(context.Context, string) error { return nil }
func (r *recorder) ResetDevice(_ context.Context, id string) (core.Device, error) {
	return core.Device{ID: id}, nil
}

// newSvc is the service over a fresh store, driving m (nil: no joiner).
func newSvc(t *testing.T, m Membership) (*Service, *boltstore.Store) {
	t.Helper()
	st := storetest.Store(t)
	s, err := New(st, m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, st
}

// newRerunningSvc is newSvc over a store that runs every transaction twice
// (storetest.Rerunning), as a store shared by several appliances may.
func newRerunningSvc(t *testing.T, m Membership) *Service {
	t.Helper()
	s, err := New(storetest.Rerunning(storetest.Store(t)), m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

var admin = Caller{APIKey: "admin-key", Admin: true}
var user = Caller{APIKey: "user-key"}

func addVersion(t *testing.T, s *Service, semver string) core.Version {
	t.Helper()
	v, err := s.AddVersion(context.Background(), admin, VersionSpec{SemVer: semver, URL: "http://10.99.0.1:8080/isos/v" + semver + ".iso"})
	if err != nil {
		t.Fatalf("add %s: %v", semver, err)
	}
	return v
}

func wait(t *testing.T, s *Service, j core.Job) core.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done, err := s.WaitJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	return done
}

// healthy feeds the cluster one observation of a healthy cluster (API
// server answers, every desired Node Ready), as ztpd's watch would.
func healthy(t *testing.T, s *Service, ref string) {
	t.Helper()
	var c core.Cluster
	if err := s.st.View(func(tx core.Tx) error {
		var err error
		c, err = ByRef(tx, ref)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cp := max(c.ControlNodes, 1)
	if err := s.ObserveHealth(c.ID, Health{APIReachable: true, Nodes: cp + c.Size, ReadyNodes: cp + c.Size,
		ControlPlanes: cp, ReadyControlPlanes: cp}); err != nil {
		t.Fatal(err)
	}
}

func wantKind(t *testing.T, err error, k core.ErrorKind, substr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected a %v error containing %q, got nil", k, substr)
	}
	if core.KindOf(err) != k || !strings.Contains(err.Error(), substr) {
		t.Fatalf("expected kind %v containing %q, got kind %v: %v", k, substr, core.KindOf(err), err)
	}
}

func state(t *testing.T, s *Service, ref string) core.ClusterState {
	t.Helper()
	v, err := s.GetCluster(context.Background(), admin, ref)
	if err != nil {
		t.Fatal(err)
	}
	return v.Cluster.State
}

func TestSemVerAndUpgradeRules(t *testing.T) {
	for _, bad := range []string{"", "1", "1.2", "1.2.3.4", "v1.2.3", "1.2.x", "1..3", "1.2.3-rc1", "-1.2.3"} {
		if _, err := ParseSemVer(bad); err == nil {
			t.Errorf("ParseSemVer(%q) accepted", bad)
		}
	}
	if v, err := ParseSemVer("1.31.04"); err != nil || v.String() != "1.31.4" {
		t.Errorf("1.31.04: %v %v", v, err)
	}
	cases := []struct {
		from, to string
		ok       bool
	}{
		{"1.30.2", "1.30.5", true},
		{"1.30.2", "1.31.0", true},
		{"1.30.2", "1.31.9", true},
		{"1.30.2", "1.32.0", false}, // minor +2
		{"1.30.2", "1.30.1", false}, // downgrade
		{"1.30.2", "1.29.9", false}, // downgrade
		{"1.30.2", "2.0.0", false},  // major change
		{"1.30.2", "1.30.2", false}, // nothing to do
	}
	for _, c := range cases {
		if err := CheckUpgrade(c.from, c.to); (err == nil) != c.ok {
			t.Errorf("CheckUpgrade(%s -> %s) = %v, want ok=%v", c.from, c.to, err, c.ok)
		}
	}
	if SupportsHA("1.15.9") || !SupportsHA("1.16.0") || !SupportsAutoscaling("1.15.0") || SupportsAutoscaling("1.9.0") {
		t.Error("HA/autoscaling thresholds wrong")
	}
}

func TestStateMachineIsCloudStacks(t *testing.T) {
	allowed := []string{
		"Created>Starting", "Starting>Running", "Starting>Alert", "Starting>Error",
		"Running>Stopping", "Stopping>Stopped", "Stopped>Starting",
		"Running>Scaling", "Scaling>Running", "Scaling>Alert",
		"Running>Upgrading", "Upgrading>Running", "Upgrading>Alert",
		"Running>Alert", "Alert>Recovering", "Recovering>Running", "Recovering>Alert",
		"Running>Destroying", "Stopped>Destroying", "Alert>Destroying", "Error>Destroying",
		"Destroying>Destroyed", "Stopping>Alert", "Destroying>Alert", "Alert>Running",
	}
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	states := []core.ClusterState{core.ClusterCreated, core.ClusterStarting, core.ClusterRunning, core.ClusterStopping,
		core.ClusterStopped, core.ClusterScaling, core.ClusterUpgrading, core.ClusterAlert, core.ClusterRecovering,
		core.ClusterError, core.ClusterDestroying, core.ClusterDestroyed}
	for _, from := range states {
		for _, to := range states {
			k := string(from) + ">" + string(to)
			if CanTransition(from, to) != ok[k] {
				t.Errorf("CanTransition(%s) = %v", k, !ok[k])
			}
		}
	}
}

func TestVersionRules(t *testing.T) {
	s, _ := newSvc(t, nil)
	ctx := context.Background()
	url := "http://10.99.0.1:8080/isos/x.iso"
	_, err := s.AddVersion(ctx, user, VersionSpec{SemVer: "1.30.0", URL: url})
	wantKind(t, err, core.KindPermission, "admins only")
	_, err = s.AddVersion(ctx, admin, VersionSpec{SemVer: "1.10.9", URL: url})
	wantKind(t, err, core.KindInvalid, "1.11.0 is minimum")
	_, err = s.AddVersion(ctx, admin, VersionSpec{SemVer: "1.30", URL: url})
	wantKind(t, err, core.KindInvalid, "MAJOR.MINOR.PATCH")
	_, err = s.AddVersion(ctx, admin, VersionSpec{SemVer: "1.30.0", URL: url, MinCPU: 1})
	wantKind(t, err, core.KindInvalid, "Minimum 2 vCPUs")
	_, err = s.AddVersion(ctx, admin, VersionSpec{SemVer: "1.30.0", URL: url, MinMemoryMB: 1024})
	wantKind(t, err, core.KindInvalid, "Minimum 2048MB")
	_, err = s.AddVersion(ctx, admin, VersionSpec{SemVer: "1.30.0", URL: "ftp://x/y.iso"})
	wantKind(t, err, core.KindInvalid, "Invalid URL")
	_, err = s.AddVersion(ctx, admin, VersionSpec{SemVer: "1.30.0", URL: url, ZoneID: "other"})
	wantKind(t, err, core.KindInvalid, "Invalid zone")
	_, err = s.AddVersion(ctx, admin, VersionSpec{SemVer: "1.30.0", URL: url, Checksum: "zz"})
	wantKind(t, err, core.KindInvalid, "checksum")

	v, err := s.AddVersion(ctx, admin, VersionSpec{SemVer: "1.11.0", URL: url, Checksum: "{SHA-256}" + strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "v1.11.0" || v.State != VersionEnabled || v.MinCPU != 2 || v.MinMemoryMB != 2048 {
		t.Fatalf("defaults: %+v", v)
	}
	_, err = s.AddVersion(ctx, admin, VersionSpec{SemVer: "1.11.0", URL: url})
	wantKind(t, err, core.KindConflict, "already exists")

	if _, err := s.SetVersionState(ctx, user, v.ID, "Disabled"); core.KindOf(err) != core.KindPermission {
		t.Fatalf("user disabled a version: %v", err)
	}
	if _, err := s.SetVersionState(ctx, admin, v.ID, "Paused"); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("bad state: %v", err)
	}
	d, err := s.SetVersionState(ctx, admin, "v1.11.0", "disabled")
	if err != nil || d.State != VersionDisabled {
		t.Fatalf("disable by name: %+v %v", d, err)
	}
	list, err := s.ListVersions(ctx, VersionFilter{State: "Enabled"})
	if err != nil || len(list) != 0 {
		t.Fatalf("enabled list: %v %v", list, err)
	}
	// A disabled version cannot back a new cluster.
	_, _, err = s.CreateCluster(ctx, admin, ClusterSpec{Name: "c1", ZoneID: s.Zone().ID, VersionID: v.ID,
		ServiceOfferingID: Offerings[0].ID, Size: 1})
	wantKind(t, err, core.KindInvalid, "Disabled state")
}

func TestClusterLifecycleDrivesMembership(t *testing.T) {
	rec := &recorder{}
	s, _ := newSvc(t, rec)
	ctx := context.Background()
	v130 := addVersion(t, s, "1.30.2")
	v131 := addVersion(t, s, "1.31.4")
	v132 := addVersion(t, s, "1.32.0")
	v115 := addVersion(t, s, "1.15.3")

	spec := ClusterSpec{Name: "prod", ZoneID: s.Zone().ID, VersionID: v130.ID, ServiceOfferingID: Offerings[1].ID, Size: 3, ControlNodes: 3}
	// HA needs >= 1.16.0.
	bad := spec
	bad.VersionID = v115.ID
	_, _, err := s.CreateCluster(ctx, user, bad)
	wantKind(t, err, core.KindInvalid, "HA support is available only for Kubernetes version 1.16.0")
	for name, mut := range map[string]func(*ClusterSpec){
		"size 0":       func(c *ClusterSpec) { c.Size = 0 },
		"control -1":   func(c *ClusterSpec) { c.ControlNodes = -1 },
		"bad name":     func(c *ClusterSpec) { c.Name = "no spaces" },
		"zone":         func(c *ClusterSpec) { c.ZoneID = "x" },
		"offering":     func(c *ClusterSpec) { c.ServiceOfferingID = "x" },
		"version":      func(c *ClusterSpec) { c.VersionID = "x" },
		"lb ip":        func(c *ClusterSpec) { c.ExternalLBIP = "10.99.300.1" },
		"join method":  func(c *ClusterSpec) { c.JoinMethod = "magic" },
		"root disk -1": func(c *ClusterSpec) { c.NodeRootDiskSize = -1 },
	} {
		b := spec
		mut(&b)
		if _, _, err := s.CreateCluster(ctx, user, b); core.KindOf(err) != core.KindInvalid {
			t.Errorf("%s: got %v", name, err)
		}
	}

	c, j, err := s.CreateCluster(ctx, user, spec)
	if err != nil {
		t.Fatal(err)
	}
	if c.State != core.ClusterCreated || j.Command != "createKubernetesCluster" {
		t.Fatalf("created: %+v %+v", c, j)
	}
	if _, _, err := s.CreateCluster(ctx, user, spec); core.KindOf(err) != core.KindConflict {
		t.Fatalf("duplicate name: %v", err)
	}
	// The job ends Starting; the watch's first healthy look makes it Running.
	if j = wait(t, s, j); j.Status != core.JobSucceeded || j.Cluster == nil || j.Cluster.State != core.ClusterStarting {
		t.Fatalf("create job: %+v", j)
	}
	healthy(t, s, "prod")
	if st := state(t, s, "prod"); st != core.ClusterRunning {
		t.Fatalf("after a healthy observation: %s", st)
	}
	if !strings.HasPrefix(rec.last(), "provision prod") {
		t.Fatalf("provision not called: %q", rec.last())
	}

	// Scale a Running cluster: Scaling -> Running, Resize sees the new size.
	j, err = s.ScaleCluster(ctx, user, "prod", 5, "")
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobSucceeded || j.Cluster.Size != 5 || j.Cluster.State != core.ClusterRunning {
		t.Fatalf("scale: %+v", j)
	}
	if rec.last() != "resize prod size=5 version="+v130.ID {
		t.Fatalf("resize call: %q", rec.last())
	}
	_, err = s.ScaleCluster(ctx, user, "prod", 0, "")
	wantKind(t, err, core.KindInvalid, "either a new service offering or a new cluster size")
	_, err = s.ScaleCluster(ctx, user, "prod", 0, Offerings[0].ID)
	wantKind(t, err, core.KindInvalid, "cannot be scaled down for service offering")

	// Upgrade: minor+2 and downgrade refused, minor+1 accepted.
	_, err = s.UpgradeCluster(ctx, user, "prod", v132.ID)
	wantKind(t, err, core.KindInvalid, "next minor or patch")
	_, err = s.UpgradeCluster(ctx, user, "prod", v115.ID)
	wantKind(t, err, core.KindInvalid, "can not be downgraded")
	j, err = s.UpgradeCluster(ctx, user, "prod", v131.Name)
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobSucceeded || j.Cluster.VersionID != v131.ID {
		t.Fatalf("upgrade: %+v", j)
	}
	if !strings.HasPrefix(rec.last(), "setversion prod") {
		t.Fatalf("setversion not called: %q", rec.last())
	}
	// A version in use cannot be deleted.
	_, err = s.DeleteVersion(ctx, admin, v131.ID, false)
	wantKind(t, err, core.KindInUse, "currently using the version")

	// Stop: tokens suspended; size cannot change while Stopped; offering can.
	j, err = s.StopCluster(ctx, user, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobSucceeded || !j.Success || state(t, s, "prod") != core.ClusterStopped {
		t.Fatalf("stop: %+v", j)
	}
	_, err = s.UpgradeCluster(ctx, user, "prod", v132.ID)
	wantKind(t, err, core.KindState, "not in running state")
	_, err = s.ScaleCluster(ctx, user, "prod", 2, "")
	wantKind(t, err, core.KindState, "Stopped state")
	j, err = s.ScaleCluster(ctx, user, "prod", 0, Offerings[2].ID)
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobSucceeded || j.Cluster.ServiceOfferingID != Offerings[2].ID || j.Cluster.State != core.ClusterStopped {
		t.Fatalf("offering change while stopped: %+v", j)
	}
	// Stop again: a no-op success.
	j, _ = s.StopCluster(ctx, user, "prod")
	if j = wait(t, s, j); j.Status != core.JobSucceeded {
		t.Fatalf("second stop: %+v", j)
	}

	j, err = s.StartCluster(ctx, user, "prod")
	if err != nil {
		t.Fatal(err)
	}
	// Started, it is Starting until the watch sees it healthy, as after create.
	if j = wait(t, s, j); j.Status != core.JobSucceeded || j.Cluster.State != core.ClusterStarting || !strings.HasPrefix(rec.last(), "start prod") {
		t.Fatalf("start: %+v %q", j, rec.last())
	}
	healthy(t, s, "prod")
	_, cfg, err := s.Kubeconfig(ctx, user, "prod")
	if err != nil || !strings.Contains(string(cfg), "prod") {
		t.Fatalf("kubeconfig: %q %v", cfg, err)
	}

	j, err = s.DeleteCluster(ctx, user, "prod", DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobSucceeded || !j.Success || !strings.HasPrefix(rec.last(), "destroy prod") {
		t.Fatalf("delete: %+v", j)
	}
	if _, err := s.GetCluster(ctx, admin, "prod"); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("deleted cluster still there: %v", err)
	}
	// The name is free again, and the version can go now.
	j, err = s.DeleteVersion(ctx, admin, v131.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobSucceeded {
		t.Fatalf("delete version: %+v", j)
	}
	if _, err := s.GetVersion(ctx, v131.ID); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("version still there: %v", err)
	}
	// Jobs are private to their owner (admins see all).
	if _, err := s.GetJob(ctx, Caller{APIKey: "someone-else"}, j.ID); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("foreign job visible: %v", err)
	}
}

// TestFailuresLeadToErrorAndAlert runs its transactions twice
// (storetest.Rerunning): a job fails, and its cluster moves, once.
func TestFailuresLeadToErrorAndAlert(t *testing.T) {
	rec := &recorder{}
	s := newRerunningSvc(t, rec)
	ctx := context.Background()
	v := addVersion(t, s, "1.30.2")
	spec := ClusterSpec{Name: "a", ZoneID: s.Zone().ID, VersionID: v.ID, ServiceOfferingID: Offerings[0].ID, Size: 1}

	rec.setFail("provision", errors.New("CA generation failed"))
	_, j, err := s.CreateCluster(ctx, user, spec)
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobFailed || !strings.Contains(j.Error, "CA generation failed") || state(t, s, "a") != core.ClusterError {
		t.Fatalf("failed create: %+v", j)
	}
	// Error clusters can only be deleted.
	if _, err := s.StartCluster(ctx, user, "a"); core.KindOf(err) != core.KindState {
		t.Fatalf("start from Error: %v", err)
	}
	j, _ = s.DeleteCluster(ctx, user, "a", DeleteOptions{})
	if j = wait(t, s, j); j.Status != core.JobSucceeded {
		t.Fatalf("delete from Error: %+v", j)
	}

	rec.setFail("provision", nil)
	_, j, _ = s.CreateCluster(ctx, user, spec)
	wait(t, s, j)
	healthy(t, s, "a")
	rec.setFail("resize", errors.New("no waiting devices"))
	j, _ = s.ScaleCluster(ctx, user, "a", 4, "")
	if j = wait(t, s, j); j.Status != core.JobFailed || state(t, s, "a") != core.ClusterAlert {
		t.Fatalf("failed scale: %+v state %s", j, state(t, s, "a"))
	}
	// Alert -> Recovering -> Running through start.
	j, _ = s.StartCluster(ctx, user, "a")
	if j = wait(t, s, j); j.Status != core.JobSucceeded || state(t, s, "a") != core.ClusterRunning {
		t.Fatalf("recover: %+v", j)
	}
	// A failed destroy leaves Alert, and the delete can be retried.
	rec.setFail("destroy", errors.New("token revocation failed"))
	j, _ = s.DeleteCluster(ctx, user, "a", DeleteOptions{})
	if j = wait(t, s, j); j.Status != core.JobFailed || state(t, s, "a") != core.ClusterAlert {
		t.Fatalf("failed delete: %+v", j)
	}
	rec.setFail("destroy", nil)
	j, _ = s.DeleteCluster(ctx, user, "a", DeleteOptions{})
	if j = wait(t, s, j); j.Status != core.JobSucceeded {
		t.Fatalf("retried delete: %+v", j)
	}
}

func TestWithoutJoinerRecordsOnly(t *testing.T) {
	s, _ := newSvc(t, nil)
	ctx := context.Background()
	v := addVersion(t, s, "1.30.2")
	_, j, err := s.CreateCluster(ctx, user, ClusterSpec{Name: "solo", ZoneID: s.Zone().ID, VersionID: v.ID,
		ServiceOfferingID: Offerings[0].Name, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobSucceeded || state(t, s, "solo") != core.ClusterStarting {
		t.Fatalf("create without joiner: %+v", j)
	}
	healthy(t, s, "solo")
	_, _, err = s.Kubeconfig(ctx, admin, "solo")
	wantKind(t, err, core.KindUnavailable, "cluster CA not provisioned")
}

func TestRestartMarksInterruptedJobsFailed(t *testing.T) {
	f := storetest.Open(t)
	st := f.Store
	s, err := New(st, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v := addVersion(t, s, "1.30.2")
	_, j, err := s.CreateCluster(ctx, user, ClusterSpec{Name: "k", ZoneID: s.Zone().ID, VersionID: v.ID, ServiceOfferingID: Offerings[0].ID, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := wait(t, s, j)
	healthy(t, s, "k")
	// Simulate a crash in the middle of a stop: the cluster is Stopping and
	// the job pending, exactly as StopCluster leaves them before its job runs.
	stuck := newJob("stopKubernetesCluster", InstanceCluster, done.InstanceID, user)
	stuck.FailState = core.ClusterAlert
	stuck.Params.Target = core.ClusterStopped
	err = st.Update(func(tx core.Tx) error {
		c, err := tx.Clusters().Get(done.InstanceID)
		if err != nil {
			return err
		}
		if err := s.setState(tx, &c, core.ClusterStopping, "test"); err != nil {
			return err
		}
		return tx.Jobs().Put(stuck)
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close(ctx)
	st.Close()

	st = storetest.OpenIn(t, f.Dir).Store
	s2, err := New(st, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(ctx)
	n, err := s2.Recover()
	if err != nil || n != 1 {
		t.Fatalf("recover: %d %v", n, err)
	}
	got, err := s2.GetJob(ctx, user, stuck.ID)
	if err != nil || got.Status != core.JobFailed || got.ErrorKind != core.KindInternal || !strings.Contains(got.Error, "restart") {
		t.Fatalf("interrupted job: %+v %v", got, err)
	}
	if st := state(t, s2, "k"); st != core.ClusterAlert {
		t.Fatalf("cluster after recovery: %s", st)
	}
	// The finished create job is still queryable after the restart.
	if got, err := s2.GetJob(ctx, user, j.ID); err != nil || got.Status != core.JobSucceeded {
		t.Fatalf("old job after restart: %+v %v", got, err)
	}
	if n, _ := s2.Recover(); n != 0 {
		t.Fatalf("second recover found %d", n)
	}
}

func TestListAndMembersFromStore(t *testing.T) {
	s, st := newSvc(t, nil)
	ctx := context.Background()
	v := addVersion(t, s, "1.30.2")
	var ids []string
	for i := 0; i < 3; i++ {
		c, j, err := s.CreateCluster(ctx, user, ClusterSpec{Name: fmt.Sprintf("c%d", i), Description: "rack " + fmt.Sprint(i),
			ZoneID: s.Zone().ID, VersionID: v.ID, ServiceOfferingID: Offerings[1].ID, Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, s, j)
		ids = append(ids, c.ID)
	}
	err := st.Update(func(tx core.Tx) error {
		for i, m := range []struct{ mac, role, ip string }{
			{"02:00:00:00:00:01", "worker", "10.99.1.11"},
			{"02:00:00:00:00:02", "control-plane", "10.99.1.10"},
			{"02:00:00:00:00:03", "worker", "10.99.1.12"},
		} {
			state := core.StateJoined
			if i == 2 {
				state = core.StateLeft
			}
			if err := tx.Devices().Put(core.Device{ID: m.mac, MAC: m.mac, IP: m.ip, State: state}); err != nil {
				return err
			}
			if err := tx.Memberships().Put(core.Membership{Device: m.mac, Cluster: ids[1], Role: m.role, State: state}); err != nil {
				return err
			}
			if err := tx.Memberships().Enlist(ids[1], m.mac, m.role); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all, total, err := s.ListClusters(ctx, admin, ClusterFilter{ListAll: true}, 1, 2)
	if err != nil || total != 3 || len(all) != 2 || all[0].Cluster.Name != "c0" || all[1].Cluster.Name != "c1" {
		t.Fatalf("page 1: %d %v", total, err)
	}
	c1 := all[1]
	if len(c1.Members) != 2 || c1.Members[0].Role != "control-plane" || c1.Members[0].IP != "10.99.1.10" {
		t.Fatalf("members: %+v", c1.Members)
	}
	if url, ip := c1.Endpoint(); url != "https://10.99.1.10:6443/" || ip != "10.99.1.10" {
		t.Fatalf("endpoint %q %q", url, ip)
	}
	if c1.Cores() != 2*3 || c1.MemoryMB() != 4096*3 {
		t.Fatalf("cores %d memory %d", c1.Cores(), c1.MemoryMB())
	}
	// Views cache decoded records, but never past a change of the stored bytes.
	err = st.Update(func(tx core.Tx) error {
		d, err := tx.Devices().Get("02:00:00:00:00:02")
		if err != nil {
			return err
		}
		d.IP = "10.99.1.99"
		return tx.Devices().Put(d)
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.GetCluster(ctx, admin, "c1"); v.Members[0].IP != "10.99.1.99" {
		t.Fatalf("stale device after change: %+v", v.Members[0])
	}
	p2, _, _ := s.ListClusters(ctx, admin, ClusterFilter{ListAll: true}, 2, 2)
	if len(p2) != 1 || p2[0].Cluster.Name != "c2" {
		t.Fatalf("page 2: %+v", p2)
	}
	k, n, _ := s.ListClusters(ctx, admin, ClusterFilter{ListAll: true, Keyword: "RACK 2"}, 0, 0)
	if n != 1 || k[0].Cluster.Name != "c2" {
		t.Fatalf("keyword: %d", n)
	}
	if _, n, _ := s.ListClusters(ctx, admin, ClusterFilter{ListAll: true, State: "stopped"}, 0, 0); n != 0 {
		t.Fatalf("state filter: %d", n)
	}
}

// TestApproveAndRevokeGoThroughTheJoiner: the device and token operations
// check the caller and the references here and are the joiner's to do;
// without a joiner they are unavailable.
func TestApproveAndRevokeGoThroughTheJoiner(t *testing.T) {
	rec := &recorder{}
	s, st := newSvc(t, rec)
	bare, _ := newSvc(t, nil)
	ctx := context.Background()
	for _, st := range []core.Store{st, bare.st} {
		err := st.Update(func(tx core.Tx) error {
			if err := tx.Devices().Put(core.Device{ID: "02:00:00:00:00:09", MAC: "02:00:00:00:00:09", State: core.StateWaiting}); err != nil {
				return err
			}
			return tx.Tokens().Put(core.Token{ID: "abcdef", Kind: "kubeadm", SecretHash: "x"})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ApproveDevice(ctx, user, "02:00:00:00:00:09", ""); core.KindOf(err) != core.KindPermission {
		t.Fatalf("user approved: %v", err)
	}
	d, err := s.ApproveDevice(ctx, admin, "02-00-00-00-00-09", "")
	if err != nil || !d.Approved || d.ID != "02:00:00:00:00:09" {
		t.Fatalf("approve: %+v %v", d, err)
	}
	if _, err := s.ApproveDevice(ctx, admin, "02:00:00:00:00:99", ""); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("unknown device: %v", err)
	}
	if _, err := s.ApproveDevice(ctx, admin, "02:00:00:00:00:09", "nosuch"); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("unknown cluster: %v", err)
	}
	if _, err := s.RevokeToken(ctx, user, "abcdef"); core.KindOf(err) != core.KindPermission {
		t.Fatalf("user revoked: %v", err)
	}
	for _, ref := range []string{"abcdef", "kubeadm/abcdef"} {
		tok, err := s.RevokeToken(ctx, admin, ref)
		if err != nil || !tok.Revoked || tok.ID != "abcdef" {
			t.Fatalf("revoke %s: %+v %v", ref, tok, err)
		}
	}
	if _, err := s.RevokeToken(ctx, admin, "nosuch"); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("unknown token: %v", err)
	}
	var writes int
	storetest.View(t, st, func(tx core.Tx) error {
		return tx.Events().List(core.AuditEvents, 0, func(e core.Event) (bool, error) {
			if e.Type == "api.write" && (e.Fields["command"] == "approveDevice" || e.Fields["command"] == "revokeToken") {
				writes++
			}
			return true, nil
		})
	})
	if writes != 3 {
		t.Fatalf("%d approve/revoke writes recorded, want 3", writes)
	}

	_, err = bare.ApproveDevice(ctx, admin, "02:00:00:00:00:09", "")
	wantKind(t, err, core.KindUnavailable, "no joiner")
	_, err = bare.RevokeToken(ctx, admin, "abcdef")
	wantKind(t, err, core.KindUnavailable, "no joiner")
	_, err = bare.ResetDevice(ctx, admin, "02:00:00:00:00:09")
	wantKind(t, err, core.KindUnavailable, "no joiner")
}

// TestViewsGenerationMovesWithEveryViewSource checks that a write to any
// repository views are read from changes the generation, and that
// unrelated writes do not.
func TestViewsGenerationMovesWithEveryViewSource(t *testing.T) {
	s, st := newSvc(t, nil)
	gen := func() uint64 {
		g, ok := s.ViewsGeneration()
		if !ok {
			t.Fatal("boltstore must support view generations")
		}
		return g
	}
	g := gen()
	storetest.Update(t, st, func(tx core.Tx) error { return tx.Leases().Put(core.Lease{IP: "10.99.0.9", MAC: "02:00:00:00:00:09"}) })
	if gen() != g {
		t.Fatal("a leases write moved the views generation")
	}
	for name, write := range map[string]func(core.Tx) error{
		"clusters":    func(tx core.Tx) error { return tx.Clusters().Put(core.Cluster{ID: "c", Name: "c"}) },
		"versions":    func(tx core.Tx) error { return tx.Versions().Put(core.Version{ID: "v"}) },
		"memberships": func(tx core.Tx) error { return tx.Memberships().Put(core.Membership{Device: "d", Cluster: "c"}) },
		"roster":      func(tx core.Tx) error { return tx.Memberships().Enlist("c", "d", "worker") },
		"devices":     func(tx core.Tx) error { return tx.Devices().Put(core.Device{ID: "d", MAC: "d"}) },
	} {
		g := gen()
		storetest.Update(t, st, write)
		if gen() == g {
			t.Fatalf("a write to %s did not move the views generation", name)
		}
	}
}

// TestTenancy: a user key sees and operates only its account's clusters;
// another account's cluster is "not found" exactly like a missing one.
// Admins operate on all, and list all with ListAll (or one by ID).
func TestTenancy(t *testing.T) {
	rec := &recorder{}
	s, st := newSvc(t, rec)
	ctx := context.Background()
	v := addVersion(t, s, "1.30.2")
	addVersion(t, s, "1.31.0")
	alice := Caller{APIKey: "alice-key", Name: "alice", Account: "team-a"}
	alice2 := Caller{APIKey: "alice-key-2", Name: "alice-ci", Account: "team-a"}
	bob := Caller{APIKey: "bob-key", Name: "bob", Account: "team-b"}
	create := func(c Caller, name string) core.Cluster {
		t.Helper()
		cl, j, err := s.CreateCluster(ctx, c, ClusterSpec{Name: name, ZoneID: s.Zone().ID, VersionID: v.ID, ServiceOfferingID: "ztpd-small", Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		if j = wait(t, s, j); j.Status != core.JobSucceeded {
			t.Fatalf("create %s: %+v", name, j)
		}
		healthy(t, s, cl.ID)
		return cl
	}
	a := create(alice, "a1")
	b := create(bob, "b1")
	create(admin, "ops1")
	// A cluster from before accounts existed belongs to the admin account.
	legacy := create(admin, "legacy")
	if err := st.Update(func(tx core.Tx) error {
		c, err := tx.Clusters().Get(legacy.ID)
		c.Account = ""
		if err == nil {
			err = tx.Clusters().Put(c)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if a.Account != "team-a" || b.Account != "team-b" {
		t.Fatalf("accounts %q %q", a.Account, b.Account)
	}

	names := func(c Caller, f ClusterFilter) string {
		t.Helper()
		vs, n, err := s.ListClusters(ctx, c, f, 0, 0)
		if err != nil || n != len(vs) {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vs {
			out = append(out, v.Cluster.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		c    Caller
		f    ClusterFilter
		want string
	}{
		{alice, ClusterFilter{}, "a1"},
		{alice2, ClusterFilter{}, "a1"}, // another key of the same account
		{alice, ClusterFilter{ListAll: true}, "a1"},
		{alice, ClusterFilter{ID: b.ID}, ""},
		{alice, ClusterFilter{Name: "b1"}, ""},
		{bob, ClusterFilter{}, "b1"},
		{admin, ClusterFilter{}, "ops1,legacy"},
		{admin, ClusterFilter{ListAll: true}, "a1,b1,ops1,legacy"},
		{admin, ClusterFilter{Account: "team-b"}, "b1"},
		{alice, ClusterFilter{Account: "team-b"}, ""},
		{alice, ClusterFilter{Account: "team-a"}, "a1"},
		{admin, ClusterFilter{ID: b.ID}, "b1"},
		{LocalAdmin, ClusterFilter{}, "ops1,legacy"},
	} {
		if got := names(tc.c, tc.f); got != tc.want {
			t.Errorf("%s lists %+v: %q, want %q", tc.c.Name, tc.f, got, tc.want)
		}
	}

	// Every operation on another account's cluster, by ID or name, fails
	// as for a cluster that does not exist.
	missing := func(err error, ref string) {
		t.Helper()
		wantKind(t, err, core.KindNotFound, "Invalid Kubernetes cluster ID: "+ref)
	}
	for _, ref := range []string{b.ID, "b1", legacy.ID} {
		_, err := s.GetCluster(ctx, alice, ref)
		missing(err, ref)
		_, err = s.ScaleCluster(ctx, alice, ref, 3, "")
		missing(err, ref)
		_, err = s.StopCluster(ctx, alice, ref)
		missing(err, ref)
		_, err = s.StartCluster(ctx, alice, ref)
		missing(err, ref)
		_, err = s.UpgradeCluster(ctx, alice, ref, "1.31.0")
		missing(err, ref)
		_, err = s.DeleteCluster(ctx, alice, ref, DeleteOptions{})
		missing(err, ref)
		_, _, err = s.Kubeconfig(ctx, alice, ref)
		missing(err, ref)
	}
	if st := state(t, s, b.ID); st != core.ClusterRunning {
		t.Fatalf("bob's cluster %s", st)
	}
	// The same account's other key operates; so does an admin on anyone's.
	j, err := s.ScaleCluster(ctx, alice2, "a1", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	wait(t, s, j)
	if _, err := s.GetJob(ctx, alice, j.ID); err != nil {
		t.Fatalf("alice reads her account's job: %v", err)
	}
	_, err = s.GetJob(ctx, bob, j.ID)
	wantKind(t, err, core.KindNotFound, "Unable to find async job")
	if j, err = s.StopCluster(ctx, admin, "b1"); err != nil || wait(t, s, j).Status != core.JobSucceeded {
		t.Fatalf("admin stops bob's cluster: %v", err)
	}

	// Kubeconfigs carry the caller's identity and the configured lifetime,
	// and every issue is an audit event naming the key.
	if _, _, err := s.Kubeconfig(ctx, alice, "a1"); err != nil {
		t.Fatal(err)
	}
	req := rec.kubeconfigs[len(rec.kubeconfigs)-1]
	if req.User != "alice" || req.Group != "ztpd:cluster-admins" || req.Validity != 24*time.Hour {
		t.Fatalf("kubeconfig request %+v", req)
	}
	if _, _, err := s.Kubeconfig(ctx, Caller{APIKey: "k", Name: "system:masters"}, "ops1"); err == nil {
		t.Fatal("a user key got an admin cluster's kubeconfig")
	}
	var evs []core.Event
	st.View(func(tx core.Tx) error {
		return tx.Events().List(core.AuditEvents, 0, func(e core.Event) (bool, error) {
			evs = append(evs, e)
			return true, nil
		})
	})
	var issued, writes int
	for _, e := range evs {
		switch e.Type {
		case "kubeconfig.issued":
			issued++
			if e.Cluster != a.ID || e.Fields["user"] != "alice" || e.Fields["api_key"] != "alice-key" || e.Fields["account"] != "team-a" ||
				e.Fields["serial"] != "0a1b" || e.Fields["not_after"] == "" || e.Fields["group"] != KubeconfigGroup {
				t.Errorf("kubeconfig event %+v", e)
			}
		case "api.write":
			writes++
			if e.Fields["command"] == "scaleKubernetesCluster" && (e.Fields["key_name"] != "alice-ci" || e.Fields["account"] != "team-a" || e.Fields["job"] == "") {
				t.Errorf("scale event %+v", e)
			}
		}
	}
	if issued != 1 || writes != 2+4+1+1 { // versions, creates, scale, stop
		t.Fatalf("%d kubeconfig events, %d write events", issued, writes)
	}
}

// TestKubeconfigUserNames: the certificate CN is the key's name, else its
// API key; a system: name cannot pose as a Kubernetes identity.
func TestKubeconfigUserNames(t *testing.T) {
	for c, want := range map[Caller]string{
		{APIKey: "K", Name: "alice"}:             "alice",
		{APIKey: "K"}:                            "apikey:K",
		{APIKey: "K", Name: "system:kube-proxy"}: "ztpd:system:kube-proxy",
		{APIKey: "K", Name: "System:x"}:          "ztpd:System:x",
		LocalAdmin:                               "local-admin",
	} {
		if got := kubeconfigUser(c); got != want {
			t.Errorf("%+v: %q, want %q", c, got, want)
		}
	}
}

// TestRecordEndpoint: the first control plane's address becomes the API
// endpoint of a cluster that has none, once; one given at creation stays.
func TestRecordEndpoint(t *testing.T) {
	st := storetest.Store(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	storetest.Update(t, st, func(tx core.Tx) error {
		if err := tx.Clusters().Put(core.Cluster{ID: "a", Name: "a", State: core.ClusterRunning}); err != nil {
			return err
		}
		return tx.Clusters().Put(core.Cluster{ID: "b", Name: "b", State: core.ClusterRunning, Endpoint: "https://api.example:443/"})
	})
	storetest.Update(t, st, func(tx core.Tx) error {
		for _, ep := range []string{"[2001:db8::1]:6443", "10.99.1.3:6443"} {
			if _, err := RecordEndpoint(tx, "a", ep, t0); err != nil {
				return err
			}
		}
		_, err := RecordEndpoint(tx, "b", "10.99.1.2:6443", t0)
		return err
	})
	storetest.View(t, st, func(tx core.Tx) error {
		a, _ := tx.Clusters().Get("a")
		b, _ := tx.Clusters().Get("b")
		if a.Endpoint != "https://[2001:db8::1]:6443/" || !a.UpdatedAt.Equal(t0) || b.Endpoint != "https://api.example:443/" || !b.UpdatedAt.IsZero() {
			t.Fatalf("endpoints %q (%v), %q (%v)", a.Endpoint, a.UpdatedAt, b.Endpoint, b.UpdatedAt)
		}
		return nil
	})
}

// forcer is a test Membership that takes members off their nodes before
// destroying (a ForceDestroyer): DestroyForce records the call and leaves
// abandoned behind, or fails as destroy does.
type forcer struct {
	*recorder
	abandoned []core.AbandonedNode
}

func (f *forcer) DestroyForce(_ context.Context, c core.Cluster) ([]core.AbandonedNode, error) {
	if err := f.do("destroyforce", c); err != nil {
		return nil, err
	}
	return f.abandoned, nil
}

// TestForcedDeleteRecordsAbandonedMembers: a delete with Force reaches
// DestroyForce, succeeds though members were left on their nodes, names
// them in the job and in one audit event with the deletion; without Force
// the same Membership gets Destroy, whose failure fails the job and leaves
// the cluster in Alert; a Membership that is no ForceDestroyer gets
// Destroy even with Force.
func TestForcedDeleteRecordsAbandonedMembers(t *testing.T) {
	f := &forcer{recorder: &recorder{}, abandoned: []core.AbandonedNode{
		{Device: "02:00:00:00:00:01", Node: "worker-1", Reason: "drain: Cannot evict pod default/db-0: disruption budget db-pdb allows 0"},
		{Device: "02:00:00:00:00:02", Node: "worker-2", Reason: "not taken out (pending): rollout ro-1 failed"},
	}}
	s, st := newSvc(t, f)
	ctx := context.Background()
	v := addVersion(t, s, "1.30.2")
	create := func(name string) {
		t.Helper()
		_, j, err := s.CreateCluster(ctx, user, ClusterSpec{Name: name, ZoneID: s.Zone().ID, VersionID: v.ID,
			ServiceOfferingID: Offerings[0].ID, Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, s, j)
		healthy(t, s, name)
	}
	create("prod")

	// Without force: Destroy, whose failure (the members could not be
	// taken out) fails the job and leaves Alert.
	f.setFail("destroy", errors.New("rollout ro-1 failed: node worker-1 failed: drain"))
	j, err := s.DeleteCluster(ctx, user, "prod", DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobFailed || j.Params.Force || !strings.HasPrefix(f.last(), "destroy prod") ||
		state(t, s, "prod") != core.ClusterAlert || len(j.Abandoned) != 0 {
		t.Fatalf("delete without force: %+v last %q state %s", j, f.last(), state(t, s, "prod"))
	}

	// With force: DestroyForce; the job succeeds and names the abandoned.
	j, err = s.DeleteCluster(ctx, user, "prod", DeleteOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if !j.Params.Force {
		t.Fatalf("accepted job without force: %+v", j.Params)
	}
	if j = wait(t, s, j); j.Status != core.JobSucceeded || !j.Success || !strings.HasPrefix(f.last(), "destroyforce prod") {
		t.Fatalf("forced delete: %+v last %q", j, f.last())
	}
	if len(j.Abandoned) != 2 || j.Abandoned[0] != f.abandoned[0] || j.Abandoned[1] != f.abandoned[1] {
		t.Fatalf("job's abandoned: %+v", j.Abandoned)
	}
	if stored, err := s.GetJob(ctx, user, j.ID); err != nil || len(stored.Abandoned) != 2 {
		t.Fatalf("stored job: %+v %v", stored, err)
	}
	if _, err := s.GetCluster(ctx, admin, "prod"); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("force-deleted cluster still there: %v", err)
	}
	var abandonedEvents []core.Event
	storetest.View(t, st, func(tx core.Tx) error {
		return tx.Events().List(core.AuditEvents, 0, func(e core.Event) (bool, error) {
			if e.Type == "cluster.abandoned" {
				abandonedEvents = append(abandonedEvents, e)
			}
			return true, nil
		})
	})
	if len(abandonedEvents) != 1 {
		t.Fatalf("%d cluster.abandoned events, want 1: %+v", len(abandonedEvents), abandonedEvents)
	}
	e := abandonedEvents[0]
	for _, want := range []string{"prod", "2 members abandoned", "worker-1 (device 02:00:00:00:00:01): drain: Cannot evict pod default/db-0",
		"worker-2 (device 02:00:00:00:00:02): not taken out (pending)"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("abandoned event lacks %q: %s", want, e.Message)
		}
	}
	if e.Fields["devices"] != "02:00:00:00:00:01,02:00:00:00:00:02" || e.Fields["nodes"] != "worker-1,worker-2" ||
		e.Fields["job"] != j.ID || e.Fields["api_key"] != user.APIKey {
		t.Errorf("abandoned event fields: %v", e.Fields)
	}

	// A forced delete whose destruction itself fails still fails (Alert).
	create("edge")
	f.setFail("destroyforce", errors.New("key material deletion failed"))
	j, _ = s.DeleteCluster(ctx, user, "edge", DeleteOptions{Force: true})
	if j = wait(t, s, j); j.Status != core.JobFailed || state(t, s, "edge") != core.ClusterAlert || len(j.Abandoned) != 0 {
		t.Fatalf("failed forced delete: %+v state %s", j, state(t, s, "edge"))
	}

	// A Membership that does not act on nodes: Force changes nothing.
	rec := &recorder{}
	s2, _ := newSvc(t, rec)
	v2 := addVersion(t, s2, "1.30.2")
	_, j, _ = s2.CreateCluster(ctx, user, ClusterSpec{Name: "plain", ZoneID: s2.Zone().ID, VersionID: v2.ID,
		ServiceOfferingID: Offerings[0].ID, Size: 1})
	wait(t, s2, j)
	healthy(t, s2, "plain")
	j, _ = s2.DeleteCluster(ctx, user, "plain", DeleteOptions{Force: true})
	if j = wait(t, s2, j); j.Status != core.JobSucceeded || !strings.HasPrefix(rec.last(), "destroy plain") || len(j.Abandoned) != 0 {
		t.Fatalf("forced delete through a plain Membership: %+v %q", j, rec.last())
	}
}
