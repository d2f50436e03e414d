package kubeconfig

import (
	"errors"
	"time"

	"github.com/ztpd/ztpd/joiner/pki"
)

// Admin identity, as kubeadm writes it into admin.conf before 1.29 (and
// into super-admin.conf since): system:masters is bound to cluster-admin
// by the apiserver itself, so it works on every Kubernetes version. ztpd
// uses it only for its own short calls to a cluster's API server; the
// kubeconfigs it hands out carry the caller's identity (IssueUser).
const (
	AdminUser  = "kubernetes-admin"
	AdminGroup = "system:masters"
)

// IssueAdmin signs a fresh admin client certificate with the cluster CA and
// returns kubeconfig credentials for server. validity 0 means one year.
func IssueAdmin(ca *pki.CA, clusterName, server string, validity time.Duration, now time.Time) (Credentials, error) {
	return IssueUser(ca, clusterName, server, AdminUser, []string{AdminGroup}, validity, now)
}

// IssueUser signs a client certificate for user (CN) in groups (O) with the
// cluster CA and returns kubeconfig credentials for server; NotAfter and
// Serial describe the certificate. validity 0 means one year.
func IssueUser(ca *pki.CA, clusterName, server, user string, groups []string, validity time.Duration, now time.Time) (Credentials, error) {
	if user == "" {
		return Credentials{}, errors.New("kubeconfig: a user name is required")
	}
	kp, err := ca.IssueClient(pki.ClientCertRequest{
		CommonName:    user,
		Organizations: groups,
		Validity:      validity,
	}, now)
	if err != nil {
		return Credentials{}, err
	}
	key, err := kp.PrivateKeyPEM()
	if err != nil {
		return Credentials{}, err
	}
	cert := kp.Certificate()
	return Credentials{
		ClusterName:   clusterName,
		Server:        server,
		CAPEM:         ca.CertPEM(),
		UserName:      user,
		ClientCertPEM: kp.CertPEM(),
		ClientKeyPEM:  key,
		NotAfter:      cert.NotAfter,
		Serial:        cert.SerialNumber.Text(16),
	}, nil
}
