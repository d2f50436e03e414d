package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// TestWaitingVMJoinsOnceApproved: a worker VM that no auto_approve rule
// admits boots with cloud-init's own CloudStack datasource and gets its
// user-data at once (200, no secret: the join waiter, which `cloud-init
// schema` accepts); its waiter asks ztpd over TLS pinned to the key the
// user-data names and is told to wait (503), which ztpd's REST API shows
// as the device's waiting reason; the operator approves it after boot
// with `ztpd device approve`, and with nothing else done to the VM its
// waiter installs the join data and its Node turns Ready in the real API
// server.
func TestWaitingVMJoinsOnceApproved(t *testing.T) {
	bin, ksim := requireLabFleet(t)
	scenario := Scenario{VMs: 2, Clusters: 1}
	plan := scenario.Plan()
	first, waiter := plan[0], plan[1] // vm0: the first control plane; vm1: a worker
	editConfig := func(cfg string) string {
		rule := "  auto_approve:\n    - {subnets: ["
		if !strings.Contains(cfg, rule) {
			t.Errorf("the lab configuration has no %q to narrow:\n%s", rule, cfg)
			return cfg
		}
		return strings.Replace(cfg, rule, "  auto_approve:\n    - {macs: [\""+first.MAC+"\"], subnets: [", 1)
	}
	work := t.TempDir()
	waitLog := filepath.Join(work, "devices", waiter.Name, JoinWaitLog)
	var (
		mu         sync.Mutex
		reason     string // the waiting reason ztpd's API showed
		approvedAt time.Time
		approveErr error
		approveOut []byte
	)
	approve := func(ctx context.Context, l *Lab) {
		for ctx.Err() == nil {
			time.Sleep(300 * time.Millisecond)
			devs, err := listDevices(ctx, l.App)
			if err != nil {
				continue
			}
			var dev core.Device
			for _, d := range devs {
				if strings.EqualFold(d.MAC, waiter.MAC) {
					dev = d
				}
			}
			// Approve only once the waiter has been told to wait at least
			// twice (its polls go on) and the API shows why.
			b, _ := os.ReadFile(waitLog)
			if dev.ID == "" || dev.Refusal.Kind != core.RefusalWaiting || strings.Count(string(b), "asking again in") < 2 {
				continue
			}
			out, err := l.ZTPD(ctx, "device", "approve", dev.ID)
			mu.Lock()
			reason, approvedAt, approveErr, approveOut = dev.Refusal.Reason, time.Now(), err, out
			mu.Unlock()
			return
		}
	}
	var log strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	l, err := Open(context.Background(), scenario, Options{Prefix: "zlv", Octet: 190, WorkDir: work, Bin: bin, Kubeletsim: ksim,
		Out: &log, Timeout: 6 * time.Minute, EditConfig: editConfig,
		OnStarted: func(l *Lab) error {
			wg.Add(1)
			go func() { defer wg.Done(); approve(ctx, l) }()
			return nil
		}})
	if l != nil {
		defer l.Close()
	}
	t.Log("progress:\n" + tail(log.String(), 5000))
	b, _ := os.ReadFile(waitLog)
	t.Logf("%s's join waiter:\n%s", waiter.Name, tail(string(b), 3000))
	mu.Lock()
	defer mu.Unlock()
	if approvedAt.IsZero() {
		t.Fatalf("%s never showed waiting with its waiter polling, nothing was approved (lab: %v)", waiter.Name, err)
	}
	if approveErr != nil {
		t.Fatalf("ztpd device approve: %v %s", approveErr, approveOut)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "approv") {
		t.Errorf("the waiting reason ztpd showed does not say approval: %q", reason)
	}
	// The waiter was told to wait (503) before the approval, and only
	// then installed the join data.
	waits, admitted := 0, time.Time{}
	for _, line := range strings.Split(string(b), "\n") {
		stamp, msg, _ := strings.Cut(line, " ")
		at, _ := time.Parse(time.RFC3339Nano, stamp)
		switch {
		case strings.Contains(msg, "asking again in"):
			waits++
		case strings.Contains(msg, "admitted to cluster"):
			admitted = at
		}
	}
	if waits < 2 || admitted.IsZero() || admitted.Before(approvedAt) {
		t.Fatalf("waiter: %d waits, admitted at %v, approved at %v", waits, admitted, approvedAt)
	}
	// Its Node is Ready in the real API server.
	c, err := l.Cluster(context.Background(), waiter.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	id := l.device(t, waiter.Name)
	node := ""
	for _, m := range c.Members {
		if m.Device == id {
			node = m.NodeName
		}
	}
	ready := false
	for _, n := range c.Nodes {
		ready = ready || (n.Name == node && n.Ready == "True")
	}
	if node == "" || !ready {
		t.Fatalf("%s (Node %q) is not a Ready Node of %s: %+v", waiter.Name, node, waiter.Cluster, c.Nodes)
	}
	t.Logf("%s waited (%d polls answered 503: %q), was approved after boot, and its Node %s is Ready, %s after approval",
		waiter.Name, waits, reason, node, admitted.Sub(approvedAt).Round(100*time.Millisecond))
}
