package rest

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

// benchEvents adds n DHCP events (device stream) and n/10 audit events.
func benchEvents(b *testing.B, e *env, n int) { apitest.AppendBenchEvents(b, e.st, n, 1<<16) }

// BenchmarkRESTDevicesPageUser: a user key's devices page is never cached;
// here it owns none of the 10,000 devices, so a request costs its empty
// range of the devices-by-cluster index, not the fleet.
func BenchmarkRESTDevicesPageUser(b *testing.B) {
	e := benchEnv(b)
	apitest.BenchREST(b, e.srv.Handler(), "/api/v1/devices", url.Values{"limit": {"100"}}, e.user.APIKey, e.userSec)
}

// BenchmarkRESTEventsPage: the first page of both streams merged (event
// pages are never cached).
func BenchmarkRESTEventsPage(b *testing.B) {
	e := benchEnv(b)
	benchEvents(b, e, 2000)
	apitest.BenchREST(b, e.srv.Handler(), "/api/v1/events", url.Values{"limit": {"100"}}, e.admin.APIKey, e.adminSec)
}

// BenchmarkRESTEventsPageFiltered: a type filter over both streams.
func BenchmarkRESTEventsPageFiltered(b *testing.B) {
	e := benchEnv(b)
	benchEvents(b, e, 2000)
	apitest.BenchREST(b, e.srv.Handler(), "/api/v1/events", url.Values{"limit": {"100"}, "type": {"api"}}, e.admin.APIKey, e.adminSec)
}

// BenchmarkRESTDevicesRender is an admin devices page rendered afresh for
// every request (a write between requests makes the cached one stale).
func BenchmarkRESTDevicesRender(b *testing.B) {
	e := benchEnv(b)
	q := url.Values{"limit": {"100"}}
	req := httptest.NewRequest("GET", "/api/v1/devices?limit=100", nil)
	req.Header.Set("Authorization", signing.RESTAuthorization("GET", "/api/v1/devices", q, nil, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute)))
	h := e.srv.Handler()
	d := core.Device{ID: "02:5f:00:00:00:01", MAC: "02:5f:00:00:00:01", Kind: core.KindVM, State: core.StateLeased}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if err := e.st.Update(func(tx core.Tx) error { return tx.Devices().Put(d) }); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.Clone(req.Context()))
		if rec.Code != 200 {
			b.Fatalf("HTTP %d", rec.Code)
		}
	}
}

// BenchmarkRESTEventsByDevice: one device's events (`ztpd events
// --device`) over the log of BenchmarkRESTEventsTail: read through the
// device index, not by a scan of the log.
func BenchmarkRESTEventsByDevice(b *testing.B) {
	e := benchEnv(b)
	benchEvents(b, e, 200000)
	apitest.BenchREST(b, e.srv.Handler(), "/api/v1/events", url.Values{"device": {"02:5e:00:00:12:34"}, "limit": {"100"}}, e.admin.APIKey, e.adminSec)
}

// BenchmarkRESTEventsByDeviceTail: a device's timeline (`ztpd device
// show`: its newest events) over the same log.
func BenchmarkRESTEventsByDeviceTail(b *testing.B) {
	e := benchEnv(b)
	benchEvents(b, e, 200000)
	apitest.BenchREST(b, e.srv.Handler(), "/api/v1/events", url.Values{"device": {"02:5e:00:00:12:34"}, "tail": {"20"}}, e.admin.APIKey, e.adminSec)
}

// BenchmarkRESTEventsTail: `ztpd events` (the newest 50 of both streams)
// over a full log of 200,000 device events and 20,000 audit events.
func BenchmarkRESTEventsTail(b *testing.B) {
	e := benchEnv(b)
	benchEvents(b, e, 200000)
	apitest.BenchREST(b, e.srv.Handler(), "/api/v1/events", url.Values{"tail": {"50"}}, e.admin.APIKey, e.adminSec)
}

// benchEnv is 10,000 devices, 10 clusters of 20 members each.
func benchEnv(b *testing.B) *env {
	e := newEnv(&testing.T{}, envOpts{noJoiner: true})
	b.Cleanup(func() { e.ts.Close(); e.clusters.Close(context.Background()); e.st.Close() })
	apitest.SeedBench(b, e.st, e.clusters)
	return e
}

// BenchmarkRESTDeviceEvents is GET /api/v1/events?device= of one device
// among 200,000 events (bench/scale.sh's query, smaller): with 100 events
// of its own (10,000 devices and 1,000,000 events) and with 10 (100,000).
// BenchmarkRESTEventsByDevice is the same query at ~3 events a device.
func BenchmarkRESTDeviceEvents(b *testing.B) {
	for _, per := range []int{100, 10} {
		b.Run(fmt.Sprintf("%d-events", per), func(b *testing.B) {
			e := benchEnv(b)
			apitest.AppendBenchEvents(b, e.st, 200000, 200000/per)
			apitest.BenchREST(b, e.srv.Handler(), "/api/v1/events", url.Values{"device": {"02:5e:00:00:00:07"}}, e.admin.APIKey, e.adminSec)
		})
	}
}
