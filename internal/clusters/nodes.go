package clusters

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
)

// NodeAdder admits named devices into a cluster (CloudStack's
// addNodesToKubernetesCluster and addVirtualMachinesToKubernetesCluster,
// with ztpd device IDs as the node IDs): a device waiting for approval or
// room is approved into it, a standalone device joins it by a join
// rollout. c already carries the grown size.
type NodeAdder interface {
	AddMembers(ctx context.Context, c core.Cluster, devices []string) error
}

// AddNodesOptions are how named devices are added.
type AddNodesOptions struct {
	// Command is the CloudStack command the job is recorded as
	// (addNodesToKubernetesCluster by default).
	Command string
	// Control adds them as control planes (iscontrolnode), else workers.
	Control bool
	// ManualUpgrade leaves them out of rolling upgrades (manualupgrade).
	ManualUpgrade bool
}

// Commands of the nodes-by-name operations, as CloudStack names them.
const (
	CmdAddNodes      = "addNodesToKubernetesCluster"
	CmdRemoveNodes   = "removeNodesFromKubernetesCluster"
	CmdAddVMs        = "addVirtualMachinesToKubernetesCluster"
	CmdRemoveVMs     = "removeVirtualMachinesFromKubernetesCluster"
	manualUpgradeWhy = "manual upgrade: left out of rolling upgrades (added with manualupgrade=true)"
)

// ManualUpgradeReason is why a rolling upgrade skips a member added with
// manualupgrade=true, as its rollout shows it.
const ManualUpgradeReason = manualUpgradeWhy

// addOp is the add-nodes operation recorded as command: a Running
// cluster scales (Running -> Scaling -> Running, Alert on failure, as a
// scale), the devices are admitted by the NodeAdder.
func addOp(command string) *operation {
	return &operation{
		command: command,
		accept:  map[core.ClusterState]core.ClusterState{core.ClusterRunning: core.ClusterScaling},
		refused: "Kubernetes cluster ID: %[1]s is in %[2]s state; nodes can be added only while it is Running",
		target:  core.ClusterRunning, fail: core.ClusterAlert,
		call: func(ctx context.Context, m Membership, c core.Cluster, _ core.Version, j *core.Job) error {
			na, ok := m.(NodeAdder)
			if !ok {
				return core.Errorf(core.KindUnavailable, "this appliance cannot add named nodes")
			}
			return na.AddMembers(ctx, c, j.Params.Add)
		},
		failed: func(j *core.Job, _ core.Version) string { return "adding " + strings.Join(j.Params.Add, ", ") },
		apply: func(c *core.Cluster, j *core.Job, _ core.Version) {
			if j.Params.Control {
				c.ControlNodes += len(j.Params.Add)
			} else {
				c.Size += len(j.Params.Add)
			}
			if j.Params.ManualUpgrade {
				for _, d := range j.Params.Add {
					if !slices.Contains(c.ManualUpgrade, d) {
						c.ManualUpgrade = append(c.ManualUpgrade, d)
					}
				}
			}
		},
		done: func(old, cur core.Cluster, _ core.Version) string {
			return fmt.Sprintf("nodes added: %d control planes and %d workers desired (were %d and %d)",
				cur.ControlNodes, cur.Size, old.ControlNodes, old.Size)
		},
	}
}

// removeOp is a scale-down naming its members recorded as command; the
// removed members leave the manual-upgrade list too.
func removeOp(command string) *operation {
	op := *opScale
	op.command = command
	op.apply = func(c *core.Cluster, j *core.Job, _ core.Version) {
		if j.Params.Size > 0 {
			c.Size = j.Params.Size
		}
		c.ManualUpgrade = slices.DeleteFunc(slices.Clone(c.ManualUpgrade), func(d string) bool { return slices.Contains(j.Params.Remove, d) })
		if len(c.ManualUpgrade) == 0 {
			c.ManualUpgrade = nil
		}
	}
	return &op
}

var (
	opAddNodes    = addOp(CmdAddNodes)
	opAddVMs      = addOp(CmdAddVMs)
	opRemoveNodes = removeOp(CmdRemoveNodes)
	opRemoveVMs   = removeOp(CmdRemoveVMs)
)

// AddNodes admits the named devices (IDs, MACs in any notation, or
// serials) into a Running cluster as workers (or control planes): the
// desired size grows by as many, and the job ends once each is admitted
// (approved into the cluster, or joined by a join rollout when it was
// standalone). A device already in a cluster, or named twice, is refused.
// A key that is not an admin's may add only devices already meant for
// one of its account's clusters (assigned to it, or waiting in it); any
// other is reported as not found, as another account's cluster is.
func (s *Service) AddNodes(ctx context.Context, caller Caller, ref string, devices []string, opts AddNodesOptions) (core.Job, error) {
	op := opAddNodes
	switch opts.Command {
	case "", CmdAddNodes:
	case CmdAddVMs:
		op = opAddVMs
	default:
		return core.Job{}, core.Errorf(core.KindInvalid, "unknown add command %q", opts.Command)
	}
	if len(devices) == 0 {
		return core.Job{}, core.Errorf(core.KindInvalid, "no nodes named")
	}
	if len(devices) > MaxNodes {
		return core.Job{}, core.Errorf(core.KindInvalid, "%d nodes named; at most %d", len(devices), MaxNodes)
	}
	if opts.Control && opts.ManualUpgrade {
		return core.Job{}, core.Errorf(core.KindInvalid, "manualupgrade is for worker nodes: a control plane is always upgraded with its cluster")
	}
	return s.accept(caller, ref, op, func(tx core.Tx, c *core.Cluster, j *core.Job) (bool, error) {
		var ids []string
		for _, dref := range devices {
			d, err := deviceRef(tx, dref)
			if err != nil {
				return false, err
			}
			if slices.Contains(ids, d.ID) {
				return false, core.Errorf(core.KindInvalid, "node %s is named twice", dref)
			}
			m, err := tx.Memberships().Get(d.ID)
			member := err == nil && m.State != core.StateLeft
			if err != nil && !errors.Is(err, core.ErrNotFound) {
				return false, err
			}
			if !caller.Admin {
				mine := d.Cluster == c.ID || (member && m.Cluster == c.ID)
				if !mine {
					return false, core.Errorf(core.KindNotFound, "device %s not found", dref)
				}
			}
			switch {
			case member && m.Cluster != c.ID:
				return false, core.Errorf(core.KindInUse, "device %s is a member of another cluster; remove it from that cluster first", dref)
			case member && m.State != core.StateWaiting:
				return false, core.Errorf(core.KindConflict, "device %s is already a node of Kubernetes cluster %s (%s)", dref, c.Name, m.State)
			}
			ids = append(ids, d.ID)
		}
		if opts.Control && c.ControlNodes+len(ids) > 1 {
			v, err := tx.Versions().Get(c.VersionID)
			if err == nil && !SupportsHA(v.SemVer) {
				return false, core.Errorf(core.KindInvalid, "Kubernetes version %s does not support more than one control plane", v.SemVer)
			}
		}
		if c.Size+c.ControlNodes+len(ids) > MaxNodes {
			return false, core.Errorf(core.KindInvalid, "Kubernetes cluster %s would have more than %d nodes", c.Name, MaxNodes)
		}
		j.Params = core.JobParams{Add: ids, Control: opts.Control, ManualUpgrade: opts.ManualUpgrade}
		return true, nil
	})
}

// RemoveNodes takes the named worker members out of a Running cluster
// as a scale-down naming them does (drained, taken off their nodes), and
// shrinks its size by as many; command is removeNodesFromKubernetesCluster
// (default) or removeVirtualMachinesFromKubernetesCluster.
func (s *Service) RemoveNodes(ctx context.Context, caller Caller, ref string, devices []string, command string) (core.Job, error) {
	op := opRemoveNodes
	switch command {
	case "", CmdRemoveNodes:
	case CmdRemoveVMs:
		op = opRemoveVMs
	default:
		return core.Job{}, core.Errorf(core.KindInvalid, "unknown remove command %q", command)
	}
	if len(devices) == 0 {
		return core.Job{}, core.Errorf(core.KindInvalid, "no nodes named")
	}
	return s.removeNamed(op, caller, ref, 0, devices)
}

// deviceRef finds a device by ID (a MAC in any notation) or serial; an
// unknown one is KindNotFound.
func deviceRef(tx core.Tx, ref string) (core.Device, error) {
	id := ref
	if mac, err := core.NormalizeMAC(ref); err == nil {
		id = mac
	}
	d, err := tx.Devices().Get(id)
	if err == nil || !errors.Is(err, core.ErrNotFound) {
		return d, err
	}
	d, err = tx.Devices().BySerial(ref)
	if errors.Is(err, core.ErrNotFound) {
		return d, core.Errorf(core.KindNotFound, "device %s not found", ref)
	}
	return d, err
}

// IsManualUpgrade reports whether device is left out of c's rolling
// upgrades.
func IsManualUpgrade(c core.Cluster, device string) bool {
	return slices.Contains(c.ManualUpgrade, device)
}
