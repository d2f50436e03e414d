// Package semver is ztpd's one Kubernetes version type: MAJOR.MINOR.PATCH,
// as CloudStack, kubeadm and the per-version BOMs name releases. It has two
// parsers because versions arrive in two forms: the CloudStack API's
// semantic version ("1.31.4", Parse) and a Kubernetes release tag
// ("v1.31.4" or "1.31.4", ParseRelease).
package semver

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a Kubernetes release.
type Version struct{ Major, Minor, Patch int }

// MinKubernetes is the oldest Kubernetes release ztpd accepts: CloudStack's
// minimum (its Kubernetes service adds no older version), which is also the
// oldest kubeadm the join bundles drive (with command-line flags).
var MinKubernetes = Version{1, 11, 0}

// Parse accepts exactly three dot-separated decimal numbers, e.g. "1.31.4"
// (no "v" prefix, no pre-release suffix), as CloudStack does.
func Parse(s string) (Version, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("invalid semantic version %q: use MAJOR.MINOR.PATCH, e.g. 1.31.4", s)
	}
	var n [3]int
	for i, p := range parts {
		if p == "" || len(p) > 9 || strings.TrimLeft(p, "0123456789") != "" {
			return Version{}, fmt.Errorf("invalid semantic version %q: use MAJOR.MINOR.PATCH, e.g. 1.31.4", s)
		}
		n[i], _ = strconv.Atoi(p)
	}
	return Version{n[0], n[1], n[2]}, nil
}

// ParseRelease accepts a release as kubeadm names it, "v1.28.4", or
// without the "v": three numbers without leading zeros.
func ParseRelease(s string) (Version, error) {
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("kubernetes version %q: want major.minor.patch", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || p == "" || (len(p) > 1 && p[0] == '0') || len(p) > 6 {
			return Version{}, fmt.Errorf("kubernetes version %q: %q is not a number", s, p)
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

// Provisionable says why ztpd cannot provision clusters of Kubernetes v, or
// nil when it can: a 1.x release from MinKubernetes on (kubeadm's releases,
// which the join bundles drive), numbered as a release tag can be. Versions
// are checked with it when added and when a cluster is created, so a cluster
// is never created only to fail into Error while being provisioned.
func Provisionable(v Version) error {
	if v.Major != 1 {
		return fmt.Errorf("kubernetes %s cannot be provisioned: ztpd provisions Kubernetes 1.x releases (%s and later)", v.Tag(), MinKubernetes.Tag())
	}
	if v.Less(MinKubernetes) {
		return fmt.Errorf("kubernetes %s cannot be provisioned: the oldest release ztpd provisions is %s", v.Tag(), MinKubernetes.Tag())
	}
	if _, err := ParseRelease(v.Tag()); err != nil {
		return fmt.Errorf("kubernetes %s cannot be provisioned: %v", v.Tag(), err)
	}
	return nil
}

// MustParse is Parse for constants.
func MustParse(s string) Version {
	v, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}

// String is the semantic version, "1.28.4".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Tag is the release tag, "v1.28.4", the form kubeadm's kubernetesVersion
// takes.
func (v Version) Tag() string { return "v" + v.String() }

// Compare returns -1, 0 or 1 as v is older than, equal to or newer than w.
func (v Version) Compare(w Version) int {
	for _, d := range [3]int{v.Major - w.Major, v.Minor - w.Minor, v.Patch - w.Patch} {
		switch {
		case d < 0:
			return -1
		case d > 0:
			return 1
		}
	}
	return 0
}

// Less orders versions.
func (v Version) Less(w Version) bool { return v.Compare(w) < 0 }

// AtLeast reports v >= major.minor.0.
func (v Version) AtLeast(major, minor int) bool { return !v.Less(Version{major, minor, 0}) }
