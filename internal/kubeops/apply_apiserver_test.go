package kubeops_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/kubeops"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// cniManifest is shaped like a CNI's: its namespace, RBAC, a custom
// resource definition and an object of it (applied in one pass), its
// configuration and its DaemonSet; two parameters as a registered CNI
// configuration declares them.
const cniManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: ztpd-cni-test
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: cni-node
  namespace: ztpd-cni-test
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ztpd-cni-test-node
rules:
- apiGroups: [""]
  resources: ["nodes", "pods"]
  verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ztpd-cni-test-node
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: ztpd-cni-test-node
subjects:
- kind: ServiceAccount
  name: cni-node
  namespace: ztpd-cni-test
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ippools.cni.ztpd.test
spec:
  group: cni.ztpd.test
  names: {kind: IPPool, plural: ippools, singular: ippool}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: cni.ztpd.test/v1
kind: IPPool
metadata:
  name: default-pool
spec:
  cidr: {{ ds.meta_data.PodCIDR }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cni-config
  namespace: ztpd-cni-test
data:
  mtu: "{{ ds.meta_data.mtu }}"
  pod_cidr: {{ ds.meta_data.PodCIDR }}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: cni-node
  namespace: ztpd-cni-test
spec:
  selector:
    matchLabels: {app: cni-node}
  template:
    metadata:
      labels: {app: cni-node}
    spec:
      serviceAccountName: cni-node
      hostNetwork: true
      tolerations: [{operator: Exists}]
      containers:
      - name: cni
        image: registry.invalid/cni:v1
`

// TestApplyManifestOnRealAPIServer: a CNI configuration, its parameters
// substituted as the clusters service does, is server-side applied to a
// real kube-apiserver (a CRD and an object of it in the same pass); a
// second apply changes nothing and succeeds; an object the API server
// refuses fails the apply naming it.
func TestApplyManifestOnRealAPIServer(t *testing.T) {
	// kubeadm init wants a bootstrap token; the test uses none.
	tok, err := tokens.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	tp := controlplane.StartForTest(t, controlplane.TestOptions{
		Namespace: fmt.Sprintf("ka-%x", os.Getpid()), EndpointIP: "10.99.219.10", AdvertiseIP: "10.99.219.11",
		Version: builtVersion(t),
		Tokens:  []bundle.Token{{Token: tok, TTL: time.Hour, Description: "ztpd: kubeops apply test"}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", tp.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dial = controlplane.NetnsDial(tp.NS)
	params, err := clusters.ParseCNIParams("mtu,PodCIDR")
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := clusters.RenderCNI(cniManifest, params, map[string]string{"mtu": "1450", "PodCIDR": "10.244.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := kubeops.ApplyManifest(ctx, cfg, []byte(manifest), "ztpd-cni")
	if err != nil || n != 8 {
		t.Fatalf("apply: %d objects, %v", n, err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	cm, err := cs.CoreV1().ConfigMaps("ztpd-cni-test").Get(ctx, "cni-config", metav1.GetOptions{})
	if err != nil || cm.Data["mtu"] != "1450" || cm.Data["pod_cidr"] != "10.244.0.0/16" {
		t.Fatalf("ConfigMap: %v %v", err, cm)
	}
	if mf := cm.ManagedFields; len(mf) == 0 || mf[0].Manager != "ztpd-cni" {
		t.Fatalf("ConfigMap managed fields: %+v", mf)
	}
	ds, err := cs.AppsV1().DaemonSets("ztpd-cni-test").Get(ctx, "cni-node", metav1.GetOptions{})
	if err != nil || ds.Spec.Template.Spec.ServiceAccountName != "cni-node" {
		t.Fatalf("DaemonSet: %v", err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	pool, err := dyn.Resource(schema.GroupVersionResource{Group: "cni.ztpd.test", Version: "v1", Resource: "ippools"}).Get(ctx, "default-pool", metav1.GetOptions{})
	if err != nil || pool.Object["spec"].(map[string]any)["cidr"] != "10.244.0.0/16" {
		t.Fatalf("IPPool: %v %v", err, pool)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, "ztpd-cni-test-node", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}

	// Again: the same objects, no error, nothing changed.
	rv := cm.ResourceVersion
	if n, err := kubeops.ApplyManifest(ctx, cfg, []byte(manifest), "ztpd-cni"); err != nil || n != 8 {
		t.Fatalf("second apply: %d %v", n, err)
	}
	if cm2, err := cs.CoreV1().ConfigMaps("ztpd-cni-test").Get(ctx, "cni-config", metav1.GetOptions{}); err != nil || cm2.ResourceVersion != rv {
		t.Fatalf("second apply changed the ConfigMap: %v %s -> %s", err, rv, cm2.ResourceVersion)
	}

	// The API server refuses an invalid object: the apply fails naming it,
	// after the objects before it.
	bad := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: before\n  namespace: ztpd-cni-test\n---\n" +
		"apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: broken\n  namespace: ztpd-cni-test\nspec:\n  selector:\n    matchLabels: {app: broken}\n  template:\n    metadata:\n      labels: {app: other}\n    spec:\n      containers: []\n"
	n, err = kubeops.ApplyManifest(ctx, cfg, []byte(bad), "ztpd-cni")
	if err == nil || n != 1 || !strings.Contains(err.Error(), "apply DaemonSet ztpd-cni-test/broken") || !apierrors.IsInvalid(unwrapAll(err)) {
		t.Fatalf("invalid object: %d %v", n, err)
	}
	if _, err := cs.CoreV1().ConfigMaps("ztpd-cni-test").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("the object before the invalid one: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(cniManifest))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}]}`))
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		objs, err := kubeops.ParseManifest(b)
		if err != nil {
			return
		}
		if len(objs) == 0 || len(objs) > kubeops.MaxManifestObjects {
			t.Fatalf("%d objects without an error", len(objs))
		}
		for _, o := range objs {
			if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
				t.Fatalf("object without apiVersion, kind or name: %v", o.Object)
			}
		}
	})
}

// builtVersion is the newest pinned Kubernetes version whose binaries are
// built ("": the newest, which the control plane skips for, saying what to
// build).
func builtVersion(t *testing.T) string {
	vs, err := kubebin.Versions()
	if err != nil {
		t.Fatal(err)
	}
	for i := len(vs) - 1; i >= 0; i-- {
		if _, err := kubebin.Kubernetes(vs[i]); err == nil {
			return vs[i]
		}
	}
	return ""
}
