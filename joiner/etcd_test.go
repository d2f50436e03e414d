package joiner

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// etcdUp is a stand-in EtcdProbe: the endpoints marked up answer.
type etcdUp struct {
	mu sync.Mutex
	up map[string]bool
}

func (u *etcdUp) set(addr string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.up == nil {
		u.up = map[string]bool{}
	}
	u.up[bundle.EtcdEndpoint(addr)] = true
}

func (u *etcdUp) probe(_ context.Context, endpoint string, cfg *tls.Config) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if cfg == nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		return errors.New("no client certificate or CA")
	}
	if !u.up[endpoint] {
		return errors.New("connection refused")
	}
	return nil
}

// etcdRequest makes a request with a fresh key (as a node's openssl does)
// for the names in tmpl.
func etcdRequest(t *testing.T, tmpl x509.CertificateRequest) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

func memberCSRs(t *testing.T) EtcdCSRs {
	return EtcdCSRs{Server: etcdRequest(t, x509.CertificateRequest{}), Peer: etcdRequest(t, x509.CertificateRequest{})}
}

func certOf(t *testing.T, pemText string) *x509.Certificate {
	t.Helper()
	c, err := pki.ParseCertPEM([]byte(pemText))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEtcdNodesCluster: in a cluster with three etcd nodes the first three
// devices become etcd nodes (the second waits for the first to answer, then
// is told to join through it), signed from their own requests for their
// own address; the first control plane waits for a quorum, then gets
// kubeadm's external etcd configuration with all three endpoints and its
// apiserver-etcd-client certificate, never a key; the next device is a
// worker.
func TestEtcdNodesCluster(t *testing.T) {
	up := &etcdUp{}
	e := newEnv(t, Options{AutoApprove: approveAll, EtcdProbe: up.probe})
	c := e.cluster(clusterSpec{Name: "db", Size: 1, EtcdNodes: 3, KubernetesVersion: "1.31.4"})
	etcdCA := certOf(t, func() string { k, _ := e.svc.keysFor(c.ID); return string(k.etcdCA.CertPEM()) }())
	roots := x509.NewCertPool()
	roots.AddCert(etcdCA)
	join := func(i int, csrs EtcdCSRs) (*Bundle, error) {
		m := mac(i)
		return e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("db", m, ""), MAC: m, RemoteIP: e.hold(addrOf(i), m), Etcd: csrs})
	}
	member := func(b *Bundle) (cfg struct {
		Name          string   `json:"name"`
		Addr          string   `json:"addr"`
		New           bool     `json:"new"`
		JoinEndpoints []string `json:"join_endpoints"`
	}) {
		files := cloudFiles(t, b)
		if err := json.Unmarshal([]byte(files[bundle.EtcdMemberConfig]), &cfg); err != nil {
			t.Fatalf("%s: member configuration: %v", b.Device, err)
		}
		for path, content := range files {
			if strings.Contains(content, "PRIVATE KEY") {
				t.Fatalf("%s's bundle carries a key in %s", b.Device, path)
			}
		}
		srv := certOf(t, files[bundle.EtcdServerCert])
		if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: cfg.Addr, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Fatalf("server certificate of %s: %v", cfg.Addr, err)
		}
		return cfg
	}

	first := e.must(join(1, memberCSRs(t)))
	if first.Role != RoleEtcd || first.Init {
		t.Fatalf("first device: %v", first)
	}
	if cfg := member(first); !cfg.New || cfg.Addr != addrOf(1) {
		t.Fatalf("first etcd node's configuration: %+v", cfg)
	}
	// The second waits until the first answers ztpd.
	var we *WaitError
	if _, err := join(2, memberCSRs(t)); !errors.As(err, &we) || we.Reason != waitFirstEtcd || we.RetryAfter != waitRetryFirstCP {
		t.Fatalf("second etcd node before the first answers: %v", err)
	}
	up.set(addrOf(1))
	second := e.must(join(2, memberCSRs(t)))
	if cfg := member(second); second.Role != RoleEtcd || cfg.New || len(cfg.JoinEndpoints) != 1 || cfg.JoinEndpoints[0] != addrOf(1)+":2379" {
		t.Fatalf("second etcd node: %v %+v", second, cfg)
	}
	if m, _ := e.svc.Membership(bg, mac(1)); m.State != core.StateJoined {
		t.Fatalf("the first etcd node answers, but its member is %s", m.State)
	}
	third := e.must(join(3, memberCSRs(t)))
	if third.Role != RoleEtcd {
		t.Fatalf("third device: %v", third)
	}
	clientCSR := etcdRequest(t, x509.CertificateRequest{})
	// The control plane waits for a quorum of the three.
	if _, err := join(4, EtcdCSRs{Client: clientCSR}); !errors.As(err, &we) || !strings.Contains(we.Reason, "1 answer ztpd over TLS") {
		t.Fatalf("first control plane before a quorum: %v", err)
	}
	// The wait is the device's reason and an event (the console and the
	// operator see why the control plane does not start).
	if d := e.device(mac(4)); d.State != core.StateWaiting || !strings.Contains(d.Refusal.Reason, "waiting for the cluster's etcd nodes") {
		t.Fatalf("waiting control plane's record: %s %+v", d.State, d.Refusal)
	}
	var waits []string
	e.store.View(func(tx core.Tx) error {
		return tx.Events().List(core.StreamOf("join.waiting"), 0, func(ev core.Event) (bool, error) {
			if ev.Type == "join.waiting" && ev.Device == mac(4) {
				waits = append(waits, ev.Message)
			}
			return true, nil
		})
	})
	if len(waits) == 0 || !strings.Contains(waits[len(waits)-1], "a quorum (2) of all 3") {
		t.Fatalf("join.waiting events of the control plane: %q", waits)
	}
	up.set(addrOf(2))
	cp := e.must(join(4, EtcdCSRs{Client: clientCSR}))
	if cp.Role != RoleControlPlane || !cp.Init {
		t.Fatalf("fourth device: %v", cp)
	}
	files := cloudFiles(t, cp)
	cfg := files[bundle.KubeadmConfigPath]
	for _, want := range []string{"https://" + addrOf(1) + ":2379", "https://" + addrOf(2) + ":2379", "https://" + addrOf(3) + ":2379",
		"caFile: " + bundle.EtcdCAFile, "keyFile: " + bundle.EtcdAPIServerKey} {
		if !strings.Contains(cfg, want) {
			t.Errorf("kubeadm configuration without %q:\n%s", want, cfg)
		}
	}
	client := certOf(t, files[bundle.EtcdAPIServerCert])
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil ||
		client.Subject.CommonName != pki.EtcdAPIServerClientName {
		t.Fatalf("apiserver-etcd-client certificate %v: %v", client.Subject, err)
	}
	if files[bundle.EtcdCAFile] != string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: etcdCA.Raw})) {
		t.Error("the first control plane lacks the etcd CA")
	}
	if _, ok := files[bundle.EtcdAPIServerKey]; ok {
		t.Error("the first control plane's bundle carries its etcd client key")
	}
	worker := e.must(e.join("db", 5))
	if worker.Role != RoleWorker {
		t.Fatalf("fifth device: %v", worker)
	}
	v, err := e.cl.GetCluster(bg, clusters.LocalAdmin, "db")
	if err != nil {
		t.Fatal(err)
	}
	if ips := v.EtcdIPs(); len(ips) != 3 || ips[first.NodeName] != addrOf(1) {
		t.Fatalf("etcd addresses %v", ips)
	}
}

// TestEtcdCSRRefusals: an etcd node whose request names another device's
// address, or that sends none, is refused with the reason (an audit event
// and a warning); nothing is issued, and its secret still joins with a
// request for its own names. In a cluster without etcd nodes a device whose
// profile gives it the etcd role waits with the reason.
func TestEtcdCSRRefusals(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, EtcdProbe: (&etcdUp{}).probe})
	e.cluster(clusterSpec{Name: "db", Size: 1, EtcdNodes: 1, KubernetesVersion: "1.31.4"})
	m := mac(7)
	ip := e.hold(addrOf(7), m)
	secret := e.enroll("db", m, "")
	for _, c := range []struct {
		name   string
		csrs   EtcdCSRs
		err    error
		reason string
	}{
		{"none", EtcdCSRs{}, ErrEtcdCSRMissing, "an etcd node sends the certificate signing requests"},
		{"another device's address", EtcdCSRs{Server: etcdRequest(t, x509.CertificateRequest{IPAddresses: []net.IP{net.ParseIP(addrOf(8))}}),
			Peer: etcdRequest(t, x509.CertificateRequest{})}, ErrCSRRefused, "address " + addrOf(8) + ", which is not this device's"},
		{"a peer name it does not hold", EtcdCSRs{Server: etcdRequest(t, x509.CertificateRequest{}),
			Peer: etcdRequest(t, x509.CertificateRequest{DNSNames: []string{"etcd.example"}})}, ErrCSRRefused, `DNS name "etcd.example"`},
		{"garbage", EtcdCSRs{Server: "nonsense", Peer: "nonsense"}, ErrCSRRefused, "not a PEM CERTIFICATE REQUEST"},
	} {
		b, err := e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: m, RemoteIP: ip, Etcd: c.csrs})
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.reason) || b != nil {
			t.Fatalf("%s: %v (bundle %v)", c.name, err, b)
		}
	}
	var refused []core.Event
	e.store.View(func(tx core.Tx) error {
		return tx.Events().List(core.StreamOf("join.refused"), 0, func(ev core.Event) (bool, error) {
			if ev.Type == "join.refused" && ev.Device == m {
				refused = append(refused, ev)
			}
			return true, nil
		})
	})
	// (A few per device are recorded: the rest are limited.)
	if len(refused) < 3 || !strings.Contains(refused[0].Message, "no etcd certificate signing request") ||
		!strings.Contains(refused[1].Message, "which is not this device's") || refused[1].Fields["reason"] != "bad-csr" {
		t.Fatalf("join.refused events: %+v", refused)
	}
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: m, RemoteIP: ip, Etcd: EtcdCSRs{
		Server: etcdRequest(t, x509.CertificateRequest{IPAddresses: []net.IP{net.ParseIP(addrOf(7)), net.ParseIP("127.0.0.1")}}),
		Peer:   etcdRequest(t, x509.CertificateRequest{})}}))
	if b.Role != RoleEtcd {
		t.Fatalf("bundle %v", b)
	}

	// A profile's etcd role in a cluster that has no etcd nodes.
	e.cluster(clusterSpec{Name: "stacked", Size: 1})
	m2 := mac(9)
	_, err := e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("stacked", m2, ""), MAC: m2, RemoteIP: e.hold(addrOf(9), m2), Role: RoleEtcd})
	var we *WaitError
	if !errors.As(err, &we) || !strings.Contains(we.Reason, "has no etcd nodes") {
		t.Fatalf("etcd role in a stacked cluster: %v", err)
	}
}

// TestEtcdNodeRealEtcd: a device holding 127.0.0.31 joins a one-etcd-node
// cluster with requests for keys it made (openssl), installs its join data
// and runs the real etcd from it; the first control plane waits until ztpd
// itself reaches that etcd over TLS (its /health), then gets the external
// etcd configuration, and its apiserver-etcd-client certificate with the
// key it made writes to and reads from that etcd. Stopping etcd makes the
// member not-ready at the next look.
func TestEtcdNodeRealEtcd(t *testing.T) {
	etcdBin := kubebin.RequireEtcd(t)
	for _, tool := range []string{"openssl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: an etcd node makes its keys with openssl and starts etcd with python3", tool)
		}
	}
	e := newEnv(t, Options{AutoApprove: approveAll})
	e.cluster(clusterSpec{Name: "db", Size: 1, EtcdNodes: 1, KubernetesVersion: "1.31.4"})
	root := t.TempDir()
	csr := func(path string) string {
		t.Helper()
		key := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		cnf := key + ".cnf"
		if err := os.WriteFile(cnf, []byte("[req]\ndistinguished_name = dn\n[dn]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("openssl", "req", "-new", "-config", cnf, "-key", key, "-subj", "/", "-sha256").Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	m := mac(31)
	ip := e.hold("127.0.0.31", m)
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("db", m, ""), MAC: m, RemoteIP: ip,
		Etcd: EtcdCSRs{Server: csr(bundle.EtcdServerKey), Peer: csr(bundle.EtcdPeerKey)}}))
	d, ok := b.NodeDelivery()
	if !ok || b.Role != RoleEtcd {
		t.Fatalf("etcd node's bundle %v", b)
	}
	for _, f := range d.Files {
		mode, _ := strconv.ParseUint(f.Mode, 8, 32)
		p := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.Content), os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}

	cp := mac(32)
	cpIP := e.hold(addrOf(32), cp)
	clientCSR := csr("cp/apiserver-etcd-client.key")
	cpSecret := e.enroll("db", cp, "")
	var we *WaitError
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: cpSecret, MAC: cp, RemoteIP: cpIP, Etcd: EtcdCSRs{Client: clientCSR}}); !errors.As(err, &we) ||
		!strings.Contains(we.Reason, "0 answer ztpd over TLS") {
		t.Fatalf("control plane before etcd runs: %v", err)
	}

	ctx, cancel := context.WithCancel(bg)
	cmd := exec.CommandContext(ctx, "python3", filepath.Join(root, bundle.EtcdStartScriptPath))
	cmd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "ZTPD_ETCD_BIN="+etcdBin, "ZTPD_ETCD_LOOPBACK=0", "ZTPD_ETCD_ARGS=--log-level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		cancel()
		if !stopped {
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("etcd's output:\n%s", logs.String())
		}
	})
	var cpb *Bundle
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		if cpb, err = e.svc.Join(bg, JoinRequest{Enrollment: cpSecret, MAC: cp, RemoteIP: cpIP, Etcd: EtcdCSRs{Client: clientCSR}}); err == nil {
			break
		}
		if !errors.As(err, &we) || time.Now().After(deadline) {
			t.Fatalf("control plane: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if mm, _ := e.svc.Membership(bg, m); mm.State != core.StateJoined {
		t.Fatalf("etcd member %s after ztpd reached it", mm.State)
	}
	files := cloudFiles(t, cpb)
	if !strings.Contains(files[bundle.KubeadmConfigPath], "https://127.0.0.31:2379") {
		t.Fatalf("kubeadm configuration:\n%s", files[bundle.KubeadmConfigPath])
	}
	keyPEM, err := os.ReadFile(filepath.Join(root, "cp/apiserver-etcd-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair([]byte(files[bundle.EtcdAPIServerCert]), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(files[bundle.EtcdCAFile]))
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots,
		Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}
	put := `{"key":"L3JlZ2lzdHJ5L25hbWVzcGFjZXMvZGVmYXVsdA==","value":"c3RvcmVk"}`
	resp, err := hc.Post("https://127.0.0.31:2379/v3/kv/put", "application/json", strings.NewReader(put))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("put with the API server's client certificate: %d", resp.StatusCode)
	}

	// etcd stops: the next look makes the member not-ready.
	cancel()
	_ = cmd.Wait()
	stopped = true
	e.svc.observeEtcd(bg, b.Cluster)
	if mm, _ := e.svc.Membership(bg, m); mm.State != core.StateNotReady {
		t.Fatalf("etcd member %s after etcd stopped", mm.State)
	}
}
