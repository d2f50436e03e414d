package desired

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// refusing is an authenticator that refuses with a detailed reason.
type refusing struct{}

func (refusing) AuthenticateAgent(context.Context, string, netip.Addr) (string, error) {
	return "", core.Errorf(core.KindRefused, "agent credential abc of device x refused: asked from 10.99.9.9, which device y holds")
}

const dev = "02:00:00:00:00:07"

var home = netip.MustParseAddr("10.99.0.7")

func newService(t *testing.T, opts Options) *Service {
	t.Helper()
	f := storetest.Open(t)
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		if err := tx.Clusters().Put(core.Cluster{ID: "c1", Name: "prod", State: core.ClusterRunning}); err != nil {
			return err
		}
		if err := tx.Images().Put(core.Image{SHA256: strings.Repeat("a", 64), Name: "snap", Kind: "file"}); err != nil {
			return err
		}
		if err := tx.Images().SetName("snap", strings.Repeat("a", 64)); err != nil {
			return err
		}
		return tx.Devices().Put(core.Device{ID: dev, MAC: dev, Kind: core.KindSONiC, State: core.StateJoined})
	})
	if opts.Auth == nil {
		opts.Auth = credentialIsDevice{}
	}
	return New(f.Store, opts)
}

func op(steps ...string) core.AgentOperation {
	o := core.AgentOperation{ID: "op-" + strings.Join(steps, "-"), Kind: core.OpUpgradeKubernetes}
	for _, s := range steps {
		o.Steps = append(o.Steps, core.AgentStep{Name: s, Action: s})
	}
	return o
}

// TestSetValidatesAndRecords: an operator's change is checked, bumps the
// generation once, and is an event; a change that changes nothing is not.
func TestSetValidatesAndRecords(t *testing.T) {
	s := newService(t, Options{})
	ctx := context.Background()
	bad := []Change{
		{Mode: ptr(core.DeviceMode("maintenance"))},
		{Cluster: ptr("nope")},
		{Role: ptr("leader")},
		{Image: ptr("no-such-image")},
		{KubernetesVersion: ptr("one.two")},
		{Labels: map[string]string{"bad key!": "v"}},
		{Hooks: map[string]string{"pre_reboot": "snap"}},
		{Hooks: map[string]string{core.HookPreUpgrade: "missing"}},
		{Mode: ptr(core.ModeStandalone), Cluster: ptr("c1")},
	}
	for _, ch := range bad {
		if _, err := s.Set(ctx, "admin", dev, ch); core.KindOf(err) != core.KindInvalid {
			t.Fatalf("change %+v: %v", ch, err)
		}
	}
	if _, err := s.Set(ctx, "admin", "02:00:00:00:00:99", Change{Role: ptr("worker")}); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("unknown device: %v", err)
	}
	d, err := s.Set(ctx, "admin", dev, Change{Cluster: ptr("prod"), KubernetesVersion: ptr("1.37.2"),
		Hooks: map[string]string{core.HookPreUpgrade: "snap"}})
	if err != nil || d.Cluster != "c1" || d.KubernetesVersion != "v1.37.2" || d.Generation != 1 || d.UpdatedBy != "admin" {
		t.Fatalf("set: %+v %v", d, err)
	}
	if d, _ = s.Set(ctx, "admin", dev, Change{Cluster: ptr("c1")}); d.Generation != 1 {
		t.Fatalf("a change that changes nothing made generation %d", d.Generation)
	}
	var events []string
	storetest.View(t, s.st, func(tx core.Tx) error {
		return tx.Events().ListDevice(core.AuditEvents, dev, 0, func(e core.Event) (bool, error) {
			events = append(events, e.Type+": "+e.Message)
			return true, nil
		})
	})
	if len(events) != 1 || !strings.Contains(events[0], "cluster (none) -> c1, kubernetes (none) -> v1.37.2, hooks") {
		t.Fatalf("events: %q", events)
	}
}

func ptr[T any](v T) *T { return &v }

// TestOperationLifecycle: one operation at a time; reports move it along,
// a failed step ends it with the reason; stale and unknown reports are
// refused; output is bounded and made valid UTF-8.
func TestOperationLifecycle(t *testing.T) {
	s := newService(t, Options{})
	ctx := context.Background()
	a := op("pre", "upgrade")
	if err := s.Assign(ctx, "ro-1", dev, a, func(d *core.DesiredState) { d.KubernetesVersion = "v1.37.2" }); err != nil {
		t.Fatal(err)
	}
	if err := s.Assign(ctx, "ro-2", dev, op("other"), nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second operation: %v", err)
	}
	if err := s.Assign(ctx, "ro-1", dev, a, nil); err != nil {
		t.Fatalf("the same operation again (a resumed rollout): %v", err)
	}
	doc, err := s.AgentDocument(ctx, dev, home)
	if err != nil || doc.Operation == nil || doc.Operation.ID != a.ID || doc.KubernetesVersion != "v1.37.2" {
		t.Fatalf("document: %+v %v", doc, err)
	}
	report := func(step, state string, code int, out string) error {
		return s.AgentReport(ctx, dev, home, Report{Operation: a.ID, Step: step, State: state, ExitCode: code, Output: out, BootID: "b1"})
	}
	if err := report("pre", "exploded", 0, ""); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("bad state: %v", err)
	}
	if err := report("nope", core.StepRunning, 0, ""); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("unknown step: %v", err)
	}
	if err := s.AgentReport(ctx, dev, home, Report{Operation: "op-old", Step: "pre", State: core.StepRunning}); !errors.Is(err, ErrStaleOperation) {
		t.Fatalf("stale operation: %v", err)
	}
	for _, r := range []struct{ step, state string }{{"pre", core.StepRunning}, {"pre", core.StepRunning}, {"pre", core.StepSucceeded}, {"upgrade", core.StepRunning}} {
		if err := report(r.step, r.state, 0, "ok"); err != nil {
			t.Fatal(err)
		}
	}
	// Withdrawing a started operation is refused: it finishes.
	if err := s.Withdraw(ctx, dev, a.ID, "aborted"); !errors.Is(err, ErrStarted) {
		t.Fatalf("withdraw of a started operation: %v", err)
	}
	huge := strings.Repeat("x", MaxOutput) + "tail\xff"
	if err := report("upgrade", core.StepFailed, 2, huge); err != nil {
		t.Fatal(err)
	}
	got, err := s.Operation(dev)
	if err != nil || got.State != core.StepFailed || !strings.Contains(got.Reason, "step upgrade (upgrade) failed with exit status 2") {
		t.Fatalf("failed operation: %+v %v", got, err)
	}
	pre, _ := got.Step("pre")
	up, _ := got.Step("upgrade")
	if pre.Attempts != 2 || pre.State != core.StepSucceeded || len(up.Output) > MaxOutput+3 || !strings.HasSuffix(up.Output, "tail\uFFFD") {
		t.Fatalf("steps: pre %+v, upgrade output %d bytes ending %q", pre, len(up.Output), up.Output[len(up.Output)-8:])
	}
	// A finished operation is not in the document; a new one may start.
	if doc, _ := s.AgentDocument(ctx, dev, home); doc.Operation != nil {
		t.Fatal("a finished operation is still handed out")
	}
	b := op("again")
	if err := s.Assign(ctx, "ro-3", dev, b, nil); err != nil {
		t.Fatal(err)
	}
	// Not started: withdrawn, and the agent's first report is stale.
	if err := s.Withdraw(ctx, dev, b.ID, "aborted"); err != nil {
		t.Fatal(err)
	}
	if err := s.AgentReport(ctx, dev, home, Report{Operation: b.ID, Step: "again", State: core.StepRunning}); !errors.Is(err, ErrStaleOperation) {
		t.Fatalf("report on a withdrawn operation: %v", err)
	}
}

// TestJoinStepGetsAMintedEnrollment: a pending join step's arguments are
// minted for each document and never stored.
func TestJoinStepGetsAMintedEnrollment(t *testing.T) {
	minted := 0
	s := newService(t, Options{JoinSection: func(_ context.Context, device, cluster string) (map[string]string, error) {
		minted++
		return map[string]string{"enrollment": "ztpe1.secret" + strings.Repeat("x", minted), "join_url": "http://10.99.0.1/join", "cluster_seen": cluster}, nil
	}})
	ctx := context.Background()
	j := core.AgentOperation{ID: "op-j", Kind: core.OpJoin, Steps: []core.AgentStep{{Name: "join", Action: "join", Args: map[string]string{"cluster": "c1"}}}}
	if err := s.Assign(ctx, "ro", dev, j, nil); err != nil {
		t.Fatal(err)
	}
	doc, err := s.AgentDocument(ctx, dev, home)
	if err != nil || doc.Operation.Steps[0].Args["enrollment"] == "" || doc.Operation.Steps[0].Args["cluster_seen"] != "c1" {
		t.Fatalf("join step: %+v %v", doc.Operation, err)
	}
	d, _ := s.Get(dev)
	if strings.Contains(strings.Join(mapValues(d.Operation.Steps[0].Args), " "), "ztpe1") {
		t.Fatal("the enrollment was stored")
	}
	s.AgentReport(ctx, dev, home, Report{Operation: "op-j", Step: "join", State: core.StepRunning})
	s.AgentReport(ctx, dev, home, Report{Operation: "op-j", Step: "join", State: core.StepSucceeded})
	before := minted
	s.AgentDocument(ctx, dev, home)
	if minted != before {
		t.Fatal("an enrollment was minted after the join succeeded")
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestRefusedAgentsLearnNothing: whatever the reason, an agent sees one
// message.
func TestRefusedAgentsLearnNothing(t *testing.T) {
	for _, s := range []*Service{newService(t, Options{Auth: refusing{}}), New(nil, Options{})} {
		_, err := s.AgentDocument(context.Background(), "cred", home)
		if !errors.Is(err, ErrAgentRefused) || strings.Contains(err.Error(), "10.99.9.9") {
			t.Fatalf("refused agent sees: %v", err)
		}
	}
}

// TestReplayedReportsDoNotRegress: an agent report sent again (a captured
// one, or one whose answer the agent lost) cannot move an operation
// backwards: a finished step stays finished, a step is not reported before
// the steps ahead of it succeeded, and an exact repeat of a finished
// step's report is accepted without changing anything or adding an event.
func TestReplayedReportsDoNotRegress(t *testing.T) {
	s := newService(t, Options{})
	ctx := context.Background()
	a := op("pre", "upgrade", "post")
	if err := s.Assign(ctx, "ro-1", dev, a, nil); err != nil {
		t.Fatal(err)
	}
	report := func(step, state string, code int) error {
		return s.AgentReport(ctx, dev, home, Report{Operation: a.ID, Step: step, State: state, ExitCode: code, Output: step + " " + state, BootID: "b1"})
	}
	events := func() int {
		n := 0
		storetest.View(t, s.st, func(tx core.Tx) error {
			return tx.Events().List(core.StreamOf("agent.step"), 0, func(e core.Event) (bool, error) {
				if e.Type == "agent.step" {
					n++
				}
				return true, nil
			})
		})
		return n
	}
	if err := report("upgrade", core.StepSucceeded, 0); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("a step reported before the one ahead of it: %v", err)
	}
	for _, r := range []struct{ step, state string }{{"pre", core.StepRunning}, {"pre", core.StepSucceeded}, {"upgrade", core.StepRunning}} {
		if err := report(r.step, r.state, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := events()
	// The replayed "pre running" would have set pre back to running, and
	// the operation could never complete.
	if err := report("pre", core.StepRunning, 0); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("replayed running report of a succeeded step: %v", err)
	}
	if err := report("pre", core.StepFailed, 3); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("failed report of a succeeded step: %v", err)
	}
	if err := report("pre", core.StepSucceeded, 0); err != nil {
		t.Fatalf("the same succeeded report again: %v", err)
	}
	if n := events(); n != before {
		t.Fatalf("refused and repeated reports made %d events", n-before)
	}
	got, err := s.Operation(dev)
	pre, _ := got.Step("pre")
	if err != nil || pre.State != core.StepSucceeded || pre.Attempts != 1 || got.State != core.StepRunning {
		t.Fatalf("after the replays: operation %s, pre %+v (%v)", got.State, pre, err)
	}
	for _, r := range []struct{ step, state string }{{"upgrade", core.StepSucceeded}, {"post", core.StepRunning}, {"post", core.StepSucceeded}} {
		if err := report(r.step, r.state, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.Operation(dev); got.State != core.StepSucceeded {
		t.Fatalf("operation after every step succeeded: %s", got.State)
	}
	// The last report repeated after the operation finished: accepted
	// (the agent must not abandon a finished operation for a lost answer).
	if err := report("post", core.StepSucceeded, 0); err != nil {
		t.Fatalf("the last report again: %v", err)
	}
	if err := report("pre", core.StepRunning, 0); !errors.Is(err, ErrStaleOperation) {
		t.Fatalf("a report on a finished operation: %v", err)
	}
}
