package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/netns"
)

// TestEndToEndOnboarding is the product in one test: 4 SONiC switches across
// two subnets (two behind a DHCP relay), 1 ONIE switch, 3 CloudStack VMs and
// 2 clusters onboard through a real ztpd with real clients, and the API
// shows every device joined and every cluster at its desired size.
func TestEndToEndOnboarding(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end lab skipped in -short mode")
	}
	if err := netns.Check(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"dnsmasq", "dhclient", "busybox", "curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	// VMs run cloud-init's own CloudStack datasource (Debian's cloud-init).
	if !HaveCloudInit() {
		t.Skipf("needs Debian's cloud-init for %s", CloudInitPython)
	}
	bin := filepath.Join(t.TempDir(), "ztpd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/ztpd/ztpd/cmd/ztpd").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	work := t.TempDir()
	var log strings.Builder
	res, err := Run(context.Background(), Scenario{Switches: 4, ONIE: 1, VMs: 3, Clusters: 2},
		Options{Prefix: "zle", Octet: 130, WorkDir: work, Bin: bin, Out: &log, Timeout: 6 * time.Minute})
	t.Log("progress:\n" + log.String())
	if err != nil {
		for _, f := range []string{"ztpd.out", "relay.log", "relay.out"} {
			if b, rerr := os.ReadFile(filepath.Join(work, f)); rerr == nil {
				t.Logf("%s (tail):\n%s", f, tail(string(b), 4000))
			}
		}
		t.Fatal(err)
	}
	if len(res.Clusters) != 2 {
		t.Fatalf("clusters: %+v", res.Clusters)
	}
	t.Logf("onboarded %d devices into %d clusters in %s", len(res.Devices), len(res.Clusters), res.Elapsed)
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "zle-") {
		t.Fatalf("lab left namespaces behind:\n%s", out)
	}
}
