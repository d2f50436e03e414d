package rollout

import (
	"context"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/kubeops"
)

// ManifestApplier applies manifests (a cluster's CNI configuration) to
// each cluster through its API server as ztpd's cluster-admin identity,
// with a short-lived client certificate from the cluster CA.
type ManifestApplier struct {
	j Credentials
}

var _ clusters.ManifestApplier = ManifestApplier{}

// NewManifestApplier reaches each cluster's API server with credentials
// from j.
func NewManifestApplier(j Credentials) ManifestApplier { return ManifestApplier{j: j} }

// CNIUser is the identity (certificate CN) a CNI configuration is applied as.
const CNIUser = "ztpd:cni"

func (a ManifestApplier) ApplyManifest(ctx context.Context, cluster string, manifest []byte) (int, error) {
	endpoint, ca, cert, key, err := a.j.ClientCredentials(cluster, CNIUser, []string{clusters.KubeconfigGroup}, 15*time.Minute)
	if err != nil {
		return 0, err
	}
	cfg := &rest.Config{Host: "https://" + endpoint, TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: cert, KeyData: key},
		Timeout: 30 * time.Second, UserAgent: "ztpd-cni"}
	return kubeops.ApplyManifest(ctx, cfg, manifest, "ztpd-cni")
}
