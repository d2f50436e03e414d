package controlplane

import (
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const initDoc = `apiVersion: kubeadm.k8s.io/v1beta4
bootstrapTokens:
- token: abcdef.0123456789abcdef
  ttl: 24h0m0s
- token: ghijkl.0123456789ghijkl
  ttl: 30s
- token: mnopqr.0123456789mnopqr
  ttl: 0s
  usages: [authentication]
certificateKey: 0a1b
kind: InitConfiguration
`

const clusterDoc = `apiVersion: kubeadm.k8s.io/v1beta4
certificatesDir: /etc/kubernetes/pki
kind: ClusterConfiguration
kubernetesVersion: v1.37.2
`

func TestParseKubeadmConfig(t *testing.T) {
	ic, err := parseKubeadmConfig([]byte(initDoc + "---\n" + clusterDoc))
	if err != nil {
		t.Fatal(err)
	}
	// The 30 s token may be gone before Start looks; the third one has no
	// signing usage, so bootstrapsigner never signs for it.
	if strings.Join(ic.signingTokenIDs, ",") != "abcdef" || !ic.certificateKey || ic.certificatesDir != "/etc/kubernetes/pki" {
		t.Errorf("parsed %+v", ic)
	}
	for _, c := range []struct{ name, doc, want string }{
		{"no cluster configuration", initDoc, "needs an InitConfiguration and a ClusterConfiguration"},
		{"no init configuration", clusterDoc, "needs an InitConfiguration and a ClusterConfiguration"},
		{"pki elsewhere", initDoc + "---\n" + strings.Replace(clusterDoc, "/etc/kubernetes/pki", "/var/pki", 1), "outside /etc/kubernetes"},
		{"pki next to it", initDoc + "---\n" + strings.Replace(clusterDoc, "/etc/kubernetes/pki", "/etc/kubernetes-pki", 1), "outside /etc/kubernetes"},
		{"malformed token", strings.Replace(initDoc, "abcdef.0123456789abcdef", "abcdef", 1) + "---\n" + clusterDoc, "malformed bootstrap token"},
		{"not yaml", "kind: [\n", "kubeadm configuration"},
	} {
		if _, err := parseKubeadmConfig([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestWithDiscoveryTimeout(t *testing.T) {
	in := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    token: abcdef.0123456789abcdef\n"
	out, err := withDiscoveryTimeout([]byte(in), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Timeouts struct {
			Discovery string `json:"discovery"`
		} `json:"timeouts"`
		Discovery struct {
			BootstrapToken struct {
				Token string `json:"token"`
			} `json:"bootstrapToken"`
		} `json:"discovery"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Timeouts.Discovery != "5s" || doc.Discovery.BootstrapToken.Token != "abcdef.0123456789abcdef" {
		t.Errorf("rewritten: %s", out)
	}
	out, err = withDiscoveryTimeout([]byte(strings.Replace(in, "v1beta4", "v1beta3", 1)), time.Minute)
	if err != nil || !strings.Contains(string(out), "timeout: 1m0s") {
		t.Errorf("v1beta3: %s %v", out, err)
	}
	if _, err := withDiscoveryTimeout([]byte("kind: InitConfiguration\n"), time.Second); err == nil {
		t.Error("an InitConfiguration was taken for a JoinConfiguration")
	}
}

func TestManifestHelpers(t *testing.T) {
	argv := setFlag([]string{"etcd", "--name=a", "--data-dir=/var/lib/etcd"}, "data-dir", "/w/etcd")
	if strings.Join(argv, " ") != "etcd --name=a --data-dir=/w/etcd" {
		t.Errorf("setFlag: %v", argv)
	}
	if docs := splitYAML([]byte("---\na: 1\n---\n\n---  \nb: 2\n")); len(docs) != 2 || string(docs[1]) != "b: 2\n" {
		t.Errorf("splitYAML: %q", docs)
	}
	if argv := withDefaultFlag([]string{"kube-apiserver", "--secure-port=6443"}, "shutdown-watch-termination-grace-period", "2s"); strings.Join(argv, " ") != "kube-apiserver --secure-port=6443 --shutdown-watch-termination-grace-period=2s" {
		t.Errorf("withDefaultFlag added: %v", argv)
	}
	// A value kubeadm's manifest sets (extraArgs) is kept.
	if argv := withDefaultFlag([]string{"kube-apiserver", "--shutdown-watch-termination-grace-period=30s"}, "shutdown-watch-termination-grace-period", "2s"); strings.Join(argv, " ") != "kube-apiserver --shutdown-watch-termination-grace-period=30s" {
		t.Errorf("withDefaultFlag kept: %v", argv)
	}
}

func FuzzParseKubeadmConfig(f *testing.F) {
	f.Add([]byte(initDoc + "---\n" + clusterDoc))
	f.Add([]byte("kind: InitConfiguration\n---\nkind: ClusterConfiguration\ncertificatesDir: /etc/kubernetes/../x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ic, err := parseKubeadmConfig(b)
		if err != nil {
			return
		}
		if ic.certificatesDir != "/etc/kubernetes" && !strings.HasPrefix(ic.certificatesDir, "/etc/kubernetes/") {
			t.Fatalf("accepted certificatesDir %q", ic.certificatesDir)
		}
	})
}
