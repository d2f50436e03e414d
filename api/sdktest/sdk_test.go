// Package sdktest is the API's acceptance test: the unmodified Apache
// CloudStack Go SDK drives a whole cluster lifecycle against a serving ztpd.
// It is a package of its own so only this test links the SDK.
package sdktest

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/cloudstack-go/v2/cloudstack"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// newKey creates an API key over the admin socket, as `ztpd apikey create` does.
func newKey(t *testing.T, cfg config.Config, role string) (key, secret string) {
	t.Helper()
	c, closeFn, err := app.AdminClient(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	resp, err := c.Post("http://ztpd/admin/apikeys?role="+role+"&name=sdk", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		APIKey    string `json:"api_key"`
		SecretKey string `json:"secret_key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusCreated || r.APIKey == "" || r.SecretKey == "" {
		t.Fatalf("apikey create: %d %v %+v", resp.StatusCode, err, r)
	}
	return r.APIKey, r.SecretKey
}

func TestCloudStackSDKLifecycle(t *testing.T) {
	base, cfg := inproc.Serve(t, nil)
	adminKey, adminSecret := newKey(t, cfg, "admin")
	userKey, userSecret := newKey(t, cfg, "user")
	admin := cloudstack.NewAsyncClient(base+"/client/api", adminKey, adminSecret, true)
	admin.AsyncTimeout(60)
	user := cloudstack.NewAsyncClient(base+"/client/api", userKey, userSecret, true)
	user.AsyncTimeout(60)

	zones, err := user.Zone.ListZones(user.Zone.NewListZonesParams())
	if err != nil || zones.Count != 1 {
		t.Fatalf("listZones: %v %+v", err, zones)
	}
	offs, err := user.ServiceOffering.ListServiceOfferings(user.ServiceOffering.NewListServiceOfferingsParams())
	if err != nil || offs.Count == 0 {
		t.Fatalf("listServiceOfferings: %v %+v", err, offs)
	}
	offering := offs.ServiceOfferings[0]

	// Versions are admin-only: the user key is refused with CloudStack's error.
	addVersion := func(c *cloudstack.CloudStackClient, semver string) (*cloudstack.AddKubernetesSupportedVersionResponse, error) {
		p := c.Kubernetes.NewAddKubernetesSupportedVersionParams(2, 2048, semver)
		p.SetUrl(base + "/isos/v" + semver + ".iso")
		p.SetChecksum("{SHA-256}" + strings.Repeat("ab", 32))
		p.SetZoneid(zones.Zones[0].Id)
		return c.Kubernetes.AddKubernetesSupportedVersion(p)
	}
	if _, err := addVersion(user, "1.30.2"); err == nil || !strings.Contains(err.Error(), "432") {
		t.Fatalf("user-role addKubernetesSupportedVersion: %v", err)
	}
	v130, err := addVersion(admin, "1.30.2")
	if err != nil || v130.Semanticversion != "1.30.2" || v130.State != "Enabled" || !v130.Supportsha {
		t.Fatalf("add 1.30.2: %v %+v", err, v130)
	}
	v131, err := addVersion(admin, "1.31.4")
	if err != nil {
		t.Fatal(err)
	}
	vl, err := user.Kubernetes.ListKubernetesSupportedVersions(user.Kubernetes.NewListKubernetesSupportedVersionsParams())
	if err != nil || vl.Count != 2 {
		t.Fatalf("list versions: %v %+v", err, vl)
	}

	cp := user.Kubernetes.NewCreateKubernetesClusterParams("rack 7", v130.Id, "edge-1", offering.Id, 2, zones.Zones[0].Id)
	cp.SetControlnodes(1)
	// The API endpoint is known up front, so the kubeconfig can be fetched
	// before any control plane has joined.
	cp.SetExternalloadbalanceripaddress("10.99.7.10")
	created, err := user.Kubernetes.CreateKubernetesCluster(cp)
	if err != nil || created.Name != "edge-1" || created.Size != 2 || created.State != "Running" {
		t.Fatalf("create: %v %+v", err, created)
	}
	if created.Kubernetesversionid != v130.Id || created.Cpunumber == "" || created.Memory == "" {
		t.Fatalf("created cluster fields: %+v", created)
	}

	lp := user.Kubernetes.NewListKubernetesClustersParams()
	lp.SetId(created.Id)
	list, err := user.Kubernetes.ListKubernetesClusters(lp)
	if err != nil || list.Count != 1 || list.KubernetesClusters[0].Name != "edge-1" {
		t.Fatalf("list: %v %+v", err, list)
	}
	got, _, err := user.Kubernetes.GetKubernetesClusterByName("edge-1")
	if err != nil || got.Id != created.Id {
		t.Fatalf("by name: %v %+v", err, got)
	}

	sp := user.Kubernetes.NewScaleKubernetesClusterParams(created.Id)
	sp.SetSize(4)
	scaled, err := user.Kubernetes.ScaleKubernetesCluster(sp)
	if err != nil || scaled.Size != 4 {
		t.Fatalf("scale: %v %+v", err, scaled)
	}

	up, err := user.Kubernetes.UpgradeKubernetesCluster(user.Kubernetes.NewUpgradeKubernetesClusterParams(created.Id, v131.Id))
	if err != nil || up.Kubernetesversionid != v131.Id {
		t.Fatalf("upgrade: %v %+v", err, up)
	}
	// No downgrade: CloudStack's rule, CloudStack's error through the SDK.
	if _, err := user.Kubernetes.UpgradeKubernetesCluster(user.Kubernetes.NewUpgradeKubernetesClusterParams(created.Id, v130.Id)); err == nil {
		t.Fatal("downgrade accepted")
	}

	if _, err := user.Kubernetes.StopKubernetesCluster(user.Kubernetes.NewStopKubernetesClusterParams(created.Id)); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if c, _, err := user.Kubernetes.GetKubernetesClusterByID(created.Id); err != nil || c.State != "Stopped" {
		t.Fatalf("after stop: %v %+v", err, c)
	}
	started, err := user.Kubernetes.StartKubernetesCluster(user.Kubernetes.NewStartKubernetesClusterParams(created.Id))
	if err != nil || started.State != "Running" {
		t.Fatalf("start: %v %+v", err, started)
	}

	gp := user.Kubernetes.NewGetKubernetesClusterConfigParams()
	gp.SetId(created.Id)
	kc, err := user.Kubernetes.GetKubernetesClusterConfig(gp)
	if err != nil || !strings.Contains(kc.Configdata, "certificate-authority-data") || !strings.Contains(kc.Configdata, "client-certificate-data") ||
		!strings.Contains(kc.Configdata, "https://10.99.7.10:6443") {
		t.Fatalf("getKubernetesClusterConfig: %v %+v", err, kc)
	}

	// What a CloudStack user does next with it.
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		f := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(f, []byte(kc.Configdata), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(kubectl, "config", "view", "--raw", "--kubeconfig", f, "-o", "jsonpath={.clusters[0].cluster.server}").CombinedOutput(); err != nil || string(out) != "https://10.99.7.10:6443" {
			t.Fatalf("kubectl config view: %v %s", err, out)
		}
	}

	del, err := user.Kubernetes.DeleteKubernetesCluster(user.Kubernetes.NewDeleteKubernetesClusterParams(created.Id))
	if err != nil || !del.Success {
		t.Fatalf("delete: %v %+v", err, del)
	}
	if _, n, err := user.Kubernetes.GetKubernetesClusterByID(created.Id); err == nil || n != 0 {
		t.Fatalf("cluster still listed after delete: %d %v", n, err)
	}
}
