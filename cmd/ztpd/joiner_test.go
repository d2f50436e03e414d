package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/clusters/clusterstest"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/testenv/certcheck"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// TestClusterKubeconfigAndDeviceApproveCLI drives the real binary on a data
// directory holding a cluster whose first control plane has joined, and
// checks the kubeconfig with the real kubectl.
func TestClusterKubeconfigAndDeviceApproveCLI(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	bin := buildZtpd(t)
	data := filepath.Join(t.TempDir(), "data")
	cfg := config.Default()
	cfg.DataDir = data
	cfg.HTTP.Addr = "127.0.0.1:8080"
	a, err := app.New(cfg, app.NewLogger(io.Discard, "error", "text"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	j := a.Joiner
	// The cluster is created as the API creates it: through the clusters
	// service, which has the joiner provision its CA.
	prod := clusterstest.Cluster(t, a.Clusters, "http://10.99.0.1:8080", "1.31.2", "prod", 2)
	// The first control plane is approved by MAC, joins, and reports back.
	cp := "02:00:00:00:00:01"
	if _, err := j.Approve(ctx, mustDevice(t, a, cp), ""); err != nil {
		t.Fatal(err)
	}
	hold := func(ip, mac string) string {
		now := time.Now().UTC()
		if err := a.Store.Update(func(tx core.Tx) error {
			return tx.Leases().Put(core.Lease{IP: ip, MAC: mac, State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)})
		}); err != nil {
			t.Fatal(err)
		}
		return ip
	}
	sec, _ := j.Enroll(ctx, joiner.EnrollRequest{Cluster: "prod", MAC: cp})
	b, err := j.Join(ctx, joiner.JoinRequest{Enrollment: sec.Reveal(), MAC: cp, RemoteIP: hold("10.99.1.10", cp)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Report(ctx, b.ReportToken(), netip.MustParseAddr("10.99.1.10"), joiner.ReportJoined, ""); err != nil {
		t.Fatal(err)
	}
	// The report is only a hint: ztpd's watch of the cluster's API server
	// sees its Node Ready (the member is joined) and the cluster healthy
	// (Starting -> Running), which is when a kubeconfig is issued.
	nodeReady(t, a, cp)
	inproc.Healthy(t, a, prod.ID)
	// A worker without approval waits.
	w := "02:00:00:00:00:02"
	mustDevice(t, a, w)
	sec, _ = j.Enroll(ctx, joiner.EnrollRequest{Cluster: "prod", MAC: w})
	if _, err := j.Join(ctx, joiner.JoinRequest{Enrollment: sec.Reveal(), MAC: w, RemoteIP: hold("10.99.1.11", w)}); err == nil {
		t.Fatal("unapproved worker joined")
	}
	a.Close()

	kc := filepath.Join(t.TempDir(), "prod.kubeconfig")
	if out, err := exec.Command(bin, "--data-dir", data, "cluster", "kubeconfig", "prod", "-f", kc).CombinedOutput(); err != nil {
		t.Fatalf("cluster kubeconfig: %v\n%s", err, out)
	}
	if fi, err := os.Stat(kc); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig file: %v %v", fi, err)
	}
	out, err := exec.Command(kubectl, "config", "view", "--raw", "--kubeconfig", kc,
		"-o", "jsonpath={.clusters[0].cluster.server} {.users[0].name} {.current-context}").CombinedOutput()
	if err != nil || string(out) != "https://10.99.1.10:6443 local-admin local-admin@prod" {
		t.Fatalf("kubectl: %v %q", err, out)
	}
	// The certificate, as openssl reads it: the local admin's identity in
	// ztpd's group (not system:masters), valid for the default 24 hours.
	certB64, err := exec.Command(kubectl, "config", "view", "--raw", "--kubeconfig", kc,
		"-o", "jsonpath={.users[0].user.client-certificate-data}").Output()
	if err != nil {
		t.Fatal(err)
	}
	subject, notAfter := opensslSubjectEnd(t, string(certB64))
	if !strings.Contains(subject, "CN = local-admin") || !strings.Contains(subject, "O = ztpd:cluster-admins") || strings.Contains(subject, "system:masters") {
		t.Fatalf("kubeconfig certificate subject %q", subject)
	}
	if d := time.Until(notAfter); d < 23*time.Hour || d > 25*time.Hour {
		t.Fatalf("kubeconfig certificate expires %v (in %v), want in 24h", notAfter, d)
	}

	out, err = exec.Command(bin, "--data-dir", data, "-o", "json", "device", "approve", w).CombinedOutput()
	if err != nil {
		t.Fatalf("device approve: %v\n%s", err, out)
	}
	var d core.Device
	if err := json.Unmarshal(out, &d); err != nil || !d.Approved || d.ID != w {
		t.Fatalf("approve output %s", out)
	}
	out, err = exec.Command(bin, "--data-dir", data, "cluster", "members", "prod").CombinedOutput()
	if err != nil || !strings.Contains(string(out), cp) || !strings.Contains(string(out), "joined") {
		t.Fatalf("members: %v\n%s", err, out)
	}
	out, _ = exec.Command(bin, "--data-dir", data, "cluster", "kubeconfig", "nosuch").CombinedOutput()
	if !strings.Contains(string(out), "nosuch") {
		t.Fatalf("unknown cluster error: %s", out)
	}

	// The running server mounts the device-facing join routes.
	s := startServe(t, bin, data)
	resp, err := http.Get("http://" + s.addr + joiner.PluginPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "#!/usr/bin/env python3") {
		t.Fatalf("plugin: %d", resp.StatusCode)
	}
	resp, err = http.Post("http://"+s.addr+"/join", "application/json", strings.NewReader(`{"enrollment":"ztpe1.aaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","mac":"02:00:00:00:00:09"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("join with an unknown secret: %d", resp.StatusCode)
	}
	// With the server running, the CLI goes through its admin socket.
	if out, err := exec.Command(bin, "--data-dir", data, "cluster", "kubeconfig", "prod").CombinedOutput(); err != nil || !strings.Contains(string(out), "client-key-data") {
		t.Fatalf("kubeconfig through the socket: %v\n%.200s", err, out)
	}
	// device reset: the joined first control plane's membership ends (its
	// next fetch may be issued join material again), approval stays.
	out, err = exec.Command(bin, "--data-dir", data, "-o", "json", "device", "reset", cp, "--yes").CombinedOutput()
	if err != nil {
		t.Fatalf("device reset: %v\n%s", err, out)
	}
	d = core.Device{}
	if err := json.Unmarshal(out, &d); err != nil || d.ID != cp || d.Role != "" || !d.Approved {
		t.Fatalf("reset output %s", out)
	}
	out, err = exec.Command(bin, "--data-dir", data, "cluster", "members", "prod").CombinedOutput()
	if err != nil || strings.Contains(string(out), cp) {
		t.Fatalf("members after reset: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "--data-dir", data, "device", "reset", "02:00:00:00:00:77", "--yes").CombinedOutput(); err == nil || !strings.Contains(string(out), "not found") {
		t.Fatalf("reset of an unknown device: %v\n%s", err, out)
	}
}

func mustDevice(t *testing.T, a *app.App, mac string) string {
	t.Helper()
	err := a.Store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: mac, MAC: mac, Kind: core.KindVM, State: core.StateLeased})
	})
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// nodeReady tells the joiner the cluster shows device's Node Ready, as the
// watch would: its member becomes joined.
func nodeReady(t *testing.T, a *app.App, device string) {
	t.Helper()
	m, err := a.Joiner.Membership(context.Background(), device)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Joiner.NodeSeen(m.Cluster, joiner.ObservedNode{Name: m.NodeName, Ready: "True", ControlPlane: m.Role == "control-plane"}); err != nil {
		t.Fatal(err)
	}
	if m, err = a.Joiner.Membership(context.Background(), device); err != nil || m.State != core.StateJoined {
		t.Fatalf("member %s after its Node is Ready: %v %+v", device, err, m)
	}
}

// opensslSubjectEnd reads a base64 PEM certificate (as kubeconfigs embed
// it) with the real openssl and returns its subject and notAfter.
func opensslSubjectEnd(t *testing.T, certB64 string) (string, time.Time) {
	t.Helper()
	pemBytes, err := base64.StdEncoding.DecodeString(strings.TrimSpace(certB64))
	if err != nil {
		t.Fatalf("certificate data: %v", err)
	}
	return certcheck.SubjectAndEnd(t, pemBytes)
}
