package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStopWithLiveCluster stops (SIGTERM) a ztpd serving a cluster whose
// endpoint is a real kube-apiserver, with its members joined, their agents
// polling and an upgrade under way (its job waiting for its rollout, a
// node's operation handed to its agent): the stop takes about as long as
// without a cluster, and the log says what it waited for, each listener,
// job and the cluster watch by name. The upgrade's job once held the stop
// for the whole shutdown grace.
func TestStopWithLiveCluster(t *testing.T) {
	from, _, err := UpgradeVersions()
	if err != nil {
		t.Skip(err)
	}
	// The upgrade prepared by hand (not run) starts at the version before
	// the newest, the one built first, and leaves the devices' agents
	// polling ztpd, as on an appliance in use.
	bin, ksim := requireLabFleetAt(t, from)
	work := t.TempDir()
	var progress strings.Builder
	l, err := Open(context.Background(), Scenario{VMs: 2, Clusters: 1, Upgrade: true},
		Options{Prefix: "zst", Octet: 158, WorkDir: work, Bin: bin, Kubeletsim: ksim, Out: &progress,
			Timeout: 6 * time.Minute, UpgradeByHand: true})
	if l != nil {
		defer l.Close()
	}
	logPath := filepath.Join(work, "ztpd.out")
	if err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("%v\nprogress:\n%s\nztpd.out (tail):\n%s", err, tail(progress.String(), 3000), tail(string(b), 3000))
	}
	// The upgrade's job waits for its rollout: SIGTERM once the first
	// node's operation is with its agent.
	go l.ZTPD(context.Background(), "cluster", "upgrade", "lab-0", "--version", l.UpgradeTo) // fails as ztpd stops
	var before []byte
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if before, err = os.ReadFile(logPath); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(before), `"phase":"agent"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node of the upgrade reached its agent within a minute:\n%s", tail(string(before), 3000))
		}
	}
	if !strings.Contains(string(before), `"msg":"cluster API reachable"`) {
		t.Fatalf("ztpd never reached the cluster's API server:\n%s", tail(string(before), 3000))
	}
	if strings.Contains(string(before), `"msg":"rollout ended"`) {
		t.Errorf("the upgrade ended before the stop: the stop did not meet its job")
	}

	start := time.Now()
	l.App.Proc.Stop(30 * time.Second)
	took := time.Since(start)
	after, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	stop := string(after[len(before):])
	t.Logf("SIGTERM to exit: %v; the stop's log:\n%s", took.Round(time.Millisecond), stop)
	if took > 5*time.Second {
		t.Errorf("the stop took %v with a live cluster, want < 5s", took.Round(time.Millisecond))
	}
	for _, want := range []string{`"msg":"shutting down"`, `"waiting_for":[`, `"runner":"kubewatch"`,
		`"msg":"every listener and job stopped"`, `"msg":"ztpd stopped"`} {
		if !strings.Contains(stop, want) {
			t.Errorf("the stop's log lacks %s", want)
		}
	}
}
