package joiner

import (
	"testing"

	"github.com/ztpd/ztpd/internal/core"
)

// The node-name index follows membership writes made after it was built
// (it rereads only the members whose record changed): a second member
// claiming a node's name makes the name match neither, and giving the
// name back makes it match its owner again.
func TestNodeIndexFollowsMembershipChanges(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	e.cluster(clusterSpec{Name: "prod", Size: 2, ControlNodes: 1})
	a := e.must(e.join("prod", 1))
	b := e.must(e.join("prod", 2))
	ma := e.nodeReady(a, "True")
	if ma.State != core.StateJoined || ma.Node == nil {
		t.Fatalf("first member after its Node was Ready: %+v", ma)
	}
	setName := func(device, name string) {
		t.Helper()
		err := e.store.Update(func(tx core.Tx) error {
			m, err := tx.Memberships().Get(device)
			if err != nil {
				return err
			}
			m.NodeName = name
			return tx.Memberships().Put(m)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	mb, err := e.svc.Membership(bg, b.Device)
	if err != nil {
		t.Fatal(err)
	}
	setName(b.Device, ma.NodeName)
	if m := e.nodeReady(a, "False"); m.State != core.StateJoined {
		t.Fatalf("a node name two members claim matched one: %+v", m)
	}
	setName(b.Device, mb.NodeName)
	if m := e.nodeReady(a, "False"); m.State != core.StateNotReady {
		t.Fatalf("the name given back does not match its member: %+v", m)
	}
}
