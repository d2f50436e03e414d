// Package bundle renders what a device needs to join a cluster: kubeadm
// configuration files and commands, CloudStack-style cloud-config
// user-data, the k3s agent configuration, and SONiC's join material. It is
// pure: inputs in, bytes out, no storage and no network.
package bundle

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a Kubernetes release, major.minor.patch.
type Version struct{ Major, Minor, Patch int }

// ParseVersion accepts "1.28.4" or "v1.28.4" (CloudStack's rule: three
// numeric parts).
func ParseVersion(s string) (Version, error) {
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

// MustVersion is ParseVersion for constants.
func MustVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// String is "v1.28.4", the form kubeadm's kubernetesVersion takes.
func (v Version) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Less orders versions.
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

// AtLeast reports v >= major.minor.0.
func (v Version) AtLeast(major, minor int) bool {
	return !v.Less(Version{major, minor, 0})
}

// KubeadmAPI is how a kubeadm release is driven: a config file of one API
// version, or command-line flags for releases older than kubeadm.k8s.io/v1beta2.
type KubeadmAPI string

const (
	// KubeadmFlags drives kubeadm 1.11–1.14 with flags, as CloudStack does.
	KubeadmFlags KubeadmAPI = "flags"
	// KubeadmV1Beta2 is read by kubeadm 1.15–1.25; used for 1.15–1.21.
	KubeadmV1Beta2 KubeadmAPI = "kubeadm.k8s.io/v1beta2"
	// KubeadmV1Beta3 is read by kubeadm 1.22+; used for 1.22–1.30.
	KubeadmV1Beta3 KubeadmAPI = "kubeadm.k8s.io/v1beta3"
	// KubeadmV1Beta4 is read by kubeadm 1.31+; used from 1.31.
	KubeadmV1Beta4 KubeadmAPI = "kubeadm.k8s.io/v1beta4"
)

// MinVersion is CloudStack's minimum supported Kubernetes version.
var MinVersion = Version{1, 11, 0}

// KubeadmAPIFor picks the newest kubeadm config API the release reads.
// The fields ztpd renders (bootstrapTokens, certificateKey,
// controlPlaneEndpoint, certSANs, discovery.bootstrapToken) mean the same
// in v1beta2, v1beta3 and v1beta4; v1beta4 changes extraArgs to a list and
// adds encryptionAlgorithm.
func KubeadmAPIFor(v Version) (KubeadmAPI, error) {
	switch {
	case v.Major != 1 || v.Less(MinVersion):
		return "", fmt.Errorf("kubernetes %s is not supported (minimum %s)", v, MinVersion)
	case v.AtLeast(1, 31):
		return KubeadmV1Beta4, nil
	case v.AtLeast(1, 22):
		return KubeadmV1Beta3, nil
	case v.AtLeast(1, 15):
		return KubeadmV1Beta2, nil
	default:
		return KubeadmFlags, nil
	}
}

// criSocket is containerd's socket in the form the release expects:
// kubeadm 1.24+ wants a URL and warns about a bare path.
func criSocket(v Version) string {
	if v.AtLeast(1, 24) {
		return "unix:///run/containerd/containerd.sock"
	}
	return "/run/containerd/containerd.sock"
}
