package rest

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/core"
)

// raScanCounts counts the devices the plain way (every record read now):
// what the kept tally must always equal.
func raScanCounts(t *testing.T, e *env, own map[string]bool) deviceCounts {
	t.Helper()
	n := newDeviceCounts()
	err := e.st.View(func(tx core.Tx) error {
		return tx.Devices().List("", func(d core.Device) (bool, error) {
			if own == nil || own[d.Cluster] {
				n.Total++
				n.ByState[string(d.State)]++
				n.ByKind[string(d.Kind)]++
				if d.Refusal.Refused() {
					n.Unmatched++
				}
			}
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func raPutDevice(t *testing.T, e *env, d core.Device) {
	t.Helper()
	if err := e.st.Update(func(tx core.Tx) error { return tx.Devices().Put(d) }); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleCountsFollowWrites: the device counts the overview and the
// stream share are kept between calls, yet every call after a device
// write (a state change, a device joining a cluster, a refusal, a
// deletion) sees it, for the admin view and a user key's, and concurrent
// callers during writes end on the exact counts.
func TestConsoleCountsFollowWrites(t *testing.T) {
	e, _, _, mine, theirs, _ := tenancyEnv(t)
	apitest.Seed(t, e.st, 30)
	own := map[string]bool{mine.ID: true}
	check := func(step string) {
		t.Helper()
		for _, o := range []map[string]bool{nil, own, {theirs.ID: true}, {}} {
			got, err := e.srv.deviceCounts(o)
			if err != nil {
				t.Fatal(err)
			}
			if want := raScanCounts(t, e, o); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, own %v: counts %+v, want %+v", step, o, got, want)
			}
		}
	}
	check("seeded")
	renders := func() *deviceTally {
		e.srv.counts.tallyMu.Lock()
		defer e.srv.counts.tallyMu.Unlock()
		return e.srv.counts.tally
	}
	kept := renders()
	check("unchanged")
	if renders() != kept {
		t.Error("the tally was counted again without a device write")
	}

	now := time.Now().UTC()
	d := core.Device{ID: "02:00:00:00:00:05", MAC: "02:00:00:00:00:05", Kind: core.KindSONiC, State: core.StateJoined, Cluster: mine.ID, UpdatedAt: now}
	raPutDevice(t, e, d)
	check("a device joined my cluster")
	d.Refusal = core.Refusal{What: "ztp.json", Kind: "no-profile", Reason: "no profile matches", At: now}
	raPutDevice(t, e, d)
	check("refused")
	if err := e.st.Update(func(tx core.Tx) error { return tx.Devices().Delete(d.ID) }); err != nil {
		t.Fatal(err)
	}
	check("deleted")

	// Readers racing writers: each sees a count no older than its call,
	// and once the writers stop the counts are exact.
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := range 50 {
				mac := fmt.Sprintf("02:00:00:01:%02x:%02x", w, i)
				raPutDevice(t, e, core.Device{ID: mac, MAC: mac, Kind: core.KindVM, State: core.StateLeased, Cluster: theirs.ID})
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if _, err := e.srv.deviceCounts(own); err != nil {
					t.Error(err)
				}
				if _, err := e.srv.deviceCounts(nil); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	check("after concurrent writes")
}

// TestConsoleOnboardingFollowsTheLog: the onboarding histogram reads the
// hour back once and afterwards only the events appended since: joins
// appended after the first overview are counted, per key, and they leave
// the histogram when they leave its hour.
func TestConsoleOnboardingFollowsTheLog(t *testing.T) {
	e, _, _, mine, theirs, _ := tenancyEnv(t)
	now := time.Now().UTC()
	raEvent(t, e, "member.joined", "02:00:00:00:0a:01", mine.ID, now.Add(-28*time.Minute))
	a, u := e.rest(e.admin.APIKey, e.adminSec), e.rest(e.user.APIKey, e.userSec)
	onboarding := func(c *apitest.RESTClient) client.Onboarding {
		t.Helper()
		var ov client.Overview
		r := c.Do("GET", "/api/v1/overview", nil)
		if r.Status != 200 {
			t.Fatalf("overview: %d %s", r.Status, r.Raw)
		}
		r.Decode(t, &ov)
		return ov.Onboarding
	}
	if ob := onboarding(a); sum(ob.Joined) != 1 || ob.Joined[6] != 1 {
		t.Fatalf("first overview: %+v", ob)
	}
	raEvent(t, e, "member.joined", "02:00:00:00:0a:01", mine.ID, now.Add(-time.Minute))
	raEvent(t, e, "member.joined", "02:00:00:00:0b:01", theirs.ID, now.Add(-time.Minute))
	raEvent(t, e, "member.joined", "02:00:00:00:0b:01", theirs.ID, now.Add(-2*time.Hour)) // appended late, outside the hour
	raEvent(t, e, "dhcp.ack", "02:00:00:00:0b:01", "", now)
	if ob := onboarding(a); sum(ob.Joined) != 3 || ob.Joined[11] != 2 {
		t.Errorf("admin after new joins: %+v", ob)
	}
	if ob := onboarding(u); sum(ob.Joined) != 2 || ob.Joined[6] != 1 || ob.Joined[11] != 1 {
		t.Errorf("user after new joins: %+v", ob)
	}
	// 40 minutes on, the join of 28 minutes ago has left the hour (the
	// server's clock is moved, so its methods are called: a signature made
	// now would have expired there).
	later := func(keep func(core.Event) bool) client.Onboarding {
		t.Helper()
		ob, _, err := e.srv.recentEvents(keep, 10)
		if err != nil {
			t.Fatal(err)
		}
		return ob
	}
	e.clock.Advance(40 * time.Minute)
	if ob := later(nil); sum(ob.Joined) != 2 || ob.Joined[3] != 2 {
		t.Errorf("admin 40 minutes on: %+v", ob)
	}
	if ob := later(func(ev core.Event) bool { return ev.Cluster == mine.ID }); sum(ob.Joined) != 1 || ob.Joined[3] != 1 {
		t.Errorf("user 40 minutes on: %+v", ob)
	}
	e.clock.Advance(2 * time.Hour)
	if ob := later(nil); sum(ob.Joined) != 0 {
		t.Errorf("admin 2 hours on: %+v", ob)
	}
}
