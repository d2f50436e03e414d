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
	serials, macs, products []string
	subnets                 []netip.Prefix
	cluster                 string
}

func compileRules(rules []Rule) ([]compiledRule, error) {
	out := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		cr := compiledRule{serials: r.Serials, products: r.Products, cluster: r.Cluster}
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

// autoApproved reports whether some rule approves d for cluster c. ip is the
// address the device asked from (its lease address when it has one).
func (s *Service) autoApproved(d core.Device, c core.Cluster, ip string) bool {
	addr, addrErr := netip.ParseAddr(ip)
	for _, r := range s.rules {
		if r.cluster != "" && r.cluster != c.Name && r.cluster != c.ID {
			continue
		}
		if len(r.serials) > 0 && (d.Serial == "" || !slices.Contains(r.serials, d.Serial)) {
			continue
		}
		if len(r.macs) > 0 && !slices.Contains(r.macs, d.MAC) {
			continue
		}
		if len(r.products) > 0 && (d.Product == "" || !slices.Contains(r.products, d.Product)) {
			continue
		}
		if len(r.subnets) > 0 {
			if addrErr != nil || !slices.ContainsFunc(r.subnets, func(p netip.Prefix) bool { return p.Contains(addr.Unmap()) }) {
				continue
			}
		}
		return true
	}
	return false
}

// holdsSlot reports whether a member in state st counts against the
// cluster's desired size. A failed member keeps its slot: it retries with
// the same role, and an operator removes it to free the slot.
func holdsSlot(st core.DeviceState) bool {
	switch st {
	case core.StateJoinIssued, core.StateJoined, core.StateFailed:
		return true
	}
	return false
}

func (rt *clusterRuntime) take(role string) {
	switch role {
	case RoleControlPlane:
		rt.ControlPlanes++
	default:
		rt.Workers++
	}
}

func (rt *clusterRuntime) release(m member) {
	switch m.Role {
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
	waitRetryFirstCP      = 5 * time.Second
	waitRetry             = 30 * time.Second
)

func decideRole(c core.Cluster, rt clusterRuntime, method, preset string) (role string, first bool, wait string) {
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
