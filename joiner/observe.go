package joiner

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/bundle"
)

// ObservedNode is one of a cluster's Nodes as its API server shows it.
type ObservedNode struct {
	Name         string
	Ready        string // True | False | Unknown (no condition yet counts as Unknown)
	Reason       string // the Ready condition's reason
	ControlPlane bool
	Created      time.Time
}

// memberState is the membership state a Node's Ready condition means:
// Ready is joined, NotReady (the kubelet says so) is not-ready, Unknown
// (the kubelet stopped reporting; the node controller says so) is lost.
func memberState(ready string) core.DeviceState {
	switch ready {
	case "True":
		return core.StateJoined
	case "False":
		return core.StateNotReady
	}
	return core.StateLost
}

// nodeIndex maps each cluster's node names to member devices. It is built
// from the rosters and rebuilt only when memberships change (the store's
// generation), so a Node event costs a map lookup, not a roster scan.
type nodeIndex struct {
	mu    sync.Mutex
	gen   uint64
	valid bool
	byKey map[string]map[string]string // cluster -> node name -> device ("" when two members claim it)
	// read is each cluster's members' node names as last read, by device,
	// with their membership's Stamp: a rebuild decodes only the
	// memberships that changed since, as decoding them all for each join
	// of a boot storm cost much of its CPU.
	read map[string]map[string]stampedName
}

type stampedName struct {
	stamp core.Stamp
	name  string
}

// memberByNode finds the member of cluster whose bundle named node.
func (s *Service) memberByNode(tx core.Tx, cluster, node string) (core.Membership, bool, error) {
	gens, cached := s.store.(core.Generations)
	s.nodes.mu.Lock()
	defer s.nodes.mu.Unlock()
	if cached {
		if gen := gens.Generation(core.AggMemberships); !s.nodes.valid || gen != s.nodes.gen {
			s.nodes.byKey, s.nodes.gen, s.nodes.valid = map[string]map[string]string{}, gen, true
		}
	}
	names, ok := s.nodes.byKey[cluster]
	if !cached || !ok {
		names = map[string]string{}
		prev := s.nodes.read[cluster]
		read := make(map[string]stampedName, len(prev))
		err := tx.Memberships().Roster(cluster, func(device, _ string) (bool, error) {
			st, err := tx.Memberships().Stamp(device)
			if errors.Is(err, core.ErrNotFound) {
				return true, nil
			} else if err != nil {
				return false, err
			}
			n, ok := prev[device]
			if !ok || n.stamp != st {
				m, err := tx.Memberships().Get(device)
				if err != nil {
					return false, err
				}
				n = stampedName{st, m.NodeName}
			}
			read[device] = n
			if n.name == "" {
				return true, nil
			}
			if _, dup := names[n.name]; dup {
				names[n.name] = "" // ambiguous: match neither
			} else {
				names[n.name] = device
			}
			return true, nil
		})
		if err != nil {
			return core.Membership{}, false, err
		}
		if cached {
			s.nodes.byKey[cluster] = names
			if s.nodes.read == nil {
				s.nodes.read = map[string]map[string]stampedName{}
			}
			s.nodes.read[cluster] = read
		}
	}
	dev := names[node]
	if dev == "" {
		return core.Membership{}, false, nil
	}
	m, err := tx.Memberships().Get(dev)
	if errors.Is(err, core.ErrNotFound) || (err == nil && (m.Cluster != cluster || m.NodeName != node)) {
		return core.Membership{}, false, nil
	}
	return m, err == nil, err
}

// NodeSeen records what the cluster says about one Node: the member whose
// bundle named it becomes joined (Ready), not-ready or lost. A Node no
// member owns (a node ztpd did not onboard) is ignored. Only changes are
// written.
func (s *Service) NodeSeen(clusterID string, n ObservedNode) error {
	now := s.now().UTC()
	st := memberState(n.Ready)
	// Most calls repeat what is recorded (the watch reports every Node at
	// each resync): answer those from a read, without a write transaction.
	unchanged := false
	if err := s.store.View(func(tx core.Tx) error {
		m, ok, err := s.memberByNode(tx, clusterID, n.Name)
		if err != nil || !ok {
			unchanged = err == nil
			return err
		}
		p := m.Node
		unchanged = m.State == core.StateLeft || m.State == core.StateLeaving || m.Impostor != "" ||
			(p != nil && !p.Deleted && p.Ready == n.Ready && p.Reason == n.Reason && p.ControlPlane == n.ControlPlane && m.State == st)
		return nil
	}); err != nil || unchanged {
		return err
	}
	// Logged once committed: fn may run again (Batch, a shared store).
	moved := "" // the device whose state changed
	var from core.DeviceState
	err := s.store.Batch(func(tx core.Tx) error {
		moved = ""
		m, ok, err := s.memberByNode(tx, clusterID, n.Name)
		if err != nil || !ok {
			return err
		}
		if m.State == core.StateLeft || m.State == core.StateLeaving || m.Impostor != "" {
			return nil // on its way out, or the Node is an impostor's (CSRSeen)
		}
		prev := m.Node
		obs := &core.NodeObservation{Ready: n.Ready, Reason: n.Reason, ControlPlane: n.ControlPlane, Registered: n.Created, Seen: now}
		if prev != nil && prev.Ready == obs.Ready && prev.Reason == obs.Reason && prev.ControlPlane == obs.ControlPlane && m.State == st && !prev.Deleted {
			return nil
		}
		m.Node = obs
		if m.State == st {
			m.UpdatedAt = now
			return tx.Memberships().Put(m)
		}
		reason := fmt.Sprintf("Node %s is Ready", n.Name)
		switch st {
		case core.StateNotReady:
			reason = fmt.Sprintf("Node %s is NotReady", n.Name)
		case core.StateLost:
			reason = fmt.Sprintf("Node %s stopped reporting (Ready Unknown)", n.Name)
		}
		if n.Reason != "" {
			reason += " (" + n.Reason + ")"
		}
		from = m.State
		if err := s.transition(tx, &m, st, reason, now); err != nil {
			return err
		}
		moved = m.Device
		return s.event(tx, now, "member."+string(st), m.Device, clusterID, reason, map[string]string{"node": n.Name})
	})
	if err == nil && moved != "" {
		s.log.Info("member state from its Node", "cluster", clusterID, "device", moved, "node", n.Name, "from", from, "to", st, "reason", n.Reason)
	}
	return err
}

// NodeGone records that a member's Node was deleted from the cluster: the
// member has left (its slot is freed and its tokens revoked, as on a
// scale-down). A Node deleted before it ever registered was not ztpd's.
func (s *Service) NodeGone(clusterID, name string) error {
	now := s.now().UTC()
	left := "" // the device, logged once committed
	err := s.store.Batch(func(tx core.Tx) error {
		left = ""
		m, ok, err := s.memberByNode(tx, clusterID, name)
		if err != nil || !ok || m.Node == nil {
			return err
		}
		m.Node.Deleted, m.Node.Seen = true, now
		reason := fmt.Sprintf("Node %s was deleted from the cluster", name)
		if err := s.leave(tx, m, reason, now); err != nil {
			return err
		}
		left = m.Device
		return s.event(tx, now, "member.left", m.Device, clusterID, reason, map[string]string{"node": name})
	})
	if err == nil && left != "" {
		s.log.Info("member left: its Node was deleted", "cluster", clusterID, "device", left, "node", name)
	}
	return err
}

// APISeen records that the cluster's API server answered ztpd: the cluster
// is initialised (its first control plane ran kubeadm init), and the RBAC
// ztpd needs there (admin binding, observer role) is made if it is not yet.
func (s *Service) APISeen(clusterID string) error {
	var kick bool
	err := s.store.Batch(func(tx core.Tx) error {
		kick = false // fn may run again on a newer state
		rt, err := tx.Clusters().JoinState(clusterID)
		if errors.Is(err, core.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		kick = !rt.AdminBinding
		if rt.Initialized {
			return nil
		}
		rt.Initialized = true
		return tx.Clusters().PutJoinState(clusterID, rt)
	})
	if err == nil && kick {
		s.kickAdminBinding(clusterID)
	}
	return err
}

// expectedRequester is the user a member's kubelet authenticates as when it
// asks for its client certificate: the bootstrap credential ztpd issued to
// it (its token, or a switch's certificate). "" when ztpd issued none (the
// first control plane's kubelet gets its credentials from kubeadm init,
// with the CA key ztpd handed only to it).
func expectedRequester(m core.Membership) string {
	// A switch joining an external cluster has a token (its kubelet
	// bootstraps with it); one of ztpd's own clusters has a certificate.
	switch {
	case m.TokenID != "":
		return "system:bootstrap:" + m.TokenID
	case m.Method == MethodSONiC:
		return bundle.SonicUserPrefix + m.NodeName
	}
	return ""
}

// CSRSeen checks who requested an approved kubelet client certificate for
// a member's node name. The node authorizer only lets system:node:<name>
// register Node <name>, but the CSR approver lets any bootstrap credential
// ask for any name: a certificate for this member's name requested with
// another device's credential makes that Node an impostor's, so the member
// is marked failed and its Node is not counted as it. Renewals by the node
// itself (system:node:<name>) are its own.
func (s *Service) CSRSeen(clusterID, node, requester string) error {
	now := s.now().UTC()
	impostor := "" // the device, warned about once committed
	var want string
	err := s.store.Batch(func(tx core.Tx) error {
		impostor = ""
		m, ok, err := s.memberByNode(tx, clusterID, node)
		if err != nil || !ok || m.State == core.StateLeft || m.KubeletCertBy == requester || m.Impostor == requester {
			return err
		}
		want = expectedRequester(m)
		if want == "" || requester == want || requester == "system:node:"+node {
			m.KubeletCertBy, m.UpdatedAt = requester, now
			return tx.Memberships().Put(m)
		}
		m.Impostor = requester
		reason := fmt.Sprintf("Node %s's kubelet certificate was requested by %s, not by the credential ztpd issued to this device (%s): not counted as this member",
			node, requester, want)
		if err := s.transition(tx, &m, core.StateFailed, reason, now); err != nil {
			return err
		}
		impostor = m.Device
		return s.event(tx, now, "member.impostor", m.Device, clusterID, reason, map[string]string{"node": node, "requester": requester})
	})
	if err == nil && impostor != "" {
		s.log.Warn("kubelet certificate requested by another identity", "cluster", clusterID, "device", impostor, "node", node,
			"requester", requester, "expected", want)
	}
	return err
}
