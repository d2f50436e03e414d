package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/netns"
)

// opensslKey makes a P-256 key at path with openssl, as a node does, and
// returns its certificate signing request (an empty subject).
func opensslKey(t *testing.T, path string) []byte {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", path).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	cnf := path + ".cnf"
	if err := os.WriteFile(cnf, []byte("[req]\ndistinguished_name = dn\n[dn]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("openssl", "req", "-new", "-config", cnf, "-key", path, "-subj", "/", "-sha256").Output()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExternalEtcdControlPlane: the real control plane of a cluster built
// with an etcd node. The etcd node (its own address in the namespace)
// runs the real etcd from its join data, with server and peer keys it
// made and certificates ztpd signed from their requests; the first control
// plane's kubeadm configuration is ztpd's external etcd one, and its API
// server's etcd client certificate too is signed from the request of a key
// made on the control plane. The real kubeadm runs no etcd there, the real
// kube-apiserver stores in the etcd node (a namespace created through it is
// read back from etcd over TLS with that client certificate), and a
// worker's real kubeadm join discovery passes against it.
func TestExternalEtcdControlPlane(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip("skipping:", err)
	}
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	for _, tool := range []string{"openssl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s not installed (an etcd node makes its keys with openssl, starts etcd with python3)", tool)
		}
	}
	etcdBin := kubebin.RequireEtcd(t)
	const endpoint, advertise, etcdIP = "10.99.215.10", "10.99.215.11", "10.99.215.21"
	// The etcd node runs in the control plane's namespace, before it.
	ns, err := netns.Add(fmt.Sprintf("cpe-%x", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	if err := ns.IP("addr", "add", etcdIP+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}

	// The etcd node: its keys, its join data's files, the real etcd.
	etcdCA, err := pki.NewEtcdCA(pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	sreq, preq := pki.EtcdMemberCerts("etcd-1", netip.MustParseAddr(etcdIP))
	sign := func(want pki.EtcdCertRequest, keyPath string) []byte {
		t.Helper()
		csr, err := pki.ParseEtcdCSR(opensslKey(t, keyPath))
		if err != nil {
			t.Fatal(err)
		}
		c, err := etcdCA.SignEtcd(want, csr, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c.CertPEM()
	}
	node, err := bundle.BuildEtcdMember(bundle.EtcdMemberParams{Name: "etcd-1", Addr: etcdIP, CACertPEM: etcdCA.CertPEM(),
		ServerCertPEM: sign(sreq, filepath.Join(root, bundle.EtcdServerKey)), PeerCertPEM: sign(preq, filepath.Join(root, bundle.EtcdPeerKey)), New: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range node.Files() {
		mode, _ := strconv.ParseUint(f.Mode, 8, 32)
		p := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.Content), os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}
	etcdCtx, stopEtcd := context.WithCancel(context.Background())
	etcd := ns.Command(etcdCtx, "python3", filepath.Join(root, bundle.EtcdStartScriptPath))
	etcd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "ZTPD_ETCD_BIN="+etcdBin, "ZTPD_ETCD_ARGS=--log-level=warn")
	var etcdLog bytes.Buffer
	etcd.Stdout, etcd.Stderr = &etcdLog, &etcdLog
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopEtcd()
		_ = etcd.Wait()
		if t.Failed() {
			t.Logf("etcd node's output:\n%s", etcdLog.String())
		}
	})

	// The first control plane: its etcd client key, made here.
	cpDir := t.TempDir()
	clientKeyPath := filepath.Join(cpDir, "apiserver-etcd-client.key")
	clientCert := sign(pki.EtcdAPIServerClient(), clientKeyPath)
	clientKey, err := os.ReadFile(clientKeyPath)
	if err != nil {
		t.Fatal(err)
	}
	worker, err := tokens.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	tp := StartForTest(t, TestOptions{NS: ns, EndpointIP: endpoint, AdvertiseIP: advertise,
		Tokens: []bundle.Token{{Token: worker, TTL: time.Hour, Description: "ztpd: worker w-1"}},
		ExternalEtcd: &TestExternalEtcd{Endpoints: []string{bundle.EtcdEndpoint(etcdIP)},
			Files: ExternalEtcdFiles{CACert: etcdCA.CertPEM(), ClientCert: clientCert, ClientKey: clientKey}}})
	cp := tp.ControlPlane
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if got := cp.Running(); len(got) == 0 || slices.Contains(got, Etcd) {
		t.Errorf("components running: %v (no etcd runs on the control plane)", got)
	}
	api := strings.Join(cp.Command(APIServer), " ")
	for _, f := range []string{"--etcd-servers=https://" + etcdIP + ":2379", "--etcd-cafile=" + bundle.EtcdCAFile,
		"--etcd-certfile=" + bundle.EtcdAPIServerCert, "--etcd-keyfile=" + bundle.EtcdAPIServerKey} {
		if !strings.Contains(api, f) {
			t.Errorf("kube-apiserver runs without %s: %s", f, api)
		}
	}

	// What the API server stores is in the etcd node.
	if out, err := cp.Kubectl(ctx, "create", "namespace", "stored-in-etcd-node"); err != nil {
		t.Fatalf("kubectl create namespace: %v\n%s", err, out)
	}
	pair, err := tls.X509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(etcdCA.Certificate())
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: NetnsDial(ns),
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}
	key := base64.StdEncoding.EncodeToString([]byte("/registry/namespaces/stored-in-etcd-node"))
	resp, err := hc.Post("https://"+etcdIP+":2379/v3/kv/range", "application/json", strings.NewReader(`{"key":"`+key+`","count_only":true}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rng struct {
		Count string `json:"count"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &rng) != nil || rng.Count != "1" {
		t.Fatalf("etcd node's range of the namespace: %d %s", resp.StatusCode, raw)
	}

	// kubeadm's uploaded certificates (what a joining control plane
	// downloads with the certificate key) carry the external etcd's CA and
	// the API server's client certificate and key.
	if out, err := cp.Kubectl(ctx, "get", "secret", "kubeadm-certs", "-n", "kube-system", "-o", "jsonpath={.data}"); err != nil ||
		!strings.Contains(string(out), "external-etcd-ca.crt") || !strings.Contains(string(out), "external-etcd.crt") || !strings.Contains(string(out), "external-etcd.key") {
		t.Errorf("kubeadm-certs without the external etcd files: %v %.300s", err, out)
	}

	// A worker's real kubeadm join discovery passes against it.
	jp, err := bundle.PlanJoin(bundle.JoinParams{Version: tp.Version, APIServerEndpoint: endpoint + ":6443", Token: worker,
		CACertHashes: []string{tp.CA.DiscoveryHash()}, NodeName: "w-1"})
	if err != nil {
		t.Fatal(err)
	}
	j, err := JoinDiscovery(ctx, JoinConfig{Kubeadm: tp.Bins.Kubeadm, Config: jp.Config, Dir: filepath.Join(t.TempDir(), "w-1"), Run: NetnsRun(ns)})
	if err != nil {
		t.Fatalf("worker's join discovery: %v", err)
	}
	if !strings.Contains(j.Output, "TLS certificate validates against pinned roots") {
		t.Errorf("kubeadm did not report a pinned-CA discovery:\n%s", j.Output)
	}
}
