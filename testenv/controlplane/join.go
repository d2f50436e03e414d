package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"
)

// JoinConfig describes one node's kubeadm join discovery.
type JoinConfig struct {
	Kubeadm string // kubeadm binary of the node's version
	// Config is the JoinConfiguration YAML of the node's bundle
	// (bundle.PlanJoin's KubeadmPlan.Config).
	Config []byte
	Dir    string // the node's directory: its /etc/kubernetes and /var/lib/kubelet
	Run    Runner // nil: exec.CommandContext
	// DiscoveryTimeout, when set, is written into the configuration's
	// discovery timeout (v1beta4 timeouts.discovery, v1beta3
	// discovery.timeout). kubeadm's default is 5 minutes, which is how long
	// a token unknown to the cluster takes to fail.
	DiscoveryTimeout time.Duration
}

// Join is the outcome of a successful discovery: what kubeadm left for the
// kubelet.
type Join struct {
	Dir string
	// BootstrapKubeconfig is kubeadm's bootstrap-kubelet.conf: the API
	// server (from the signed cluster-info), the cluster CA and the
	// bootstrap token, for the kubelet's TLS bootstrap.
	BootstrapKubeconfig string
	CACert              string // pki/ca.crt kubeadm wrote from cluster-info
	KubeletDir          string // config.yaml, kubeadm-flags.env, instance-config.yaml
	Output              string // kubeadm's output
}

// JoinDiscovery runs the real `kubeadm join phase kubelet-start` for a node:
// kubeadm's token discovery (cluster-info fetched, its JWS signature for the
// token verified, the CA checked against the configuration's sha256 pins,
// cluster-info fetched again over TLS verified with that CA), then, as the
// bootstrap token, the Node-name check and the kubeadm-config and
// kubelet-config ConfigMaps; it writes bootstrap-kubelet.conf, ca.crt and
// the kubelet's configuration. No kubelet is started: kubeadm runs without
// PATH, so it finds no init system to start one with. Discovery is not
// dry-run because kubeadm's dry-run replaces an unknown token with a fake
// one and a fake cluster-info.
//
// kubeadm runs in a private mount namespace with Dir/etc-kubernetes on
// /etc/kubernetes and Dir/var-lib-kubelet on /var/lib/kubelet.
func JoinDiscovery(ctx context.Context, c JoinConfig) (*Join, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if c.Kubeadm == "" || c.Dir == "" {
		return nil, errors.New("controlplane: JoinDiscovery needs Kubeadm and Dir")
	}
	if c.Run == nil {
		c.Run = exec.CommandContext
	}
	cfg := c.Config
	if c.DiscoveryTimeout > 0 {
		var err error
		if cfg, err = withDiscoveryTimeout(cfg, c.DiscoveryTimeout); err != nil {
			return nil, err
		}
	}
	j := &Join{
		Dir:        c.Dir,
		KubeletDir: filepath.Join(c.Dir, "var-lib-kubelet"),
	}
	etcKube := filepath.Join(c.Dir, "etc-kubernetes")
	j.BootstrapKubeconfig = filepath.Join(etcKube, "bootstrap-kubelet.conf")
	j.CACert = filepath.Join(etcKube, "pki", "ca.crt")
	for _, d := range []string{etcKube, j.KubeletDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := ensureMountPoints("/etc/kubernetes", "/var/lib/kubelet"); err != nil {
		return nil, err
	}
	path := filepath.Join(c.Dir, "kubeadm-join.yaml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return nil, err
	}
	binds := []bind{{etcKube, "/etc/kubernetes"}, {j.KubeletDir, "/var/lib/kubelet"}}
	out, err := runIsolated(ctx, c.Run, binds, c.Kubeadm, "join", "phase", "kubelet-start", "--config", path, "-v=1")
	j.Output = string(out)
	_ = os.WriteFile(filepath.Join(c.Dir, "kubeadm-join.log"), out, 0o600)
	if err != nil {
		return j, fmt.Errorf("controlplane: kubeadm join phase kubelet-start: %w\n%s", err, lastBytes(out, 4096))
	}
	if _, err := os.Stat(j.BootstrapKubeconfig); err != nil {
		return j, fmt.Errorf("controlplane: kubeadm join succeeded but wrote no bootstrap kubeconfig: %w", err)
	}
	return j, nil
}

// withDiscoveryTimeout sets the discovery timeout in a JoinConfiguration.
func withDiscoveryTimeout(cfg []byte, d time.Duration) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(cfg, &doc); err != nil {
		return nil, fmt.Errorf("controlplane: JoinConfiguration: %w", err)
	}
	if doc["kind"] != "JoinConfiguration" {
		return nil, fmt.Errorf("controlplane: want one JoinConfiguration document, have kind %v", doc["kind"])
	}
	sub := func(m map[string]any, key string) map[string]any {
		v, ok := m[key].(map[string]any)
		if !ok {
			v = map[string]any{}
			m[key] = v
		}
		return v
	}
	switch doc["apiVersion"] {
	case "kubeadm.k8s.io/v1beta4":
		sub(doc, "timeouts")["discovery"] = d.String()
	case "kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta2":
		sub(doc, "discovery")["timeout"] = d.String()
	default:
		return nil, fmt.Errorf("controlplane: JoinConfiguration %v: no known discovery timeout field", doc["apiVersion"])
	}
	return yaml.Marshal(doc)
}
