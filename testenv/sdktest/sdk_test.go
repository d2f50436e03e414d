// Package sdktest is the API's acceptance test: the unmodified Apache
// CloudStack Go SDK drives a whole cluster lifecycle against a serving ztpd.
// It is a package of its own so only this test links the SDK.
//
// This file is the lifecycle every SDK release ztpd answers runs: here
// with the root module's cloudstack-go (v2.17.1), and in the module in
// newest/ (a link to this file there) with the newest release, as CloudStack
// clients do not upgrade together.
package sdktest

import (
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/cloudstack-go/v2/cloudstack"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/certcheck"
	"github.com/ztpd/ztpd/testenv/freeport"
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
	var r client.NewAPIKey
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusCreated || r.APIKey == "" || r.SecretKey == "" {
		t.Fatalf("apikey create: %d %v %+v", resp.StatusCode, err, r)
	}
	return r.APIKey, r.SecretKey
}

// External load balancer addresses of the clusters no control plane runs
// behind: loopback addresses nothing listens on (ztpd accepts any IP), so
// ztpd's watch, which probes every cluster's API endpoint, gets "connection
// refused" here and sends nothing onto the host's network.
const (
	lifecycleLBIP = "127.0.7.10"
	tenancyLBIP   = "127.0.7.20"
)

func TestCloudStackSDKLifecycle(t *testing.T) { sdkLifecycle(t, nil) }

// TestCloudStackSDKLifecycleOnEtcd is the same lifecycle against an
// appliance whose store is an embedded etcd member.
func TestCloudStackSDKLifecycleOnEtcd(t *testing.T) {
	sdkLifecycle(t, func(c *config.Config) {
		c.Store = config.Store{Backend: "etcd-embedded", Name: "a1",
			Peers:     []config.StorePeer{{Name: "a1", URL: "http://" + freeport.On(t, "127.0.0.1")}},
			ClientURL: "http://" + freeport.On(t, "127.0.0.1")}
	})
}

func sdkLifecycle(t *testing.T, configure func(*config.Config)) {
	base, cfg, ztpd := inproc.ServeApp(t, configure)
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
	cp.SetExternalloadbalanceripaddress(lifecycleLBIP)
	// The create job ends with the cluster Starting: nothing has booted yet.
	created, err := user.Kubernetes.CreateKubernetesCluster(cp)
	if err != nil || created.Name != "edge-1" || created.Size != 2 || created.State != "Starting" {
		t.Fatalf("create: %v %+v", err, created)
	}
	if created.Kubernetesversionid != v130.Id || created.Cpunumber == "" || created.Memory == "" {
		t.Fatalf("created cluster fields: %+v", created)
	}
	// Its kubeconfig waits for it to run; the SDK gets CloudStack's error
	// saying what the cluster waits for.
	gp := user.Kubernetes.NewGetKubernetesClusterConfigParams()
	gp.SetId(created.Id)
	if _, err := user.Kubernetes.GetKubernetesClusterConfig(gp); err == nil ||
		!strings.Contains(err.Error(), "CloudStack API error 530 (CSExceptionErrorCode: 9999): Kubernetes cluster edge-1 is Starting (waiting for") ||
		!strings.Contains(err.Error(), "its kubeconfig is available once it is Running") {
		t.Fatalf("getKubernetesClusterConfig of a Starting cluster: %v", err)
	}
	inproc.Healthy(t, ztpd, created.Id) // ztpd's watch sees it answer, control plane Ready
	if c, _, err := user.Kubernetes.GetKubernetesClusterByID(created.Id); err != nil || c.State != "Running" {
		t.Fatalf("after a healthy observation: %v %+v", err, c)
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
	if err != nil || started.State != "Starting" {
		t.Fatalf("start: %v %+v", err, started)
	}
	inproc.Healthy(t, ztpd, created.Id) // Running once the watch sees it healthy

	kc, err := user.Kubernetes.GetKubernetesClusterConfig(gp)
	if err != nil || !strings.Contains(kc.Configdata, "certificate-authority-data") || !strings.Contains(kc.Configdata, "client-certificate-data") ||
		!strings.Contains(kc.Configdata, "https://"+lifecycleLBIP+":6443") {
		t.Fatalf("getKubernetesClusterConfig: %v %+v", err, kc)
	}

	// What a CloudStack user does next with it.
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		f := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(f, []byte(kc.Configdata), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(kubectl, "config", "view", "--raw", "--kubeconfig", f, "-o", "jsonpath={.clusters[0].cluster.server}").CombinedOutput(); err != nil || string(out) != "https://"+lifecycleLBIP+":6443" {
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

// TestCloudStackSDKTenancyAndKubeconfig: with the unmodified SDK, a user key
// cannot see or touch another account's cluster; an admin lists all with
// listall; a kubeconfig names its user, is not system:masters and expires
// when configured (checked with the real openssl).
func TestCloudStackSDKTenancyAndKubeconfig(t *testing.T) {
	base, cfg, ztpd := inproc.ServeApp(t, func(c *config.Config) { c.API.KubeconfigTTL = config.Duration(2 * time.Hour) })
	adminKey, adminSecret := newNamedKey(t, cfg, "admin", "ops")
	aliceKey, aliceSecret := newNamedKey(t, cfg, "user", "alice")
	bobKey, bobSecret := newNamedKey(t, cfg, "user", "bob")
	client := func(k, s string) *cloudstack.CloudStackClient {
		c := cloudstack.NewAsyncClient(base+"/client/api", k, s, true)
		c.AsyncTimeout(60)
		return c
	}
	admin, alice, bob := client(adminKey, adminSecret), client(aliceKey, aliceSecret), client(bobKey, bobSecret)

	zones, err := alice.Zone.ListZones(alice.Zone.NewListZonesParams())
	if err != nil || zones.Count != 1 {
		t.Fatalf("listZones: %v", err)
	}
	vp := admin.Kubernetes.NewAddKubernetesSupportedVersionParams(2, 2048, "1.31.4")
	vp.SetUrl(base + "/isos/v1.31.4.iso")
	v, err := admin.Kubernetes.AddKubernetesSupportedVersion(vp)
	if err != nil {
		t.Fatal(err)
	}
	offs, err := alice.ServiceOffering.ListServiceOfferings(alice.ServiceOffering.NewListServiceOfferingsParams())
	if err != nil {
		t.Fatal(err)
	}
	cp := alice.Kubernetes.NewCreateKubernetesClusterParams("", v.Id, "alice-1", offs.ServiceOfferings[0].Id, 1, zones.Zones[0].Id)
	cp.SetExternalloadbalanceripaddress(tenancyLBIP)
	mine, err := alice.Kubernetes.CreateKubernetesCluster(cp)
	if err != nil {
		t.Fatal(err)
	}
	if mine.Account != aliceKey || mine.Domainid == "" || mine.Domain != "ROOT" {
		t.Fatalf("cluster account %q domain %q %q", mine.Account, mine.Domainid, mine.Domain)
	}
	// Running, so bob's refused stop and delete below would have been
	// accepted from its owner.
	inproc.Healthy(t, ztpd, mine.Id)

	// bob: nothing to see, nothing to touch.
	if l, err := bob.Kubernetes.ListKubernetesClusters(bob.Kubernetes.NewListKubernetesClustersParams()); err != nil || l.Count != 0 {
		t.Fatalf("bob lists: %v %+v", err, l)
	}
	lp := bob.Kubernetes.NewListKubernetesClustersParams()
	lp.SetListall(true)
	if l, err := bob.Kubernetes.ListKubernetesClusters(lp); err != nil || l.Count != 0 {
		t.Fatalf("bob lists with listall: %v %+v", err, l)
	}
	if _, n, err := bob.Kubernetes.GetKubernetesClusterByID(mine.Id); err == nil || n != 0 {
		t.Fatalf("bob gets alice's cluster: %d %v", n, err)
	}
	sp := bob.Kubernetes.NewScaleKubernetesClusterParams(mine.Id)
	sp.SetSize(3)
	for what, err := range map[string]error{
		"scale": func() error { _, err := bob.Kubernetes.ScaleKubernetesCluster(sp); return err }(),
		"stop": func() error {
			_, err := bob.Kubernetes.StopKubernetesCluster(bob.Kubernetes.NewStopKubernetesClusterParams(mine.Id))
			return err
		}(),
		"delete": func() error {
			_, err := bob.Kubernetes.DeleteKubernetesCluster(bob.Kubernetes.NewDeleteKubernetesClusterParams(mine.Id))
			return err
		}(),
		"kubeconfig": func() error {
			gp := bob.Kubernetes.NewGetKubernetesClusterConfigParams()
			gp.SetId(mine.Id)
			_, err := bob.Kubernetes.GetKubernetesClusterConfig(gp)
			return err
		}(),
	} {
		if err == nil || !strings.Contains(err.Error(), "Invalid Kubernetes cluster ID: "+mine.Id) {
			t.Errorf("bob %s of alice's cluster: %v", what, err)
		}
	}
	if c, _, err := alice.Kubernetes.GetKubernetesClusterByID(mine.Id); err != nil || c.State != "Running" || c.Size != 1 {
		t.Fatalf("alice's cluster after bob: %v %+v", err, c)
	}

	// The admin: its own account by default, everyone's with listall.
	if l, err := admin.Kubernetes.ListKubernetesClusters(admin.Kubernetes.NewListKubernetesClustersParams()); err != nil || l.Count != 0 {
		t.Fatalf("admin lists its account: %v %+v", err, l)
	}
	lp = admin.Kubernetes.NewListKubernetesClustersParams()
	lp.SetListall(true)
	if l, err := admin.Kubernetes.ListKubernetesClusters(lp); err != nil || l.Count != 1 || l.KubernetesClusters[0].Account != aliceKey {
		t.Fatalf("admin lists all: %v %+v", err, l)
	}

	// alice's kubeconfig: her identity, ztpd's group, 2 hours.
	gp := alice.Kubernetes.NewGetKubernetesClusterConfigParams()
	gp.SetId(mine.Id)
	kc, err := alice.Kubernetes.GetKubernetesClusterConfig(gp)
	if err != nil {
		t.Fatal(err)
	}
	var certB64 string
	for _, line := range strings.Split(kc.Configdata, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "client-certificate-data: "); ok {
			certB64 = v
		}
	}
	certPEM, err := base64.StdEncoding.DecodeString(certB64)
	if err != nil {
		t.Fatalf("client certificate in %q: %v", kc.Configdata, err)
	}
	subject, end := certcheck.SubjectAndEnd(t, certPEM)
	if subject != "O = ztpd:cluster-admins, CN = alice" {
		t.Fatalf("certificate subject %q", subject)
	}
	if d := time.Until(end); d < 119*time.Minute || d > 121*time.Minute {
		t.Fatalf("certificate expires %v, in %v; want in 2h", end, d)
	}
}

// TestCloudStackSDKStuckClusterAndRefusals: the corners an SDK's cleanup
// meets. A create with a parameter ztpd cannot honour is refused with
// CloudStack's 431 naming it; a cluster no device ever boots for is
// deleted at once, and so is one whose control plane got its join bundle
// and never joined; one left Starting goes to Alert at the start timeout,
// from where it is deleted.
func TestCloudStackSDKStuckClusterAndRefusals(t *testing.T) {
	const timeout = 4 * time.Second
	base, cfg, ztpd := inproc.ServeApp(t, func(c *config.Config) { c.API.ClusterStartTimeout = config.Duration(timeout) })
	userKey, userSecret := newKey(t, cfg, "user")
	adminKey, adminSecret := newKey(t, cfg, "admin")
	user := cloudstack.NewAsyncClient(base+"/client/api", userKey, userSecret, true)
	user.AsyncTimeout(60)
	admin := cloudstack.NewAsyncClient(base+"/client/api", adminKey, adminSecret, true)
	zones, err := user.Zone.ListZones(user.Zone.NewListZonesParams())
	if err != nil || zones.Count != 1 {
		t.Fatalf("listZones: %v", err)
	}
	offs, err := user.ServiceOffering.ListServiceOfferings(user.ServiceOffering.NewListServiceOfferingsParams())
	if err != nil {
		t.Fatal(err)
	}
	vp := admin.Kubernetes.NewAddKubernetesSupportedVersionParams(2, 2048, "1.31.4")
	vp.SetUrl(base + "/isos/v1.31.4.iso")
	v, err := admin.Kubernetes.AddKubernetesSupportedVersion(vp)
	if err != nil {
		t.Fatal(err)
	}
	params := func(name string) *cloudstack.CreateKubernetesClusterParams {
		return user.Kubernetes.NewCreateKubernetesClusterParams("", v.Id, name, offs.ServiceOfferings[0].Id, 1, zones.Zones[0].Id)
	}

	ext := params("external")
	ext.SetClustertype("ExternalManaged")
	if _, err := user.Kubernetes.CreateKubernetesCluster(ext); err == nil || !strings.Contains(err.Error(), "CloudStack API error 431 (CSExceptionErrorCode: 4350): an ExternalManaged cluster needs the kubeconfig ztpd reaches it with (parameter kubeconfig)") {
		t.Fatalf("create ExternalManaged: %v", err)
	}

	never, err := user.Kubernetes.CreateKubernetesCluster(params("never-booted"))
	if err != nil || never.State != "Starting" {
		t.Fatalf("create: %v %+v", err, never)
	}
	if del, err := user.Kubernetes.DeleteKubernetesCluster(user.Kubernetes.NewDeleteKubernetesClusterParams(never.Id)); err != nil || !del.Success {
		t.Fatalf("delete of a cluster no device booted for: %v %+v", err, del)
	}

	// A control plane received its join bundle and never came up: nothing
	// joined, so the cluster goes at once, its member reset.
	issued, err := user.Kubernetes.CreateKubernetesCluster(params("never-joined"))
	if err != nil {
		t.Fatal(err)
	}
	const device = "02:00:00:00:0f:01"
	now := time.Now().UTC()
	if err := ztpd.Store.Update(func(tx core.Tx) error {
		if err := tx.Devices().Put(core.Device{ID: device, MAC: device, Kind: core.KindVM, State: core.StateJoinIssued, Cluster: issued.Id,
			Role: "control-plane", FirstSeen: now, LastSeen: now, UpdatedAt: now}); err != nil {
			return err
		}
		if err := tx.Memberships().Put(core.Membership{Device: device, Cluster: issued.Id, Role: "control-plane", State: core.StateJoinIssued,
			Created: now, UpdatedAt: now}); err != nil {
			return err
		}
		return tx.Memberships().Enlist(issued.Id, device, "control-plane")
	}); err != nil {
		t.Fatal(err)
	}
	if del, err := user.Kubernetes.DeleteKubernetesCluster(user.Kubernetes.NewDeleteKubernetesClusterParams(issued.Id)); err != nil || !del.Success {
		t.Fatalf("delete of a cluster whose control plane never joined: %v %+v", err, del)
	}

	// Left Starting, it goes to Alert at the start timeout; there it takes
	// no autoscaling either, and is deleted.
	stuck, err := user.Kubernetes.CreateKubernetesCluster(params("stuck"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout + 10*time.Second)
	for {
		c, _, err := user.Kubernetes.GetKubernetesClusterByID(stuck.Id)
		if err != nil {
			t.Fatal(err)
		}
		if c.State == "Alert" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %s 10s after the start timeout", c.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sp := user.Kubernetes.NewScaleKubernetesClusterParams(stuck.Id)
	sp.SetAutoscalingenabled(true)
	sp.SetMinsize(1)
	sp.SetMaxsize(3)
	if _, err := user.Kubernetes.ScaleKubernetesCluster(sp); err == nil || !strings.Contains(err.Error(), "431") ||
		!strings.Contains(err.Error(), "ztpd cannot honour parameter autoscalingenabled=true") {
		t.Fatalf("scale with autoscaling: %v", err)
	}
	if del, err := user.Kubernetes.DeleteKubernetesCluster(user.Kubernetes.NewDeleteKubernetesClusterParams(stuck.Id)); err != nil || !del.Success {
		t.Fatalf("delete after the start timeout: %v %+v", err, del)
	}
}

// newNamedKey creates an API key with a name over the admin socket.
func newNamedKey(t *testing.T, cfg config.Config, role, name string) (key, secret string) {
	t.Helper()
	c, closeFn, err := app.AdminClient(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	resp, err := c.Post("http://ztpd/admin/apikeys?role="+role+"&name="+name, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r client.NewAPIKey
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("apikey create: %d %v", resp.StatusCode, err)
	}
	return r.APIKey, r.SecretKey
}
