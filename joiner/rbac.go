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

// Observer is the identity ztpd watches its clusters with (the watch
// adapter defines it): a client certificate the appliance mints from each
// cluster CA for User in Groups, and the RBAC objects, created in each
// cluster with the admin binding, that allow it only what the watch needs.
type Observer struct {
	User   string
	Groups []string
	// RBAC are the cluster-scoped RBAC objects (JSON: ClusterRole or
	// ClusterRoleBinding) that grant the identity its rights.
	RBAC [][]byte
}

// ObserverCredentials mints the observer's client certificate for a
// cluster, valid for validity, with the cluster's API endpoint and CA.
// Nothing is stored: the watch asks again before it expires.
func (s *Service) ObserverCredentials(clusterID string, validity time.Duration) (endpoint string, caPEM, certPEM, keyPEM []byte, err error) {
	o := s.opts.Observer
	if o.User == "" {
		return "", nil, nil, nil, fmt.Errorf("%w: no observer identity is configured", ErrClusterUnavailable)
	}
	return s.ClientCredentials(clusterID, o.User, o.Groups, validity)
}

// ClientCredentials issues a client certificate of one of ztpd's own
// identities in a cluster (the observer, the node operator of day-2
// operations) from the cluster's CA: its API endpoint, the CA, and the
// certificate and key for user in groups.
func (s *Service) ClientCredentials(clusterID, user string, groups []string, validity time.Duration) (endpoint string, caPEM, certPEM, keyPEM []byte, err error) {
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
	if keys.ext != nil {
		return "", nil, nil, nil, errNoCAKey("a certificate for " + user)
	}
	creds, err := kubeconfig.IssueUser(keys.ca, c.Name, "https://"+rt.APIEndpoint, user, groups, validity, s.now())
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
	admin, err := json.Marshal(adminBinding())
	if err != nil {
		return err
	}
	var callErr error
	for _, body := range append([][]byte{admin}, s.opts.Observer.RBAC...) {
		var kind struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(body, &kind); err != nil {
			return fmt.Errorf("observer RBAC object: %w", err)
		}
		path := "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
		if kind.Kind == "ClusterRole" {
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
			fmt.Sprintf("ClusterRoleBinding %s (group %s -> cluster-admin) and %d observer RBAC object(s) for %s in place",
				AdminBindingName, clusters.KubeconfigGroup, len(s.opts.Observer.RBAC), s.opts.Observer.User), nil)
	})
	if callErr != nil {
		return fmt.Errorf("creating ClusterRoleBinding %s and the observer's RBAC in cluster %s (will retry): %w", AdminBindingName, c.Name, callErr)
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
