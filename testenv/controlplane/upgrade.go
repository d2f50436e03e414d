package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ztpd/ztpd/internal/semver"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// UpgradeTo moves the control plane to another pinned Kubernetes version
// (its binaries built, see kubebin), as `kubeadm upgrade apply` does on the
// first control plane: the ClusterConfiguration's kubernetesVersion is
// raised, the new version's kubeadm writes the static pod manifests
// (`kubeadm init phase control-plane all`, the same generator the upgrade
// uses), kube-apiserver, kube-controller-manager and (when the plane runs
// one) kube-scheduler are restarted one at a time with the new binaries and the new manifests' command lines
// (as the kubelet replaces a static pod: SIGTERM, SIGKILL after
// restartGrace; etcd holds the state, so a kill loses nothing), and the
// kubeadm-config and kubelet-config ConfigMaps are uploaded at the
// new version. It returns once the API server is ready and /version
// reports the new gitVersion.
//
// The real `kubeadm upgrade apply` cannot run here: it restarts the
// components by rewriting manifests for a kubelet to pick up, and waits for
// the kubelet's mirror pods to show the new manifests' hashes; there is no
// kubelet. etcd stays as it is (one etcd version is pinned), so every
// object survives; certificates are not renewed. As kubeadm, UpgradeTo
// refuses a downgrade and a skipped minor version. Not to be called
// concurrently with other methods of cp.
func (cp *ControlPlane) UpgradeTo(ctx context.Context, version string) error {
	bins, err := kubebin.Kubernetes(version)
	if err != nil {
		return err
	}
	from, err := semver.ParseRelease(cp.cfg.Kubernetes.Version)
	if err != nil {
		return fmt.Errorf("controlplane: the running version: %w", err)
	}
	to, err := semver.ParseRelease(bins.Version)
	if err != nil {
		return err
	}
	switch {
	case to == from:
		return nil
	case to.Less(from):
		return fmt.Errorf("controlplane: %s is older than the running %s: kubeadm upgrades, it does not downgrade", to.Tag(), from.Tag())
	case to.Major != from.Major || to.Minor > from.Minor+1:
		return fmt.Errorf("controlplane: %s to %s skips a minor version; kubeadm upgrades one minor version at a time", from.Tag(), to.Tag())
	}

	kcfg := filepath.Join(cp.cfg.Dir, "kubeadm.yaml")
	b, err := os.ReadFile(kcfg)
	if err != nil {
		return err
	}
	if b, err = withKubernetesVersion(b, to.Tag()); err != nil {
		return err
	}
	if err := os.WriteFile(kcfg, b, 0o600); err != nil {
		return err
	}
	// A plane with a scheduler moves it too, so it is never newer or older
	// than its API server.
	var scheduler string
	if cp.cfg.Scheduler != "" {
		h, err := kubebin.Hollow(to.Tag())
		if err != nil {
			return fmt.Errorf("controlplane: the scheduler of %s: %w", to.Tag(), err)
		}
		scheduler = h.Scheduler
	}
	cp.cfg.Kubernetes = bins // kubeadm is the new version's from here on
	if err := cp.kubeadm(ctx, "init", "phase", "control-plane", "all", "--config", kcfg); err != nil {
		return err
	}
	for _, c := range cp.components()[1:] {
		argv, err := manifestCommand(filepath.Join(cp.etcKube, "manifests", c+".yaml"))
		if err != nil {
			return err
		}
		switch c {
		case APIServer:
			argv[0] = bins.APIServer
			argv = withDefaultFlag(argv, "shutdown-watch-termination-grace-period", apiServerWatchGrace)
		case ControllerManager:
			argv[0] = bins.ControllerManager
		case Scheduler:
			argv[0] = scheduler
			cp.cfg.Scheduler = scheduler
		}
		// A stop that needed SIGKILL is no reason to stop here: the
		// component would stay down (an upgrade that gave up after the
		// old API server was killed left the cluster without one).
		if _, err := cp.terminate(c, restartGrace); err != nil {
			return err
		}
		cp.mu.Lock()
		cp.argv[c] = argv
		cp.mu.Unlock()
		if err := cp.startProc(c); err != nil {
			return err
		}
		if c == APIServer {
			if err := cp.waitVersion(ctx, to.Tag()); err != nil {
				return fmt.Errorf("controlplane: upgrading to %s: %w", to.Tag(), err)
			}
		}
	}
	return cp.kubeadm(ctx, "init", "phase", "upload-config", "all", "--config", kcfg)
}

// restartGrace is how long UpgradeTo lets a component shut down before it
// kills it (the kubelet's default terminationGracePeriodSeconds is 30 s;
// the API server needs about a second with apiServerWatchGrace).
const restartGrace = 10 * time.Second

// Binaries are the Kubernetes binaries the control plane runs (the newest
// UpgradeTo's).
func (cp *ControlPlane) Binaries() kubebin.Set { return cp.cfg.Kubernetes }

// ServerVersion is the gitVersion the API server reports on /version
// (readable by anyone, as kubeadm's RBAC allows).
func (cp *ControlPlane) ServerVersion(ctx context.Context) (string, error) {
	code, body, err := cp.get(ctx, "/version")
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("controlplane: GET /version: HTTP %d: %s", code, bytes.TrimSpace(body))
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("controlplane: GET /version: %w", err)
	}
	return v.GitVersion, nil
}

// waitVersion waits until the API server is ready and reports version.
func (cp *ControlPlane) waitVersion(ctx context.Context, version string) error {
	if err := cp.WaitReady(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.StartTimeout)
	defer cancel()
	var last string
	for {
		v, err := cp.ServerVersion(ctx)
		if err == nil && v == version {
			return nil
		}
		last = v
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("controlplane: the API server reports %s, want %s (log %s)", last, version, cp.LogFile(APIServer))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

var kubernetesVersionLine = regexp.MustCompile(`(?m)^kubernetesVersion:.*$`)

// withKubernetesVersion sets kubernetesVersion in the configuration's
// ClusterConfiguration, leaving every other line as it was.
func withKubernetesVersion(cfg []byte, version string) ([]byte, error) {
	docs := splitYAML(cfg)
	found := false
	for i, doc := range docs {
		if !bytes.HasSuffix(doc, []byte("\n")) {
			docs[i] = append(doc, '\n')
			doc = docs[i]
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("controlplane: kubeadm configuration: %w", err)
		}
		if meta.Kind != "ClusterConfiguration" {
			continue
		}
		found = true
		line := []byte("kubernetesVersion: " + version)
		if kubernetesVersionLine.Match(doc) {
			docs[i] = kubernetesVersionLine.ReplaceAllLiteral(doc, line)
		} else {
			docs[i] = append(doc, append(line, '\n')...)
		}
	}
	if !found {
		return nil, fmt.Errorf("controlplane: the kubeadm configuration has no ClusterConfiguration")
	}
	return bytes.Join(docs, []byte("---\n")), nil
}
