package bundle

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// TestRealKubeadmValidatesConfigs runs `kubeadm config validate` of each
// Kubernetes version built in testenv/k8sbin on the init, worker-join and
// control-plane-join configurations ztpd renders for that version (kubeadm
// accepts one minor of skew, so each is checked with its own). Older
// versions keep the golden format tests.
func TestRealKubeadmValidatesConfigs(t *testing.T) {
	vs, err := kubebin.Versions()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Run(v, func(t *testing.T) {
			kubeadm := kubebin.Require(t, v).Kubeadm
			ver := strings.TrimPrefix(v, "v")
			for _, alg := range []pki.Algorithm{pki.RSA2048, pki.ECDSAP256} {
				ip := initParams(ver, alg)
				ip.NodeLabels = map[string]string{"ztpd.io/role": "control-plane", "label.ztpd.io/rack": "r7"}
				init, err := PlanInit(ip)
				if err != nil {
					t.Fatal(err)
				}
				kubeadmValidate(t, kubeadm, "init-"+string(alg), init.Config, "")
			}
			worker := JoinParams{
				Version: MustVersion(ver), APIServerEndpoint: "10.99.1.10:6443", Token: tokA,
				CACertHashes: []string{caHash}, NodeName: "prod-a-node-1",
				NodeLabels: map[string]string{"ztpd.io/role": "worker", "ztpd.io/serial": "LAB0001"},
			}
			cp := worker
			cp.ControlPlane, cp.CertificateKey, cp.AdvertiseAddress, cp.NodeName = true, certKey, "10.99.1.12", "prod-a-control-2"
			for name, p := range map[string]JoinParams{"join-worker": worker, "join-control-plane": cp} {
				plan, err := PlanJoin(p)
				if err != nil {
					t.Fatal(err)
				}
				kubeadmValidate(t, kubeadm, name, plan.Config, "")
			}
			// validate is strict, so the passes above mean something.
			bad, err := PlanJoin(worker)
			if err != nil {
				t.Fatal(err)
			}
			kubeadmValidate(t, kubeadm, "misspelt", []byte(strings.Replace(string(bad.Config), "caCertHashes", "caCertHashs", 1)), "unknown field")
		})
	}
}

// kubeadmValidate runs `kubeadm config validate` on cfg; wantErr "" means
// it must pass, otherwise fail with output containing wantErr.
func kubeadmValidate(t *testing.T, kubeadm, name string, cfg []byte, wantErr string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubeadm, "config", "validate", "--config", path).CombinedOutput()
	switch {
	case wantErr == "" && err != nil:
		t.Errorf("%s: kubeadm config validate: %v\n%s\n--- config ---\n%s", name, err, out, cfg)
	case wantErr != "" && err == nil:
		t.Errorf("%s: kubeadm config validate accepted it:\n%s", name, out)
	case wantErr != "" && !strings.Contains(string(out), wantErr):
		t.Errorf("%s: kubeadm config validate failed without %q:\n%s", name, wantErr, out)
	}
}

// TestRealKubeadmValidatesIPv6Configs: an IPv6 cluster's configurations,
// the control plane endpoint bracketed ([fd99::1]:6443), the advertise
// address and the kubelet's node-ip not, pass the real kubeadm of each
// version built.
func TestRealKubeadmValidatesIPv6Configs(t *testing.T) {
	vs, err := kubebin.Versions()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Run(v, func(t *testing.T) {
			kubeadm := kubebin.Require(t, v).Kubeadm
			ver := strings.TrimPrefix(v, "v")
			ip := initParams(ver, pki.ECDSAP256)
			ip.ControlPlaneEndpoint, ip.AdvertiseAddress, ip.NodeIP = "[fd99::1:10]:6443", "fd99::1:11", "fd99::1:11"
			ip.CertSANs, ip.PodSubnet, ip.ServiceSubnet = []string{"fd99::1:10"}, "fd99:244::/56", "fd99:96::/112"
			init, err := PlanInit(ip)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"controlPlaneEndpoint: '[fd99::1:10]:6443'", "advertiseAddress: fd99::1:11", "node-ip"} {
				if !strings.Contains(string(init.Config), want) && !strings.Contains(string(init.Config), strings.ReplaceAll(want, "'", "\"")) {
					t.Errorf("init configuration without %s:\n%s", want, init.Config)
				}
			}
			kubeadmValidate(t, kubeadm, "init-ipv6", init.Config, "")
			worker := JoinParams{
				Version: MustVersion(ver), APIServerEndpoint: "[fd99::1:10]:6443", Token: tokA,
				CACertHashes: []string{caHash}, NodeName: "prod-a-node-1", NodeIP: "fd99::1:21",
				NodeLabels: map[string]string{"ztpd.io/role": "worker"},
			}
			cp := worker
			cp.ControlPlane, cp.CertificateKey, cp.AdvertiseAddress, cp.NodeIP, cp.NodeName = true, certKey, "fd99::1:12", "fd99::1:12", "prod-a-control-2"
			for name, p := range map[string]JoinParams{"join-worker-ipv6": worker, "join-control-plane-ipv6": cp} {
				plan, err := PlanJoin(p)
				if err != nil {
					t.Fatal(err)
				}
				kubeadmValidate(t, kubeadm, name, plan.Config, "")
			}
			// kubeadm wants advertiseAddress bare: the passes above mean
			// the brackets are where kubeadm takes them.
			bracketed := ip
			bracketed.AdvertiseAddress = "[fd99::1:11]"
			if wrong, err := PlanInit(bracketed); err != nil {
				t.Fatal(err)
			} else {
				kubeadmValidate(t, kubeadm, "init-ipv6-bracketed", wrong.Config, "must be ipv4 or ipv6 address")
			}
			// An unbracketed IPv6 endpoint is no host:port and is refused
			// before kubeadm sees it.
			bad := ip
			bad.ControlPlaneEndpoint = "fd99::1:10:6443"
			if _, err := PlanInit(bad); err == nil {
				t.Error("an unbracketed IPv6 control plane endpoint was accepted")
			}
		})
	}
}
