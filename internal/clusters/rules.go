//lint:file-ignore ST1005 error texts are CloudStack's own wording, which clients show and match

package clusters

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
)

// CloudStack's Kubernetes rules.
const (
	MinVersion            = "1.11.0" // oldest Kubernetes version accepted
	MinVersionHA          = "1.16.0" // more than one control node needs this
	MinVersionAutoscaling = "1.15.0"
	MinNodeCPU            = 2    // mincpunumber floor (vCPUs)
	MinNodeMemoryMB       = 2048 // minmemory floor (MiB)
	MaxNodes              = 1000 // sanity bound on size and on controlnodes
)

// SemVer is a MAJOR.MINOR.PATCH Kubernetes version.
type SemVer [3]int

// ParseSemVer accepts exactly three dot-separated decimal numbers, e.g.
// "1.31.4" (no "v" prefix, no pre-release suffix), as CloudStack does.
func ParseSemVer(s string) (SemVer, error) {
	var v SemVer
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return v, fmt.Errorf("invalid semantic version %q: use MAJOR.MINOR.PATCH, e.g. 1.31.4", s)
	}
	for i, p := range parts {
		if p == "" || len(p) > 9 || strings.TrimLeft(p, "0123456789") != "" {
			return v, fmt.Errorf("invalid semantic version %q: use MAJOR.MINOR.PATCH, e.g. 1.31.4", s)
		}
		n, _ := strconv.Atoi(p)
		v[i] = n
	}
	return v, nil
}

func mustSemVer(s string) SemVer {
	v, err := ParseSemVer(s)
	if err != nil {
		panic(err)
	}
	return v
}

// Compare returns -1, 0 or 1 as v is older than, equal to or newer than w.
func (v SemVer) Compare(w SemVer) int {
	for i := range v {
		if v[i] != w[i] {
			if v[i] < w[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

func (v SemVer) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// SupportsHA reports whether a version may run more than one control node.
func SupportsHA(semver string) bool {
	v, err := ParseSemVer(semver)
	return err == nil && v.Compare(mustSemVer(MinVersionHA)) >= 0
}

// SupportsAutoscaling reports whether CloudStack's autoscaler supports the version.
func SupportsAutoscaling(semver string) bool {
	v, err := ParseSemVer(semver)
	return err == nil && v.Compare(mustSemVer(MinVersionAutoscaling)) >= 0
}

// CheckUpgrade applies CloudStack's upgrade rule: never downgrade, same
// major, the minor may rise by at most one (patch releases in between are free).
func CheckUpgrade(from, to string) error {
	f, err := ParseSemVer(from)
	if err != nil {
		return err
	}
	t, err := ParseSemVer(to)
	if err != nil {
		return err
	}
	switch c := t.Compare(f); {
	case c < 0:
		return fmt.Errorf("Kubernetes clusters can not be downgraded, current version: %s, upgrade version: %s", from, to)
	case c == 0:
		return fmt.Errorf("Kubernetes cluster already runs version %s", from)
	}
	if t[0] != f[0] || t[1]-f[1] > 1 {
		return fmt.Errorf("Kubernetes clusters can be upgraded between next minor or patch version releases, current version: %s, upgrade version: %s", from, to)
	}
	return nil
}

// transitions is CloudStack's Kubernetes cluster state machine. The two
// failure edges Stopping -> Alert and Destroying -> Alert are CloudStack's
// too (OperationFailed); they keep a failed stop or delete visible and
// retryable instead of stuck.
var transitions = map[core.ClusterState][]core.ClusterState{
	core.ClusterCreated:    {core.ClusterStarting},
	core.ClusterStarting:   {core.ClusterRunning, core.ClusterAlert, core.ClusterError},
	core.ClusterRunning:    {core.ClusterStopping, core.ClusterScaling, core.ClusterUpgrading, core.ClusterAlert, core.ClusterDestroying},
	core.ClusterStopping:   {core.ClusterStopped, core.ClusterAlert},
	core.ClusterStopped:    {core.ClusterStarting, core.ClusterDestroying},
	core.ClusterScaling:    {core.ClusterRunning, core.ClusterAlert},
	core.ClusterUpgrading:  {core.ClusterRunning, core.ClusterAlert},
	core.ClusterAlert:      {core.ClusterRecovering, core.ClusterDestroying},
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
