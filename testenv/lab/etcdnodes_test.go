package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/controlplane"
)

// TestLabEtcdNodeCluster: a cluster created with etcdnodes=1 over
// CloudStack's API, onboarded by three VMs through cloud-init and ztpd's
// join waiter: the etcd node's waiter makes its etcd keys with openssl and
// posts their requests, and the real etcd runs from its join data; the
// first control plane waits until ztpd reaches that etcd over TLS, then
// runs the real kube-apiserver on it (kubeadm's external etcd, its client
// key made on the VM); the worker's Node turns Ready. The API server
// stores in the etcd node: a namespace created through it is read back
// from that etcd over TLS with the control plane's etcd client
// certificate, and the unused etcd keys are gone from the worker.
func TestLabEtcdNodeCluster(t *testing.T) {
	bin, ksim := requireLabFleet(t)
	work := t.TempDir()
	var log strings.Builder
	scenario := Scenario{VMs: 3, Clusters: 1, EtcdNodes: 1}
	plan := scenario.Plan()
	cpVM, etcdVM, workerVM := plan[0], plan[1], plan[2]
	if cpVM.Role != "control-plane" || etcdVM.Role != "etcd" || workerVM.Role != "worker" {
		t.Fatalf("plan: %+v", plan)
	}
	l, err := Open(context.Background(), scenario,
		Options{Prefix: "zlx", Octet: 198, WorkDir: work, Bin: bin, Kubeletsim: ksim, Out: &log, Timeout: 6 * time.Minute})
	if l != nil {
		defer l.Close()
	}
	t.Log("progress:\n" + tail(log.String(), 5000))
	for _, vm := range []string{cpVM.Name, etcdVM.Name} {
		if b, rerr := os.ReadFile(filepath.Join(work, "devices", vm, JoinWaitLog)); rerr == nil {
			t.Logf("%s's join waiter:\n%s", vm, tail(string(b), 2500))
		}
	}
	if err != nil {
		if b, rerr := os.ReadFile(filepath.Join(work, "devices", etcdVM.Name, EtcdLog)); rerr == nil {
			t.Logf("etcd node's etcd:\n%s", tail(string(b), 3000))
		}
		if b, rerr := os.ReadFile(filepath.Join(work, "ztpd.out")); rerr == nil {
			t.Logf("ztpd.out (tail):\n%s", tail(string(b), 4000))
		}
		t.Fatal(err)
	}
	p := l.Kube.Plane(cpVM.Cluster)
	if p == nil || p.Device != cpVM.Name {
		t.Fatalf("control plane %+v, want on %s", p, cpVM.Name)
	}
	api := strings.Join(p.CP.Command(controlplane.APIServer), " ")
	if !strings.Contains(api, "--etcd-servers=https://") || !strings.Contains(api, "--etcd-certfile="+bundle.EtcdAPIServerCert) {
		t.Fatalf("kube-apiserver does not run on external etcd: %s", api)
	}
	etcdURL := api[strings.Index(api, "--etcd-servers=")+len("--etcd-servers="):]
	etcdURL, _, _ = strings.Cut(etcdURL, " ")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := p.CP.Kubectl(ctx, "create", "namespace", "stored-in-etcd-node"); err != nil {
		t.Fatalf("kubectl create namespace: %v\n%s", err, out)
	}
	root := filepath.Join(work, "devices", cpVM.Name, "root")
	read := func(path string) []byte {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pair, err := tls.X509KeyPair(read(bundle.EtcdAPIServerCert), read(bundle.EtcdAPIServerKey))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(read(bundle.EtcdCAFile))
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: controlplane.NetnsDial(p.NS),
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}
	key := base64.StdEncoding.EncodeToString([]byte("/registry/namespaces/stored-in-etcd-node"))
	resp, err := hc.Post(etcdURL+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"`+key+`","count_only":true}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rng struct {
		Count string `json:"count"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &rng) != nil || rng.Count != "1" {
		t.Fatalf("%s range of the namespace: %d %s", etcdURL, resp.StatusCode, raw)
	}
	// The keys a role does not use were removed by the waiter.
	for vm, gone := range map[string][]string{
		workerVM.Name: {bundle.EtcdServerKey, bundle.EtcdPeerKey, bundle.EtcdAPIServerKey},
		etcdVM.Name:   {bundle.EtcdAPIServerKey},
		cpVM.Name:     {bundle.EtcdServerKey, bundle.EtcdPeerKey},
	} {
		for _, k := range gone {
			if _, err := os.Stat(filepath.Join(work, "devices", vm, "root", k)); err == nil {
				t.Errorf("%s keeps %s, which its role does not use", vm, k)
			}
		}
	}
	t.Logf("etcd node %s serves %s; kube-apiserver on %s stores there (count %s), %d devices onboarded in %s",
		etcdVM.Name, etcdURL, cpVM.Name, rng.Count, len(l.Result.Devices), l.Result.Elapsed.Round(100*time.Millisecond))
}
