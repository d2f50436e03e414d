package console

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/core"
)

// The console's per-poll and per-page costs at scale: the device counts
// every stream update carries, the overview page and one poll of the
// stream hub during a storm, at 10,000 and 100,000 devices.

// benchConsoleEnv is benchEnv (10,000 devices, 10 clusters of 20 members)
// grown to n devices.
func benchConsoleEnv(b *testing.B, n int) *env {
	e := benchEnv(b)
	now := time.Now().UTC()
	for start := 10000; start < n; start += 5000 {
		err := e.st.Update(func(tx core.Tx) error {
			for i := start; i < min(start+5000, n); i++ {
				mac := fmt.Sprintf("02:5f:00:%02x:%02x:%02x", i>>16&255, i>>8&255, i&255)
				d := core.Device{ID: mac, Kind: core.KindVM, MAC: mac, Hostname: fmt.Sprintf("vm-%06d", i),
					IP: fmt.Sprintf("10.99.%d.%d", 1+i/250%250, 1+i%250), Subnet: "fabric", State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now}
				if i%7 == 0 {
					d.Refusal = core.Refusal{What: "meta-data", Kind: "no-profile", Reason: "no profile matches", At: now}
				}
				if err := tx.Devices().Put(d); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return e
}

var benchConsoleSizes = []int{10000, 100000}

// BenchmarkConsoleDeviceCounts: the counts as the admin view computes
// them while the devices change between calls (nothing can be reused).
func BenchmarkConsoleDeviceCounts(b *testing.B) {
	for _, n := range benchConsoleSizes {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			e := benchConsoleEnv(b, n)
			d := core.Device{ID: "02:60:00:00:00:01", MAC: "02:60:00:00:00:01", Kind: core.KindVM, State: core.StateLeased}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				if err := e.st.Update(func(tx core.Tx) error { return tx.Devices().Put(d) }); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				c, err := e.srv.rest.DeviceCounts(nil)
				if err != nil || c.Total != n+1 {
					b.Fatalf("counts %+v: %v", c, err)
				}
			}
		})
	}
}

// BenchmarkConsoleOverview: GET /api/v1/overview for an admin key, the
// store unchanged between requests (tabs refetching a quiet appliance).
// Run it with -benchtime Nx: each b.N ramp seeds the devices again.
func BenchmarkConsoleOverview(b *testing.B) {
	for _, n := range benchConsoleSizes {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			e := benchConsoleEnv(b, n)
			benchEvents(b, e, 2000)
			apitest.BenchREST(b, e.srv.Handler(), "/api/v1/overview", nil, e.admin.APIKey, e.adminSec)
		})
	}
}

// BenchmarkConsoleOverviewEvents: the overview over 100,000 device events
// of the last hour (a boot storm's), 10,000 devices.
func BenchmarkConsoleOverviewEvents(b *testing.B) {
	e := benchConsoleEnv(b, 10000)
	benchEvents(b, e, 100000)
	apitest.BenchREST(b, e.srv.Handler(), "/api/v1/overview", nil, e.admin.APIKey, e.adminSec)
}

// BenchmarkConsoleOverviewEventsChanging: as BenchmarkConsoleOverviewEvents
// with one new device event and one device write before every request
// (the storm is still going).
func BenchmarkConsoleOverviewEventsChanging(b *testing.B) {
	e := benchConsoleEnv(b, 10000)
	benchEvents(b, e, 100000)
	q := url.Values(nil)
	req := httptest.NewRequest("GET", "/api/v1/overview", nil)
	req.Header.Set("Authorization", signing.RESTAuthorization("GET", "/api/v1/overview", q, nil, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute)))
	h := e.srv.Handler()
	d := core.Device{ID: "02:60:00:00:00:01", MAC: "02:60:00:00:00:01", Kind: core.KindVM, State: core.StateLeased}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		benchStormWrite(b, e, d)
		b.StartTimer()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.Clone(req.Context()))
		if rec.Code != 200 {
			b.Fatalf("HTTP %d", rec.Code)
		}
	}
}

// benchStormWrite is one step of a storm: a device written and its event,
// and an audit event of the user key's account (so a user's stream has
// news too).
func benchStormWrite(b *testing.B, e *env, d core.Device) {
	err := e.st.Update(func(tx core.Tx) error {
		if err := tx.Devices().Put(d); err != nil {
			return err
		}
		if _, err := tx.Events().Append(core.Event{Type: "dhcp.ack", Device: d.ID, Message: "lease"}); err != nil {
			return err
		}
		_, err := tx.Events().Append(core.Event{Type: "api.write", Message: "scale", Fields: map[string]string{"account": e.user.Account}})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkConsoleHubPoll: one poll of the stream hub during a storm (a
// device written and its events before each poll) serving an admin stream
// and a user stream (two views, both with news: two sets of counts).
func BenchmarkConsoleHubPoll(b *testing.B) {
	for _, n := range benchConsoleSizes {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			e := benchConsoleEnv(b, n)
			admin, err := e.keys.Lookup(e.admin.APIKey)
			if err != nil {
				b.Fatal(err)
			}
			user, err := e.keys.Lookup(e.user.APIKey)
			if err != nil {
				b.Fatal(err)
			}
			subs := []*streamSub{
				{cred: admin, notify: make(chan struct{}, 1), stop: make(chan struct{})},
				{cred: user, notify: make(chan struct{}, 1), stop: make(chan struct{})},
			}
			after, err := e.srv.latestSeq()
			if err != nil {
				b.Fatal(err)
			}
			d := core.Device{ID: "02:60:00:00:00:01", MAC: "02:60:00:00:00:01", Kind: core.KindVM, State: core.StateLeased}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				benchStormWrite(b, e, d)
				b.StartTimer()
				last, err := e.srv.hub.poll(after, subs)
				if err != nil || last == after {
					b.Fatalf("poll after %d: %d, %v", after, last, err)
				}
				after = last
			}
			if u, ok := subs[0].take(); !ok || u.counts == nil || u.counts.Total != n+1 {
				b.Fatalf("admin update: %v %+v", ok, u.counts)
			}
			if u, ok := subs[1].take(); !ok || u.counts == nil || u.counts.Total != 0 || len(u.events) == 0 {
				b.Fatalf("user update: %v %+v", ok, u.counts)
			}
		})
	}
}

func benchEvents(b *testing.B, e *env, n int) { apitest.AppendBenchEvents(b, e.st, n, 1<<16) }

// benchEnv is 10,000 devices, 10 clusters of 20 members each.
func benchEnv(b *testing.B) *env {
	e := newEnv(&testing.T{}, envOpts{noJoiner: true})
	b.Cleanup(func() { e.ts.Close(); e.clusters.Close(context.Background()); e.st.Close() })
	apitest.SeedBench(b, e.st, e.clusters)
	return e
}
