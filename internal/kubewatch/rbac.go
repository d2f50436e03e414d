package kubewatch

import (
	"bytes"
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

const (
	// ObserverUser is the identity (certificate CN) ztpd watches clusters as.
	ObserverUser = "ztpd:observer"
	// ObserverGroup is its group (certificate O); RBAC binds the group.
	ObserverGroup = "ztpd:observers"
	// RBACName names both the ClusterRole and the ClusterRoleBinding.
	RBACName = "ztpd:node-observer"
)

// RBAC returns the least privilege the watcher needs: Nodes get, list and
// watch (the informer) and patch (labels), and kubelet CSRs get, list and
// watch (who asked for each Node's certificate), bound to ObserverGroup.
// Nothing else: not Secrets, not Pods, not Node status, no CSR approval. /readyz needs no rule (the
// built-in system:public-info-viewer role allows it to every
// authenticated user).
func RBAC() (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	labels := map[string]string{"app.kubernetes.io/managed-by": "ztpd"}
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: RBACName, Labels: labels},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""},
			Resources: []string{"nodes"},
			Verbs:     []string{"get", "list", "watch", "patch"},
		}, {
			// Who requested each kubelet's certificate (CSRSink): read only.
			APIGroups: []string{"certificates.k8s.io"},
			Resources: []string{"certificatesigningrequests"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: RBACName, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: RBACName},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: ObserverGroup}},
	}
	return role, binding
}

// RBACManifest is RBAC() as a YAML stream (kubectl apply -f -).
func RBACManifest() []byte {
	role, binding := RBAC()
	var b bytes.Buffer
	for i, obj := range []any{role, binding} {
		y, err := yaml.Marshal(obj)
		if err != nil {
			panic(err) // fixed, well-formed objects
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes()
}

// EnsureRBAC creates or updates RBAC() through an administrator's client
// (for example the kubeadm admin.conf of a control plane ztpd bootstraps).
func EnsureRBAC(ctx context.Context, admin kubernetes.Interface) error {
	role, binding := RBAC()
	roles := admin.RbacV1().ClusterRoles()
	if cur, err := roles.Get(ctx, role.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := roles.Create(ctx, role, metav1.CreateOptions{FieldManager: "ztpd"}); err != nil {
			return fmt.Errorf("kubewatch: create ClusterRole %s: %w", role.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("kubewatch: get ClusterRole %s: %w", role.Name, err)
	} else {
		cur.Rules, cur.Labels = role.Rules, role.Labels
		if _, err := roles.Update(ctx, cur, metav1.UpdateOptions{FieldManager: "ztpd"}); err != nil {
			return fmt.Errorf("kubewatch: update ClusterRole %s: %w", role.Name, err)
		}
	}
	bindings := admin.RbacV1().ClusterRoleBindings()
	if cur, err := bindings.Get(ctx, binding.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{FieldManager: "ztpd"}); err != nil {
			return fmt.Errorf("kubewatch: create ClusterRoleBinding %s: %w", binding.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("kubewatch: get ClusterRoleBinding %s: %w", binding.Name, err)
	} else if cur.RoleRef != binding.RoleRef {
		// roleRef is immutable: replace the binding.
		if err := bindings.Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("kubewatch: replace ClusterRoleBinding %s: %w", binding.Name, err)
		}
		if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{FieldManager: "ztpd"}); err != nil {
			return fmt.Errorf("kubewatch: create ClusterRoleBinding %s: %w", binding.Name, err)
		}
	} else {
		cur.Subjects, cur.Labels = binding.Subjects, binding.Labels
		if _, err := bindings.Update(ctx, cur, metav1.UpdateOptions{FieldManager: "ztpd"}); err != nil {
			return fmt.Errorf("kubewatch: update ClusterRoleBinding %s: %w", binding.Name, err)
		}
	}
	return nil
}
