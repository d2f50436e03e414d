package api

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// csAnswerBytes are the CloudStack answers built from typed structs, as
// clients have always seen them, IDs, times and the kubeconfig replaced:
// the keys of objects once encoded from maps stay in name order.
const csAnswerBytes = `zones {"listzonesresponse":{"count":1,"zone":[{"allocationstate":"Enabled","description":"ztpd appliance","id":"UUID","localstorageenabled":false,"name":"ztpd","networktype":"Advanced","securitygroupsenabled":false,"type":"Core"}]}}
zones-none {"listzonesresponse":{}}
offerings {"listserviceofferingsresponse":{"count":4,"serviceoffering":[{"cpunumber":2,"cpuspeed":1000,"displaytext":"2 vCPU, 2 GiB","id":"UUID","iscustomized":false,"issystem":false,"memory":2048,"name":"ztpd-small","offerha":false,"state":"Active","storagetype":"shared"},{"cpunumber":2,"cpuspeed":1000,"displaytext":"2 vCPU, 4 GiB","id":"UUID","iscustomized":false,"issystem":false,"memory":4096,"name":"ztpd-medium","offerha":false,"state":"Active","storagetype":"shared"},{"cpunumber":4,"cpuspeed":1000,"displaytext":"4 vCPU, 8 GiB","id":"UUID","iscustomized":false,"issystem":false,"memory":8192,"name":"ztpd-large","offerha":false,"state":"Active","storagetype":"shared"},{"cpunumber":8,"cpuspeed":1000,"displaytext":"8 vCPU, 16 GiB","id":"UUID","iscustomized":false,"issystem":false,"memory":16384,"name":"ztpd-xlarge","offerha":false,"state":"Active","storagetype":"shared"}]}}
offerings-page {"listserviceofferingsresponse":{"count":4,"serviceoffering":[{"cpunumber":2,"cpuspeed":1000,"displaytext":"2 vCPU, 4 GiB","id":"UUID","iscustomized":false,"issystem":false,"memory":4096,"name":"ztpd-medium","offerha":false,"state":"Active","storagetype":"shared"}]}}
offerings-none {"listserviceofferingsresponse":{}}
capabilities {"listcapabilitiesresponse":{"capability":{"allowusercreateprojects":false,"apilimitinterval":0,"apilimitmax":0,"cloudstackversion":"4.20.0 (ztpd)","kubernetesclusterexperimentalfeaturesenabled":false,"kubernetesserviceenabled":true,"userpublictemplateenabled":false}}}
addversion {"addkubernetessupportedversionresponse":{"kubernetessupportedversion":{"id":"UUID","name":"v1.30.2","semanticversion":"1.30.2","isoid":"","isoname":"v1.30.2-Kubernetes-Binaries-ISO","isostate":"Ready","isourl":"http://10.99.0.1:8080/isos/v1.30.2.iso","state":"Enabled","mincpunumber":2,"minmemory":2048,"supportsha":true,"supportsautoscaling":true,"directdownload":false,"created":"TIME"}}}
addversion {"addkubernetessupportedversionresponse":{"kubernetessupportedversion":{"id":"UUID","name":"v1.31.4","semanticversion":"1.31.4","isoid":"","isoname":"v1.31.4-Kubernetes-Binaries-ISO","isostate":"Ready","isourl":"http://10.99.0.1:8080/isos/v1.31.4.iso","state":"Enabled","mincpunumber":2,"minmemory":2048,"supportsha":true,"supportsautoscaling":true,"directdownload":false,"created":"TIME"}}}
updateversion {"updatekubernetessupportedversionresponse":{"kubernetessupportedversion":{"id":"UUID","name":"v1.31.4","semanticversion":"1.31.4","isoid":"","isoname":"v1.31.4-Kubernetes-Binaries-ISO","isostate":"Ready","isourl":"http://10.99.0.1:8080/isos/v1.31.4.iso","state":"Disabled","mincpunumber":2,"minmemory":2048,"supportsha":true,"supportsautoscaling":true,"directdownload":false,"created":"TIME"}}}
create {"createkubernetesclusterresponse":{"id":"UUID","jobid":"UUID"}}
create-job {"kubernetescluster":{"id":"UUID","name":"edge-1","description":"","account":"USER","domainid":"UUID","domain":"ROOT","zoneid":"UUID","zonename":"ztpd","kubernetesversionid":"UUID","kubernetesversionname":"v1.30.2","serviceofferingid":"UUID","serviceofferingname":"ztpd-small","size":1,"controlnodes":1,"masternodes":1,"cpunumber":"4","memory":"4096","state":"Starting","endpoint":"","keypair":"","networkid":"","virtualmachines":[],"ipaddress":"","created":"TIME","autoscalingenabled":false,"minsize":0,"maxsize":0,"clustertype":"CloudManaged","controlofferingid":"UUID","controlofferingname":"ztpd-small","csienabled":false,"etcdnodes":0,"workerofferingid":"UUID","workerofferingname":"ztpd-small","ztpdwaiting":"waiting for its first control plane to start the API server; ztpd has not reached it yet"}}
clusterconfig {"getkubernetesclusterconfigresponse":{"clusterconfig":{"configdata":"KUBECONFIG","id":"UUID","name":"edge-1"}}}
stop {"stopkubernetesclusterresponse":{"jobid":"UUID"}}
stop-job {"displaytext":"Kubernetes cluster stopped","success":true}
deleteversion {"deletekubernetessupportedversionresponse":{"jobid":"UUID"}}
deleteversion-job {"displaytext":"Kubernetes version deleted","success":true}`

var (
	csUUID       = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	csTimestamp  = regexp.MustCompile(`"\d{4}-\d\d-\d\dT[0-9:.+\-Z]+"`)
	csConfigData = regexp.MustCompile(`"configdata":"(?:[^"\\]|\\.)*"`)
)

// TestCloudStackAnswerBytes checks the bytes of every answer whose shape
// ztpd declares (discovery, versions, job starts and results, cluster
// config): a field reordered or renamed in a struct fails here before a
// CloudStack client sees it.
func TestCloudStackAnswerBytes(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, u := e.adminClient(), e.userClient()
	var got []string
	norm := func(raw []byte) string {
		s := csUUID.ReplaceAllString(strings.TrimSpace(string(raw)), "UUID")
		s = csTimestamp.ReplaceAllString(s, `"TIME"`)
		s = strings.ReplaceAll(s, `"account":"`+e.user.APIKey+`"`, `"account":"USER"`)
		return csConfigData.ReplaceAllString(s, `"configdata":"KUBECONFIG"`)
	}
	rec := func(name string, r csResp) map[string]json.RawMessage {
		t.Helper()
		got = append(got, name+" "+norm(r.raw))
		_, in := r.inner(t)
		return in
	}
	job := func(c *csClient, name string, started map[string]json.RawMessage) {
		t.Helper()
		j := c.wait(field[string](t, started, "jobid"))
		got = append(got, name+" "+norm(j["jobresult"]))
	}
	first := func(in map[string]json.RawMessage, key string) string {
		t.Helper()
		var items []map[string]json.RawMessage
		mustJSON(t, in[key], &items)
		return field[string](t, items[0], "id")
	}

	zones := rec("zones", a.call("listZones", nil, false))
	rec("zones-none", a.call("listZones", map[string]string{"name": "nope"}, false))
	offerings := rec("offerings", a.call("listServiceOfferings", nil, false))
	rec("offerings-page", a.call("listServiceOfferings", map[string]string{"page": "2", "pagesize": "1"}, false))
	rec("offerings-none", a.call("listServiceOfferings", map[string]string{"name": "nope"}, false))
	rec("capabilities", a.call("listCapabilities", nil, false))
	add := func(semver string) string {
		t.Helper()
		in := rec("addversion", a.call("addKubernetesSupportedVersion", map[string]string{"semanticversion": semver, "mincpunumber": "2",
			"minmemory": "2048", "url": "http://10.99.0.1:8080/isos/v" + semver + ".iso", "checksum": "{SHA-256}" + strings.Repeat("0f", 32)}, true))
		var v map[string]json.RawMessage
		mustJSON(t, in["kubernetessupportedversion"], &v)
		return field[string](t, v, "id")
	}
	v1, v2 := add("1.30.2"), add("1.31.4")
	rec("updateversion", a.call("updateKubernetesSupportedVersion", map[string]string{"id": v2, "state": "Disabled"}, true))
	cr := rec("create", u.call("createKubernetesCluster", map[string]string{"name": "edge-1", "zoneid": first(zones, "zone"),
		"kubernetesversionid": v1, "serviceofferingid": first(offerings, "serviceoffering"), "size": "1", "controlnodes": "1"}, true))
	job(u, "create-job", cr)
	id := field[string](t, cr, "id")
	e.healthy(id)
	rec("clusterconfig", u.call("getKubernetesClusterConfig", map[string]string{"id": id}, false))
	job(u, "stop-job", rec("stop", u.call("stopKubernetesCluster", map[string]string{"id": id}, true)))
	job(a, "deleteversion-job", rec("deleteversion", a.call("deleteKubernetesSupportedVersion", map[string]string{"id": v2}, true)))

	want := strings.Split(csAnswerBytes, "\n")
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("answer %d:\n got: %s\nwant: %s", i, g, w)
		}
	}
}
