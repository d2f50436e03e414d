package bundle

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

	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// TestBuildEtcdMember: an etcd node writes the etcd CA, its two
// certificates (not its keys: it made them), its member configuration, the
// start script and the unit, and enables the unit; a later member is told
// whom to join through.
func TestBuildEtcdMember(t *testing.T) {
	p := EtcdMemberParams{Name: "etcd-2", Addr: "fd99::1:22", CACertPEM: []byte("CA"), ServerCertPEM: []byte("S"), PeerCertPEM: []byte("P"),
		JoinEndpoints: []string{EtcdEndpoint("fd99::1:21")}}
	n, err := BuildEtcdMember(p)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]NodeFile{}
	for _, f := range n.Files() {
		files[f.Path] = f
	}
	for _, path := range []string{EtcdPKIDir + "/ca.crt", EtcdServerCert, EtcdPeerCert, EtcdMemberConfig, EtcdStartScriptPath, EtcdUnitPath} {
		if _, ok := files[path]; !ok {
			t.Errorf("no %s", path)
		}
	}
	for path := range files {
		if strings.HasSuffix(path, ".key") {
			t.Errorf("the bundle writes a key: %s", path)
		}
	}
	var cfg etcdMemberConfig
	if err := json.Unmarshal([]byte(files[EtcdMemberConfig].Content), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.New || cfg.Name != "etcd-2" || cfg.Addr != "fd99::1:22" || len(cfg.JoinEndpoints) != 1 || cfg.JoinEndpoints[0] != "[fd99::1:21]:2379" {
		t.Errorf("member configuration %+v", cfg)
	}
	if got := strings.Join(n.Commands(), "; "); got != "systemctl daemon-reload; systemctl enable --now "+EtcdUnit {
		t.Errorf("commands: %s", got)
	}
	for _, bad := range []EtcdMemberParams{
		func() EtcdMemberParams { q := p; q.JoinEndpoints = nil; return q }(),
		func() EtcdMemberParams { q := p; q.Name = "a=b"; return q }(),
		func() EtcdMemberParams { q := p; q.Addr = "fe80::1%eth0"; return q }(),
		func() EtcdMemberParams { q := p; q.PeerCertPEM = nil; return q }(),
		func() EtcdMemberParams { q := p; q.JoinEndpoints = []string{"fd99::1:21:2379"}; return q }(),
	} {
		if _, err := BuildEtcdMember(bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}

// etcdNode is one etcd node of the real-etcd test: its root (what it
// writes lands under it) and its address.
type etcdNode struct {
	name, addr, root string
}

// opensslCSR makes a P-256 key at keyPath with openssl, as a node does, and
// returns the request of it (an empty subject: ztpd fills it in).
func opensslCSR(t *testing.T, keyPath string) []byte {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(keyPath), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", keyPath).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	cnf := keyPath + ".cnf"
	if err := os.WriteFile(cnf, []byte("[req]\ndistinguished_name = dn\n[dn]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("openssl", "req", "-new", "-config", cnf, "-key", keyPath, "-subj", "/", "-sha256").Output()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeNode writes n's files under root with their modes.
func writeNode(t *testing.T, root string, n *Node) {
	t.Helper()
	for _, f := range n.Files() {
		mode, err := strconv.ParseUint(f.Mode, 8, 32)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.Content), os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEtcdMembersRealEtcd: three etcd nodes set up as their bundles say,
// with keys they made (openssl) and certificates signed from their
// requests, run the real etcd (testenv/k8sbin's): the first starts the
// cluster, the second and third add themselves through it (member add) and
// start as existing members. The API server's etcd client certificate
// (signed from its own request) writes and reads over TLS, every member
// reports the three, and a client certificate of another CA is refused.
func TestEtcdMembersRealEtcd(t *testing.T) {
	etcdBin := kubebin.RequireEtcd(t)
	for _, tool := range []string{"openssl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: an etcd node makes its keys with openssl and starts etcd with python3", tool)
		}
	}
	ca, err := pki.NewEtcdCA(pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The API server's client: its key and certificate, by request.
	clientDir := t.TempDir()
	clientCSR, err := pki.ParseEtcdCSR(opensslCSR(t, filepath.Join(clientDir, "apiserver-etcd-client.key")))
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := ca.SignEtcd(pki.EtcdAPIServerClient(), clientCSR, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(clientDir, "apiserver-etcd-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(clientCert.CertPEM(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	client := func(cert tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
	}
	apiserver := client(pair)
	call := func(c *http.Client, ep, path string, body any) (map[string]any, error) {
		b, _ := json.Marshal(body)
		resp, err := c.Post("https://"+ep+path, "application/json", bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s %s: %d %s", ep, path, resp.StatusCode, raw)
		}
		var out map[string]any
		return out, json.Unmarshal(raw, &out)
	}
	healthy := func(ep string) error {
		resp, err := apiserver.Get("https://" + ep + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"health":"true"`) {
			return fmt.Errorf("%d %s", resp.StatusCode, raw)
		}
		return nil
	}

	nodes := []etcdNode{{"etcd-1", "127.0.0.21", t.TempDir()}, {"etcd-2", "127.0.0.22", t.TempDir()}, {"etcd-3", "127.0.0.23", t.TempDir()}}
	for i, n := range nodes {
		serverCSR, err := pki.ParseEtcdCSR(opensslCSR(t, filepath.Join(n.root, EtcdServerKey)))
		if err != nil {
			t.Fatal(err)
		}
		peerCSR, err := pki.ParseEtcdCSR(opensslCSR(t, filepath.Join(n.root, EtcdPeerKey)))
		if err != nil {
			t.Fatal(err)
		}
		sreq, preq := pki.EtcdMemberCerts(n.name, netip.MustParseAddr(n.addr))
		server, err := ca.SignEtcd(sreq, serverCSR, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		peer, err := ca.SignEtcd(preq, peerCSR, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p := EtcdMemberParams{Name: n.name, Addr: n.addr, CACertPEM: ca.CertPEM(), ServerCertPEM: server.CertPEM(), PeerCertPEM: peer.CertPEM(),
			New: i == 0}
		if i > 0 {
			// What ztpd names: the members that answered it.
			for _, prev := range nodes[:i] {
				p.JoinEndpoints = append(p.JoinEndpoints, EtcdEndpoint(prev.addr))
			}
		}
		node, err := BuildEtcdMember(p)
		if err != nil {
			t.Fatal(err)
		}
		writeNode(t, n.root, node)
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, "python3", filepath.Join(n.root, EtcdStartScriptPath))
		// All three members share this host's loopback, so a peer's
		// connection comes from 127.0.0.1 (or the dialled address), never
		// from the address its certificate names: etcd's check of the
		// client's source address against the peer certificate is skipped
		// here only. The dialling member still checks the server's
		// certificate for the address it dials.
		cmd.Env = append(os.Environ(), "ZTPD_ROOT="+n.root, "ZTPD_ETCD_BIN="+etcdBin, "ZTPD_ETCD_LOOPBACK=0",
			"ZTPD_ETCD_ARGS=--log-level=warn --peer-skip-client-san-verification")
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cancel()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("%s's output:\n%s", n.name, logs.String())
			}
		})
		ep := EtcdEndpoint(n.addr)
		deadline := time.Now().Add(60 * time.Second)
		for {
			err := healthy(ep)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never answered /health: %v\n%s", n.name, err, logs.String())
			}
			time.Sleep(300 * time.Millisecond)
		}
	}

	key := base64.StdEncoding.EncodeToString([]byte("/registry/namespaces/default"))
	val := base64.StdEncoding.EncodeToString([]byte("stored through external etcd"))
	if _, err := call(apiserver, EtcdEndpoint(nodes[0].addr), "/v3/kv/put", map[string]string{"key": key, "value": val}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		ep := EtcdEndpoint(n.addr)
		got, err := call(apiserver, ep, "/v3/kv/range", map[string]string{"key": key})
		if err != nil {
			t.Fatal(err)
		}
		if kvs, _ := got["kvs"].([]any); len(kvs) != 1 || kvs[0].(map[string]any)["value"] != val {
			t.Errorf("%s: range answered %v", n.name, got)
		}
		list, err := call(apiserver, ep, "/v3/cluster/member/list", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range list["members"].([]any) {
			names = append(names, fmt.Sprint(m.(map[string]any)["name"]))
		}
		slices.Sort(names)
		if strings.Join(names, ",") != "etcd-1,etcd-2,etcd-3" {
			t.Errorf("%s lists members %v", n.name, names)
		}
	}

	// A certificate of another CA is no client of this etcd.
	other, err := pki.NewEtcdCA(pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.IssueEtcdClient("stranger", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	skey, err := stranger.PrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	spair, err := tls.X509KeyPair(stranger.CertPEM(), skey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call(client(spair), EtcdEndpoint(nodes[0].addr), "/v3/kv/range", map[string]string{"key": key}); err == nil {
		t.Error("etcd answered a client certificate of another CA")
	}
}
