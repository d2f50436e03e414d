package api

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/internal/core"
)

// unversionedStop is a stopKubernetesCluster signed as an old CloudStack
// client signs it: no signatureversion, no expires, so the signature never
// expires.
func unversionedStop(e *env, id string) string {
	return signedCS(url.Values{"apiKey": {e.admin.APIKey}, "command": {"stopKubernetesCluster"}, "id": {id},
		"response": {"json"}}, e.adminSec)
}

// TestUnversionedCloudStackWriteRefusedByDefault: a CloudStack write whose
// signature never expires could be replayed at any later time, so it is
// refused by default, with an answer naming the setting for old clients;
// unversioned reads stay allowed (repeating one changes nothing).
func TestUnversionedCloudStackWriteRefusedByDefault(t *testing.T) {
	e := newEnv(t, envOpts{failuresPerMinute: 20})
	c := makeCluster(t, e, adminCaller(e), "prod")
	code, body, _ := rawGet(t, e, "/client/api?"+unversionedStop(e, c.ID), nil)
	if code != 401 || !strings.Contains(body, "api.cloudstack_unversioned_writes: allow") || !strings.Contains(body, "signatureversion=3") ||
		!strings.Contains(body, `"stopkubernetesclusterresponse"`) {
		t.Fatalf("unversioned stop: %d %s", code, body)
	}
	if st := clusterState(t, e, c.ID); st != core.ClusterRunning {
		t.Fatalf("cluster %s after a refused unversioned stop", st)
	}
	list := signedCS(url.Values{"apiKey": {e.admin.APIKey}, "command": {"listKubernetesClusters"}, "response": {"json"}}, e.adminSec)
	for i := range 3 {
		if code, body, _ := rawGet(t, e, "/client/api?"+list, nil); code != 200 {
			t.Fatalf("unversioned read %d: %d %s", i, code, body)
		}
	}
	// A correct old client is not a failed login: its address is not
	// blocked for its reads.
	for range 30 {
		rawGet(t, e, "/client/api?"+unversionedStop(e, c.ID), nil)
	}
	if code, body, _ := rawGet(t, e, "/client/api?"+list, nil); code != 200 {
		t.Fatalf("read after refused unversioned writes: %d %s", code, body)
	}
}

// TestUnversionedCloudStackWriteReplayedLater: where old clients are
// allowed, an unversioned write is accepted once, and its replay is
// refused however much later it comes (its signature never expires) and
// after a restart (the memory is in the store).
func TestUnversionedCloudStackWriteReplayedLater(t *testing.T) {
	sigs := auth.DefaultSignaturePolicy()
	sigs.AllowUnversionedCloudStackWrites = true
	e := newEnv(t, envOpts{sigs: &sigs})
	c := makeCluster(t, e, adminCaller(e), "prod")
	stop := unversionedStop(e, c.ID)
	if code, body, _ := rawGet(t, e, "/client/api?"+stop, nil); code != 200 {
		t.Fatalf("first unversioned stop: %d %s", code, body)
	}
	e.clock.Advance(25 * time.Minute) // past the longest signature lifetime
	code, body, _ := rawGet(t, e, "/client/api?"+stop, nil)
	if code != 401 || !strings.Contains(body, "already used") {
		t.Fatalf("unversioned stop replayed 25 minutes later: %d %s", code, body)
	}
	// The same after a restart: a new server over the same store.
	restarted := New(Deps{Metrics: prometheus.NewRegistry(), Store: e.st, Clusters: e.clusters, Keys: e.keys, Now: e.clock.Now, Signatures: &sigs})
	ts := httptest.NewServer(restarted.Handler())
	defer ts.Close()
	resp, err := ts.Client().Get(ts.URL + "/client/api?" + stop)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("unversioned stop replayed after a restart: %d", resp.StatusCode)
	}
	// Another unversioned write is its own signature: accepted (and
	// answered by the cluster's state).
	start := signedCS(url.Values{"apiKey": {e.admin.APIKey}, "command": {"startKubernetesCluster"}, "id": {c.ID},
		"response": {"json"}}, e.adminSec)
	if code, body, _ := rawGet(t, e, "/client/api?"+start, nil); code == 401 {
		t.Fatalf("a new unversioned write: %d %s", code, body)
	}
	if n, err := e.srv.verifier.UnversionedRemembered(e.admin.APIKey); err != nil || n != 2 {
		t.Fatalf("%d unversioned signatures remembered (%v), want 2", n, err)
	}

	// A key's memory full: its next unversioned write is refused, nothing
	// remembered is forgotten, and other keys are unaffected.
	err = e.st.Update(func(tx core.Tx) error {
		seen, _, err := tx.Settings().Get(auth.UnversionedSetting(e.admin.APIKey))
		if err != nil {
			return err
		}
		for i := 2; i < auth.UnversionedWritesPerKey; i++ {
			seen += auth.UnversionedDigest(strings.Repeat("x", i))
		}
		return tx.Settings().Put(auth.UnversionedSetting(e.admin.APIKey), seen)
	})
	if err != nil {
		t.Fatal(err)
	}
	scale := signedCS(url.Values{"apiKey": {e.admin.APIKey}, "command": {"scaleKubernetesCluster"}, "id": {c.ID}, "size": {"2"},
		"response": {"json"}}, e.adminSec)
	if code, body, _ := rawGet(t, e, "/client/api?"+scale, nil); code != 401 || !strings.Contains(body, "as many as ztpd remembers") {
		t.Fatalf("unversioned write into a full memory: %d %s", code, body)
	}
	if code, body, _ := rawGet(t, e, "/client/api?"+stop, nil); code != 401 || !strings.Contains(body, "already used") {
		t.Fatalf("first stop replayed with a full memory: %d %s", code, body)
	}
	userScale := signedCS(url.Values{"apiKey": {e.user.APIKey}, "command": {"scaleKubernetesCluster"}, "id": {"none"}, "size": {"2"},
		"response": {"json"}}, e.userSec)
	if code, body, _ := rawGet(t, e, "/client/api?"+userScale, nil); code != 431 { // accepted, then "no such cluster"
		t.Fatalf("another key's unversioned write: %d %s", code, body)
	}
	// Versioned writes of the full key still work.
	versioned := e.adminClient()
	versioned.expires = e.clock.Now().Add(10 * time.Minute)
	if r := versioned.call("scaleKubernetesCluster", map[string]string{"id": c.ID, "size": "2"}, false); r.status == 401 {
		t.Fatalf("a versioned write of the key whose memory is full: %d %s", r.status, r.raw)
	}
}
