package kubeops

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// OperatorUser is the identity (certificate CN) ztpd operates Nodes as.
	OperatorUser = "ztpd:operator"
	// OperatorGroup is its group (certificate O); RBAC binds the group.
	OperatorGroup = "ztpd:operators"
	// RBACName names both the ClusterRole and the ClusterRoleBinding.
	RBACName = "ztpd:operator"
)

// RBAC returns the least privilege the operations need, bound to
// OperatorGroup: Nodes read, patched (cordon), updated and deleted; pods
// read (what a drain evicts and whether it is gone) and evicted through
// pods/eviction, never deleted directly, so PodDisruptionBudgets hold;
// PodDisruptionBudgets read (which one blocks a drain). Not Secrets, not
// Node status, no pod creation or exec.
func RBAC() (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	labels := map[string]string{"app.kubernetes.io/managed-by": "ztpd"}
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: RBACName, Labels: labels},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""},
			Resources: []string{"nodes"},
			Verbs:     []string{"get", "list", "watch", "patch", "update", "delete"},
		}, {
			APIGroups: []string{""},
			Resources: []string{"pods"},
			Verbs:     []string{"get", "list", "watch"},
		}, {
			APIGroups: []string{""},
			Resources: []string{"pods/eviction"},
			Verbs:     []string{"create"},
		}, {
			APIGroups: []string{"policy"},
			Resources: []string{"poddisruptionbudgets"},
			Verbs:     []string{"get", "list"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: RBACName, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: RBACName},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: OperatorGroup}},
	}
	return role, binding
}
