package lab

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// The node name and --node-labels the lab's kubelets register with come
// from the configuration ztpd renders, in both kubeletExtraArgs forms
// (v1beta4 list, v1beta3 map).
func TestNodeRegistrationFromBundle(t *testing.T) {
	tok, err := tokens.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"ztpd.io/role": "worker", "ztpd.io/mac": "1e-00-00-00-01-02"}
	for _, v := range []string{"1.37.2", "1.30.4"} {
		plan, err := bundle.PlanJoin(bundle.JoinParams{Version: bundle.MustVersion(v), APIServerEndpoint: "10.99.130.10:6443",
			Token: tok, CACertHashes: []string{"sha256:0000000000000000000000000000000000000000000000000000000000000000"},
			NodeName: "vm2", NodeLabels: labels})
		if err != nil {
			t.Fatal(err)
		}
		reg, err := nodeRegistration(plan.Config, "JoinConfiguration")
		if err != nil {
			t.Fatalf("%s: %v\n%s", v, err, plan.Config)
		}
		if reg.Name != "vm2" || !maps.Equal(reg.Labels, labels) {
			t.Errorf("%s: got %+v, want vm2 %v\n%s", v, reg, labels, plan.Config)
		}
		if _, err := nodeRegistration(plan.Config, "InitConfiguration"); err == nil {
			t.Errorf("%s: a JoinConfiguration read as an InitConfiguration", v)
		}
	}
}

func TestKubeadmFlags(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kubeadm-flags.env")
	env := `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --hostname-override=vm2 --node-labels=ztpd.io/role=worker,ztpd.io/kind=vm --pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n"
	if err := os.WriteFile(p, []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := kubeadmFlags(p)
	if err != nil {
		t.Fatal(err)
	}
	if f["hostname-override"] != "vm2" || f["node-labels"] != "ztpd.io/role=worker,ztpd.io/kind=vm" {
		t.Fatalf("flags %v", f)
	}
	l, err := parseLabelList(f["node-labels"])
	if err != nil || l["ztpd.io/kind"] != "vm" || len(l) != 2 {
		t.Fatalf("labels %v %v", l, err)
	}
	if _, err := parseLabelList("a=b,broken"); err == nil {
		t.Error("a label without = was accepted")
	}
}
