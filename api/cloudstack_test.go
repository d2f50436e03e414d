package api

import (
	"context"
	"encoding/json"
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

var clusterTypes = map[string]string{
	"id": "string", "name": "string", "description": "string", "zoneid": "string", "zonename": "string",
	"kubernetesversionid": "string", "kubernetesversionname": "string", "serviceofferingid": "string",
	"serviceofferingname": "string", "size": "number", "controlnodes": "number", "masternodes": "number",
	"cpunumber": "string", "memory": "string", "state": "string", "endpoint": "string", "keypair": "string",
	"networkid": "string", "virtualmachines": "array", "ipaddress": "string", "created": "string",
	"autoscalingenabled": "bool", "minsize": "number", "maxsize": "number",
}

var versionTypes = map[string]string{
	"id": "string", "name": "string", "semanticversion": "string", "isoid": "string", "isoname": "string",
	"isostate": "string", "isourl": "string", "state": "string", "mincpunumber": "number", "minmemory": "number",
	"supportsha": "bool", "supportsautoscaling": "bool", "created": "string",
}

func field[T any](t *testing.T, obj map[string]json.RawMessage, name string) T {
	t.Helper()
	var v T
	mustJSON(t, obj[name], &v)
	return v
}

// TestCloudStackLifecycle walks the whole cluster lifecycle as a CloudStack
// client does, checking envelopes, async jobs and JSON types field by field.
func TestCloudStackLifecycle(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.adminClient()

	// Discovery a client needs for createKubernetesCluster.
	zones := a.ok("listZones", nil, false)
	if field[int](t, zones, "count") != 1 {
		t.Fatalf("listZones: %v", zones)
	}
	var zl []map[string]json.RawMessage
	mustJSON(t, zones["zone"], &zl)
	zoneID := field[string](t, zl[0], "id")
	offs := a.ok("listServiceOfferings", map[string]string{"name": "ztpd-medium"}, false)
	var ol []map[string]json.RawMessage
	mustJSON(t, offs["serviceoffering"], &ol)
	checkTypes(t, "serviceoffering", ol[0], map[string]string{"id": "string", "cpunumber": "number", "memory": "number", "cpuspeed": "number"})
	offeringID := field[string](t, ol[0], "id")

	// Versions: add (POST, as the SDK does), list.
	add := func(semver string) map[string]json.RawMessage {
		r := a.ok("addKubernetesSupportedVersion", map[string]string{"semanticversion": semver, "mincpunumber": "2",
			"minmemory": "2048", "url": "http://10.99.0.1:8080/isos/v" + semver + ".iso",
			"checksum": "{SHA-256}" + strings.Repeat("0f", 32)}, true)
		var v map[string]json.RawMessage
		mustJSON(t, r["kubernetessupportedversion"], &v)
		checkTypes(t, "kubernetessupportedversion", v, versionTypes)
		return v
	}
	v130 := add("1.30.2")
	v131 := add("1.31.4")
	if field[string](t, v130, "name") != "v1.30.2" || !field[bool](t, v130, "supportsha") || field[string](t, v130, "state") != "Enabled" {
		t.Fatalf("version: %v", v130)
	}
	vl := a.ok("listKubernetesSupportedVersions", map[string]string{"minimumsemanticversion": "1.31.0"}, false)
	if field[int](t, vl, "count") != 1 {
		t.Fatalf("min semver filter: %s", vl["count"])
	}

	// Create: {id, jobid}; then the job result carries the cluster.
	u := e.userClient()
	cr := u.ok("createKubernetesCluster", map[string]string{"name": "edge-1", "description": "rack 7",
		"zoneid": zoneID, "kubernetesversionid": field[string](t, v130, "id"), "serviceofferingid": offeringID,
		"size": "2", "controlnodes": "3"}, true)
	checkTypes(t, "create", cr, map[string]string{"id": "string", "jobid": "string"})
	clusterID := field[string](t, cr, "id")
	job := u.wait(field[string](t, cr, "jobid"))
	checkTypes(t, "queryasyncjobresult", job, map[string]string{"jobstatus": "number", "jobresultcode": "number",
		"jobresulttype": "string", "jobresult": "object", "jobid": "string", "cmd": "string", "jobinstancetype": "string",
		"jobinstanceid": "string", "created": "string", "completed": "string", "jobprocstatus": "number"})
	if field[int](t, job, "jobstatus") != 1 || field[string](t, job, "jobresulttype") != "object" ||
		field[string](t, job, "jobinstanceid") != clusterID {
		t.Fatalf("create job: %v", job)
	}
	var jr map[string]map[string]json.RawMessage
	mustJSON(t, job["jobresult"], &jr)
	kc := jr["kubernetescluster"]
	checkTypes(t, "jobresult.kubernetescluster", kc, clusterTypes)
	// The job ends with the cluster Starting: nothing has booted yet.
	if field[string](t, kc, "state") != "Starting" || field[int](t, kc, "size") != 2 || field[int](t, kc, "controlnodes") != 3 ||
		field[int](t, kc, "masternodes") != 3 || field[string](t, kc, "cpunumber") != "10" || field[string](t, kc, "memory") != "20480" {
		t.Fatalf("created cluster: %s", job["jobresult"])
	}
	// A Starting cluster has no kubeconfig yet; the error says what it waits for.
	errorBody(t, u.call("getKubernetesClusterConfig", map[string]string{"id": clusterID}, false), "getkubernetesclusterconfigresponse",
		530, 9999, "Kubernetes cluster edge-1 is Starting (waiting for its first control plane to start the API server")
	// ztpd's watch sees its API server answer and its control planes Ready.
	e.healthy(clusterID)
	if st := clusterState(t, e, clusterID); st != core.ClusterRunning {
		t.Fatalf("after a healthy observation: %s", st)
	}
	cfg := u.ok("getKubernetesClusterConfig", map[string]string{"id": clusterID}, false)
	var cc map[string]json.RawMessage
	mustJSON(t, cfg["clusterconfig"], &cc)
	if !strings.Contains(field[string](t, cc, "configdata"), "name: edge-1") {
		t.Fatalf("configdata of a Running cluster: %s", cc["configdata"])
	}

	// Devices join: memberships appear as virtualmachines, the control node's
	// address becomes the endpoint.
	err := e.st.Update(func(tx core.Tx) error {
		for _, d := range []core.Device{{ID: "02:00:00:00:01:01", MAC: "02:00:00:00:01:01", IP: "10.99.1.10", Hostname: "cp-1", State: core.StateJoined},
			{ID: "02:00:00:00:01:02", MAC: "02:00:00:00:01:02", IP: "10.99.1.11", State: core.StateJoinIssued}} {
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			role := "worker"
			if d.Hostname == "cp-1" {
				role = "control-plane"
			}
			if err := tx.Memberships().Put(core.Membership{Device: d.ID, Cluster: clusterID, Role: role, State: d.State}); err != nil {
				return err
			}
			if err := tx.Memberships().Enlist(clusterID, d.ID, role); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	list := u.ok("listKubernetesClusters", map[string]string{"id": clusterID}, false)
	checkTypes(t, "listkubernetesclustersresponse", list, map[string]string{"count": "number", "kubernetescluster": "array"})
	var cl []map[string]json.RawMessage
	mustJSON(t, list["kubernetescluster"], &cl)
	if len(cl) != 1 {
		t.Fatalf("list: %s", list["kubernetescluster"])
	}
	checkTypes(t, "kubernetescluster", cl[0], clusterTypes)
	var vms []map[string]json.RawMessage
	mustJSON(t, cl[0]["virtualmachines"], &vms)
	if len(vms) != 2 || field[string](t, vms[0], "name") != "cp-1" || field[string](t, vms[0], "state") != "Running" ||
		field[string](t, vms[1], "state") != "Starting" {
		t.Fatalf("virtualmachines: %s", cl[0]["virtualmachines"])
	}
	if field[string](t, cl[0], "endpoint") != "https://10.99.1.10:6443/" || field[string](t, cl[0], "ipaddress") != "10.99.1.10" {
		t.Fatalf("endpoint: %s %s", cl[0]["endpoint"], cl[0]["ipaddress"])
	}

	// Scale (POST), upgrade, stop, start, config, delete.
	j := u.ok("scaleKubernetesCluster", map[string]string{"id": clusterID, "size": "4"}, true)
	checkTypes(t, "scale", j, map[string]string{"jobid": "string"})
	job = u.wait(field[string](t, j, "jobid"))
	mustJSON(t, job["jobresult"], &jr)
	if field[int](t, job, "jobstatus") != 1 || field[int](t, jr["kubernetescluster"], "size") != 4 ||
		field[string](t, jr["kubernetescluster"], "cpunumber") != "14" {
		t.Fatalf("scale job: %s", job["jobresult"])
	}
	j = u.ok("upgradeKubernetesCluster", map[string]string{"id": clusterID, "kubernetesversionid": field[string](t, v131, "id")}, true)
	job = u.wait(field[string](t, j, "jobid"))
	mustJSON(t, job["jobresult"], &jr)
	if field[string](t, jr["kubernetescluster"], "kubernetesversionname") != "v1.31.4" {
		t.Fatalf("upgrade job: %s", job["jobresult"])
	}
	j = u.ok("stopKubernetesCluster", map[string]string{"id": clusterID}, true)
	job = u.wait(field[string](t, j, "jobid"))
	var sr map[string]json.RawMessage
	mustJSON(t, job["jobresult"], &sr)
	checkTypes(t, "stop jobresult", sr, map[string]string{"success": "bool", "displaytext": "string"})
	if !field[bool](t, sr, "success") {
		t.Fatalf("stop: %s", job["jobresult"])
	}
	// Stopped: size changes refused (synchronously, 431).
	r := u.call("scaleKubernetesCluster", map[string]string{"id": clusterID, "size": "5"}, true)
	if r.status != 431 {
		t.Fatalf("scale while stopped: %d %s", r.status, r.raw)
	}
	j = u.ok("startKubernetesCluster", map[string]string{"id": clusterID}, true)
	if job = u.wait(field[string](t, j, "jobid")); field[int](t, job, "jobstatus") != 1 || !strings.Contains(string(job["jobresult"]), `"state":"Starting"`) {
		t.Fatalf("start: %s", job["jobresult"])
	}
	e.healthy(clusterID) // started, it is Running once the watch sees it healthy
	cfg = u.ok("getKubernetesClusterConfig", map[string]string{"id": clusterID}, false)
	mustJSON(t, cfg["clusterconfig"], &cc)
	checkTypes(t, "clusterconfig", cc, map[string]string{"id": "string", "name": "string", "configdata": "string"})
	if !strings.Contains(field[string](t, cc, "configdata"), "name: edge-1") {
		t.Fatalf("configdata: %s", cc["configdata"])
	}
	j = u.ok("deleteKubernetesCluster", map[string]string{"id": clusterID}, true)
	job = u.wait(field[string](t, j, "jobid"))
	mustJSON(t, job["jobresult"], &sr)
	if !field[bool](t, sr, "success") {
		t.Fatalf("delete: %s", job["jobresult"])
	}
	// Empty list: {}.
	r = u.call("listKubernetesClusters", nil, false)
	if r.status != 200 || strings.TrimSpace(string(r.raw)) != `{"listkubernetesclustersresponse":{}}` {
		t.Fatalf("empty list: %s", r.raw)
	}
	// Version delete is async and admin-only.
	j = a.ok("deleteKubernetesSupportedVersion", map[string]string{"id": field[string](t, v131, "id")}, true)
	if job = a.wait(field[string](t, j, "jobid")); field[int](t, job, "jobstatus") != 1 {
		t.Fatalf("delete version: %s", job["jobresult"])
	}
}

// errorBody checks a CloudStack error: HTTP status = errorcode, the envelope
// key, and each field's value and type.
func errorBody(t *testing.T, r csResp, key string, code, cscode int, text string) {
	t.Helper()
	if r.status != code {
		t.Fatalf("HTTP %d, want %d: %s", r.status, code, r.raw)
	}
	k, inner := r.inner(t)
	if k != key {
		t.Fatalf("envelope key %q, want %q: %s", k, key, r.raw)
	}
	checkTypes(t, key, inner, map[string]string{"uuidList": "array", "errorcode": "number", "cserrorcode": "number", "errortext": "string"})
	if field[int](t, inner, "errorcode") != code || field[int](t, inner, "cserrorcode") != cscode {
		t.Fatalf("codes: %s", r.raw)
	}
	if got := field[string](t, inner, "errortext"); !strings.Contains(got, text) {
		t.Fatalf("errortext %q does not contain %q", got, text)
	}
}

func TestCloudStackErrors(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, u := e.adminClient(), e.userClient()

	t.Run("wrong signature", func(t *testing.T) {
		bad := &csClient{t: t, base: e.ts.URL, apiKey: e.admin.APIKey, secret: "not-the-secret", http: e.ts.Client()}
		errorBody(t, bad.call("listKubernetesClusters", nil, false), "listkubernetesclustersresponse", 401, 9999, auth.FailedText)
		errorBody(t, bad.call("createKubernetesCluster", map[string]string{"name": "x"}, true), "createkubernetesclusterresponse", 401, 9999, auth.FailedText)
	})
	t.Run("expired request", func(t *testing.T) {
		old := &csClient{t: t, base: e.ts.URL, apiKey: e.admin.APIKey, secret: e.adminSec, http: e.ts.Client(),
			expires: time.Now().UTC().Add(-time.Minute)}
		errorBody(t, old.call("listKubernetesClusters", nil, false), "listkubernetesclustersresponse", 401, 9999, auth.FailedText)
	})
	t.Run("signatureversion 3 without expires", func(t *testing.T) {
		v := url.Values{"command": {"listZones"}, "apiKey": {e.admin.APIKey}, "response": {"json"}, "signatureversion": {"3"}}
		q := apitest.EncodeValues(v)
		resp, err := http.Get(e.ts.URL + "/client/api?" + q + "&signature=" + url.QueryEscape(hmacSig(e.adminSec, q)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("HTTP %d", resp.StatusCode)
		}
	})
	t.Run("unknown API key", func(t *testing.T) {
		ghost := &csClient{t: t, base: e.ts.URL, apiKey: "nobody", secret: "x", http: e.ts.Client()}
		errorBody(t, ghost.call("listZones", nil, false), "listzonesresponse", 401, 9999, auth.FailedText)
	})
	t.Run("no credentials", func(t *testing.T) {
		resp, err := http.Get(e.ts.URL + "/client/api?command=listZones&response=json")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("HTTP %d", resp.StatusCode)
		}
	})
	t.Run("user key on admin command", func(t *testing.T) {
		r := u.call("addKubernetesSupportedVersion", map[string]string{"semanticversion": "1.30.0", "url": "http://x/y.iso"}, true)
		errorBody(t, r, "errorresponse", 432, 9999, "The API [addKubernetesSupportedVersion] does not exist or is not available for the account dev.")
		errorBody(t, u.call("deleteKubernetesSupportedVersion", map[string]string{"id": "x"}, true), "errorresponse", 432, 9999, "not available")
		errorBody(t, u.call("updateKubernetesSupportedVersion", map[string]string{"id": "x", "state": "Disabled"}, true), "errorresponse", 432, 9999, "not available")
		// listApis does not offer them to users.
		l := u.ok("listApis", nil, false)
		if strings.Contains(string(l["api"]), "addKubernetesSupportedVersion") {
			t.Fatal("listApis shows admin commands to a user key")
		}
	})
	t.Run("unknown command", func(t *testing.T) {
		errorBody(t, a.call("deployVirtualMachine", nil, false), "errorresponse", 432, 9999, "The given command 'deployVirtualMachine' either does not exist or is not available for user")
	})
	t.Run("missing parameter", func(t *testing.T) {
		errorBody(t, u.call("createKubernetesCluster", map[string]string{"description": "x"}, true), "createkubernetesclusterresponse",
			431, 9999, "Unable to execute API command createkubernetescluster due to missing parameter name")
		errorBody(t, u.call("queryAsyncJobResult", nil, false), "queryasyncjobresultresponse", 431, 9999, "missing parameter jobid")
	})
	t.Run("malformed number", func(t *testing.T) {
		errorBody(t, u.call("scaleKubernetesCluster", map[string]string{"id": "x", "size": "many"}, true), "scalekubernetesclusterresponse",
			431, 9999, "Invalid parameter size value=many")
	})
	t.Run("rule violations", func(t *testing.T) {
		errorBody(t, a.call("addKubernetesSupportedVersion", map[string]string{"semanticversion": "1.10.0", "url": "http://x/y.iso"}, true),
			"addkubernetessupportedversionresponse", 431, 4350, "1.11.0 is minimum")
		errorBody(t, a.call("addKubernetesSupportedVersion", map[string]string{"semanticversion": "1.30", "url": "http://x/y.iso"}, true),
			"addkubernetessupportedversionresponse", 431, 4350, "MAJOR.MINOR.PATCH")
		errorBody(t, u.call("upgradeKubernetesCluster", map[string]string{"id": "nope", "kubernetesversionid": "x"}, true),
			"upgradekubernetesclusterresponse", 431, 4350, "Invalid Kubernetes cluster ID")
		errorBody(t, u.call("queryAsyncJobResult", map[string]string{"jobid": "nope"}, false), "queryasyncjobresultresponse", 431, 4350, "Unable to find async job")
	})
	t.Run("xml response", func(t *testing.T) {
		errorBody(t, a.call("listZones", map[string]string{"response": "xml"}, false), "listzonesresponse", 432, 9999, "response=json")
	})
	t.Run("kubeconfig without joiner", func(t *testing.T) {
		e2 := newEnv(t, envOpts{noJoiner: true})
		c2 := e2.userClient()
		v, err := e2.clusters.AddVersion(context.Background(), clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.30.1", URL: "http://x/y.iso"})
		if err != nil {
			t.Fatal(err)
		}
		cr := c2.ok("createKubernetesCluster", map[string]string{"name": "k", "zoneid": e2.clusters.Zone().ID,
			"kubernetesversionid": v.ID, "serviceofferingid": "ztpd-small", "size": "1"}, true)
		c2.wait(field[string](t, cr, "jobid"))
		id := field[string](t, cr, "id")
		// Starting: what it waits for comes first.
		errorBody(t, c2.call("getKubernetesClusterConfig", map[string]string{"id": id}, false),
			"getkubernetesclusterconfigresponse", 530, 9999, "Kubernetes cluster k is Starting (waiting for")
		// Running, but no joiner holds a CA for it.
		e2.healthy(id)
		errorBody(t, c2.call("getKubernetesClusterConfig", map[string]string{"id": id}, false),
			"getkubernetesclusterconfigresponse", 530, 9999, "cluster CA not provisioned")
	})
}

func TestCloudStackFailedJobResult(t *testing.T) {
	e := newEnv(t, envOpts{})
	u := e.userClient()
	v, _ := e.clusters.AddVersion(context.Background(), clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.30.1", URL: "http://x/y.iso"})
	cr := u.ok("createKubernetesCluster", map[string]string{"name": "k", "zoneid": e.clusters.Zone().ID,
		"kubernetesversionid": v.ID, "serviceofferingid": "ztpd-small", "size": "1"}, true)
	u.wait(field[string](t, cr, "jobid"))
	e.healthy(field[string](t, cr, "id")) // Running: it may be stopped
	// Simulate a restart in the middle of a stop; the recovered job must
	// report failure 530 through queryAsyncJobResult.
	stop := u.ok("stopKubernetesCluster", map[string]string{"id": field[string](t, cr, "id")}, true)
	u.wait(field[string](t, stop, "jobid"))
	err := e.st.Update(func(tx core.Tx) error {
		j, err := tx.Jobs().Get(field[string](t, stop, "jobid"))
		if err != nil {
			return err
		}
		j.Status, j.Completed, j.Success = core.JobPending, time.Time{}, false
		return tx.Jobs().Put(j)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.clusters.Recover(); err != nil || n != 1 {
		t.Fatalf("recover %d %v", n, err)
	}
	job := u.ok("queryAsyncJobResult", map[string]string{"jobid": field[string](t, stop, "jobid")}, false)
	var res map[string]json.RawMessage
	mustJSON(t, job["jobresult"], &res)
	checkTypes(t, "failed jobresult", res, map[string]string{"errorcode": "number", "errortext": "string"})
	if field[int](t, job, "jobstatus") != 2 || field[int](t, job, "jobresultcode") != 530 || field[int](t, res, "errorcode") != 530 ||
		!strings.Contains(field[string](t, res, "errortext"), "restart") {
		t.Fatalf("failed job: %s", job["jobresult"])
	}
}

func TestFailedAuthIsRateLimitedAndLoggedWithoutSecrets(t *testing.T) {
	e := newEnv(t, envOpts{failuresPerMinute: 3})
	bad := &csClient{t: t, base: e.ts.URL, apiKey: e.admin.APIKey, secret: "wrong", http: e.ts.Client()}
	good := e.adminClient()
	for i := 0; i < 3; i++ {
		if r := bad.call("listZones", nil, false); r.status != 401 {
			t.Fatalf("failure %d: HTTP %d", i, r.status)
		}
	}
	// Budget spent: even a correct request from this address waits.
	r := good.call("listZones", nil, false)
	errorBody(t, r, "errorresponse", 429, 9999, "too many failed authentications")
	// The REST API shares the budget.
	resp, err := http.Get(e.ts.URL + "/api/v1/devices")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("REST while blocked: %d %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// One failure's worth of time later (20 s at 3/min) one attempt is allowed.
	e.clock.Advance(21 * time.Second)
	if r := good.call("listZones", nil, false); r.status != 200 {
		t.Fatalf("after refill: %d %s", r.status, r.raw)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "API authentication failed") || !strings.Contains(logs, "signature mismatch") ||
		!strings.Contains(logs, e.admin.APIKey) {
		t.Fatalf("failure not logged usefully:\n%s", logs)
	}
	for _, secret := range []string{e.adminSec, e.userSec, "signature="} {
		if strings.Contains(logs, secret) {
			t.Fatalf("log contains %q:\n%s", secret, logs)
		}
	}
}

func TestCloudStackAcceptsTildeAndSpecialCharacters(t *testing.T) {
	e := newEnv(t, envOpts{})
	u := e.userClient()
	// keyword values with characters the encoders treat differently: the
	// SDK leaves "~" and "*" alone, Java escapes "~"; both must verify.
	for _, kw := range []string{"a~b", "x*y", "with space", "plus+sign", "ümlaut/&="} {
		r := u.call("listKubernetesClusters", map[string]string{"keyword": kw}, false)
		if r.status != 200 {
			t.Fatalf("keyword %q: %d %s", kw, r.status, r.raw)
		}
		if r := u.call("listKubernetesClusters", map[string]string{"keyword": kw}, true); r.status != 200 {
			t.Fatalf("POST keyword %q: %d %s", kw, r.status, r.raw)
		}
	}
}

func TestListApisDescribesCommands(t *testing.T) {
	e := newEnv(t, envOpts{})
	l := e.adminClient().ok("listApis", map[string]string{"name": "createKubernetesCluster"}, false)
	var apis []struct {
		Name    string `json:"name"`
		IsAsync bool   `json:"isasync"`
		Params  []struct {
			Name     string `json:"name"`
			Required bool   `json:"required"`
		} `json:"params"`
	}
	mustJSON(t, l["api"], &apis)
	if len(apis) != 1 || !apis[0].IsAsync {
		t.Fatalf("listApis: %s", l["api"])
	}
	req := map[string]bool{}
	for _, p := range apis[0].Params {
		req[p.Name] = p.Required
	}
	for _, n := range []string{"name", "zoneid"} {
		if !req[n] {
			t.Errorf("param %s not listed as required", n)
		}
	}
	// Optional since 4.19, as in CloudStack: an ExternalManaged cluster
	// names none of them (a CloudManaged create still must).
	for _, n := range []string{"kubernetesversionid", "serviceofferingid", "size"} {
		if r, ok := req[n]; !ok || r {
			t.Errorf("param %s: listed %v, required %v; want listed, optional", n, ok, r)
		}
	}
}
