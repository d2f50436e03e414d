package joiner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/kubeconfig"
)

// AdminBindingName is the ClusterRoleBinding that makes the group of every
// kubeconfig ztpd issues (clusters.KubeconfigGroup) cluster-admin. The
// first control plane's init bundle applies it (bundle.ClusterAdminsRBAC);
// ztpd also creates it through the API server, for clusters whose control
// plane it did not set up (k3s servers) or that predate it. Deleting it in
// the cluster revokes every kubeconfig ztpd issued for that cluster; ztpd
// does not put it back once recorded.
const AdminBindingName = "ztpd:cluster-admins"

// adminBinding is the ClusterRoleBinding object.
func adminBinding() map[string]any {
	const rbac = "rbac.authorization.k8s.io"
	return map[string]any{
		"apiVersion": rbac + "/v1",
		"kind":       "ClusterRoleBinding",
		"metadata": map[string]any{"name": AdminBindingName,
			"labels": map[string]string{"app.kubernetes.io/managed-by": "ztpd"}},
		"roleRef":  map[string]string{"apiGroup": rbac, "kind": "ClusterRole", "name": "cluster-admin"},
		"subjects": []map[string]string{{"apiGroup": rbac, "kind": "Group", "name": clusters.KubeconfigGroup}},
	}
}

// The identity ztpd watches its clusters with: a client certificate the
// appliance mints from the cluster CA, bound to ObserverRole, which allows
// only what the watch needs (nodes: get, list, watch, and patch for
// labels), not system:masters.
const (
	ObserverUser  = "ztpd:observer"
	ObserverGroup = "ztpd:observers"
	ObserverRole  = "ztpd:node-observer"
)

// observerRBAC is the ClusterRole and ClusterRoleBinding of the observer.
func observerRBAC() []map[string]any {
	const rbac = "rbac.authorization.k8s.io"
	labels := map[string]string{"app.kubernetes.io/managed-by": "ztpd"}
	return []map[string]any{{
		"apiVersion": rbac + "/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": ObserverRole, "labels": labels},
		"rules": []map[string]any{{"apiGroups": []string{""}, "resources": []string{"nodes"},
			"verbs": []string{"get", "list", "watch", "patch"}}},
	}, {
		"apiVersion": rbac + "/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": ObserverRole, "labels": labels},
		"roleRef":  map[string]string{"apiGroup": rbac, "kind": "ClusterRole", "name": ObserverRole},
		"subjects": []map[string]string{{"apiGroup": rbac, "kind": "Group", "name": ObserverGroup}},
	}}
}

// ObserverCredentials mints the observer's client certificate for a
// cluster, valid for validity, with the cluster's API endpoint and CA.
// Nothing is stored: the watch asks again before it expires.
func (s *Service) ObserverCredentials(clusterID string, validity time.Duration) (endpoint string, caPEM, certPEM, keyPEM []byte, err error) {
	c, rt, err := s.clusterState(clusterID)
	if err != nil {
		return "", nil, nil, nil, err
	}
	if rt.APIEndpoint == "" {
		return "", nil, nil, nil, fmt.Errorf("%w: cluster %s has no API endpoint yet", ErrClusterUnavailable, c.Name)
	}
	keys, err := s.keysFor(c.ID)
	if err != nil {
		return "", nil, nil, nil, err
	}
	creds, err := kubeconfig.IssueUser(keys.ca, c.Name, "https://"+rt.APIEndpoint, ObserverUser, []string{ObserverGroup}, validity, s.now())
	if err != nil {
		return "", nil, nil, nil, err
	}
	return rt.APIEndpoint, creds.CAPEM, creds.ClientCertPEM, creds.ClientKeyPEM, nil
}

// EnsureAdminBinding creates, through the cluster's API server, the admin
// ClusterRoleBinding and the observer's ClusterRole and binding, once: an
// existing object (409) counts as created, and success is recorded so they
// are never posted again. A failure (API server not reachable yet) is
// recorded for the sweeper to retry.
func (s *Service) EnsureAdminBinding(ctx context.Context, clusterRef string) error {
	c, rt, err := s.clusterState(clusterRef)
	if err != nil || rt.AdminBinding {
		return err
	}
	if rt.APIEndpoint == "" {
		return fmt.Errorf("%w: cluster %s has no API endpoint yet", ErrClusterUnavailable, c.Name)
	}
	keys, err := s.keysFor(c.ID)
	if err != nil {
		return err
	}
	var callErr error
	for _, obj := range append([]map[string]any{adminBinding()}, observerRBAC()...) {
		body, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		path := "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
		if obj["kind"] == "ClusterRole" {
			path = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
		}
		if callErr = s.clusterAPI(ctx, keys, c.Name, rt.APIEndpoint, http.MethodPost, path, body,
			http.StatusCreated, http.StatusOK, http.StatusConflict); callErr != nil {
			break
		}
	}
	now := s.now()
	err = s.store.Update(func(tx core.Tx) error {
		cur, err := joinState(tx, c.ID)
		if err != nil {
			return err
		}
		if callErr != nil {
			if cur.AdminBindingRetry {
				return nil
			}
			cur.AdminBindingRetry = true
			return tx.Clusters().PutJoinState(c.ID, cur)
		}
		cur.AdminBinding, cur.AdminBindingRetry = true, false
		if err := tx.Clusters().PutJoinState(c.ID, cur); err != nil {
			return err
		}
		return s.event(tx, now, "cluster.rbac", "", c.ID,
			fmt.Sprintf("ClusterRoleBinding %s (group %s -> cluster-admin) and observer role %s (group %s) in place",
				AdminBindingName, clusters.KubeconfigGroup, ObserverRole, ObserverGroup), nil)
	})
	if callErr != nil {
		return fmt.Errorf("creating ClusterRoleBinding %s and observer role %s in cluster %s (will retry): %w", AdminBindingName, ObserverRole, c.Name, callErr)
	}
	if err == nil {
		s.log.Info("admin ClusterRoleBinding in place", "cluster", c.Name, "binding", AdminBindingName, "group", clusters.KubeconfigGroup)
	}
	return err
}

// kickAdminBinding asks the sweeper loop to ensure the binding soon; when
// its queue is full the next sweep's retry covers it.
func (s *Service) kickAdminBinding(clusterID string) {
	select {
	case s.bindKick <- clusterID:
	default:
	}
}

// retryAdminBindings ensures the binding of every cluster whose last
// attempt failed.
func (s *Service) retryAdminBindings(ctx context.Context) {
	var ids []string
	err := s.store.View(func(tx core.Tx) error {
		return tx.Clusters().JoinStates(func(cluster string, rt core.JoinState) (bool, error) {
			if rt.AdminBindingRetry && !rt.AdminBinding {
				ids = append(ids, cluster)
			}
			return true, nil
		})
	})
	if err != nil {
		s.log.Warn("listing clusters awaiting their admin binding", "err", err)
		return
	}
	for _, id := range ids {
		s.ensureAdminBindingLogged(ctx, id)
	}
}

func (s *Service) ensureAdminBindingLogged(ctx context.Context, clusterID string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.EnsureAdminBinding(ctx, clusterID); err != nil && ctx.Err() == nil {
		s.log.Warn("admin ClusterRoleBinding not created yet", "cluster", clusterID, "err", err)
	}
}
