package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/fleet"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
	"github.com/ztpd/ztpd/testenv/stormlab"
)

// TestStormSurvivesKill9InTheMiddle: ztpd is killed (SIGKILL) while a
// storm of 2,000 switches is a third through, and started again on its
// data. The switches in flight fail as real ones would; the store must have
// kept every join bundle ztpd handed out, and the fleet, run again as
// SONiC's ZTP retries, then onboards completely: every switch join-issued,
// each at the address it had before the kill, no address given twice, and
// the same after one more (clean) restart. Sizes past 10,000 run in
// bench/scale.sh only.
func TestStormSurvivesKill9InTheMiddle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ztpd and bootstorm and runs a 2,000-switch storm; skipped in -short mode")
	}
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	const n = 2000
	work := t.TempDir()
	o := options{conc: 256, bin: filepath.Join(work, "ztpd"), storm: filepath.Join(work, "bootstorm"), work: work,
		leaseTime: time.Hour, maxStormed: maxDevices}
	if err := lab.BuildBinaries(map[string]string{o.bin: "github.com/ztpd/ztpd/cmd/ztpd", o.storm: "github.com/ztpd/ztpd/testenv/cmd/bootstorm"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	b := &bench{o: o, n: n, work: filepath.Join(work, "storm"), nsPrefix: fmt.Sprintf("sck%x", os.Getpid()%0xffff)}
	b.stormed, b.clusters, b.extraClusters = split(n, o.maxStormed)
	if err := os.MkdirAll(b.work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.network(); err != nil {
		t.Fatal(err)
	}
	defer b.cli.Close()
	defer b.srv.Close()
	if err := stormlab.WriteProfiles(b.work, b.clusters); err != nil {
		t.Fatal(err)
	}
	var err error
	if b.app, err = b.start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { b.app.Close() }()
	if err := b.apiKey(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.app.CreateStormClusters(ctx, b.clusters, (n+b.clusters-1)/b.clusters); err != nil {
		t.Fatal(err)
	}

	type stormDone struct {
		res fleet.StormResult
		err error
	}
	first := make(chan stormDone, 1)
	go func() {
		res, _, err := b.storm(ctx)
		first <- stormDone{res, err}
	}()
	for {
		issued, err := b.app.CountDevices(ctx, "join-issued")
		if err != nil {
			t.Fatal(err)
		}
		if issued >= n/3 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := b.app.Proc.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-b.app.Proc.Done()
	t.Log("ztpd killed with SIGKILL a third through the storm")
	if b.app, err = b.start(ctx); err != nil {
		t.Fatalf("ztpd after kill -9: %v", err)
	}
	if err := b.app.UseAdminKey(ctx); err != nil {
		t.Fatal(err)
	}
	d := <-first
	if d.err != nil {
		t.Fatalf("first storm: %v", d.err)
	}
	bundled := 0
	for _, ok := range d.res.Bundled {
		if ok {
			bundled++
		}
	}
	t.Logf("first storm: %d of %d switches got their bundle, %d failed (first errors %v)", bundled, n, d.res.Failed, d.res.Errors)
	if bundled == n || d.res.Failed == 0 {
		t.Fatalf("the kill went unnoticed (%d bundled, %d failed): it did not land in the storm", bundled, d.res.Failed)
	}
	stored := joinIssued(ctx, t, b)
	for i, ok := range d.res.Bundled {
		if ok && !stored[fleet.MAC(i).String()] {
			t.Errorf("switch %d (%s) received its bundle before the kill, but the store does not have it join-issued", i, fleet.MAC(i))
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// SONiC's ZTP starts over after a failure: the whole fleet again.
	again, _, err := b.storm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.Failed != 0 {
		t.Fatalf("second storm: %d failed: %v", again.Failed, again.Errors)
	}
	for i, ip := range d.res.Leases {
		if d.res.Bundled[i] && ip != again.Leases[i] {
			t.Errorf("switch %d had %s before the kill and %s after", i, ip, again.Leases[i])
		}
	}
	if _, err := b.checkAddressesUnique(ctx, again); err != nil {
		t.Fatal(err)
	}
	b.app.Close()
	if b.app, err = b.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.app.UseAdminKey(ctx); err != nil {
		t.Fatal(err)
	}
	if issued, err := b.app.CountDevices(ctx, "join-issued"); err != nil || issued != n {
		t.Fatalf("after a clean restart: %d of %d join-issued (%v)", issued, n, err)
	}
	if _, err := b.checkAddressesUnique(ctx, again); err != nil {
		t.Fatalf("after a clean restart: %v", err)
	}
}

// joinIssued is the set of devices the store has join-issued.
func joinIssued(ctx context.Context, t *testing.T, b *bench) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	cursor := ""
	for {
		q := url.Values{"limit": {"1000"}, "state": {"join-issued"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
			NextCursor string `json:"next_cursor"`
		}
		if err := b.app.REST(ctx, "/api/v1/devices", q, &page); err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Items {
			out[d.ID] = true
		}
		if page.NextCursor == "" {
			return out
		}
		cursor = page.NextCursor
	}
}
