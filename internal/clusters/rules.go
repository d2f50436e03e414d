//lint:file-ignore ST1005 error texts are CloudStack's own wording, which clients show and match

package clusters

import (
	"fmt"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/semver"
)

// MinVersion is the oldest Kubernetes version accepted (semver.MinKubernetes).
var MinVersion = semver.MinKubernetes.String()

// CloudStack's Kubernetes rules.
const (
	MinVersionHA          = "1.16.0" // more than one control node needs this
	MinVersionAutoscaling = "1.15.0"
	MinNodeCPU            = 2    // mincpunumber floor (vCPUs)
	MinNodeMemoryMB       = 2048 // minmemory floor (MiB)
	MaxNodes              = 1000 // sanity bound on size and on controlnodes
)

// ParseSemVer parses a version as the CloudStack API gives it (see
// semver.Parse).
func ParseSemVer(s string) (semver.Version, error) { return semver.Parse(s) }

// SupportsHA reports whether a version may run more than one control node.
func SupportsHA(version string) bool {
	v, err := semver.Parse(version)
	return err == nil && v.Compare(semver.MustParse(MinVersionHA)) >= 0
}

// SupportsAutoscaling reports whether CloudStack's autoscaler supports the version.
func SupportsAutoscaling(version string) bool {
	v, err := semver.Parse(version)
	return err == nil && v.Compare(semver.MustParse(MinVersionAutoscaling)) >= 0
}

// CheckUpgrade applies CloudStack's upgrade rule: never downgrade, same
// major, the minor may rise by at most one (patch releases in between are free).
func CheckUpgrade(from, to string) error {
	f, err := semver.Parse(from)
	if err != nil {
		return err
	}
	t, err := semver.Parse(to)
	if err != nil {
		return err
	}
	switch c := t.Compare(f); {
	case c < 0:
		return fmt.Errorf("Kubernetes clusters can not be downgraded, current version: %s, upgrade version: %s", from, to)
	case c == 0:
		return fmt.Errorf("Kubernetes cluster already runs version %s", from)
	}
	if t.Major != f.Major || t.Minor-f.Minor > 1 {
		return fmt.Errorf("Kubernetes clusters can be upgraded between next minor or patch version releases, current version: %s, upgrade version: %s", from, to)
	}
	return nil
}

// transitions is CloudStack's Kubernetes cluster state machine. The two
// failure edges Stopping -> Alert and Destroying -> Alert are CloudStack's
// too (OperationFailed); they keep a failed stop or delete visible and
// retryable instead of stuck.
//
// ztpd adds two steps of its own, which only deleteKubernetesCluster takes
// (deleteBeyond) and the docs' state table lists:
//
//	Starting -> Destroying  a Starting cluster none of whose members has
//	                        joined: nothing runs on any node yet, so
//	                        there is nothing to wait for;
//	any      -> Destroying  a forced delete (REST force=true, the CLI's
//	                        --force), which CloudStack does not have.
//
// The start timeout (Options.StartTimeout) takes CloudStack's own step
// Starting -> Alert (OperationFailed), as CloudStack's create job does when
// it gives up.
var transitions = map[core.ClusterState][]core.ClusterState{
	core.ClusterCreated:   {core.ClusterStarting},
	core.ClusterStarting:  {core.ClusterRunning, core.ClusterAlert, core.ClusterError},
	core.ClusterRunning:   {core.ClusterStopping, core.ClusterScaling, core.ClusterUpgrading, core.ClusterAlert, core.ClusterDestroying},
	core.ClusterStopping:  {core.ClusterStopped, core.ClusterAlert},
	core.ClusterStopped:   {core.ClusterStarting, core.ClusterDestroying},
	core.ClusterScaling:   {core.ClusterRunning, core.ClusterAlert},
	core.ClusterUpgrading: {core.ClusterRunning, core.ClusterAlert},
	// Alert -> Running: the watch sees the cluster healthy again (CloudStack's
	// state scanner makes the same move).
	core.ClusterAlert:      {core.ClusterRecovering, core.ClusterRunning, core.ClusterDestroying},
	core.ClusterRecovering: {core.ClusterRunning, core.ClusterAlert},
	core.ClusterError:      {core.ClusterDestroying},
	core.ClusterDestroying: {core.ClusterDestroyed, core.ClusterAlert},
}

// CanTransition reports whether the state machine allows from -> to.
func CanTransition(from, to core.ClusterState) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}
