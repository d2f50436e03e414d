package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

func TestWithKubernetesVersion(t *testing.T) {
	in := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nnodeRegistration:\n  name: cp-1\n" +
		"---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.36.3\n# kept\ncertificatesDir: /etc/kubernetes/pki"
	out, err := withKubernetesVersion([]byte(in), "v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	want := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nnodeRegistration:\n  name: cp-1\n" +
		"---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.37.2\n# kept\ncertificatesDir: /etc/kubernetes/pki\n"
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	// No kubernetesVersion line (kubeadm's default): one is added.
	out, err = withKubernetesVersion([]byte("kind: ClusterConfiguration\n"), "v1.37.2")
	if err != nil || string(out) != "kind: ClusterConfiguration\nkubernetesVersion: v1.37.2\n" {
		t.Errorf("got %q, %v", out, err)
	}
	if _, err := withKubernetesVersion([]byte("kind: InitConfiguration\n"), "v1.37.2"); err == nil {
		t.Error("no error without a ClusterConfiguration")
	}
}

// TestUpgradeTo starts a control plane at the oldest pinned version and
// upgrades it to the next: the API server and the controller manager run
// the new binaries with the new kubeadm's command lines, /version and
// kubectl report the new version, kubeadm-config says it, the objects made
// before survive, the controllers work (a new bootstrap token's
// cluster-info signature), and a downgrade is refused.
func TestUpgradeTo(t *testing.T) {
	vs, err := kubebin.Versions()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) < 2 {
		t.Skipf("skipping: one Kubernetes version is pinned (%v); an upgrade needs two", vs)
	}
	from, to := vs[len(vs)-2], vs[len(vs)-1]
	kubebin.Require(t, to)
	worker, err := tokens.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	tp := StartForTest(t, TestOptions{
		Version:    from,
		Namespace:  fmt.Sprintf("cpup-%x", os.Getpid()),
		EndpointIP: endpointIP, AdvertiseIP: advertiseIP,
		Tokens: []bundle.Token{{Token: worker, TTL: time.Hour, Description: "ztpd: worker"}},
	})
	cp := tp.ControlPlane
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	if v, err := cp.ServerVersion(ctx); err != nil || v != from {
		t.Fatalf("before: /version %q, %v; want %s", v, err, from)
	}
	if out, err := cp.Kubectl(ctx, "create", "configmap", "before-upgrade", "-n", "default", "--from-literal=k=v"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	oldAPI, oldKCM := cp.PID(APIServer), cp.PID(ControllerManager)
	oldEtcd := cp.PID(Etcd)

	begin := time.Now()
	if err := cp.UpgradeTo(ctx, to); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s -> %s in %v", from, to, time.Since(begin).Round(time.Millisecond))

	if v, err := cp.ServerVersion(ctx); err != nil || v != to {
		t.Errorf("after: /version %q, %v; want %s", v, err, to)
	}
	out, err := cp.Kubectl(ctx, "version", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var kv struct {
		ServerVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
	}
	if err := json.Unmarshal(out, &kv); err != nil || kv.ServerVersion.GitVersion != to {
		t.Errorf("kubectl version: server %q (%v)\n%s", kv.ServerVersion.GitVersion, err, out)
	}

	bins := cp.Binaries()
	if bins.Version != to {
		t.Errorf("Binaries().Version = %s", bins.Version)
	}
	for c, bin := range map[string]string{APIServer: bins.APIServer, ControllerManager: bins.ControllerManager} {
		if argv := cp.Command(c); argv[0] != bin {
			t.Errorf("%s runs %s, want %s", c, argv[0], bin)
		}
	}
	if cp.PID(APIServer) == oldAPI || cp.PID(ControllerManager) == oldKCM || cp.PID(APIServer) == 0 || cp.PID(ControllerManager) == 0 {
		t.Errorf("components not restarted: kube-apiserver %d -> %d, kube-controller-manager %d -> %d",
			oldAPI, cp.PID(APIServer), oldKCM, cp.PID(ControllerManager))
	}
	if cp.PID(Etcd) != oldEtcd {
		t.Errorf("etcd restarted: %d -> %d", oldEtcd, cp.PID(Etcd))
	}

	// etcd kept everything; kubeadm's ConfigMap says the new version.
	if out, err := cp.Kubectl(ctx, "get", "configmap", "before-upgrade", "-n", "default", "-o", "jsonpath={.data.k}"); err != nil || string(out) != "v" {
		t.Errorf("ConfigMap made before the upgrade: %q, %v", out, err)
	}
	out, err = cp.Kubectl(ctx, "get", "configmap", "kubeadm-config", "-n", "kube-system", "-o", "jsonpath={.data.ClusterConfiguration}")
	if err != nil || !strings.Contains(string(out), "kubernetesVersion: "+to) {
		t.Errorf("kubeadm-config after the upgrade (%v):\n%s", err, out)
	}

	// The new controller manager works: its bootstrapsigner signs
	// cluster-info for a token made after the upgrade.
	tok, err := tokens.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	secret := fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","type":"bootstrap.kubernetes.io/token",
		"metadata":{"name":"bootstrap-token-%s","namespace":"kube-system"},
		"stringData":{"token-id":%q,"token-secret":%q,"usage-bootstrap-signing":"true","usage-bootstrap-authentication":"true"}}`,
		tok.ID(), tok.ID(), strings.TrimPrefix(tok.Reveal(), tok.ID()+"."))
	p := t.TempDir() + "/token.json"
	if err := os.WriteFile(p, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(ctx, "create", "-f", p); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cp.tokenIDs = append(cp.tokenIDs, tok.ID())
	signing := time.Now()
	if err := cp.waitClusterInfoSigned(ctx); err != nil {
		t.Error(err)
	}
	// The new controller manager first waits for the old one's leader
	// lease to expire (it is not released on SIGTERM).
	t.Logf("cluster-info signed for the new token %v later", time.Since(signing).Round(time.Millisecond))

	if err := cp.UpgradeTo(ctx, to); err != nil {
		t.Errorf("upgrading to the running version: %v, want nothing to do", err)
	}
	if err := cp.UpgradeTo(ctx, from); err == nil || !strings.Contains(err.Error(), "does not downgrade") {
		t.Errorf("downgrade: %v", err)
	}
}
