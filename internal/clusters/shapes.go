package clusters

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
)

// Node types of CloudStack 4.21's per-role shapes (nodeofferings,
// nodetemplates).
const (
	NodeWorker  = "worker"
	NodeControl = "control"
	NodeEtcd    = "etcd"
)

// ProfileCatalog says which profiles are loaded: a node template names
// one (ztpd has no VM templates; a device's profile says what it runs).
type ProfileCatalog interface {
	// ProfileCluster is the cluster (name or ID) profile name assigns its
	// devices to, "" for none; loaded is false when no such profile is
	// loaded.
	ProfileCluster(name string) (cluster string, loaded bool)
	// LoadedProfiles are the profiles loaded now, as templates show them.
	LoadedProfiles() []ProfileSummary
}

// NodeType is the CloudStack node type of a member role: a control plane
// is "control", an etcd node "etcd", every other member (workers, SONiC
// switches) "worker".
func NodeType(role string) string {
	switch role {
	case "control-plane":
		return NodeControl
	case NodeEtcd:
		return NodeEtcd
	}
	return NodeWorker
}

// MaxEtcdNodes is the most etcd nodes a cluster may have: etcd's own
// advice, as more members slow every write without adding tolerance that
// matters.
const MaxEtcdNodes = 7

// CheckEtcdNodes refuses an etcd node count other than 0 (etcd on the
// control planes) or an odd 1 to MaxEtcdNodes: an even count tolerates no
// more failures than the odd one below it, and costs a member.
func CheckEtcdNodes(n int) error {
	if n == 0 || n > 0 && n <= MaxEtcdNodes && n%2 == 1 {
		return nil
	}
	return core.Errorf(core.KindInvalid, "Invalid value for parameter etcdnodes: %d; use 0 (etcd on the control planes) or an odd number of dedicated etcd nodes from 1 to %d (an even count tolerates no more failed members than one fewer)", n, MaxEtcdNodes)
}

// nodeTypeOf checks a node type as a client gave it; the etcd type only
// for a cluster with etcd nodes.
func nodeTypeOf(param, t string, etcdNodes int) (string, error) {
	switch lt := strings.ToLower(strings.TrimSpace(t)); lt {
	case NodeWorker, NodeControl:
		return lt, nil
	case NodeEtcd:
		if etcdNodes == 0 {
			return "", core.Errorf(core.KindInvalid, "%s: node type etcd needs etcd nodes (etcdnodes), and this cluster runs etcd on its control planes", param)
		}
		return lt, nil
	default:
		return "", core.Errorf(core.KindInvalid, "%s: node type %q is none of worker, control, etcd", param, t)
	}
}

// resolveNodeOfferings checks per-role offerings (node type to offering ID
// or name) of a cluster with etcdNodes etcd nodes, and returns them by
// node type and offering ID.
func resolveNodeOfferings(in map[string]string, etcdNodes int) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(in))
	for _, t := range slices.Sorted(maps.Keys(in)) {
		nt, err := nodeTypeOf("nodeofferings", t, etcdNodes)
		if err != nil {
			return nil, err
		}
		off, ok := OfferingByID(in[t])
		if !ok {
			return nil, core.Errorf(core.KindInvalid, "nodeofferings: no service offering with ID %s (node type %s)", in[t], nt)
		}
		if prev, dup := out[nt]; dup && prev != off.ID {
			return nil, core.Errorf(core.KindInvalid, "nodeofferings: node type %s is given twice", nt)
		}
		out[nt] = off.ID
	}
	return out, nil
}

// resolveNodeTemplates checks per-role templates (node type to profile
// name or template ID) against the loaded profiles and returns them by
// node type and profile name.
func (s *Service) resolveNodeTemplates(clusterName string, in map[string]string, etcdNodes int) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(in))
	for _, t := range slices.Sorted(maps.Keys(in)) {
		nt, err := nodeTypeOf("nodetemplates", t, etcdNodes)
		if err != nil {
			return nil, err
		}
		name, byID := s.nodeTemplateProfile(strings.TrimSpace(in[t]))
		var pc string
		loaded := false
		if s.opts.Profiles != nil {
			pc, loaded = s.opts.Profiles.ProfileCluster(name)
		}
		switch {
		case !loaded && byID:
			return nil, core.Errorf(core.KindInvalid, "nodetemplates: no loaded profile has template ID %s (node type %s): listTemplates lists them", name, nt)
		case !loaded:
			return nil, core.Errorf(core.KindInvalid, "nodetemplates: no profile named %q is loaded (node type %s): a node template names the profile its nodes get", name, nt)
		}
		// Its members would otherwise be told to join another cluster.
		if pc != "" && pc != clusterName {
			return nil, core.Errorf(core.KindInvalid, "nodetemplates: profile %q assigns its devices to cluster %s, not to %s", name, pc, clusterName)
		}
		if prev, dup := out[nt]; dup && prev != name {
			return nil, core.Errorf(core.KindInvalid, "nodetemplates: node type %s is given twice", nt)
		}
		out[nt] = name
	}
	return out, nil
}

// RoleOffering is the service offering a node of type t gets in c: its
// per-role offering, else the cluster's; ok is false when neither is known.
func RoleOffering(c core.Cluster, t string) (Offering, bool) {
	if id := c.NodeOfferings[t]; id != "" {
		if off, ok := OfferingByID(id); ok {
			return off, true
		}
	}
	return OfferingByID(c.ServiceOfferingID)
}

// RoleProfile is the profile a node of type t gets in c ("" when c names
// none: the device's profile is the one it matches).
func RoleProfile(c core.Cluster, t string) string { return c.NodeTemplates[t] }

// NodeShape is what the cluster a device is a member of gives its role:
// the profile its node template names and its offering's name. Both are ""
// for a device in no cluster, or in one that names no shape for its role.
func NodeShape(tx core.Tx, clusterID, role string) (profileName, offeringName string, err error) {
	if clusterID == "" {
		return "", "", nil
	}
	c, err := tx.Clusters().Get(clusterID)
	if errors.Is(err, core.ErrNotFound) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	t := NodeType(role)
	if id := c.NodeOfferings[t]; id != "" {
		if off, ok := OfferingByID(id); ok {
			offeringName = off.Name
		}
	}
	return RoleProfile(c, t), offeringName, nil
}

// checkNotSmaller refuses a new offering with fewer resources than cur
// (CloudStack never scales an offering down).
func checkNotSmaller(c core.Cluster, what string, cur, next Offering) error {
	if next.CPU < cur.CPU || next.MemoryMB < cur.MemoryMB {
		return core.Errorf(core.KindInvalid, "Kubernetes cluster cannot be scaled down for service offering. Service offering ID: %s offers lesser resources as compared to service offering ID: %s of %sKubernetes cluster ID: %s", next.ID, cur.ID, what, c.ID)
	}
	return nil
}

// describeShapes is the per-role part of an event's message ("" when the
// cluster names none).
func describeShapes(c core.Cluster) string {
	var parts []string
	for _, t := range []string{NodeControl, NodeWorker, NodeEtcd} {
		if id := c.NodeOfferings[t]; id != "" {
			off, _ := OfferingByID(id)
			parts = append(parts, fmt.Sprintf("%s offering %s", t, off.Name))
		}
		if p := c.NodeTemplates[t]; p != "" {
			parts = append(parts, fmt.Sprintf("%s profile %s", t, p))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// describeEtcd is the etcd nodes' part of an event's message.
func describeEtcd(c core.Cluster) string {
	if c.EtcdNodes == 0 {
		return ""
	}
	return fmt.Sprintf(" + %d etcd", c.EtcdNodes)
}
