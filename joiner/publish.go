package joiner

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"

	"github.com/ztpd/ztpd/joiner/kubeconfig"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// publishToken creates a node's bootstrap token in the running cluster,
// which kubeadm init did not create (tokens made after the first control
// plane's bundle, e.g. on scale-up, or every k3s agent token). It posts the
// kube-system Secret "bootstrap-token-<id>" with an admin certificate the
// appliance signs itself, pinning the API server to the cluster CA. An
// existing Secret (409) counts as created.
func (s *Service) publishToken(ctx context.Context, res *joinResult, keys *clusterKeys, bt tokens.BootstrapToken) error {
	if res.rt.APIEndpoint == "" {
		return fmt.Errorf("%w: no API endpoint", ErrClusterUnavailable)
	}
	body, err := json.Marshal(bootstrapTokenSecret(bt, res.tokenExp, "ztpd join token for "+res.device.ID))
	if err != nil {
		return err
	}
	err = s.clusterAPI(ctx, keys, res.cluster.Name, res.rt.APIEndpoint, http.MethodPost,
		"/api/v1/namespaces/kube-system/secrets", body, http.StatusCreated, http.StatusOK, http.StatusConflict)
	if err == nil {
		s.log.Info("bootstrap token created in cluster", "cluster", res.cluster.Name, "token", bt, "device", res.device.ID)
	}
	return err
}

// unpublishToken deletes a revoked bootstrap token's Secret from the running
// cluster, so the API server stops accepting it at once rather than when it
// expires. A Secret already gone (404) counts as deleted.
func (s *Service) unpublishToken(ctx context.Context, keys *clusterKeys, clusterName, endpoint, id string) error {
	if keys.ext != nil {
		// ztpd's role in a cluster it did not build creates Secrets but
		// deletes none: the token expires within ExternalTokenTTL.
		s.log.Info("revoked bootstrap token left to expire in external cluster", "cluster", clusterName, "token_id", id)
		return nil
	}
	err := s.clusterAPI(ctx, keys, clusterName, endpoint, http.MethodDelete,
		"/api/v1/namespaces/kube-system/secrets/"+bootstraputil.BootstrapTokenSecretName(id), nil,
		http.StatusOK, http.StatusAccepted, http.StatusNotFound)
	if err == nil {
		s.log.Info("bootstrap token deleted from cluster", "cluster", clusterName, "token_id", id)
	}
	return err
}

// clusterAPI makes one call to the cluster's API server as a short-lived
// admin the appliance signs itself, pinning the server to the cluster CA.
// Any status outside ok is an error carrying the server's answer.
func (s *Service) clusterAPI(ctx context.Context, keys *clusterKeys, clusterName, endpoint, method, path string, body []byte, ok ...int) error {
	creds, err := kubeconfig.IssueAdmin(keys.ca, clusterName, "https://"+endpoint, time.Hour, s.now())
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(creds.ClientCertPEM, creds.ClientKeyPEM)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(keys.ca.Certificate())
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, "https://"+endpoint+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if slices.Contains(ok, resp.StatusCode) {
		return nil
	}
	return fmt.Errorf("API server answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
}

// bootstrapTokenSecret is the Secret kubeadm's token create makes, with
// the key names from k8s.io/cluster-bootstrap.
func bootstrapTokenSecret(bt tokens.BootstrapToken, expires time.Time, description string) map[string]any {
	secret, _ := strings.CutPrefix(bt.Reveal(), bt.ID()+".")
	data := map[string]string{
		bootstrapapi.BootstrapTokenIDKey:          bt.ID(),
		bootstrapapi.BootstrapTokenSecretKey:      secret,
		bootstrapapi.BootstrapTokenDescriptionKey: description,
		bootstrapapi.BootstrapTokenExtraGroupsKey: strings.Join(tokens.DefaultGroups(), ","),
	}
	for _, u := range tokens.DefaultUsages() {
		data[bootstrapapi.BootstrapTokenUsagePrefix+u] = "true"
	}
	if !expires.IsZero() {
		data[bootstrapapi.BootstrapTokenExpirationKey] = expires.UTC().Format(time.RFC3339)
	}
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   map[string]string{"name": bootstraputil.BootstrapTokenSecretName(bt.ID()), "namespace": "kube-system"},
		"type":       string(bootstrapapi.SecretTypeBootstrapToken),
		"stringData": data,
	}
}
