// Package bundle renders what a device needs to join a cluster: kubeadm
// configuration files and commands, CloudStack-style cloud-config
// user-data, the k3s agent configuration, and SONiC's join material. It is
// pure: inputs in, bytes out, no storage and no network.
package bundle

import (
	"fmt"

	"github.com/ztpd/ztpd/internal/semver"
)

// Version is a Kubernetes release: ztpd's one version type.
type Version = semver.Version

// ParseVersion accepts "1.28.4" or "v1.28.4" (CloudStack's rule: three
// numeric parts).
func ParseVersion(s string) (Version, error) { return semver.ParseRelease(s) }

// MustVersion is ParseVersion for constants.
func MustVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
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

// KubeadmAPIFor picks the newest kubeadm config API the release reads.
// The fields ztpd renders (bootstrapTokens, certificateKey,
// controlPlaneEndpoint, certSANs, discovery.bootstrapToken) mean the same
// in v1beta2, v1beta3 and v1beta4; v1beta4 changes extraArgs to a list and
// adds encryptionAlgorithm.
func KubeadmAPIFor(v Version) (KubeadmAPI, error) {
	switch {
	case v.Major != 1 || v.Less(semver.MinKubernetes):
		return "", fmt.Errorf("kubernetes %s is not supported (minimum %s)", v.Tag(), semver.MinKubernetes.Tag())
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
