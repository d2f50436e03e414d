package sdktest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/kubeletsim"
	"github.com/ztpd/ztpd/testenv/netns"
	"github.com/ztpd/ztpd/testenv/testpki"
)

// TestSwitchModeRealControlPlane: a SONiC switch that joined a
// real cluster with its certificate moves cluster -> standalone ->
// cluster through its desired state (PUT /api/v1/devices/{id}/desired on
// the admin socket). Standalone: ztpd cordons and drains its Node, the
// switch's agent disables KUBERNETES_MASTER|SERVER (`config kube server
// disable on`), the Node is deleted and the member left, and the switch
// keeps its agent. Back to cluster: its agent runs the join plugin with
// an enrollment minted into its own document (the normal join path and
// admission rules), the switch gets a new certificate and its Node comes
// back Ready. Simulated: the switch's kubelet and its `config` command.
func TestSwitchModeRealControlPlane(t *testing.T) {
	if err := controlplane.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("skipping: python3 is not installed (the device agent)")
	}
	const version = "v1.37.2"
	bins := kubebin.Require(t, version)
	etcd := kubebin.RequireEtcd(t)
	// The control plane in namespace 10, the switch in namespace 12
	// (addresses apart from TestDayTwoRealControlPlane's 0-2).
	const cpI, swI = 10, 12
	ns0, mac0 := d2Namespace(t, cpI)
	nsSw, macSw := d2Namespace(t, swI)
	var plane *controlplane.ControlPlane
	t.Cleanup(func() {
		if plane != nil {
			if err := plane.Stop(); err != nil {
				t.Error(err)
			}
		}
	})
	deviceBase, cfg, _, ztpd := serveDayTwo(t, cpI, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	admin := clusters.LocalAdmin
	v, err := ztpd.Clusters.AddVersion(ctx, admin, clusters.VersionSpec{SemVer: strings.TrimPrefix(version, "v"), URL: deviceBase + "/isos/" + version + ".iso"})
	if err != nil {
		t.Fatal(err)
	}
	cl, j, err := ztpd.Clusters.CreateCluster(ctx, admin, clusters.ClusterSpec{Name: "fabric", ZoneID: ztpd.Clusters.Zone().ID, VersionID: v.ID,
		ServiceOfferingID: clusters.Offerings[0].ID, Size: 1, ControlNodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, ztpd.Clusters, j, core.JobSucceeded)

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

	// The control plane.
	lease(d2Node(cpI), mac0)
	sec, err := ztpd.Joiner.Enroll(ctx, joiner.EnrollRequest{Cluster: cl.ID, MAC: mac0})
	if err != nil {
		t.Fatal(err)
	}
	d0 := post(ns0, map[string]string{"enrollment": sec.Reveal(), "mac": mac0, "hostname": "fabric-cp", "kind": "vm"})
	root0 := filepath.Join(t.TempDir(), "cp")
	d2WriteFiles(t, []byte(d0.CloudConfig), root0)
	kubeadmConfig, caCert, caKey, manifests, err := controlplane.InputsFromRoot(root0)
	if err != nil {
		t.Fatal(err)
	}
	plane, err = controlplane.Start(ctx, controlplane.Config{Kubernetes: bins, Etcd: etcd, KubeadmConfig: kubeadmConfig,
		CACert: caCert, CAKey: caKey, Manifests: manifests, Dir: filepath.Join(t.TempDir(), "plane"),
		Run: controlplane.NetnsRun(ns0), Dial: controlplane.NetnsDial(ns0)})
	if err != nil {
		t.Fatal(err)
	}
	pool := kubeletsim.NewPool(kubeletsim.PoolOptions{Dial: kubeletsim.DialFunc(controlplane.NetnsDial(ns0))})
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	kubeletConf, err := os.ReadFile(filepath.Join(plane.KubernetesDir(), "kubelet.conf"))
	if err != nil {
		t.Fatal(err)
	}
	cpKubelet, err := pool.Start(context.Background(), kubeletsim.Config{NodeName: d0.NodeName, BootstrapKubeconfig: kubeletConf,
		Labels: d0.NodeLabels, InternalIP: d2Node(cpI), KubeletVersion: version, RunPods: true, StatusEvery: time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cpKubelet.Stop)
	if err := cpKubelet.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	if err := plane.MarkControlPlane(ctx); err != nil {
		t.Fatal(err)
	}

	// The switch joins with its certificate, as its ZTP join plugin would.
	if err := ztpd.Store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: macSw, MAC: macSw, Kind: core.KindSONiC, Serial: "SN-LEAF-9", Hostname: "leaf-9",
			Product: "Accton-AS7712-32X", State: core.StateLeased})
	}); err != nil {
		t.Fatal(err)
	}
	lease(d2Node(swI), macSw)
	sec, err = ztpd.Joiner.Enroll(ctx, joiner.EnrollRequest{Cluster: cl.ID, MAC: macSw})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, func() error { // the switch waits for the first control plane's endpoint
		c, err := ztpd.Clusters.GetCluster(ctx, admin, cl.ID)
		if err != nil || c.Cluster.State != core.ClusterRunning {
			return fmt.Errorf("cluster %v %v", c.Cluster.State, err)
		}
		return nil
	})
	// The switch makes its key, as its join plugin does, and asks for a
	// certificate for it.
	rootSw := filepath.Join(t.TempDir(), "leaf")
	swKey, swCSR, err := testpki.DeviceCSR()
	if err != nil {
		t.Fatal(err)
	}
	installDelivery(t, joiner.Delivery{Files: []joiner.DeliveredFile{{Path: bundle.SonicClientKeyPath, Mode: "0600", Content: string(swKey)}}}, rootSw)
	dsw := post(nsSw, map[string]string{"enrollment": sec.Reveal(), "mac": macSw, "serial": "SN-LEAF-9", "hostname": "leaf-9", "kind": "sonic",
		"csr": string(swCSR)})
	if dsw.Method != "sonic" || !dsw.Agent {
		t.Fatalf("switch bundle: method %q agent %v", dsw.Method, dsw.Agent)
	}
	installDelivery(t, dsw, rootSw)
	var swKubelet *kubeletsim.Kubelet
	startSwitchKubelet := func() {
		t.Helper()
		// The plugin installs the certificate, then the key: wait until
		// they are a pair.
		var cert, key []byte
		for deadline := time.Now().Add(30 * time.Second); ; {
			cert, _ = os.ReadFile(filepath.Join(rootSw, bundle.SonicClientCertPath))
			key, _ = os.ReadFile(filepath.Join(rootSw, bundle.SonicClientKeyPath))
			if _, err := tls.X509KeyPair(cert, key); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		ca, _ := os.ReadFile(filepath.Join(rootSw, fmt.Sprintf(bundle.SonicCAPathPattern, cl.ID)))
		k, err := pool.Start(context.Background(), kubeletsim.Config{NodeName: dsw.NodeName, ClientCertPEM: cert, ClientKeyPEM: key,
			APIServer: "https://" + d2Node(cpI) + ":6443", CACertPEM: ca, Labels: dsw.NodeLabels, InternalIP: d2Node(swI),
			KubeletVersion: version, RunPods: true, StatusEvery: time.Second, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Stop)
		if err := k.WaitRegistered(ctx); err != nil {
			t.Fatal(err)
		}
		swKubelet = k
	}
	startSwitchKubelet()
	memberState := func() core.DeviceState {
		m, err := ztpd.Joiner.Membership(ctx, macSw)
		if err != nil {
			return ""
		}
		return m.State
	}
	eventually(t, time.Minute, func() error {
		if st := memberState(); st != core.StateJoined {
			return fmt.Errorf("switch member %s", st)
		}
		return nil
	})

	rc, err := clientcmd.BuildConfigFromFlags("", plane.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	rc.Dial = controlplane.NetnsDial(ns0)
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	agent := startSwitchAgent(t, ctx, python, nsSw, rootSw)
	// The switch's `config kube server disable on` makes ctrmgrd stop its
	// kubelet: the simulated kubelet stops.
	go func() {
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			if d2Exists(filepath.Join(rootSw, "reset-requested")) && !d2Exists(filepath.Join(rootSw, "reset-done")) {
				swKubelet.Stop()
				os.WriteFile(filepath.Join(rootSw, "reset-done"), nil, 0o644)
			}
		}
	}()

	// cluster -> standalone.
	code, body := adminREST(t, cfg, http.MethodPut, "/api/v1/devices/"+macSw+"/desired", `{"mode":"standalone"}`)
	var ans struct {
		Rollout struct {
			ID string `json:"id"`
		} `json:"rollout"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || code != http.StatusAccepted || ans.Rollout.ID == "" {
		t.Fatalf("switch to standalone: %d %s", code, body)
	}
	r, err := ztpd.Rollouts.Wait(ctx, ans.Rollout.ID)
	if err != nil || r.State != core.RolloutSucceeded {
		t.Fatalf("standalone rollout: %v %s %s", err, r.State, r.Reason)
	}
	if _, err := kube.CoreV1().Nodes().Get(ctx, dsw.NodeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the standalone switch's Node: %v", err)
	}
	if st := memberState(); st != core.StateLeft {
		t.Fatalf("standalone switch's membership: %s", st)
	}
	if d, err := ztpd.Desired.Get(macSw); err != nil || d.Mode != core.ModeStandalone || d.Cluster != "" {
		t.Fatalf("desired state after standalone: %+v %v", d, err)
	}
	if calls := agent.calls(); !strings.Contains(calls, "config kube server disable on") ||
		!strings.Contains(calls, "config feature owner telemetry local") || strings.Contains(calls, "owner snmp") {
		t.Fatalf("the switch's agent ran:\n%s", calls)
	}
	oldCred := agentCredential(t, rootSw)
	if dev, err := ztpd.Joiner.AuthenticateAgent(ctx, oldCred, netip.MustParseAddr(d2Node(swI))); err != nil || dev != macSw {
		t.Fatalf("the standalone switch's agent credential: %q %v (it must stay valid)", dev, err)
	}

	// A standalone switch's image upgrade: hooks and the image only, no
	// Kubernetes step and no Node. Its fakes are installed here (the later
	// upgrade in its cluster uses them too).
	addImage := func(name, kind, content string) {
		t.Helper()
		if _, _, err := ztpd.Images.Add(ctx, strings.NewReader(content), imagestore.Meta{Name: name, Kind: kind}, ""); err != nil {
			t.Fatal(err)
		}
	}
	addImage("snapshot-bgp", "file", "#!/bin/sh\necho \"snapshot $ZTPD_STEP\" >> \"$ZTPD_ROOT/hooks.log\"\n")
	addImage("compare-bgp", "file", "#!/bin/sh\necho \"compare $ZTPD_STEP\" >> \"$ZTPD_ROOT/hooks.log\"\n")
	addImage("sonic-202505", "sonic-installer", "SONiC 202505 image "+strings.Repeat("x", 4096))
	bootID := filepath.Join(rootSw, "proc/sys/kernel/random/boot_id")
	if err := os.MkdirAll(filepath.Dir(bootID), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bootID, []byte("boot-1\n"), 0o644)
	for name, script := range map[string]string{
		"sonic-installer": "#!/bin/sh\necho \"sonic-installer $*\" >> \"$ZTPD_ROOT/calls.log\"\n",
		// A reboot: the next run of the agent is in a new boot.
		"reboot": "#!/bin/sh\necho reboot >> \"$ZTPD_ROOT/calls.log\"\necho boot-$(date +%s%N) > \"$ZTPD_ROOT/proc/sys/kernel/random/boot_id\"\n",
	} {
		if err := os.WriteFile(filepath.Join(rootSw, "fakebin", name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before := agent.calls()
	code, body = adminREST(t, cfg, http.MethodPost, "/api/v1/rollouts", `{"kind":"image","target":"sonic-202505","devices":["`+macSw+`"],`+
		`"hooks":{"pre_upgrade":"snapshot-bgp","post_upgrade":"compare-bgp"}}`)
	var standaloneImage struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &standaloneImage); err != nil || code != http.StatusAccepted {
		t.Fatalf("standalone image rollout: %d %s", code, body)
	}
	if r, err = ztpd.Rollouts.Wait(ctx, standaloneImage.ID); err != nil || r.State != core.RolloutSucceeded {
		t.Fatalf("standalone image rollout: %v %s %s", err, r.State, r.Reason)
	}
	if did := strings.TrimPrefix(agent.calls(), before); !strings.Contains(did, "sonic-installer install -y") || !strings.Contains(did, "reboot") ||
		strings.Contains(did, "config kube") || strings.Contains(did, "kubeadm") {
		t.Fatalf("the standalone switch's agent ran:\n%s", did)
	}
	if hooks, _ := os.ReadFile(filepath.Join(rootSw, "hooks.log")); string(hooks) != "snapshot pre_upgrade\ncompare post_upgrade\n" {
		t.Fatalf("hooks of the standalone upgrade: %q", hooks)
	}
	if st := memberState(); st != core.StateLeft {
		t.Fatalf("the standalone switch's membership after its image upgrade: %s", st)
	}
	os.Remove(filepath.Join(rootSw, "hooks.log"))

	// standalone -> cluster: the normal join path, from the agent.
	back := time.Now()
	code, body = adminREST(t, cfg, http.MethodPut, "/api/v1/devices/"+macSw+"/desired", `{"mode":"cluster","cluster":"`+cl.ID+`"}`)
	if err := json.Unmarshal(body, &ans); err != nil || code != http.StatusAccepted || ans.Rollout.ID == "" {
		t.Fatalf("switch back to cluster: %d %s", code, body)
	}
	// The plugin the agent runs installs a new certificate: ctrmgrd's
	// kubelet starts with it.
	go func() {
		certPath := filepath.Join(rootSw, bundle.SonicClientCertPath)
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			if fi, err := os.Stat(certPath); err == nil && fi.ModTime().After(back) {
				startSwitchKubelet()
				return
			}
		}
	}()
	r, err = ztpd.Rollouts.Wait(ctx, ans.Rollout.ID)
	if err != nil || r.State != core.RolloutSucceeded {
		t.Fatalf("join rollout: %v %s %s\nagent:\n%s", err, r.State, r.Reason, agent.output())
	}
	nd, err := kube.CoreV1().Nodes().Get(ctx, dsw.NodeName, metav1.GetOptions{})
	if err != nil || !d2Ready(nd) {
		t.Fatalf("the switch's Node after rejoining: %v", err)
	}
	eventually(t, time.Minute, func() error {
		if st := memberState(); st != core.StateJoined {
			return fmt.Errorf("switch member %s", st)
		}
		return nil
	})
	if d, _ := ztpd.Desired.Get(macSw); d.Mode != core.ModeCluster || d.Cluster != cl.ID {
		t.Fatalf("desired state after rejoining: %+v", d)
	}
	// The agent goes on with the credential of its new bundle; the old
	// one is gone.
	newCred := agentCredential(t, rootSw)
	if dev, err := ztpd.Joiner.AuthenticateAgent(ctx, newCred, netip.MustParseAddr(d2Node(swI))); err != nil || dev != macSw || newCred == oldCred {
		t.Fatalf("the rejoined switch's new agent credential: %q %v", dev, err)
	}
	if _, err := ztpd.Joiner.AuthenticateAgent(ctx, oldCred, netip.MustParseAddr(d2Node(swI))); err == nil {
		t.Fatal("the switch's previous agent credential still works")
	}

	// A SONiC image upgrade of the switch in its cluster, with hooks from
	// the image store: drained, pre_upgrade, leave (Node deleted), the
	// image installed (its sha256 checked), reboot, rejoin, post_upgrade.
	os.Remove(filepath.Join(rootSw, "reset-requested"))
	os.Remove(filepath.Join(rootSw, "reset-done"))
	upgradeStart, callsBefore := time.Now(), agent.calls()
	go func() {
		certPath := filepath.Join(rootSw, bundle.SonicClientCertPath)
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			if fi, err := os.Stat(certPath); err == nil && fi.ModTime().After(upgradeStart) {
				startSwitchKubelet()
				return
			}
		}
	}()
	code, body = adminREST(t, cfg, http.MethodPost, "/api/v1/rollouts", `{"cluster":"`+cl.ID+`","kind":"image","target":"sonic-202505",`+
		`"devices":["`+macSw+`"],"hooks":{"pre_upgrade":"snapshot-bgp","post_upgrade":"compare-bgp"}}`)
	var started struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &started); err != nil || code != http.StatusAccepted || started.ID == "" {
		t.Fatalf("image rollout: %d %s", code, body)
	}
	r, err = ztpd.Rollouts.Wait(ctx, started.ID)
	if err != nil || r.State != core.RolloutSucceeded {
		t.Fatalf("image rollout: %v %s %s\nagent:\n%s", err, r.State, r.Reason, agent.output())
	}
	calls := strings.TrimPrefix(agent.calls(), callsBefore)
	install := strings.Index(calls, "sonic-installer install -y")
	if install < 0 || !strings.Contains(calls[:install], "config kube server disable on") ||
		strings.LastIndex(calls, "config kube server disable on") > install || !strings.Contains(calls[install:], "reboot") {
		t.Fatalf("the switch's agent ran:\n%s", calls)
	}
	hooks, _ := os.ReadFile(filepath.Join(rootSw, "hooks.log"))
	if string(hooks) != "snapshot pre_upgrade\ncompare post_upgrade\n" {
		t.Fatalf("hooks ran: %q", hooks)
	}
	nd, err = kube.CoreV1().Nodes().Get(ctx, dsw.NodeName, metav1.GetOptions{})
	if err != nil || !d2Ready(nd) || nd.Spec.Unschedulable {
		t.Fatalf("the switch's Node after its image upgrade: %v", err)
	}
	if d, _ := ztpd.Desired.Get(macSw); d.Image != "sonic-202505" {
		t.Fatalf("desired image after the upgrade: %q", d.Image)
	}

	// Rollout controls on the same switch.
	startImage := func(hook string) string {
		t.Helper()
		os.Remove(filepath.Join(rootSw, "reset-requested"))
		os.Remove(filepath.Join(rootSw, "reset-done"))
		upgradeStart = time.Now()
		go func(since time.Time) {
			certPath := filepath.Join(rootSw, bundle.SonicClientCertPath)
			for ctx.Err() == nil {
				time.Sleep(200 * time.Millisecond)
				if fi, err := os.Stat(certPath); err == nil && fi.ModTime().After(since) {
					startSwitchKubelet()
					return
				}
			}
		}(upgradeStart)
		code, body := adminREST(t, cfg, http.MethodPost, "/api/v1/rollouts", `{"cluster":"`+cl.ID+`","kind":"image","target":"sonic-202505",`+
			`"devices":["`+macSw+`"],"hooks":{"pre_upgrade":"`+hook+`"}}`)
		var started struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &started); err != nil || code != http.StatusAccepted {
			t.Fatalf("image rollout: %d %s", code, body)
		}
		return started.ID
	}
	// A failing pre_upgrade hook stops the rollout with its output; the
	// switch is left cordoned, in its cluster.
	addImage("check-bgp", "file", "#!/bin/sh\necho 'bgp: neighbor 10.0.0.1 is down'\nexit 3\n")
	r, err = ztpd.Rollouts.Wait(ctx, startImage("check-bgp"))
	if err != nil || r.State != core.RolloutFailed || !strings.Contains(r.Reason, "pre_upgrade (hook) failed with exit status 3: bgp: neighbor 10.0.0.1 is down") {
		t.Fatalf("rollout with a failing hook: %v %s %q", err, r.State, r.Reason)
	}
	if nd, err := kube.CoreV1().Nodes().Get(ctx, dsw.NodeName, metav1.GetOptions{}); err != nil || !nd.Spec.Unschedulable {
		t.Fatalf("the switch after its failed hook: %v (want it cordoned, still a Node)", err)
	}
	// The agent killed mid-step (power lost during a slow hook): its next
	// run runs the step again and the rollout completes. Paused meanwhile:
	// the node underway finishes, nothing more starts until resumed.
	addImage("slow-snapshot", "file", "#!/bin/sh\necho \"slow $ZTPD_STEP start\" >> \"$ZTPD_ROOT/hooks.log\"\nsleep 3\necho \"slow $ZTPD_STEP end\" >> \"$ZTPD_ROOT/hooks.log\"\n")
	os.Remove(filepath.Join(rootSw, "hooks.log"))
	id := startImage("slow-snapshot")
	eventually(t, time.Minute, func() error {
		b, _ := os.ReadFile(filepath.Join(rootSw, "hooks.log"))
		if !strings.Contains(string(b), "slow pre_upgrade start") {
			return fmt.Errorf("the slow hook has not started: %q", b)
		}
		return nil
	})
	if out, err := exec.Command("pkill", "-9", "-f", filepath.Join(rootSw, "usr/local/bin/ztpd-agent")).CombinedOutput(); err != nil {
		t.Fatalf("killing the agent: %v %s", err, out)
	}
	if _, err := ztpd.Rollouts.Pause(id, "admin"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, func() error {
		r, err := ztpd.Rollouts.Get(id)
		if err != nil || r.Nodes[0].Phase != core.NodeDone || r.State != core.RolloutPaused {
			return fmt.Errorf("paused rollout: %v %s, node %s", err, r.State, r.Nodes[0].Phase)
		}
		return nil
	})
	if _, err := ztpd.Rollouts.Resume(id, "admin"); err != nil {
		t.Fatal(err)
	}
	if r, err = ztpd.Rollouts.Wait(ctx, id); err != nil || r.State != core.RolloutSucceeded {
		t.Fatalf("resumed rollout: %v %s %s", err, r.State, r.Reason)
	}
	resumed := false
	if err := ztpd.Store.View(func(tx core.Tx) error {
		return tx.Events().ListDevice(core.DeviceEvents, macSw, 0, func(e core.Event) (bool, error) {
			resumed = resumed || (e.Type == "agent.step" && strings.Contains(e.Message, "pre_upgrade (hook) running again"))
			return true, nil
		})
	}); err != nil || !resumed {
		t.Fatalf("no event says the interrupted hook ran again (%v)", err)
	}
	// Aborted before its node starts: nothing happens to the switch.
	before = agent.calls()
	id = startImage("snapshot-bgp")
	if _, err := ztpd.Rollouts.Abort(id, "admin"); err != nil {
		t.Fatal(err)
	}
	if r, err = ztpd.Rollouts.Wait(ctx, id); err != nil || r.State != core.RolloutAborted {
		t.Fatalf("aborted rollout: %v %s", err, r.State)
	}
	if r.Nodes[0].Phase == core.NodePending || r.Nodes[0].Phase == core.NodeWithdrawn {
		if agent.calls() != before {
			t.Fatalf("the switch acted on an aborted rollout:\n%s", strings.TrimPrefix(agent.calls(), before))
		}
	} else if r.Nodes[0].Phase != core.NodeDone {
		t.Fatalf("node of the aborted rollout: %s %s", r.Nodes[0].Phase, r.Nodes[0].Reason)
	}
}

// agentCredential is the credential in the agent's installed config.
func agentCredential(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "etc/ztpd/agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Credential string `json:"credential"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.Credential == "" {
		t.Fatalf("agent.json: %v", err)
	}
	return c.Credential
}

// installDelivery writes a switch's delivered files under root, as its
// join plugin does.
func installDelivery(t *testing.T, d joiner.Delivery, root string) {
	t.Helper()
	for _, f := range d.Files {
		var mode uint32 = 0o600
		fmt.Sscanf(f.Mode, "%o", &mode)
		dst := filepath.Join(root, filepath.Clean("/"+f.Path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte(f.Content), os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}
}

// adminREST calls the REST API through the admin socket, as the CLI does
// on the appliance.
func adminREST(t *testing.T, cfg config.Config, method, path, body string) (int, []byte) {
	t.Helper()
	sock := filepath.Join(cfg.DataDir, app.AdminSocketName)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, err := http.NewRequest(method, "http://ztpd"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// switchAgent is d2Agent with a SONiC switch's fake `config` (recorded;
// `kube server disable on` waits for the harness to stop the kubelet).
type switchAgent struct{ *d2Agent }

func (a switchAgent) output() string { return a.calls() }

func startSwitchAgent(t *testing.T, ctx context.Context, python string, ns *netns.NS, root string) switchAgent {
	t.Helper()
	bin := filepath.Join(root, "fakebin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgScript := `#!/bin/sh
echo "config $*" >> "$ZTPD_ROOT/calls.log"
if [ "$1 $2 $3 $4" = "kube server disable on" ]; then
	touch "$ZTPD_ROOT/reset-requested"
	while [ ! -e "$ZTPD_ROOT/reset-done" ]; do sleep 0.2; done
fi
exit 0
`
	if err := os.WriteFile(filepath.Join(bin, "config"), []byte(cfgScript), 0o755); err != nil {
		t.Fatal(err)
	}
	// CONFIG_DB's FEATURE table: telemetry is owned by Kubernetes.
	db := `#!/bin/sh
case "$2 $3 $4" in
"KEYS FEATURE|* ") printf 'FEATURE|telemetry\nFEATURE|snmp\n' ;;
"HGET FEATURE|telemetry set_owner") echo kube ;;
"HGET FEATURE|snmp set_owner") echo local ;;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "sonic-db-cli"), []byte(db), 0o755); err != nil {
		t.Fatal(err)
	}
	// startD2Agent writes its own fakes (kubeadm, systemctl) beside it.
	return switchAgent{startD2Agent(t, ctx, python, ns, root, "")}
}
