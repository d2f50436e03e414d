package sdktest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/kubeconfig"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/kubeletsim"
	"github.com/ztpd/ztpd/testenv/netns"
)

// TestExternalClusterRealControlPlane: a real control plane ztpd did not
// build (kubeadm init from a CA this test makes and never gives ztpd) is
// registered as ExternalManaged with a kubeconfig of the documented
// onboarding role (docs/examples/ztpd-onboarder-rbac.yaml). A VM and a
// SONiC switch then join it: ztpd mints their bootstrap tokens as Secrets
// through that API server, the VM runs the real kubeadm join discovery with
// the token and the CA hash ztpd pinned from cluster-info, the switch's
// kubelet bootstraps from the kubeconfig in its bundle, the cluster's own
// controller approves both kubelet certificates, and ztpd sees both Nodes
// Ready through the registered identity. ztpd's store holds no CA key for
// the cluster and the kubeconfig only sealed. Simulated: the kubelets.
func TestExternalClusterRealControlPlane(t *testing.T) {
	if err := controlplane.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	const version = "v1.36.3"
	bins := kubebin.Require(t, version)
	etcd := kubebin.RequireEtcd(t)
	// The foreign control plane in namespace 20, the VM in 21, the switch
	// in 22 (apart from the other real-control-plane tests' addresses).
	const cpI, vmI, swI = 20, 21, 22
	nsCP, _ := d2Namespace(t, cpI)
	nsVM, macVM := d2Namespace(t, vmI)
	nsSw, macSw := d2Namespace(t, swI)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// The cluster's administrators build it: their CA, kubeadm init.
	v := bundle.MustVersion(strings.TrimPrefix(version, "v"))
	ca, err := pki.NewCA("kubernetes", pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := ca.PrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	certKey, err := tokens.GenerateCertificateKey()
	if err != nil {
		t.Fatal(err)
	}
	endpoint := d2Node(cpI) + ":6443"
	initToken, err := tokens.GenerateBootstrapToken() // the administrators' own, never ztpd's
	if err != nil {
		t.Fatal(err)
	}
	plan, err := bundle.PlanInit(bundle.InitParams{Version: v, ControlPlaneEndpoint: endpoint, AdvertiseAddress: d2Node(cpI),
		NodeName: "lab-b-cp", CertificateKey: certKey, EncryptionAlgorithm: pki.ECDSAP256, PodSubnet: "10.244.0.0/16",
		Tokens: []bundle.Token{{Token: initToken, TTL: time.Hour, Description: "administrators' init token"}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plane, err := controlplane.Start(ctx, controlplane.Config{Kubernetes: bins, Etcd: etcd, KubeadmConfig: plan.Config,
		CACert: ca.CertPEM(), CAKey: caKey, Dir: filepath.Join(dir, "cp"),
		Run: controlplane.NetnsRun(nsCP), Dial: controlplane.NetnsDial(nsCP)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := plane.Stop(); err != nil {
			t.Error(err)
		}
	})
	rbac, err := filepath.Abs("../../docs/examples/ztpd-onboarder-rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := plane.Kubectl(ctx, "apply", "-f", rbac); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	issue := func(user string) []byte {
		t.Helper()
		creds, err := kubeconfig.IssueUser(ca, "lab-b", "https://"+endpoint, user, nil, 24*time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		b, err := creds.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	onboarder := issue("ztpd-onboarder")

	deviceBase, cfg, _, ztpd := serveDayTwo(t, cpI, 10*time.Second)
	admin := clusters.LocalAdmin
	if _, err := ztpd.Clusters.AddVersion(ctx, admin, clusters.VersionSpec{SemVer: v.String(), URL: deviceBase + "/isos/" + version + ".iso"}); err != nil {
		t.Fatal(err)
	}
	register := func(name string, kc []byte) (int, []byte) {
		body, _ := json.Marshal(map[string]any{"name": name, "type": "ExternalManaged", "kubeconfig": string(kc)})
		return adminREST(t, cfg, http.MethodPost, "/api/v1/clusters", string(body))
	}
	// An identity without the role is refused, naming what it lacks.
	if code, body := register("lab-b", issue("nobody")); code != http.StatusBadRequest || !strings.Contains(string(body), "create Secrets in kube-system") {
		t.Fatalf("registering with an identity lacking the role: %d %s", code, body)
	}
	code, body := register("lab-b", onboarder)
	if code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("register: %d %s", code, body)
	}
	var cl core.Cluster
	eventually(t, 2*time.Minute, func() error {
		vs, _, err := ztpd.Clusters.ListClusters(ctx, admin, clusters.ClusterFilter{Name: "lab-b"}, 0, 0)
		if err != nil || len(vs) != 1 {
			return fmt.Errorf("lab-b: %v %d", err, len(vs))
		}
		if cl = vs[0].Cluster; cl.State != core.ClusterRunning {
			return fmt.Errorf("lab-b %s", cl.State)
		}
		return nil
	})
	if !cl.IsExternal() || cl.Endpoint != "https://"+endpoint+"/" {
		t.Fatalf("registered cluster: type %q endpoint %q", cl.Type, cl.Endpoint)
	}
	for typ, want := range map[string]int{"ExternalManaged": 1, "CloudManaged": 0} {
		code, body := adminREST(t, cfg, http.MethodGet, "/api/v1/clusters?type="+typ, "")
		var page struct {
			Items []struct{ Name, Type string } `json:"items"`
		}
		if err := json.Unmarshal(body, &page); err != nil || code != http.StatusOK || len(page.Items) != want {
			t.Fatalf("clusters of type %s: %d %s", typ, code, body)
		}
	}
	if _, _, err := ztpd.Clusters.Kubeconfig(ctx, admin, cl.ID); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("kubeconfig of an external cluster: %v", err)
	}
	// ztpd's store: no CA key, the kubeconfig only sealed.
	if err := ztpd.Store.View(func(tx core.Tx) error {
		raw, ok, err := tx.Secrets().Get("cluster/" + cl.ID)
		if err != nil || !ok {
			return fmt.Errorf("cluster secrets: %v %v", ok, err)
		}
		var sec map[string]json.RawMessage
		if err := json.Unmarshal(raw, &sec); err != nil {
			return err
		}
		var own struct {
			SealedKey []byte `json:"sealedKey"`
		}
		if len(sec["ca"]) > 0 {
			if err := json.Unmarshal(sec["ca"], &own); err != nil {
				return err
			}
		}
		if _, ok := sec["external"]; !ok || len(own.SealedKey) > 0 {
			return fmt.Errorf("external cluster's secrets hold a CA key: %s", sec["ca"])
		}
		var ext struct {
			CA []byte `json:"ca_cert"`
		}
		if err := json.Unmarshal(sec["external"], &ext); err != nil || !bytes.Equal(ext.CA, ca.CertPEM()) {
			return fmt.Errorf("pinned CA differs from the cluster's: %v", err)
		}
		for _, leak := range [][]byte{caKey, []byte("BEGIN EC PRIVATE KEY"), []byte("PRIVATE KEY"), []byte("ztpd-onboarder")} {
			if bytes.Contains(raw, leak) {
				return fmt.Errorf("the store holds %q in clear", leak[:min(len(leak), 24)])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	lease := func(ip, mac string) {
		t.Helper()
		now := time.Now().UTC()
		if err := ztpd.Store.Update(func(tx core.Tx) error {
			return tx.Leases().Put(core.Lease{IP: ip, MAC: mac, State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)})
		}); err != nil {
			t.Fatal(err)
		}
	}
	post := func(ns *netns.NS, body map[string]string) joiner.Delivery {
		t.Helper()
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: controlplane.NetnsDial(ns)}}
		b, _ := json.Marshal(body)
		resp, err := hc.Post(deviceBase+"/join", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d joiner.Delivery
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /join: %d %v", resp.StatusCode, err)
		}
		return d
	}
	secretOf := func(device string) {
		t.Helper()
		m, err := ztpd.Joiner.Membership(ctx, device)
		if err != nil || m.TokenID == "" {
			t.Fatalf("membership of %s: token %q %v", device, m.TokenID, err)
		}
		out, err := plane.Kubectl(ctx, "-n", "kube-system", "get", "secret", "bootstrap-token-"+m.TokenID, "-o", "jsonpath={.type} {.data.expiration}")
		if err != nil || !strings.HasPrefix(string(out), "bootstrap.kubernetes.io/token ") {
			t.Fatalf("the device's bootstrap token in the cluster: %v %s", err, out)
		}
	}
	pool := kubeletsim.NewPool(kubeletsim.PoolOptions{Dial: kubeletsim.DialFunc(controlplane.NetnsDial(nsCP))})
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	startKubelet := func(d joiner.Delivery, ip string, bootstrap []byte) {
		t.Helper()
		k, err := pool.Start(context.Background(), kubeletsim.Config{NodeName: d.NodeName, BootstrapKubeconfig: bootstrap,
			Labels: d.NodeLabels, InternalIP: ip, KubeletVersion: version, StatusEvery: time.Second, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Stop)
		if err := k.WaitRegistered(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The VM: kubeadm join with the token and the pinned CA hash.
	lease(d2Node(vmI), macVM)
	sec, err := ztpd.Joiner.Enroll(ctx, joiner.EnrollRequest{Cluster: cl.ID, MAC: macVM})
	if err != nil {
		t.Fatal(err)
	}
	dvm := post(nsVM, map[string]string{"enrollment": sec.Reveal(), "mac": macVM, "hostname": "lab-b-vm", "kind": "vm"})
	if dvm.Role != joiner.RoleWorker || dvm.Init || dvm.CAHash != pki.DiscoveryHash(ca.Certificate()) {
		t.Fatalf("VM bundle: role %q init %v CA hash %s", dvm.Role, dvm.Init, dvm.CAHash)
	}
	secretOf(macVM)
	rootVM := filepath.Join(dir, "vm")
	d2WriteFiles(t, []byte(dvm.CloudConfig), rootVM)
	joinCfg, err := os.ReadFile(filepath.Join(rootVM, bundle.KubeadmConfigPath))
	if err != nil {
		t.Fatal(err)
	}
	jd, err := controlplane.JoinDiscovery(ctx, controlplane.JoinConfig{Kubeadm: bins.Kubeadm, Config: joinCfg,
		Dir: filepath.Join(dir, "vm-kubeadm"), Run: controlplane.NetnsRun(nsCP)})
	if err != nil {
		t.Fatal(err)
	}
	boot, err := os.ReadFile(jd.BootstrapKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	startKubelet(dvm, d2Node(vmI), boot)

	// The switch: a bootstrap kubeconfig for its kubelet, no certificate.
	if err := ztpd.Store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: macSw, MAC: macSw, Kind: core.KindSONiC, Serial: "SN-LAB-B-7", Hostname: "leaf-7",
			Product: "Accton-AS7712-32X", State: core.StateLeased})
	}); err != nil {
		t.Fatal(err)
	}
	lease(d2Node(swI), macSw)
	sec, err = ztpd.Joiner.Enroll(ctx, joiner.EnrollRequest{Cluster: cl.ID, MAC: macSw})
	if err != nil {
		t.Fatal(err)
	}
	dsw := post(nsSw, map[string]string{"enrollment": sec.Reveal(), "mac": macSw, "serial": "SN-LAB-B-7", "hostname": "leaf-7", "kind": "sonic"})
	if dsw.Method != joiner.MethodSONiC || dsw.Role != joiner.RoleSONiC {
		t.Fatalf("switch bundle: method %q role %q", dsw.Method, dsw.Role)
	}
	var swBoot []byte
	for _, f := range dsw.Files {
		switch f.Path {
		case bundle.SonicBootstrapKubeconfigPath:
			swBoot = []byte(f.Content)
		case bundle.SonicClientCertPath:
			t.Fatalf("a switch of an external cluster got a client certificate ztpd signed")
		}
	}
	if swBoot == nil {
		t.Fatalf("switch bundle has no %s", bundle.SonicBootstrapKubeconfigPath)
	}
	secretOf(macSw)
	startKubelet(dsw, d2Node(swI), swBoot)

	// Both Nodes Ready in the cluster, and seen so by ztpd.
	eventually(t, 2*time.Minute, func() error {
		out, err := plane.Kubectl(ctx, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		if err != nil {
			return err
		}
		for _, n := range []string{dvm.NodeName, dsw.NodeName} {
			if !strings.Contains(string(out), n+"=True") {
				return fmt.Errorf("nodes: %s", out)
			}
		}
		ms, err := ztpd.Joiner.Members(ctx, cl.ID)
		if err != nil {
			return err
		}
		joined := 0
		for _, m := range ms {
			if m.State == core.StateJoined && m.Impostor == "" {
				joined++
			}
		}
		if joined != 2 {
			return fmt.Errorf("%d of 2 members joined", joined)
		}
		return nil
	})
	// The kubelet certificates were approved by the cluster's controller
	// for the tokens ztpd minted.
	out, err := plane.Kubectl(ctx, "get", "csr", "-o", `jsonpath={range .items[*]}{.spec.username} {.status.conditions[0].type}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{macVM, macSw} {
		m, _ := ztpd.Joiner.Membership(ctx, dev)
		if !strings.Contains(string(out), "system:bootstrap:"+m.TokenID+" Approved") {
			t.Fatalf("no approved CSR by %s's token %s:\n%s", dev, m.TokenID, out)
		}
	}

	// Unregistering leaves the Nodes to the cluster's administrators.
	code, body = adminREST(t, cfg, http.MethodDelete, "/api/v1/clusters/"+cl.ID, "")
	if code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, body)
	}
	eventually(t, time.Minute, func() error {
		if _, err := ztpd.Clusters.GetCluster(ctx, admin, cl.ID); core.KindOf(err) != core.KindNotFound {
			return fmt.Errorf("still registered: %v", err)
		}
		return nil
	})
	if out, err := plane.Kubectl(ctx, "get", "node", dvm.NodeName, dsw.NodeName, "-o", "name"); err != nil || strings.Count(string(out), "node/") != 2 {
		t.Fatalf("nodes after unregistering: %v %s", err, out)
	}
}
