package kubeconfig

import (
	"time"

	"github.com/ztpd/ztpd/joiner/pki"
)

// Admin identity, as kubeadm writes it into admin.conf before 1.29 (and
// into super-admin.conf since): system:masters is bound to cluster-admin
// by the apiserver itself, so it works on every Kubernetes version.
const (
	AdminUser  = "kubernetes-admin"
	AdminGroup = "system:masters"
)

// IssueAdmin signs a fresh admin client certificate with the cluster CA and
// returns kubeconfig credentials for server. validity 0 means one year.
func IssueAdmin(ca *pki.CA, clusterName, server string, validity time.Duration, now time.Time) (Credentials, error) {
	kp, err := ca.IssueClient(pki.ClientCertRequest{
		CommonName:    AdminUser,
		Organizations: []string{AdminGroup},
		Validity:      validity,
	}, now)
	if err != nil {
		return Credentials{}, err
	}
	key, err := kp.PrivateKeyPEM()
	if err != nil {
		return Credentials{}, err
	}
	return Credentials{
		ClusterName:   clusterName,
		Server:        server,
		CAPEM:         ca.CertPEM(),
		UserName:      AdminUser,
		ClientCertPEM: kp.CertPEM(),
		ClientKeyPEM:  key,
	}, nil
}
