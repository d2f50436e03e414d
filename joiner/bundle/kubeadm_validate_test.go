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
			// Without a named Service range the IPv6 default is written,
			// and kubeadm takes it.
			defaulted := ip
			defaulted.ServiceSubnet, defaulted.PodSubnet = "", ""
			if d, err := PlanInit(defaulted); err != nil {
				t.Fatal(err)
			} else {
				kubeadmValidate(t, kubeadm, "init-ipv6-default-services", d.Config, "")
			}
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

// TestRealKubeadmValidatesExternalEtcd: the first control plane's init
// configuration of a cluster built with etcd nodes (etcd.external: the
// members' https client URLs, the etcd CA and the API server's etcd client
// certificate under /etc/kubernetes/pki) passes the real kubeadm of each
// version built, over IPv4 and IPv6 (endpoints bracketed), and kubeadm
// refuses the same document with the endpoints misspelt, so the pass means
// kubeadm read the section.
func TestRealKubeadmValidatesExternalEtcd(t *testing.T) {
	vs, err := kubebin.Versions()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Run(v, func(t *testing.T) {
			kubeadm := kubebin.Require(t, v).Kubeadm
			ver := strings.TrimPrefix(v, "v")
			v4 := initParams(ver, pki.ECDSAP256)
			v4.ExternalEtcd = &ExternalEtcd{Endpoints: []string{EtcdEndpoint("10.99.1.21"), EtcdEndpoint("10.99.1.22"), EtcdEndpoint("10.99.1.23")}}
			v6 := initParams(ver, pki.ECDSAP256)
			v6.ControlPlaneEndpoint, v6.AdvertiseAddress, v6.NodeIP = "[fd99::1:10]:6443", "fd99::1:11", "fd99::1:11"
			v6.CertSANs, v6.PodSubnet = []string{"fd99::1:10"}, "fd99:244::/56"
			v6.ExternalEtcd = &ExternalEtcd{Endpoints: []string{EtcdEndpoint("fd99::1:21")}}
			for name, p := range map[string]InitParams{"init-external-etcd": v4, "init-external-etcd-ipv6": v6} {
				plan, err := PlanInit(p)
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range []string{"external:", "caFile: " + EtcdCAFile, "certFile: " + EtcdAPIServerCert, "keyFile: " + EtcdAPIServerKey} {
					if !strings.Contains(string(plan.Config), want) {
						t.Errorf("%s: no %q in\n%s", name, want, plan.Config)
					}
				}
				kubeadmValidate(t, kubeadm, name, plan.Config, "")
				kubeadmValidate(t, kubeadm, name+"-misspelt", []byte(strings.Replace(string(plan.Config), "endpoints:", "endpoint:", 1)), "unknown field")
			}
			if plan, err := PlanInit(v6); err != nil {
				t.Fatal(err)
			} else if !strings.Contains(string(plan.Config), "https://[fd99::1:21]:2379") {
				t.Errorf("IPv6 etcd endpoint not bracketed:\n%s", plan.Config)
			}
			bad := v4
			bad.ExternalEtcd = &ExternalEtcd{Endpoints: []string{"fd99::1:21:2379"}}
			if _, err := PlanInit(bad); err == nil {
				t.Error("an unbracketed IPv6 etcd endpoint was accepted")
			}
			bad.ExternalEtcd = &ExternalEtcd{}
			if _, err := PlanInit(bad); err == nil {
				t.Error("external etcd without endpoints was accepted")
			}
		})
	}
}
