package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/apache/cloudstack-go/v2/cloudstack"

	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// bigClusterEnv is one cluster of 400 joined members: its
// listKubernetesClusters answer (~150 KB) is past httpserve.CompressMin.
func bigClusterEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t, envOpts{noJoiner: true})
	v, err := e.clusters.AddVersion(context.Background(), clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.31.4", URL: "http://x/y.iso"})
	if err != nil {
		t.Fatal(err)
	}
	return e, addMemberCluster(t, e, v.ID, "big", 0, 400, core.StateJoined)
}

// addMemberCluster creates cluster name (the local admin's, at version)
// and stores n member devices numbered from first, in state, on its
// roster. It returns the cluster's ID.
func addMemberCluster(tb testing.TB, e *env, version, name string, first, n int, state core.DeviceState) string {
	tb.Helper()
	ctx := context.Background()
	cl, j, err := e.clusters.CreateCluster(ctx, clusters.LocalAdmin, clusters.ClusterSpec{Name: name,
		ZoneID: e.clusters.Zone().ID, VersionID: version, ServiceOfferingID: "ztpd-medium", Size: n - 1})
	if err != nil {
		tb.Fatal(err)
	}
	e.clusters.WaitJob(ctx, j.ID)
	now := time.Now().UTC()
	err = e.st.Update(func(tx core.Tx) error {
		for i := first; i < first+n; i++ {
			mac := fmt.Sprintf("02:5e:00:00:%02x:%02x", i>>8&255, i&255)
			d := core.Device{ID: mac, Kind: core.KindSONiC, MAC: mac, Serial: fmt.Sprintf("SN%07d", i), Hostname: fmt.Sprintf("leaf-%05d", i),
				IP: fmt.Sprintf("10.99.%d.%d", 1+i/250, 1+i%250), Subnet: "fabric", State: state, FirstSeen: now, LastSeen: now, UpdatedAt: now}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			m := core.Membership{Device: mac, Cluster: cl.ID, Role: "worker", State: state, NodeName: d.Hostname,
				Created: now, UpdatedAt: now, History: []core.StateTransition{{State: state, At: now}}}
			if err := tx.Memberships().Put(m); err != nil {
				return err
			}
			if err := tx.Memberships().Enlist(cl.ID, mac, "worker"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return cl.ID
}

// A big cached answer goes gzipped to a client that accepts gzip (Go's
// transport, the SDK, browsers, CloudMonkey's requests all do) and as is to
// one that does not; both are the same JSON.
func TestBigListingsAreGzippedForClientsThatAcceptIt(t *testing.T) {
	e, _ := bigClusterEnv(t)
	q := signing.SignQuery(url.Values{"command": {"listKubernetesClusters"}, "response": {"json"}}, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute))
	rq := url.Values{"limit": {"200"}}
	restAuth := signing.RESTAuthorization("GET", "/api/v1/devices", rq, nil, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute))
	for _, target := range []struct{ name, url, auth string }{
		{"listKubernetesClusters", e.ts.URL + "/client/api?" + q, ""},
		{"REST devices", e.ts.URL + "/api/v1/devices?" + rq.Encode(), restAuth},
	} {
		get := func(acceptEncoding string) (*http.Response, []byte) {
			t.Helper()
			return getAsSent(t, target.url, target.auth, acceptEncoding)
		}
		plainResp, plain := get("")
		if len(plain) < httpserve.CompressMin || plainResp.Header.Get("Content-Encoding") != "" || plainResp.Header.Get("Vary") != "Accept-Encoding" {
			t.Fatalf("%s without Accept-Encoding: %d bytes, Content-Encoding %q, Vary %q", target.name, len(plain),
				plainResp.Header.Get("Content-Encoding"), plainResp.Header.Get("Vary"))
		}
		for _, ae := range []string{"gzip", "br, gzip;q=0.5", "deflate, *", "GZIP"} {
			resp, gz := get(ae)
			if resp.Header.Get("Content-Encoding") != "gzip" || len(gz)*5 > len(plain) {
				t.Fatalf("%s (Accept-Encoding %q): Content-Encoding %q, %d bytes for %d", target.name, ae, resp.Header.Get("Content-Encoding"), len(gz), len(plain))
			}
			if inflated := gunzipMember(t, gz); !bytes.Equal(inflated, plain) {
				t.Fatalf("%s (Accept-Encoding %q): inflated answer differs", target.name, ae)
			}
		}
		for _, ae := range []string{"identity", "gzip;q=0", "br", "gzip;q=x"} {
			if resp, body := get(ae); resp.Header.Get("Content-Encoding") != "" || !bytes.Equal(body, plain) {
				t.Fatalf("%s (Accept-Encoding %q): Content-Encoding %q", target.name, ae, resp.Header.Get("Content-Encoding"))
			}
		}
	}

	// The SDK (Go's transport: gzip asked for and inflated) reads every member.
	sdk := cloudstack.NewAsyncClient(e.ts.URL+"/client/api", e.admin.APIKey, e.adminSec, false)
	l, err := sdk.Kubernetes.ListKubernetesClusters(sdk.Kubernetes.NewListKubernetesClustersParams())
	if err != nil || l.Count != 1 || len(l.KubernetesClusters[0].Virtualmachines) != 400 {
		t.Fatalf("SDK listKubernetesClusters: %v %+v", err, l)
	}
}

// getAsSent GETs url (with auth as Authorization and acceptEncoding as
// Accept-Encoding when set) without Go's transparent gzip, so the body is
// as ztpd sent it; anything but a 200 fails the test.
func getAsSent(t *testing.T, url, auth, acceptEncoding string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %.80s (Accept-Encoding %q): HTTP %d %v %.200s", url, acceptEncoding, resp.StatusCode, err, body)
	}
	return resp, body
}

// gunzipMember inflates gz, which must be one gzip member and nothing
// after it.
func gunzipMember(t *testing.T, gz []byte) []byte {
	t.Helper()
	br := bytes.NewReader(gz)
	zr, err := gzip.NewReader(br)
	if err != nil {
		t.Fatal(err)
	}
	zr.Multistream(false)
	out, err := io.ReadAll(zr)
	if err != nil || br.Len() != 0 {
		t.Fatalf("gunzip: %v, %d bytes after the member", err, br.Len())
	}
	return out
}

func TestAcceptsGzip(t *testing.T) {
	for v, want := range map[string]bool{
		"": false, "gzip": true, "gzip, deflate, br": true, "br;q=1, gzip;q=0.1": true, "*": true, "x-gzip": true,
		"gzip;q=0": false, "gzip; q=0.0": false, "identity": false, "br": false, "gzip;q=nope": false, "*;q=0": false,
	} {
		if got := httpserve.AcceptsGzip([]string{v}); got != want {
			t.Errorf("AcceptsGzip(%q) = %v, want %v", v, got, want)
		}
	}
}

// A listing of several clusters is gzipped by joining each cluster's
// cached segment: after one member of one cluster changes, the gzipped
// answer is the new plain one, and only the changed cluster was compressed
// again (the others' segments are the very ones cached before).
func TestClusterListingGzipJoinsCachedClusterSegments(t *testing.T) {
	e, _ := bigClusterEnv(t)
	v, err := e.clusters.AddVersion(context.Background(), clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.32.1", URL: "http://x/z.iso"})
	if err != nil {
		t.Fatal(err)
	}
	addMemberCluster(t, e, v.ID, "second", 1000, 300, core.StateJoined)
	changed := addMemberCluster(t, e, v.ID, "third", 2000, 300, core.StateJoined)
	q := signing.SignQuery(url.Values{"command": {"listKubernetesClusters"}, "response": {"json"}}, e.admin.APIKey, []byte(e.adminSec), time.Now().Add(10*time.Minute))
	get := func(acceptEncoding string) []byte {
		t.Helper()
		resp, body := getAsSent(t, e.ts.URL+"/client/api?"+q, "", acceptEncoding)
		if acceptEncoding == "gzip" {
			if resp.Header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
			}
			body = gunzipMember(t, body)
		}
		return body
	}
	segments := func() map[string]any { return e.srv.cloudStack.RenderedClusters() }
	before := get("identity")
	if gz := get("gzip"); !bytes.Equal(gz, before) {
		t.Fatal("the gzipped listing inflates to something else")
	}
	cached := segments()
	if len(cached) != 3 {
		t.Fatalf("%d clusters rendered, want 3", len(cached))
	}
	// One member of the third cluster gets a new hostname.
	if err := e.st.Update(func(tx core.Tx) error {
		d, err := tx.Devices().Get("02:5e:00:00:07:d0") // number 2000
		if err != nil {
			return err
		}
		d.Hostname = "renamed-leaf"
		return tx.Devices().Put(d)
	}); err != nil {
		t.Fatal(err)
	}
	after := get("identity")
	if bytes.Equal(after, before) || !bytes.Contains(after, []byte("renamed-leaf")) {
		t.Fatal("the listing does not show the change")
	}
	if gz := get("gzip"); !bytes.Equal(gz, after) {
		t.Fatal("after the change, the gzipped listing inflates to something else")
	}
	for id, seg := range segments() {
		if reused := cached[id] == seg; reused == (id == changed) {
			t.Errorf("cluster %s (changed %v): segment reused %v", id, id == changed, reused)
		}
	}
}
