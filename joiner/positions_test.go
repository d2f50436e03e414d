package joiner

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
)

// planEnv is a switch fabric (a SONiC-method cluster with its control
// plane joined) under a cabling plan, with the Nodes the joiner deleted.
type planEnv struct {
	*env
	plan    *positions.Plan
	mu      sync.Mutex
	deleted []string // cluster/node
}

func newPlanEnv(t *testing.T, ps ...*positions.Position) *planEnv {
	t.Helper()
	pl, errs := positions.Build(ps)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pe := &planEnv{plan: pl}
	pe.env = newEnv(t, Options{AutoApprove: approveAll, AgentFiles: agentFiles,
		Plan: func() *positions.Plan { return pe.plan },
		DeleteNode: func(_ context.Context, cluster, node string) error {
			pe.mu.Lock()
			defer pe.mu.Unlock()
			pe.deleted = append(pe.deleted, cluster+"/"+node)
			return nil
		}})
	pe.cluster(clusterSpec{Name: "fabric", Size: 4, JoinMethod: MethodSONiC})
	pe.must(pe.join("fabric", 1)) // its control plane
	return pe
}

func slot(name, circuit string) *positions.Position {
	return &positions.Position{Name: name, Relay: netip.MustParseAddr("10.99.7.1"), CircuitID: circuit, Cluster: "fabric", Role: "sonic"}
}

// arrive is a switch with serial plugged in at position (its record as
// DHCP leaves it: the lease it holds was granted through the position)
// asking to join with neighbours.
func (e *planEnv) arrive(i int, serial, position string, ns ...positions.Neighbor) (*Bundle, error) {
	e.t.Helper()
	m := mac(i)
	ip := e.hold(addrOf(i), m)
	if err := e.store.Update(func(tx core.Tx) error {
		d, err := tx.Devices().Get(m)
		if errors.Is(err, core.ErrNotFound) {
			d = core.Device{ID: m, MAC: m, Kind: core.KindSONiC, Serial: serial, State: core.StateLeased}
		} else if err != nil {
			return err
		}
		d.Position, d.IP = position, ip
		return tx.Devices().Put(d)
	}); err != nil {
		e.t.Fatal(err)
	}
	return e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("fabric", "", serial), Serial: serial, Kind: core.KindSONiC,
		RemoteIP: ip, CSR: switchCSR(e.t), Neighbors: ns})
}

func (e *planEnv) events(typ, device string) []core.Event {
	var out []core.Event
	e.store.View(func(tx core.Tx) error {
		return tx.Events().ListDevice(core.StreamOf(typ), device, 0, func(ev core.Event) (bool, error) {
			if ev.Type == typ {
				out = append(out, ev)
			}
			return true, nil
		})
	})
	return out
}

func (e *planEnv) agentRevoked(b *Bundle) bool {
	e.t.Helper()
	cred := ""
	for _, f := range b.Deliver().Files {
		if strings.Contains(f.Content, "ztpa1.") {
			cred = agentCredentialOf(e.t, f.Content)
		}
	}
	if cred == "" {
		e.t.Fatal("bundle has no agent credential")
	}
	_, err := e.svc.AuthenticateAgent(bg, cred, e.deviceAddr(b.Device))
	return errors.Is(err, ErrAgentRefused)
}

// TestReplacementAuto: under `replace: auto` a new box at a position whose
// member is known takes its place at once: the old membership ends, its
// Node is deleted, its agent credential revoked, and the new box joins
// under the same node name; each step is an event.
func TestReplacementAuto(t *testing.T) {
	p := slot("leaf-07a", "Ethernet12")
	p.Replace = positions.ReplaceAuto
	e := newPlanEnv(t, p)
	old := e.must(e.arrive(60, "SN-OLD", "leaf-07a"))
	if old.NodeName != "leaf-07a" {
		t.Fatalf("node name at a position: %q", old.NodeName)
	}
	e.nodeReady(old, "True")
	if e.agentRevoked(old) {
		t.Fatal("the member's agent is refused before any replacement")
	}

	// The switch fails; another box with another serial takes its slot.
	nb := e.must(e.arrive(61, "SN-NEW", "leaf-07a"))
	if nb.NodeName != "leaf-07a" || nb.Device != mac(61) {
		t.Fatalf("replacement joined as %q (%s)", nb.NodeName, nb.Device)
	}
	if m, _ := e.svc.Membership(bg, mac(60)); m.State != core.StateLeft {
		t.Fatalf("predecessor's membership: %s", m.State)
	}
	if m, _ := e.svc.Membership(bg, mac(61)); m.State != core.StateJoinIssued || m.NodeName != "leaf-07a" {
		t.Fatalf("replacement's membership: %s %q", m.State, m.NodeName)
	}
	if !e.agentRevoked(old) {
		t.Fatal("the predecessor's agent credential still works")
	}
	if len(e.deleted) != 1 || e.deleted[0] != nb.Cluster+"/leaf-07a" {
		t.Fatalf("Nodes deleted: %v", e.deleted)
	}
	rep := e.events("position.replaced", mac(61))
	if len(rep) != 1 || !strings.Contains(rep[0].Message, "replaces "+mac(60)+" (serial SN-OLD) at position leaf-07a (replace: auto)") {
		t.Fatalf("position.replaced events: %+v", rep)
	}
	if left := e.events("join.left", mac(60)); len(left) != 1 || !strings.Contains(left[0].Message, "replaced at position leaf-07a by "+mac(61)+" (serial SN-NEW)") {
		t.Fatalf("join.left events: %+v", left)
	}
	if len(e.events("position.node_deleted", mac(60))) != 1 {
		t.Fatal("no event for the deleted Node")
	}
	// The cluster's slot count is the same: one left, one joined.
	if rt := e.joinState(nb.Cluster); rt.Workers != 1 {
		t.Fatalf("switches counted: %d", rt.Workers)
	}
}

func (e *planEnv) joinState(cluster string) core.JoinState {
	var rt core.JoinState
	e.store.View(func(tx core.Tx) error {
		var err error
		rt, err = tx.Clusters().JoinState(cluster)
		return err
	})
	return rt
}

// TestReplacementApprove: under `replace: approve` (the default) the new
// box waits with the reason "replaces <position> (serial X)" and the
// predecessor stays the member until an operator approves the new box
// (ztpd device approve); then it takes the predecessor's place.
func TestReplacementApprove(t *testing.T) {
	e := newPlanEnv(t, slot("leaf-07b", "Ethernet13"))
	old := e.must(e.arrive(62, "SN-OLD-B", "leaf-07b"))
	e.nodeReady(old, "Unknown")

	_, err := e.arrive(63, "SN-NEW-B", "leaf-07b")
	var we *WaitError
	if !errors.As(err, &we) || !strings.Contains(we.Reason, "replaces leaf-07b (serial SN-OLD-B)") {
		t.Fatalf("replacement under approve: %v", err)
	}
	if d := e.device(mac(63)); d.State != core.StateWaiting || !strings.Contains(d.Refusal.Reason, "replaces leaf-07b (serial SN-OLD-B)") {
		t.Fatalf("waiting replacement's record: %s %+v", d.State, d.Refusal)
	}
	if m, _ := e.svc.Membership(bg, mac(62)); m.State == core.StateLeft || len(e.deleted) != 0 {
		t.Fatalf("the predecessor was replaced before any approval: %s, deleted %v", m.State, e.deleted)
	}
	if len(e.events("join.waiting", mac(63))) != 1 {
		t.Fatal("the wait is no event")
	}

	if _, err := e.svc.Approve(bg, mac(63), ""); err != nil {
		t.Fatal(err)
	}
	nb := e.must(e.arrive(63, "SN-NEW-B", "leaf-07b"))
	if nb.NodeName != "leaf-07b" {
		t.Fatalf("approved replacement joined as %q", nb.NodeName)
	}
	if m, _ := e.svc.Membership(bg, mac(62)); m.State != core.StateLeft {
		t.Fatalf("predecessor after the approval: %s", m.State)
	}
	if !e.agentRevoked(old) || len(e.deleted) != 1 {
		t.Fatalf("predecessor's agent revoked %v, Nodes deleted %v", e.agentRevoked(old), e.deleted)
	}
	if rep := e.events("position.replaced", mac(63)); len(rep) != 1 || !strings.Contains(rep[0].Message, "approved by an operator") {
		t.Fatalf("position.replaced events: %+v", rep)
	}
}

// TestMovedMemberRefused: a member of one position whose box is plugged
// into another is refused there (moved: refuse, the default) with a reason
// naming both positions, or held waiting (moved: wait); it is never given
// the other slot's name, and its membership stays as it was.
func TestMovedMemberRefused(t *testing.T) {
	a, b, c := slot("leaf-07d", "Ethernet16"), slot("leaf-07e", "Ethernet17"), slot("leaf-07f", "Ethernet18")
	c.Moved = positions.MovedWait
	e := newPlanEnv(t, a, b, c)
	first := e.must(e.arrive(64, "SN-D", "leaf-07d"))
	e.nodeReady(first, "True")

	bundle, err := e.arrive(64, "SN-D", "leaf-07e")
	if !errors.Is(err, ErrMoved) || core.KindOf(err) != core.KindRefused || bundle != nil {
		t.Fatalf("moved member: %v (bundle %v)", err, bundle)
	}
	for _, want := range []string{"member of position leaf-07d", "from position leaf-07e", `circuit-id "Ethernet16"`, `circuit-id "Ethernet17"`, "serial SN-D"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not say %q", err, want)
		}
	}
	if m, _ := e.svc.Membership(bg, mac(64)); m.State != core.StateJoined || m.NodeName != "leaf-07d" {
		t.Fatalf("moved member's membership: %s %q", m.State, m.NodeName)
	}
	if ev := e.events("position.moved_refused", mac(64)); len(ev) != 1 || ev[0].Fields["member_of"] != "leaf-07d" || ev[0].Fields["position"] != "leaf-07e" {
		t.Fatalf("moved events: %+v", ev)
	}
	if d := e.device(mac(64)); !strings.Contains(d.Refusal.Reason, "leaf-07d") || d.Refusal.Kind != "mismatch" {
		t.Fatalf("moved member's refusal: %+v", d.Refusal)
	}
	// Asking again is the same refusal, recorded once.
	if _, err := e.arrive(64, "SN-D", "leaf-07e"); !errors.Is(err, ErrMoved) {
		t.Fatal(err)
	}
	if n := len(e.events("position.moved_refused", mac(64))); n != 1 {
		t.Fatalf("a repeated refusal recorded %d times", n)
	}

	// At a position whose policy is to wait, it waits, with the same reason.
	_, err = e.arrive(64, "SN-D", "leaf-07f")
	var we *WaitError
	if !errors.As(err, &we) || !strings.Contains(we.Reason, "member of position leaf-07d") || !strings.Contains(we.Reason, "from position leaf-07f") {
		t.Fatalf("moved member under moved: wait: %v", err)
	}
	if len(e.events("position.moved_waiting", mac(64))) != 1 {
		t.Fatal("no moved_waiting event")
	}

	// Plugged back, it is its own slot's member again: a joined member
	// asking for join material is the ordinary refusal, not a move.
	if _, err := e.arrive(64, "SN-D", "leaf-07d"); errors.Is(err, ErrMoved) || !errors.Is(err, ErrAlreadyIssued) {
		t.Fatalf("back home: %v", err)
	}
}

// TestCablingStrictHoldsTheJoin: the neighbours a switch reports are
// compared with its position's; a mismatch is an event and the device's
// cabling warning, and under `cabling: strict` the join waits with a
// reason naming expected and seen. Fixed cabling clears both and the
// join goes on. Under the default (warn) the mismatch is recorded and the
// join goes on.
func TestCablingStrictHoldsTheJoin(t *testing.T) {
	strict, warn := slot("leaf-07c", "Ethernet14"), slot("leaf-07g", "Ethernet19")
	strict.Cabling = positions.CablingStrict
	want := []positions.Neighbor{{Port: "eth0", RemoteSystem: "mgmt-sw-1", RemotePort: "Ethernet14"}}
	strict.Neighbors, warn.Neighbors = want, []positions.Neighbor{{Port: "eth0", RemoteSystem: "mgmt-sw-1", RemotePort: "Ethernet19"}}
	e := newPlanEnv(t, strict, warn)
	wrong := []positions.Neighbor{{Port: "eth0", RemoteSystem: "mgmt-sw-2", RemotePort: "Ethernet3"}, {Port: "Ethernet0", RemoteSystem: "spine-1", RemotePort: "Ethernet1"}}

	_, err := e.arrive(65, "SN-C", "leaf-07c", wrong...)
	var we *WaitError
	if !errors.As(err, &we) || !strings.Contains(we.Reason, "cabling does not match position leaf-07c") ||
		!strings.Contains(we.Reason, "eth0: expected mgmt-sw-1 Ethernet14, seen mgmt-sw-2 Ethernet3") {
		t.Fatalf("strict mismatch: %v", err)
	}
	d := e.device(mac(65))
	if d.CablingMismatch == nil || d.CablingMismatch.Position != "leaf-07c" || len(d.CablingMismatch.Mismatches) != 1 || d.State != core.StateWaiting {
		t.Fatalf("device after a mismatch: %s %+v", d.State, d.CablingMismatch)
	}
	if ev := e.events("device.cabling_mismatch", mac(65)); len(ev) != 1 || ev[0].Fields["policy"] != "strict" {
		t.Fatalf("mismatch events: %+v", ev)
	}
	// No LLDP on the switch: nothing judged, still held by what it said.
	if _, err := e.arrive(65, "SN-C", "leaf-07c"); !errors.As(err, &we) {
		t.Fatalf("no neighbours after a mismatch: %v", err)
	}
	b := e.must(e.arrive(65, "SN-C", "leaf-07c", want...))
	if b.NodeName != "leaf-07c" || e.device(mac(65)).CablingMismatch != nil || len(e.events("device.cabling_matched", mac(65))) != 1 {
		t.Fatalf("after recabling: %q %+v", b.NodeName, e.device(mac(65)).CablingMismatch)
	}

	// warn: recorded, joined.
	b = e.must(e.arrive(66, "SN-G", "leaf-07g", wrong...))
	if d := e.device(mac(66)); b == nil || d.CablingMismatch == nil || !strings.Contains(d.CablingMismatch.Mismatches[0], "expected mgmt-sw-1 Ethernet19, seen mgmt-sw-2 Ethernet3") {
		t.Fatalf("warn mismatch: %+v", d.CablingMismatch)
	}
}

func (e *planEnv) deviceAddr(id string) netip.Addr {
	return netip.MustParseAddr(e.device(id).IP)
}

// TestAgentNeighboursRecordTheCabling: the neighbours a joined device's
// agent reports later are compared the same way: a mismatch becomes the
// device's warning and an event, a match clears it; a joined member is
// not held.
func TestAgentNeighboursRecordTheCabling(t *testing.T) {
	p := slot("leaf-07h", "Ethernet20")
	p.Cabling = positions.CablingStrict
	p.Neighbors = []positions.Neighbor{{Port: "eth0", RemoteSystem: "mgmt-sw-1", RemotePort: "Ethernet20"}}
	e := newPlanEnv(t, p)
	b := e.must(e.arrive(67, "SN-H", "leaf-07h", p.Neighbors...))
	e.nodeReady(b, "True")
	if err := e.svc.ObserveNeighbors(bg, mac(67), []positions.Neighbor{{Port: "eth0", RemoteSystem: "mgmt-sw-9", RemotePort: "Ethernet1"}}); err != nil {
		t.Fatal(err)
	}
	d := e.device(mac(67))
	if d.CablingMismatch == nil || !strings.Contains(d.CablingMismatch.Mismatches[0], "seen mgmt-sw-9 Ethernet1") || len(e.events("device.cabling_mismatch", mac(67))) != 1 {
		t.Fatalf("after a mismatching report: %+v", d.CablingMismatch)
	}
	if m, _ := e.svc.Membership(bg, mac(67)); m.State != core.StateJoined {
		t.Fatalf("a joined member was held: %s", m.State)
	}
	if err := e.svc.ObserveNeighbors(bg, mac(67), p.Neighbors); err != nil {
		t.Fatal(err)
	}
	if e.device(mac(67)).CablingMismatch != nil {
		t.Fatal("a matching report left the warning")
	}
	if err := e.svc.ObserveNeighbors(bg, mac(67), []positions.Neighbor{{Port: "eth0\x00", RemoteSystem: "x"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a hostile report: %v", err)
	}
}
