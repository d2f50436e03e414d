package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// listedCluster is what the cache tests read from listKubernetesClusters.
type listedCluster struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	State    string `json:"state"`
	Size     int    `json:"size"`
	Version  string `json:"kubernetesversionname"`
	Endpoint string `json:"endpoint"`
	VMs      []struct {
		ID    string `json:"id"`
		Name  string `json:"name"`
		State string `json:"state"`
		IP    string `json:"ipaddress"`
	} `json:"virtualmachines"`
}

func listClusters(t *testing.T, c *csClient, params map[string]string) []listedCluster {
	t.Helper()
	r := c.ok("listKubernetesClusters", params, false)
	if len(r) == 0 {
		return nil
	}
	var out []listedCluster
	mustJSON(t, r["kubernetescluster"], &out)
	var count int
	mustJSON(t, r["count"], &count)
	if count < len(out) {
		t.Fatalf("count %d < %d items", count, len(out))
	}
	return out
}

// TestClusterListCacheFollowsEveryChange checks that a repeated
// listKubernetesClusters is served from the response cache and that every
// kind of change shows in the very next list: create, job progress, devices
// joining, a device's address changing, membership state, scale, a version
// record changing, a record written behind the service's back, delete.
// Both member sources are covered: the joiner (here its stand-in) and the
// memberships bucket read directly.
func TestClusterListCacheFollowsEveryChange(t *testing.T) {
	for _, noJoiner := range []bool{false, true} {
		t.Run(fmt.Sprintf("noJoiner=%v", noJoiner), func(t *testing.T) {
			testClusterListCache(t, newEnv(t, envOpts{noJoiner: noJoiner}))
		})
	}
}

func testClusterListCache(t *testing.T, e *env) {
	ctx := context.Background()
	u := e.userClient()
	if got := listClusters(t, u, nil); len(got) != 0 {
		t.Fatalf("empty store lists %v", got)
	}
	// Unchanged data: the second identical list is not rendered again.
	before := e.srv.bodies.Renders()
	listClusters(t, u, nil)
	if e.srv.bodies.Renders() != before {
		t.Fatalf("an unchanged list was rendered again")
	}

	v, err := e.clusters.AddVersion(ctx, clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.31.4", URL: "http://10.99.0.1/k.iso"})
	if err != nil {
		t.Fatal(err)
	}
	cl, j, err := e.clusters.CreateCluster(ctx, clusters.Caller{APIKey: e.user.APIKey}, clusters.ClusterSpec{Name: "c1",
		ZoneID: e.clusters.Zone().ID, VersionID: v.ID, ServiceOfferingID: clusters.Offerings[0].ID, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := listClusters(t, u, nil)
	if len(got) != 1 || got[0].ID != cl.ID {
		t.Fatalf("created cluster not listed: %+v", got)
	}
	if _, err := e.clusters.WaitJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if got = listClusters(t, u, nil); got[0].State != "Starting" {
		t.Fatalf("after the create job: state %q", got[0].State)
	}
	// An observation from the watch moves it to Running: the next list shows it.
	e.healthy(cl.ID)
	if got = listClusters(t, u, nil); got[0].State != "Running" {
		t.Fatalf("after a healthy observation: state %q", got[0].State)
	}
	one := map[string]string{"id": cl.ID}
	listClusters(t, u, one) // a second cached key for the same data

	// A device joins: it shows as a virtual machine at once, in both lists.
	join := func(mac, ip, host, role string, st core.DeviceState) {
		t.Helper()
		err := e.st.Update(func(tx core.Tx) error {
			if err := tx.Devices().Put(core.Device{ID: mac, MAC: mac, IP: ip, Hostname: host, State: st}); err != nil {
				return err
			}
			if err := tx.Memberships().Put(core.Membership{Device: mac, Cluster: cl.ID, Role: role, State: st}); err != nil {
				return err
			}
			return tx.Memberships().Enlist(cl.ID, mac, role)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	join("02:00:00:00:02:01", "10.99.2.10", "cp-1", "control-plane", core.StateJoined)
	for _, params := range []map[string]string{nil, one} {
		got = listClusters(t, u, params)
		if len(got[0].VMs) != 1 || got[0].VMs[0].Name != "cp-1" || got[0].VMs[0].State != "Running" ||
			got[0].Endpoint != "https://10.99.2.10:6443/" {
			t.Fatalf("joined device not listed (params %v): %+v", params, got[0])
		}
	}
	join("02:00:00:00:02:02", "10.99.2.11", "w-1", "worker", core.StateJoinIssued)
	if got = listClusters(t, u, one); len(got[0].VMs) != 2 || got[0].VMs[1].State != "Starting" {
		t.Fatalf("second device: %+v", got[0].VMs)
	}

	// Only the device record changes (a new address, as DHCP would write).
	err = e.st.Update(func(tx core.Tx) error {
		d, err := tx.Devices().Get("02:00:00:00:02:01")
		if err != nil {
			return err
		}
		d.IP = "10.99.2.99"
		return tx.Devices().Put(d)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got = listClusters(t, u, one); got[0].VMs[0].IP != "10.99.2.99" || got[0].Endpoint != "https://10.99.2.99:6443/" {
		t.Fatalf("device address change not listed: %+v", got[0])
	}

	// Only the membership changes.
	err = e.st.Update(func(tx core.Tx) error {
		return tx.Memberships().Put(core.Membership{Device: "02:00:00:00:02:02",
			Cluster: cl.ID, Role: "worker", State: core.StateLeaving})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got = listClusters(t, u, one); got[0].VMs[1].State != "Stopping" {
		t.Fatalf("membership change not listed: %+v", got[0].VMs)
	}

	// Scale through the API.
	a := e.adminClient()
	sj := a.ok("scaleKubernetesCluster", map[string]string{"id": cl.ID, "size": "5"}, true)
	a.wait(field[string](t, sj, "jobid"))
	if got = listClusters(t, u, nil); got[0].Size != 5 {
		t.Fatalf("scale not listed: size %d", got[0].Size)
	}

	// The version record changes behind the service (a restore, another part).
	err = e.st.Update(func(tx core.Tx) error {
		ver, err := tx.Versions().Get(v.ID)
		if err != nil {
			return err
		}
		ver.Name = "v1.31.4-renamed"
		return tx.Versions().Put(ver)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got = listClusters(t, u, one); got[0].Version != "v1.31.4-renamed" {
		t.Fatalf("version change not listed: %q", got[0].Version)
	}

	// So does the cluster record itself.
	err = e.st.Update(func(tx core.Tx) error {
		c, err := tx.Clusters().Get(cl.ID)
		if err != nil {
			return err
		}
		c.Name = "c1-renamed"
		return tx.Clusters().Put(c)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got = listClusters(t, u, nil); got[0].Name != "c1-renamed" {
		t.Fatalf("cluster record change not listed: %q", got[0].Name)
	}

	// Delete: the list is empty once the job is done.
	dj := u.ok("deleteKubernetesCluster", map[string]string{"id": cl.ID}, true)
	u.wait(field[string](t, dj, "jobid"))
	if got = listClusters(t, u, nil); len(got) != 0 {
		t.Fatalf("deleted cluster still listed: %+v", got)
	}
	if got = listClusters(t, u, one); len(got) != 0 {
		t.Fatalf("deleted cluster still listed by id: %+v", got)
	}
}

// TestClusterListCacheKeepsAuthentication checks that a cached answer is
// only ever served after the request itself was authenticated: a revoked
// key, a wrong signature and an expired request are refused although an
// identical request's answer is cached.
func TestClusterListCacheKeepsAuthentication(t *testing.T) {
	e := newEnv(t, envOpts{})
	u := e.userClient()
	listClusters(t, u, nil)
	listClusters(t, u, nil)

	bad := &csClient{t: t, base: e.ts.URL, apiKey: e.user.APIKey, secret: "wrong", http: e.ts.Client()}
	errorBody(t, bad.call("listKubernetesClusters", nil, false), "listkubernetesclustersresponse", 401, 9999, auth.FailedText)
	old := &csClient{t: t, base: e.ts.URL, apiKey: e.user.APIKey, secret: e.userSec, http: e.ts.Client(),
		expires: time.Now().UTC().Add(time.Minute)}
	listClusters(t, old, nil)
	e.clock.Advance(2 * time.Minute)
	errorBody(t, old.call("listKubernetesClusters", nil, false), "listkubernetesclustersresponse", 401, 9999, auth.FailedText)

	if _, err := e.keys.Revoke(e.user.APIKey); err != nil {
		t.Fatal(err)
	}
	errorBody(t, u.call("listKubernetesClusters", nil, false), "listkubernetesclustersresponse", 401, 9999, auth.FailedText)
}

// TestClusterListCacheUnderConcurrentWrites lists from many goroutines while
// a writer adds members one by one; once a write has returned, no list that
// starts afterwards may miss it.
func TestClusterListCacheUnderConcurrentWrites(t *testing.T) {
	e := newEnv(t, envOpts{noJoiner: true})
	ctx := context.Background()
	v, err := e.clusters.AddVersion(ctx, clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.31.4", URL: "http://10.99.0.1/k.iso"})
	if err != nil {
		t.Fatal(err)
	}
	cl, j, err := e.clusters.CreateCluster(ctx, clusters.LocalAdmin, clusters.ClusterSpec{Name: "c", ZoneID: e.clusters.Zone().ID,
		VersionID: v.ID, ServiceOfferingID: clusters.Offerings[0].ID, Size: 100})
	if err != nil {
		t.Fatal(err)
	}
	e.clusters.WaitJob(ctx, j.ID)

	const members = 40
	var written atomic.Int64 // members whose write has returned
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &csClient{t: t, base: e.ts.URL, apiKey: e.admin.APIKey, secret: e.adminSec, http: e.ts.Client()}
			for {
				select {
				case <-stop:
					return
				default:
				}
				least := written.Load()
				r := c.call("listKubernetesClusters", nil, false)
				if r.status != http.StatusOK {
					errs <- fmt.Errorf("HTTP %d: %s", r.status, r.raw)
					return
				}
				var body struct {
					Clusters []listedCluster `json:"kubernetescluster"`
				}
				if err := json.Unmarshal(r.body["listkubernetesclustersresponse"], &body); err != nil {
					errs <- err
					return
				}
				if n := int64(len(body.Clusters[0].VMs)); n < least {
					errs <- fmt.Errorf("stale list: %d members, %d already written", n, least)
					return
				}
			}
		}()
	}
	for i := 0; i < members; i++ {
		mac := fmt.Sprintf("02:00:00:00:03:%02x", i)
		err := e.st.Batch(func(tx core.Tx) error {
			if err := tx.Devices().Put(core.Device{ID: mac, MAC: mac, State: core.StateJoined}); err != nil {
				return err
			}
			if err := tx.Memberships().Put(core.Membership{Device: mac, Cluster: cl.ID, Role: "worker", State: core.StateJoined}); err != nil {
				return err
			}
			return tx.Memberships().Enlist(cl.ID, mac, "worker")
		})
		if err != nil {
			t.Fatal(err)
		}
		written.Add(1)
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDevicePageCacheFollowsEveryChange checks that a repeated device or
// lease page is served from the response cache and that a device written,
// changed or deleted, by any writer, shows in the very next page.
func TestDevicePageCacheFollowsEveryChange(t *testing.T) {
	e := newEnv(t, envOpts{})
	apitest.Seed(t, e.st, 30)
	c := e.rest(e.admin.APIKey, e.adminSec) // user keys' pages depend on their clusters and are not kept
	get := func(path string) client.Page[core.Device] {
		t.Helper()
		r := c.Do("GET", path, nil)
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
		}
		if r.Header.Get("Content-Length") != fmt.Sprint(len(r.Raw)) {
			t.Fatalf("%s: Content-Length %q for %d bytes", path, r.Header.Get("Content-Length"), len(r.Raw))
		}
		var p client.Page[core.Device]
		r.Decode(t, &p)
		return p
	}
	const first = "/api/v1/devices?limit=10"
	p := get(first)
	before := e.srv.bodies.Renders()
	if q := get(first); len(q.Items) != 10 || q.NextCursor != p.NextCursor {
		t.Fatalf("second read differs: %+v", q)
	}
	if e.srv.bodies.Renders() != before {
		t.Fatal("an unchanged page was rendered again")
	}
	second := first + "&cursor=" + p.NextCursor
	get(second)

	// A new device sorting first.
	if err := e.st.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: "00:00:00:00:00:01", MAC: "00:00:00:00:00:01", Kind: core.KindSONiC,
			Hostname: "new", State: core.StateDiscovered})
	}); err != nil {
		t.Fatal(err)
	}
	if p = get(first); p.Items[0].ID != "00:00:00:00:00:01" {
		t.Fatalf("new device not on the first page: %s", p.Items[0].ID)
	}
	// A change to a device on the second page, by the DHCP-style writer path.
	target := get(second).Items[3].ID
	if err := e.st.Batch(func(tx core.Tx) error {
		d, err := tx.Devices().Get(target)
		if err != nil {
			return err
		}
		d.Hostname = "renamed"
		return tx.Devices().Put(d)
	}); err != nil {
		t.Fatal(err)
	}
	if q := get(second); q.Items[3].Hostname != "renamed" {
		t.Fatalf("changed device not listed: %+v", q.Items[3])
	}
	// Filters are part of the key, and follow changes too.
	if q := get("/api/v1/devices?limit=100&state=joined"); len(q.Items) != 0 {
		t.Fatalf("state filter: %d", len(q.Items))
	}
	if err := e.st.Update(func(tx core.Tx) error {
		d, err := tx.Devices().Get(target)
		if err != nil {
			return err
		}
		d.State = core.StateJoined
		return tx.Devices().Put(d)
	}); err != nil {
		t.Fatal(err)
	}
	if q := get("/api/v1/devices?limit=100&state=joined"); len(q.Items) != 1 || q.Items[0].ID != target {
		t.Fatalf("state filter after change: %+v", q.Items)
	}
	// Deleted.
	if err := e.st.Update(func(tx core.Tx) error { return tx.Devices().Delete("00:00:00:00:00:01") }); err != nil {
		t.Fatal(err)
	}
	if p = get(first); p.Items[0].ID == "00:00:00:00:00:01" {
		t.Fatal("deleted device still listed")
	}

	// Leases: same rule, own repository.
	var lp client.Page[core.Lease]
	c.Do("GET", "/api/v1/leases?limit=5", nil).Decode(t, &lp)
	if err := e.st.Update(func(tx core.Tx) error {
		return tx.Leases().Put(core.Lease{IP: "10.0.0.1", MAC: "02:00:00:00:00:aa", State: core.LeaseActive})
	}); err != nil {
		t.Fatal(err)
	}
	c.Do("GET", "/api/v1/leases?limit=5", nil).Decode(t, &lp)
	if lp.Items[0].IP != "10.0.0.1" {
		t.Fatalf("new lease not listed: %+v", lp.Items[0])
	}

	// Authentication still runs first: a bad signature gets 401, not the page.
	bad := e.rest(e.user.APIKey, "wrong")
	if r := bad.Do("GET", first, nil); r.Status != 401 {
		t.Fatalf("bad signature: %d", r.Status)
	}
}

// TestRESTClusterListCacheFollowsChanges: GET /api/v1/clusters is cached
// like listKubernetesClusters and shows a joining member and a scale at once.
func TestRESTClusterListCacheFollowsChanges(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	v, err := e.clusters.AddVersion(ctx, clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.31.4", URL: "http://10.99.0.1/k.iso"})
	if err != nil {
		t.Fatal(err)
	}
	cl, j, err := e.clusters.CreateCluster(ctx, clusters.LocalAdmin, clusters.ClusterSpec{Name: "r1", ZoneID: e.clusters.Zone().ID,
		VersionID: v.ID, ServiceOfferingID: clusters.Offerings[0].ID, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.clusters.WaitJob(ctx, j.ID)
	// Running (as ztpd's watch would find it), so it can be scaled below.
	e.healthy(cl.ID)
	c := e.rest(e.admin.APIKey, e.adminSec) // the cluster is the admin account's
	list := func() client.Cluster {
		t.Helper()
		var p client.Page[client.Cluster]
		r := c.Do("GET", "/api/v1/clusters", nil)
		r.Decode(t, &p)
		if r.Status != 200 || len(p.Items) != 1 {
			t.Fatalf("clusters: %d %s", r.Status, r.Raw)
		}
		return p.Items[0]
	}
	list()
	before := e.srv.bodies.Renders()
	if got := list(); len(got.Members) != 0 || e.srv.bodies.Renders() != before {
		t.Fatalf("unchanged list rendered again or wrong: %+v", got)
	}
	if err := e.st.Update(func(tx core.Tx) error {
		if err := tx.Devices().Put(core.Device{ID: "02:00:00:00:04:01", MAC: "02:00:00:00:04:01", Kind: core.KindVM,
			IP: "10.99.4.1", State: core.StateJoined}); err != nil {
			return err
		}
		if err := tx.Memberships().Put(core.Membership{Device: "02:00:00:00:04:01",
			Cluster: cl.ID, Role: "control-plane", State: core.StateJoined}); err != nil {
			return err
		}
		return tx.Memberships().Enlist(cl.ID, "02:00:00:00:04:01", "control-plane")
	}); err != nil {
		t.Fatal(err)
	}
	if got := list(); len(got.Members) != 1 || got.Members[0].IP != "10.99.4.1" {
		t.Fatalf("joined member not listed: %+v", got.Members)
	}
	sj, err := e.clusters.ScaleCluster(ctx, clusters.LocalAdmin, cl.ID, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	e.clusters.WaitJob(ctx, sj.ID)
	if got := list(); got.Size != 3 {
		t.Fatalf("scale not listed: %d", got.Size)
	}
}
