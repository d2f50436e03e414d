package clusters

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// fakeClock is a settable clock for the start timeout.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) Now() time.Time  { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeClock) Set(t time.Time) { f.mu.Lock(); defer f.mu.Unlock(); f.t = t }
func (f *fakeClock) Add(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
}

// newClockedSvc is newSvc with the start timeout measured by clock, over
// a store that runs every transaction twice, as a shared one may.
func newClockedSvc(t *testing.T, m Membership, clock *fakeClock) *Service {
	t.Helper()
	s, err := New(storetest.Rerunning(storetest.Store(t)), m, Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func startingCluster(t *testing.T, s *Service, name string) core.Cluster {
	t.Helper()
	v := addVersion(t, s, "1.31.4")
	c, j, err := s.CreateCluster(context.Background(), user, ClusterSpec{Name: name, ZoneID: s.Zone().ID, VersionID: v.ID,
		ServiceOfferingID: Offerings[0].ID, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobSucceeded || state(t, s, name) != core.ClusterStarting {
		t.Fatalf("create %s: %+v, state %s", name, j, state(t, s, name))
	}
	return c
}

// enlist makes device a member of c in state st, as the joiner would.
func enlist(t *testing.T, s *Service, c core.Cluster, device string, st core.DeviceState) {
	t.Helper()
	if err := s.st.Update(func(tx core.Tx) error {
		if err := tx.Memberships().Put(core.Membership{Device: device, Cluster: c.ID, Role: "control-plane", State: st}); err != nil {
			return err
		}
		return tx.Memberships().Enlist(c.ID, device, "control-plane")
	}); err != nil {
		t.Fatal(err)
	}
}

func TestStartTimeoutMovesToAlertOnce(t *testing.T) {
	clock := &fakeClock{}
	rec := &recorder{}
	s := newClockedSvc(t, rec, clock)
	c := startingCluster(t, s, "stuck")
	clock.Set(time.Now()) // the cluster has been Starting since just before

	clock.Add(59 * time.Minute)
	if n, err := s.ExpireStarts(); err != nil || n != 0 || state(t, s, "stuck") != core.ClusterStarting {
		t.Fatalf("before the timeout: %d %v %s", n, err, state(t, s, "stuck"))
	}
	clock.Add(time.Minute)
	if n, err := s.ExpireStarts(); err != nil || n != 1 || state(t, s, "stuck") != core.ClusterAlert {
		t.Fatalf("at the timeout: %d %v %s", n, err, state(t, s, "stuck"))
	}
	// A second sweep (another appliance's, or the next tick) moves nothing.
	if n, err := s.ExpireStarts(); err != nil || n != 0 {
		t.Fatalf("second sweep: %d %v", n, err)
	}
	evs := events(t, s, c.ID, "cluster.state")
	if last := evs[len(evs)-1]; last.Message != "Kubernetes cluster stuck: Starting -> Alert (no control plane joined within 1h)" {
		t.Fatalf("event: %q", last.Message)
	}
	// From Alert it is deleted as CloudStack deletes it.
	if j := wait(t, s, mustJob(s.DeleteCluster(context.Background(), user, "stuck", DeleteOptions{}))); j.Status != core.JobSucceeded {
		t.Fatalf("delete after the timeout: %+v", j)
	}
	if !strings.HasPrefix(rec.last(), "destroy stuck") {
		t.Fatalf("destroy not called: %v", rec.calls)
	}
}

func TestStartTimeoutSaysWhatWasMissing(t *testing.T) {
	clock := &fakeClock{}
	s := newClockedSvc(t, &recorder{}, clock)
	c := startingCluster(t, s, "halfway")
	clock.Set(time.Now())
	// The API server answers but no control-plane Node is Ready yet.
	if err := s.ObserveHealth(c.ID, Health{APIReachable: true}); err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * time.Hour)
	if n, err := s.ExpireStarts(); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	evs := events(t, s, c.ID, "cluster.state")
	if last := evs[len(evs)-1]; !strings.HasSuffix(last.Message, "(0 of 1 control-plane Nodes Ready within 1h)") {
		t.Fatalf("event: %q", last.Message)
	}
	// Its Nodes come up after all: the watch makes it Running, as CloudStack's state scanner does.
	healthy(t, s, "halfway")
	if st := state(t, s, "halfway"); st != core.ClusterRunning {
		t.Fatalf("after a late healthy look: %s", st)
	}
}

func TestDeleteStartingCluster(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	s, _ := newSvc(t, rec)
	empty := startingCluster(t, s, "empty")
	// No member has joined: nothing runs anywhere, it goes at once.
	enlist(t, s, empty, "aa:00:00:00:00:01", core.StateJoinIssued)
	if j := wait(t, s, mustJob(s.DeleteCluster(ctx, user, "empty", DeleteOptions{}))); j.Status != core.JobSucceeded {
		t.Fatalf("delete of a Starting cluster with no joined member: %+v", j)
	}
	if _, err := s.GetCluster(ctx, admin, "empty"); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("still there: %v", err)
	}

	// A member has joined: refused with what would let it go.
	v := addVersion(t, s, "1.31.5")
	c, j, err := s.CreateCluster(ctx, user, ClusterSpec{Name: "joined", ZoneID: s.Zone().ID, VersionID: v.ID, ServiceOfferingID: Offerings[0].ID, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, s, j)
	enlist(t, s, c, "aa:00:00:00:00:02", core.StateJoined)
	_, err = s.DeleteCluster(ctx, user, "joined", DeleteOptions{})
	wantKind(t, err, core.KindState, "Kubernetes cluster ID: "+c.ID+" is in Starting state and cannot be deleted: 1 member has joined (aa:00:00:00:00:02); it can be deleted once it is Running, or in Alert, where it goes if it is not Running within 1h of starting, or with force")
	// With force it goes from any state.
	if j := wait(t, s, mustJob(s.DeleteCluster(ctx, user, "joined", DeleteOptions{Force: true}))); j.Status != core.JobSucceeded {
		t.Fatalf("forced delete of a Starting cluster: %+v", j)
	}
	evs := events(t, s, c.ID, "cluster.state")
	if len(evs) < 2 || !strings.Contains(evs[len(evs)-2].Message, "Starting -> Destroying") {
		t.Fatalf("events: %+v", evs)
	}
}

func TestForcedDeleteFromATransientState(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	s, _ := newSvc(t, rec)
	c := startingCluster(t, s, "busy")
	healthy(t, s, "busy")
	// An upgrade whose joiner call never returns leaves it Upgrading.
	block := make(chan struct{})
	hung := &hangingSetVersion{recorder: rec, block: block}
	s.mem = hung
	v2 := addVersion(t, s, "1.32.0")
	up, err := s.UpgradeCluster(ctx, user, "busy", v2.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st := state(t, s, "busy"); st != core.ClusterUpgrading {
		t.Fatalf("state %s", st)
	}
	_, err = s.DeleteCluster(ctx, user, "busy", DeleteOptions{})
	wantKind(t, err, core.KindState, "is in Upgrading state and cannot be deleted")
	del := wait(t, s, mustJob(s.DeleteCluster(ctx, user, "busy", DeleteOptions{Force: true})))
	if del.Status != core.JobSucceeded {
		t.Fatalf("forced delete: %+v", del)
	}
	close(block)
	// The overtaken upgrade fails and does not bring the cluster back.
	if up = wait(t, s, up); up.Status != core.JobFailed {
		t.Fatalf("upgrade: %+v", up)
	}
	if _, err := s.GetCluster(ctx, admin, c.ID); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("cluster after the forced delete: %v", err)
	}
}

// hangingSetVersion is a Membership whose SetVersion waits for block.
type hangingSetVersion struct {
	*recorder
	block chan struct{}
}

func (h *hangingSetVersion) SetVersion(ctx context.Context, c core.Cluster, v core.Version) error {
	<-h.block
	return h.recorder.SetVersion(ctx, c, v)
}

func mustJob(j core.Job, err error) core.Job {
	if err != nil {
		panic(err)
	}
	return j
}

func events(t *testing.T, s *Service, cluster, typ string) []core.Event {
	t.Helper()
	var out []core.Event
	if err := s.st.View(func(tx core.Tx) error {
		return tx.Events().List(core.StreamOf(typ), 0, func(e core.Event) (bool, error) {
			if e.Type == typ && e.Cluster == cluster {
				out = append(out, e)
			}
			return true, nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStartTimeoutSweptByTwoAppliances: two services on one store (as two
// appliances, should a leadership change let both sweep at once) move a
// late cluster to Alert once: one state change, one event.
func TestStartTimeoutSweptByTwoAppliances(t *testing.T) {
	clock := &fakeClock{}
	st := storetest.Store(t)
	var svcs []*Service
	for _, name := range []string{"a1", "a2"} {
		s, err := New(st, &recorder{}, Options{Now: clock.Now, Appliance: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		svcs = append(svcs, s)
	}
	c := startingCluster(t, svcs[0], "late")
	clock.Set(time.Now().Add(time.Hour))
	var wg sync.WaitGroup
	moved := make([]int, len(svcs))
	for i, s := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := s.ExpireStarts()
			if err != nil {
				t.Error(err)
			}
			moved[i] = n
		}()
	}
	wg.Wait()
	if moved[0]+moved[1] != 1 || state(t, svcs[1], "late") != core.ClusterAlert {
		t.Fatalf("moved %v, state %s", moved, state(t, svcs[1], "late"))
	}
	alerts := 0
	for _, e := range events(t, svcs[0], c.ID, "cluster.state") {
		if strings.Contains(e.Message, "Starting -> Alert") {
			alerts++
		}
	}
	if alerts != 1 {
		t.Fatalf("%d Starting -> Alert events", alerts)
	}
}

func TestStartTimeoutNamesMissingEtcdNodes(t *testing.T) {
	clock := &fakeClock{}
	s := newClockedSvc(t, &recorder{}, clock)
	v := addVersion(t, s, "1.31.4")
	c, j, err := s.CreateCluster(context.Background(), user, ClusterSpec{Name: "ext", ZoneID: s.Zone().ID, VersionID: v.ID,
		ServiceOfferingID: Offerings[0].ID, Size: 1, EtcdNodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	if j = wait(t, s, j); j.Status != core.JobSucceeded {
		t.Fatalf("create: %+v", j)
	}
	clock.Set(time.Now())
	// One of the three etcd nodes joined; the first control plane waits
	// for the others, so no control plane joined either.
	if err := s.st.Update(func(tx core.Tx) error {
		return tx.Clusters().PutJoinState(c.ID, core.JoinState{EtcdMembers: 1, FirstEtcd: "aa:00:00:00:00:e1"})
	}); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Hour)
	if n, err := s.ExpireStarts(); err != nil || n != 1 || state(t, s, "ext") != core.ClusterAlert {
		t.Fatalf("sweep: %d %v %s", n, err, state(t, s, "ext"))
	}
	evs := events(t, s, c.ID, "cluster.state")
	if last := evs[len(evs)-1]; !strings.HasSuffix(last.Message, "(1 of 3 etcd nodes joined, no control plane joined within 1h)") {
		t.Fatalf("event: %q", last.Message)
	}
}
