package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// benchEnv is 10,000 devices, 10 clusters of 20 members each.
func benchEnv(b *testing.B) *env {
	t := &testing.T{}
	e := newEnv(t, envOpts{noJoiner: true})
	b.Cleanup(func() { e.ts.Close(); e.clusters.Close(context.Background()); e.st.Close() })
	now := time.Now().UTC()
	for start := 0; start < 10000; start += 2000 {
		err := e.st.Update(func(tx core.Tx) error {
			for i := start; i < start+2000; i++ {
				mac := fmt.Sprintf("02:5e:00:00:%02x:%02x", i>>8&255, i&255)
				d := core.Device{ID: mac, Kind: core.KindSONiC, MAC: mac, Serial: fmt.Sprintf("SN%07d", i), Hostname: fmt.Sprintf("leaf-%05d", i),
					IP: fmt.Sprintf("10.99.%d.%d", 1+i/250, 1+i%250), Subnet: "fabric", State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now}
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
	ctx := context.Background()
	v, err := e.clusters.AddVersion(ctx, clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.31.4", URL: "http://x/y.iso"})
	if err != nil {
		b.Fatal(err)
	}
	for c := 0; c < 10; c++ {
		cl, j, err := e.clusters.CreateCluster(ctx, clusters.LocalAdmin, clusters.ClusterSpec{Name: fmt.Sprintf("b%d", c),
			ZoneID: e.clusters.Zone().ID, VersionID: v.ID, ServiceOfferingID: "ztpd-medium", Size: 19})
		if err != nil {
			b.Fatal(err)
		}
		e.clusters.WaitJob(ctx, j.ID)
		err = e.st.Update(func(tx core.Tx) error {
			for m := 0; m < 20; m++ {
				i := c*20 + m
				mac := fmt.Sprintf("02:5e:00:00:%02x:%02x", i>>8&255, i&255)
				if err := tx.Memberships().Put(core.Membership{Device: mac, Cluster: cl.ID, Role: "worker", State: core.StateJoined}); err != nil {
					return err
				}
				if err := tx.Memberships().Enlist(cl.ID, mac, "worker"); err != nil {
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

func benchRequest(b *testing.B, h http.Handler, req *http.Request) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req.Clone(context.Background()))
			if rec.Code != 200 {
				b.Fatalf("HTTP %d: %.200s", rec.Code, rec.Body.String())
			}
		}
	})
}

func BenchmarkListKubernetesClusters(b *testing.B) {
	e := benchEnv(b)
	q := signing.SignQuery(url.Values{"command": {"listKubernetesClusters"}, "response": {"json"}}, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute))
	req := httptest.NewRequest("GET", "/client/api?"+q, nil)
	benchRequest(b, e.srv.Handler(), req)
}

func BenchmarkRESTDevicesPage(b *testing.B) {
	e := benchEnv(b)
	q := url.Values{"limit": {"100"}}
	req := httptest.NewRequest("GET", "/api/v1/devices?limit=100", nil)
	req.Header.Set("Authorization", signing.RESTAuthorization("GET", "/api/v1/devices", q, nil, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute)))
	benchRequest(b, e.srv.Handler(), req)
}

// BenchmarkVerifyCloudStack is the per-request cost of CloudStack
// authentication alone: parsing the query and checking its signature.
func BenchmarkVerifyCloudStack(b *testing.B) {
	e := newEnv(&testing.T{}, envOpts{noJoiner: true})
	b.Cleanup(func() { e.ts.Close(); e.clusters.Close(context.Background()); e.st.Close() })
	q := signing.SignQuery(url.Values{"command": {"listKubernetesClusters"}, "response": {"json"}}, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute))
	b.ReportAllocs()
	for b.Loop() {
		form, err := url.ParseQuery(q)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.srv.verifier.VerifyCloudStack(form, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRESTDeviceEvents is GET /api/v1/events?device= of one device
// among 200,000 events (bench/scale.sh's query, smaller): with 100 events
// of its own (10,000 devices and 1,000,000 events) and with 10 (100,000).
// BenchmarkRESTEventsByDevice is the same query at ~3 events a device.
func BenchmarkRESTDeviceEvents(b *testing.B) {
	for _, per := range []int{100, 10} {
		b.Run(fmt.Sprintf("%d-events", per), func(b *testing.B) {
			e := benchEnv(b)
			benchEventsOver(b, e, 200000, 200000/per)
			benchREST(b, e, "/api/v1/events", url.Values{"device": {"02:5e:00:00:00:07"}}, e.admin.APIKey, e.adminSec)
		})
	}
}

// BenchmarkListKubernetesClustersRender is a listKubernetesClusters of 5
// clusters of 1,000 members after a write: to a device (as during a storm:
// every member is read again) or to one cluster's record (a health
// observation: the members and the other clusters' renderings are kept).
func BenchmarkListKubernetesClustersRender(b *testing.B) {
	e := newEnv(&testing.T{}, envOpts{noJoiner: true})
	b.Cleanup(func() { e.ts.Close(); e.clusters.Close(context.Background()); e.st.Close() })
	ctx := context.Background()
	v, err := e.clusters.AddVersion(ctx, clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.31.4", URL: "http://x/y.iso"})
	if err != nil {
		b.Fatal(err)
	}
	for c := 0; c < 5; c++ {
		addMemberCluster(b, e, v.ID, fmt.Sprintf("r%d", c), c*1000, 1000, core.StateJoinIssued)
	}
	q := signing.SignQuery(url.Values{"command": {"listKubernetesClusters"}, "response": {"json"}}, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute))
	h := e.srv.Handler()
	writes := map[string]func(tx core.Tx) error{
		"device-write": func(tx core.Tx) error {
			d, err := tx.Devices().Get("02:5e:00:00:00:00")
			if err != nil {
				return err
			}
			d.LastSeen = time.Now()
			return tx.Devices().Put(d)
		},
		"cluster-write": func(tx core.Tx) error {
			c, err := tx.Clusters().ByName("r0")
			if err != nil {
				return err
			}
			c.Observed = &core.ClusterObservation{Error: "dial tcp: i/o timeout " + time.Now().String()}
			return tx.Clusters().Put(c)
		},
	}
	for _, name := range []string{"device-write", "cluster-write"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				// A write to an aggregate the views read: the cached answer is stale.
				if err := e.st.Update(writes[name]); err != nil {
					b.Fatal(err)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/client/api?"+q, nil))
				if rec.Code != 200 {
					b.Fatalf("HTTP %d", rec.Code)
				}
			}
		})
	}
}
