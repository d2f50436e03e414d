package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// abandoningMembership takes members out before destroying (a
// clusters.ForceDestroyer) and fails to take one out: Destroy fails as
// the app's does when its remove rollout fails, DestroyForce destroys and
// names the member left.
type abandoningMembership struct {
	*apitest.Membership
}

var abandonedWorker = core.AbandonedNode{Device: "02:00:00:00:00:07", Node: "worker-7",
	Reason: "drain of node worker-7: Cannot evict pod default/db-0: disruption budget db-pdb allows 0"}

func (m abandoningMembership) Destroy(context.Context, core.Cluster) error {
	m.Count("destroy")
	return &core.Error{Kind: core.KindUnavailable, Msg: "rollout ro-1 failed: node worker-7 failed: " + abandonedWorker.Reason}
}

func (m abandoningMembership) DestroyForce(context.Context, core.Cluster) ([]core.AbandonedNode, error) {
	m.Count("destroyforce")
	return []core.AbandonedNode{abandonedWorker}, nil
}

// TestRESTDeleteForce: DELETE /clusters/{id} fails when its members
// cannot be taken out (Alert); ?force=true deletes it and the job names
// the abandoned member, over REST (validated against openapi.json) and in
// CloudStack's queryAsyncJobResult; a force that is not a boolean is 400.
func TestRESTDeleteForce(t *testing.T) {
	e := newEnv(t, envOpts{})
	// The env's server over a clusters service driving the abandoning
	// Membership (same store and keys).
	mem := abandoningMembership{&apitest.Membership{St: e.st}}
	cs, err := clusters.New(e.st, mem, clusters.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(context.Background()) })
	ts := httptest.NewServer(New(Deps{Metrics: prometheus.NewRegistry(), Log: slog.New(slog.NewTextHandler(e.logs, nil)), Store: e.st, Clusters: cs, Keys: e.keys,
		Now: e.clock.Now}).Handler())
	t.Cleanup(ts.Close)
	_, router := apitest.LoadDoc(t, rest.OpenAPI())
	a := &apitest.RESTClient{T: t, Base: ts.URL, APIKey: e.admin.APIKey, Secret: e.adminSec, HTTP: ts.Client(), Router: router}

	wait := func(r apitest.RESTResp) client.Job {
		t.Helper()
		if r.Status != 202 {
			t.Fatalf("not accepted: %d %s", r.Status, r.Raw)
		}
		loc := r.Header.Get("Location")
		for range 500 {
			var j client.Job
			a.Do("GET", loc, nil).Decode(t, &j)
			if j.Status != "pending" {
				return j
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("job did not finish")
		return client.Job{}
	}
	if _, err := cs.AddVersion(context.Background(), clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.30.2",
		URL: "http://10.99.0.1:8080/isos/v1.30.2.iso"}); err != nil {
		t.Fatal(err)
	}
	if j := wait(a.Do("POST", "/api/v1/clusters", map[string]any{"name": "lab", "version": "v1.30.2", "size": 2})); j.Status != "succeeded" {
		t.Fatalf("create: %+v", j)
	}
	c, err := cs.GetCluster(context.Background(), clusters.LocalAdmin, "lab")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.ObserveHealth(c.Cluster.ID, clusters.Health{APIReachable: true, Nodes: 3, ReadyNodes: 3, ControlPlanes: 1,
		ReadyControlPlanes: 1}); err != nil {
		t.Fatal(err)
	}

	if r := a.Do("DELETE", "/api/v1/clusters/lab?force=maybe", nil); r.Status != 400 || !strings.Contains(string(r.Raw), "force must be true or false") {
		t.Fatalf("force=maybe: %d %s", r.Status, r.Raw)
	}
	j := wait(a.Do("DELETE", "/api/v1/clusters/lab", nil))
	if j.Status != "failed" || j.Error == nil || !strings.Contains(j.Error.Message, "disruption budget db-pdb") || len(j.Abandoned) != 0 {
		t.Fatalf("delete without force: %+v", j)
	}
	if got, _ := cs.GetCluster(context.Background(), clusters.LocalAdmin, "lab"); got.Cluster.State != core.ClusterAlert {
		t.Fatalf("after the failed delete the cluster is %s", got.Cluster.State)
	}
	j = wait(a.Do("DELETE", "/api/v1/clusters/lab?force=true", nil))
	if j.Status != "succeeded" || len(j.Abandoned) != 1 || j.Abandoned[0] != (client.AbandonedNode(abandonedWorker)) {
		t.Fatalf("forced delete: %+v", j)
	}
	if r := a.Do("GET", "/api/v1/clusters/lab", nil); r.Status != 404 {
		t.Fatalf("force-deleted cluster: %d %s", r.Status, r.Raw)
	}
	// The same job through CloudStack: a plain success whose text says
	// what was abandoned.
	csc := &csClient{t: t, base: ts.URL, apiKey: e.admin.APIKey, secret: e.adminSec, http: ts.Client()}
	var res struct {
		Success bool   `json:"success"`
		Text    string `json:"displaytext"`
	}
	if err := json.Unmarshal(csc.wait(j.ID)["jobresult"], &res); err != nil {
		t.Fatal(err)
	}
	if !res.Success || !strings.Contains(res.Text, "Kubernetes cluster deleted; 1 node abandoned: worker-7 (device 02:00:00:00:00:07): drain of node worker-7") {
		t.Fatalf("queryAsyncJobResult of the forced delete: %+v", res)
	}
}
