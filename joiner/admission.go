package joiner

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Roles a member holds (core.Device.Role's vocabulary). The first control
// plane is a control plane the cluster runtime names as the one that runs
// kubeadm init.
const (
	RoleControlPlane = "control-plane"
	RoleWorker       = "worker"
	RoleSONiC        = "sonic" // a SONiC switch: a worker joined by ctrmgrd
)

type compiledRule struct {
	Rule
	macs    []string
	subnets []netip.Prefix
}

func compileRules(rules []Rule) ([]compiledRule, error) {
	out := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		cr := compiledRule{Rule: r}
		for _, m := range r.MACs {
			n, err := core.NormalizeMAC(m)
			if err != nil {
				return nil, fmt.Errorf("auto_approve[%d]: %v", i, err)
			}
			cr.macs = append(cr.macs, n)
		}
		for _, s := range r.Subnets {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("auto_approve[%d]: subnet %q: %v", i, s, err)
			}
			cr.subnets = append(cr.subnets, p.Masked())
		}
		out = append(out, cr)
	}
	return out, nil
}

// approval is what a device is approved for.
type approval uint8

const (
	approvedWorker approval = 1 << iota
	approvedControlPlane
	approvedAny = approvedWorker | approvedControlPlane
)

// approvalOf is what the device d holding h is approved for in cluster c:
// everything when an operator approved it, else the union of the rules it
// matches (0: it waits for an operator).
func (s *Service) approvalOf(d core.Device, c core.Cluster, h core.Holder) approval {
	if d.Approved {
		return approvedAny
	}
	var a approval
	for _, r := range s.rules {
		if r.matches(d, c, h) {
			a |= approvedWorker
			if r.ControlPlane {
				a |= approvedControlPlane
			}
		}
	}
	return a
}

func (r *compiledRule) matches(d core.Device, c core.Cluster, h core.Holder) bool {
	in := func(l []string, v string) bool { return len(l) == 0 || v != "" && slices.Contains(l, v) }
	switch {
	case r.Cluster != "" && r.Cluster != c.Name && r.Cluster != c.ID:
		return false
	case !in(r.macs, h.MAC), !in(r.CircuitIDs, d.CircuitID), !in(r.RemoteIDs, d.RemoteID):
		return false
	case r.Reserved && !reservedByMAC(h):
		return false
	case len(r.subnets) > 0 && !slices.ContainsFunc(r.subnets, func(p netip.Prefix) bool { return p.Contains(h.Addr) }):
		return false
	case !in(r.AssertedSerials, d.Serial), !in(r.AssertedProducts, d.Product):
		return false
	}
	return true
}

// reservedByMAC reports whether h holds its address through a reservation
// the network proves: one by hardware address. A reservation by serial or
// client id is matched on the client's own word, which any host can repeat.
func reservedByMAC(h core.Holder) bool {
	if h.Lease != nil {
		return h.Lease.Reserved // the DHCP server marks only MAC reservations so
	}
	return h.Binding != nil && h.Binding.MAC != ""
}

// holdsSlot reports whether a member in state st counts against the
// cluster's desired size. A failed member keeps its slot: it retries with
// the same role, and an operator removes it to free the slot.
func holdsSlot(st core.DeviceState) bool {
	switch st {
	case core.StateJoinIssued, core.StateJoined, core.StateNotReady, core.StateLost, core.StateFailed:
		return true
	}
	return false
}

// take and release count a member with role in or out of rt.
func take(rt *core.JoinState, role string) {
	switch role {
	case RoleEtcd:
		rt.EtcdMembers++
	case RoleControlPlane:
		rt.ControlPlanes++
	default:
		rt.Workers++
	}
}

func release(rt *core.JoinState, role string) {
	switch role {
	case RoleEtcd:
		rt.EtcdMembers--
	case RoleControlPlane:
		rt.ControlPlanes--
	default:
		rt.Workers--
	}
}

// decideRole applies CloudStack's shape: the first admitted VM becomes the
// first control plane, then control planes up to ControlNodes, then workers
// up to Size. A device whose profile fixed its role only takes that role.
// Switches and k3s agents are always workers. The empty role with a reason
// means the device waits.
// waitFirstControlPlane is the wait of a node that needs the cluster's API
// endpoint: it ends as soon as the first control plane enrolls, so such a
// node is told to ask again soon (waitRetryFirstCP) rather than after the
// long wait for an operator or a scale-up (waitRetry).
const (
	waitFirstControlPlane = "waiting for the cluster's first control plane"
	// waitControlPlaneUp: a switch's kubelet bootstraps the moment it has
	// its certificate, so a switch of a cluster whose control plane ztpd
	// issued gets it once the cluster is Running (its API server answers,
	// its control planes are Ready), not while kubeadm init is still
	// setting up the bootstrap RBAC.
	waitControlPlaneUp = "waiting for the cluster's control plane to be Running"
	waitRetryFirstCP   = 5 * time.Second
	waitRetry          = 30 * time.Second
)

func decideRole(c core.Cluster, rt core.JoinState, method, preset string) (role string, first bool, wait string) {
	wantCP := max(c.ControlNodes, 1)
	canCP := method == MethodKubeadm && preset != RoleWorker && preset != RoleSONiC
	workerRole := RoleWorker
	if method == MethodSONiC {
		workerRole = RoleSONiC
	}
	if method == MethodKubeadm && rt.FirstControlPlane == "" {
		if canCP {
			return RoleControlPlane, true, ""
		}
		return "", false, waitFirstControlPlane
	}
	if method == MethodSONiC && rt.FirstControlPlane == "" && rt.APIEndpoint == "" {
		return "", false, waitFirstControlPlane
	}
	if method == MethodSONiC && rt.FirstControlPlane != "" && c.State == core.ClusterStarting {
		// A control plane ztpd issued is still coming up. (A cluster given
		// an endpoint or load balancer up front hands certificates out at
		// once: its API server need not be one ztpd can reach.)
		return "", false, waitControlPlaneUp
	}
	if canCP && rt.ControlPlanes < wantCP {
		return RoleControlPlane, false, ""
	}
	if preset == RoleControlPlane {
		return "", false, fmt.Sprintf("cluster has its %d control plane(s)", wantCP)
	}
	if rt.Workers < c.Size {
		return workerRole, false, ""
	}
	return "", false, fmt.Sprintf("cluster is at its desired size (%d workers)", c.Size)
}

// decideExternalRole admits a device into a cluster ztpd did not build:
// always as a worker (or switch), since joining its control plane would
// need keys ztpd does not hold, up to c.Size devices when a cap is set.
func decideExternalRole(c core.Cluster, rt core.JoinState, method, preset string) (role, wait string) {
	if preset == RoleControlPlane {
		return "", "ztpd adds no control planes to an ExternalManaged cluster: its control plane is its administrators'"
	}
	if method == MethodK3s {
		return "", "an ExternalManaged cluster is joined with kubeadm or by a switch's kubelet, not as a k3s agent"
	}
	if c.Size > 0 && rt.Workers >= c.Size {
		return "", fmt.Sprintf("cluster is at the number of devices ztpd onboards into it (%d)", c.Size)
	}
	if method == MethodSONiC {
		return RoleSONiC, ""
	}
	return RoleWorker, ""
}
