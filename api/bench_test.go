package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// benchEnv is 10,000 devices, 10 clusters of 20 members each.
func benchEnv(b *testing.B) *env {
	e := newEnv(&testing.T{}, envOpts{noJoiner: true})
	b.Cleanup(func() { e.ts.Close(); e.clusters.Close(context.Background()); e.st.Close() })
	apitest.SeedBench(b, e.st, e.clusters)
	return e
}

func BenchmarkListKubernetesClusters(b *testing.B) {
	e := benchEnv(b)
	q := signing.SignQuery(url.Values{"command": {"listKubernetesClusters"}, "response": {"json"}}, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute))
	req := httptest.NewRequest("GET", "/client/api?"+q, nil)
	apitest.BenchRequest(b, e.srv.Handler(), req)
}

func BenchmarkRESTDevicesPage(b *testing.B) {
	e := benchEnv(b)
	q := url.Values{"limit": {"100"}}
	req := httptest.NewRequest("GET", "/api/v1/devices?limit=100", nil)
	req.Header.Set("Authorization", signing.RESTAuthorization("GET", "/api/v1/devices", q, nil, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute)))
	apitest.BenchRequest(b, e.srv.Handler(), req)
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
