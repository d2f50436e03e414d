package bundle

// ClusterAdminsGroup is the group (certificate O) of the kubeconfigs ztpd
// issues (clusters.KubeconfigGroup).
const ClusterAdminsGroup = "ztpd:cluster-admins"

// ClusterAdminsRBAC binds ClusterAdminsGroup to the cluster-admin
// ClusterRole. The first control plane applies it right after kubeadm
// init, so the kubeconfigs ztpd issues work from the start; ztpd also
// creates it through the API server (joiner.EnsureAdminBinding) for
// clusters it did not initialise. Deleting it revokes every kubeconfig
// ztpd issued for the cluster.
const ClusterAdminsRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ztpd:cluster-admins
  labels:
    app.kubernetes.io/managed-by: ztpd
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: ` + ClusterAdminsGroup + `
`
