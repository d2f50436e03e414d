package api

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// rawGet sends a GET and returns status, body and headers.
func rawGet(t *testing.T, e *env, pathAndQuery string, hdr http.Header) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", e.ts.URL+pathAndQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// signedCS is an SDK-style signed query (values URL-encoded, names as
// they are, signature last), built apart from package signing.
func signedCS(v url.Values, secret string) string {
	s := apitest.EncodeValues(v)
	return s + "&signature=" + url.QueryEscape(hmacSig(secret, s))
}

func makeCluster(t *testing.T, e *env, caller clusters.Caller, name string) core.Cluster {
	return e.fx.MakeCluster(t, caller, name)
}

func clusterState(t *testing.T, e *env, id string) core.ClusterState { return e.fx.ClusterState(t, id) }

// TestReshapedExpiredSignatureIsRefused: an expired signatureversion=3
// request re-sent with "response" and "signatureversion" merged into one
// parameter name ("response=json&signatureversion" = "3") signs to the same
// string, but no longer says it is version 3, so its expiry went unchecked.
// Names outside [A-Za-z0-9_.-[]] are now refused before anything else.
func TestReshapedExpiredSignatureIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := makeCluster(t, e, adminCaller(e), "prod")

	exp := e.clock.Now().UTC().Add(time.Minute).Format(time.RFC3339)
	v := url.Values{"apiKey": {e.admin.APIKey}, "command": {"deleteKubernetesCluster"}, "id": {c.ID},
		"response": {"json"}, "signatureversion": {"3"}, "expires": {exp}}
	s := apitest.EncodeValues(v)
	sig := hmacSig(e.adminSec, s)
	e.clock.Advance(2 * time.Minute)

	if code, body, _ := rawGet(t, e, "/client/api?"+s+"&signature="+url.QueryEscape(sig), nil); code != 401 {
		t.Fatalf("expired request as signed: %d %s", code, body)
	}
	reshaped := url.Values{"apiKey": {e.admin.APIKey}, "command": {"deleteKubernetesCluster"}, "id": {c.ID},
		"expires": {exp}, "response=json&signatureversion": {"3"}}
	// Same signed string: the attack needs no secret.
	if rs := apitest.EncodeValues(reshaped); hmacSig(e.adminSec, rs) != sig {
		t.Fatalf("reshaped request does not sign alike:\n%s\n%s", strings.ToLower(s), strings.ToLower(rs))
	}
	q := "apiKey=" + e.admin.APIKey + "&command=deleteKubernetesCluster&expires=" + url.QueryEscape(exp) + "&id=" + c.ID +
		"&" + url.QueryEscape("response=json&signatureversion") + "=3&signature=" + url.QueryEscape(sig)
	code, body, _ := rawGet(t, e, "/client/api?"+q, nil)
	if code != 430 || !strings.Contains(body, "parameter name") {
		t.Fatalf("reshaped expired request: %d %s", code, body)
	}
	if st := clusterState(t, e, c.ID); st != core.ClusterRunning {
		t.Fatalf("cluster %s after the reshaped delete", st)
	}
	// The SDK's map parameters keep working.
	ok := url.Values{"apiKey": {e.admin.APIKey}, "command": {"listZones"}, "response": {"json"},
		"details[0].key": {"a"}, "details[0].value": {"b"}, "signatureversion": {"3"},
		"expires": {e.clock.Now().UTC().Add(time.Minute).Format(time.RFC3339)}}
	if code, body, _ := rawGet(t, e, "/client/api?"+signedCS(ok, e.adminSec), nil); code != 200 {
		t.Fatalf("map parameters refused: %d %s", code, body)
	}
	// A name given twice in different case is refused too.
	dup := url.Values{"apiKey": {e.admin.APIKey}, "command": {"listZones"}, "response": {"json"}, "Response": {"json"}}
	if code, body, _ := rawGet(t, e, "/client/api?"+signedCS(dup, e.adminSec), nil); code != 430 || !strings.Contains(body, "differ only in case") {
		t.Fatalf("names differing in case: %d %s", code, body)
	}
}

// TestCaseChangedRESTPathIsRefused: a REST signature binds the path
// exactly; it was compared lowercased, so a signed GET of cluster "lab"'s
// kubeconfig also fetched cluster "LAB"'s.
func TestCaseChangedRESTPathIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	makeCluster(t, e, adminCaller(e), "lab")
	makeCluster(t, e, adminCaller(e), "LAB")
	a := e.rest(e.admin.APIKey, e.adminSec)
	auth := a.Authorization("GET", "/api/v1/clusters/lab/kubeconfig", nil, nil, e.clock.Now().Add(5*time.Minute))
	h := http.Header{"Authorization": {auth}}
	if code, body, _ := rawGet(t, e, "/api/v1/clusters/lab/kubeconfig", h); code != 200 {
		t.Fatalf("as signed: %d %s", code, body)
	}
	if code, body, _ := rawGet(t, e, "/api/v1/clusters/LAB/kubeconfig", h); code != 401 {
		t.Fatalf("path case changed: %d %s", code, body)
	}
	// Query values are bound exactly too.
	auth = a.Authorization("GET", "/api/v1/devices", url.Values{"state": {"joined"}}, nil, e.clock.Now().Add(5*time.Minute))
	if code, body, _ := rawGet(t, e, "/api/v1/devices?state=JOINED", http.Header{"Authorization": {auth}}); code != 401 {
		t.Fatalf("query value case changed: %d %s", code, body)
	}
}

// TestReplayedWritesAreRefused: a write's signature is accepted once while
// it is valid; reads may repeat (clients poll).
func TestReplayedWritesAreRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := makeCluster(t, e, adminCaller(e), "prod")

	exp := e.clock.Now().UTC().Add(5 * time.Minute).Format(time.RFC3339)
	scale := signedCS(url.Values{"apiKey": {e.admin.APIKey}, "command": {"scaleKubernetesCluster"}, "id": {c.ID}, "size": {"3"},
		"response": {"json"}, "signatureversion": {"3"}, "expires": {exp}}, e.adminSec)
	if code, body, _ := rawGet(t, e, "/client/api?"+scale, nil); code != 200 {
		t.Fatalf("first scale: %d %s", code, body)
	}
	code, body, _ := rawGet(t, e, "/client/api?"+scale, nil)
	if code != 401 || !strings.Contains(body, "already used") {
		t.Fatalf("replayed scale: %d %s", code, body)
	}
	// The same write sent as a POST form is the same signature.
	form, _ := url.ParseQuery(scale)
	resp, err := e.ts.Client().PostForm(e.ts.URL+"/client/api", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("replayed scale as POST: %d", resp.StatusCode)
	}
	list := signedCS(url.Values{"apiKey": {e.admin.APIKey}, "command": {"listKubernetesClusters"}, "response": {"json"},
		"signatureversion": {"3"}, "expires": {exp}}, e.adminSec)
	for i := 0; i < 3; i++ {
		if code, body, _ := rawGet(t, e, "/client/api?"+list, nil); code != 200 {
			t.Fatalf("repeated read %d: %d %s", i, code, body)
		}
	}

	// REST: a signed POST sent twice.
	a := e.rest(e.admin.APIKey, e.adminSec)
	auth := a.Authorization("POST", "/api/v1/clusters/prod/stop", nil, nil, e.clock.Now().Add(5*time.Minute))
	post := func() (int, string) {
		req, _ := http.NewRequest("POST", e.ts.URL+"/api/v1/clusters/prod/stop", nil)
		req.Header.Set("Authorization", auth)
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(); code != 202 {
		t.Fatalf("first stop: %d %s", code, body)
	}
	if code, body := post(); code != 401 || !strings.Contains(body, "already used") {
		t.Fatalf("replayed stop: %d %s", code, body)
	}
}

// TestReplayMemoryRefusesWhenFull: when the memory holds as many unexpired
// signatures as one key may have (a sixteenth of it), that key's writes are
// refused (never forgotten early) while other keys still write; as they
// expire, room comes back.
func TestReplayMemoryRefusesWhenFull(t *testing.T) {
	e := newEnv(t, envOpts{sigs: &auth.SignaturePolicy{RequireExpiryREST: true, MaxLifetime: 20 * time.Minute, ReplayMemory: 32}})
	write := func(key, secret string, size int) (int, string, http.Header) {
		q := signedCS(url.Values{"apiKey": {key}, "command": {"scaleKubernetesCluster"}, "id": {"none"},
			"size": {fmt.Sprint(size)}, "response": {"json"}, "signatureversion": {"3"},
			"expires": {e.clock.Now().UTC().Add(time.Minute).Format(time.RFC3339)}}, secret)
		return rawGet(t, e, "/client/api?"+q, nil)
	}
	for size := 1; size <= 2; size++ {
		if code, body, _ := write(e.user.APIKey, e.userSec, size); code != 431 { // accepted, then "no such cluster"
			t.Fatalf("write %d: %d %s", size, code, body)
		}
	}
	code, body, hdr := write(e.user.APIKey, e.userSec, 3)
	if code != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "too many signed writes") {
		t.Fatalf("write into a full share: %d %s", code, body)
	}
	if code, body, _ := write(e.admin.APIKey, e.adminSec, 3); code != 431 {
		t.Fatalf("another key's write while one key's share is full: %d %s", code, body)
	}
	e.clock.Advance(2 * time.Minute)
	if code, body, _ := write(e.user.APIKey, e.userSec, 4); code != 431 {
		t.Fatalf("write after the remembered ones expired: %d %s", code, body)
	}
	if n := e.srv.verifier.RememberedWrites(); n != 1 {
		t.Fatalf("%d signatures remembered, want 1", n)
	}
}

// restNoExpiry is an unversioned REST signature: ztpd-expires is empty and
// the header has no expires field.
func restNoExpiry(key, secret, method, path string) string {
	v := url.Values{"ztpd-method": {method}, "ztpd-path": {path}, "ztpd-expires": {""}, "ztpd-apikey": {key}}
	return fmt.Sprintf("ZTPD-HMAC-SHA1 apikey=%s, signature=%s", key, apitest.HMACExact(secret, apitest.EncodeValues(v)))
}

// TestUnversionedSignatures: REST refuses signatures without expires unless
// api.require_expiry_rest is off; CloudStack accepts them (its own clients
// may send them) unless api.require_expiry_cloudstack is on.
func TestUnversionedSignatures(t *testing.T) {
	unversionedCS := func(e *env) (int, string) {
		q := signedCS(url.Values{"apiKey": {e.admin.APIKey}, "command": {"listZones"}, "response": {"json"}}, e.adminSec)
		code, body, _ := rawGet(t, e, "/client/api?"+q, nil)
		return code, body
	}
	unversionedREST := func(e *env) (int, string) {
		code, body, _ := rawGet(t, e, "/api/v1/offerings", http.Header{"Authorization": {restNoExpiry(e.admin.APIKey, e.adminSec, "GET", "/api/v1/offerings")}})
		return code, body
	}

	def := newEnv(t, envOpts{})
	if code, body := unversionedREST(def); code != 401 || !strings.Contains(body, "expires") {
		t.Fatalf("default: unversioned REST: %d %s", code, body)
	}
	if code, body := unversionedCS(def); code != 200 {
		t.Fatalf("default: unversioned CloudStack: %d %s", code, body)
	}

	relaxed := newEnv(t, envOpts{sigs: &auth.SignaturePolicy{RequireExpiryREST: false}})
	if code, body := unversionedREST(relaxed); code != 200 {
		t.Fatalf("require_expiry_rest off: unversioned REST: %d %s", code, body)
	}

	strict := newEnv(t, envOpts{sigs: &auth.SignaturePolicy{RequireExpiryREST: true, RequireExpiryCloudStack: true}})
	if code, body := unversionedCS(strict); code != 401 || !strings.Contains(body, "signatureversion=3") {
		t.Fatalf("require_expiry_cloudstack on: unversioned CloudStack: %d %s", code, body)
	}
	// Versioned requests are unaffected.
	strict.adminClient().ok("listZones", nil, false)
}

// TestExpiresIsCapped: a signature cannot be minted to last a year; the
// SDK's 15 minutes are fine (the SDK test runs with the defaults).
func TestExpiresIsCapped(t *testing.T) {
	e := newEnv(t, envOpts{})
	far := &csClient{t: t, base: e.ts.URL, apiKey: e.admin.APIKey, secret: e.adminSec, http: e.ts.Client(),
		expires: time.Now().UTC().AddDate(1, 0, 0)}
	r := far.call("listZones", nil, false)
	if r.status != 401 || !strings.Contains(string(r.raw), "at most 20m0s ahead") {
		t.Fatalf("expires a year ahead: %d %s", r.status, r.raw)
	}
	a := e.rest(e.admin.APIKey, e.adminSec)
	auth := a.Authorization("GET", "/api/v1/offerings", nil, nil, time.Now().AddDate(1, 0, 0))
	if code, body, _ := rawGet(t, e, "/api/v1/offerings", http.Header{"Authorization": {auth}}); code != 401 {
		t.Fatalf("REST expires a year ahead: %d %s", code, body)
	}
	e.adminClient().ok("listZones", nil, false) // 15 minutes, as the SDK signs
}

func adminCaller(e *env) clusters.Caller { return e.fx.AdminCaller() }
