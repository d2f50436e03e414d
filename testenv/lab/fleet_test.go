package lab

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/netns"
)

// requireLabFleet skips t unless the whole lab can run here (root and
// namespaces, the real control plane's binaries, every client the devices
// run, Debian's cloud-init), then builds ztpd and the simulated kubelet
// into t's temporary directory and returns their paths.
func requireLabFleet(t *testing.T) (bin, kubeletsim string) {
	t.Helper()
	version, err := LabKubernetesVersion()
	if err != nil {
		t.Fatal(err)
	}
	return requireLabFleetAt(t, version)
}

// requireLabFleetAt is requireLabFleet with the clusters at Kubernetes
// version (one of testenv/k8sbin/versions) instead of the newest.
func requireLabFleetAt(t *testing.T, version string) (bin, kubeletsim string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end lab skipped in -short mode")
	}
	if err := netns.Check(); err != nil {
		t.Skip(err)
	}
	if err := controlplane.Check(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"dnsmasq", "dhclient", "busybox", "curl", "python3", "openssl", "kubectl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	// VMs run cloud-init's own CloudStack datasource (Debian's cloud-init).
	if !HaveCloudInit() {
		t.Skipf("needs Debian's cloud-init for %s", CloudInitPython)
	}
	kubebin.Require(t, version)
	kubebin.RequireEtcd(t)
	bin = filepath.Join(t.TempDir(), "ztpd")
	kubeletsim = filepath.Join(t.TempDir(), "kubeletsim")
	if err := BuildBinaries(map[string]string{bin: "github.com/ztpd/ztpd/cmd/ztpd", kubeletsim: "github.com/ztpd/ztpd/testenv/cmd/kubeletsim"}); err != nil {
		t.Fatal(err)
	}
	return bin, kubeletsim
}
