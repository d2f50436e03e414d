package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/images/peerblobs"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
	"github.com/ztpd/ztpd/testenv/freeport"
	"github.com/ztpd/ztpd/testenv/testpki"
)

// syncBuffer is a log sink the test reads while the app writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// groupAppliance is one appliance of the test's group, served.
type groupAppliance struct {
	name string
	cfg  config.Config
	app  *App
	log  *syncBuffer
}

// startTwoAppliances starts an etcd member with mutual TLS and two
// appliances (a, b) sharing it as a group (store.appliances), each with its
// own data directory, certificate and peer listener on loopback, served as
// `ztpd serve` serves them (listeners bound by Serve).
//
// Each tune, if any, adjusts both appliances' configuration.
func startTwoAppliances(t *testing.T, tune ...func(*config.Config)) (*testpki.TestCA, []*groupAppliance) {
	t.Helper()
	pki := testpki.New(t, "ztpd appliances")
	etcd := pki.Issue("etcd")
	clientURL := freeport.URL(t, "https")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := etcdstore.StartMember(ctx, etcdstore.MemberConfig{Name: "etcd", Dir: filepath.Join(t.TempDir(), "etcd"),
		Peers: map[string]string{"etcd": freeport.URL(t, "https")}, ClientURL: clientURL,
		CertFile: etcd.CertFile, KeyFile: etcd.KeyFile, CAFile: pki.File, Token: "t-" + t.Name()})
	if err != nil {
		t.Fatalf("etcd member: %v", err)
	}
	t.Cleanup(func() { m.Close() })

	var apps []*groupAppliance
	for _, name := range []string{"a", "b"} {
		// Both loopbacks: a test may put the group on IPv6.
		cert := pki.Issue(name, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
		cfg := config.Default()
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
		cfg.HTTP.Addr = freeport.Addr(t)
		cfg.AdvertiseAddr = "127.0.0.1"
		cfg.Store = config.Store{Backend: "etcd", Endpoints: []string{clientURL}, Name: name, Appliances: []string{"a", "b"},
			SessionTTL: config.Duration(2 * time.Second), PeerAddr: freeport.Addr(t),
			TLS: config.StoreTLS{CertFile: cert.CertFile, KeyFile: cert.KeyFile, CAFile: pki.File}}
		for _, f := range tune {
			f(&cfg)
		}
		if len(apps) > 0 { // one at-rest key for the shared store
			cfg.KeyFile = filepath.Join(apps[0].cfg.DataDir, SecretKeyFile)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		log := &syncBuffer{}
		a, err := New(cfg, NewLogger(log, "info", "text"))
		if err != nil {
			t.Fatalf("appliance %s: %v", name, err)
		}
		sctx, stop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- a.Serve(sctx, time.Second) }()
		t.Cleanup(func() {
			stop()
			if err := <-served; err != nil {
				t.Errorf("appliance %s served: %v", name, err)
			}
			a.Close()
		})
		apps = append(apps, &groupAppliance{name: name, cfg: cfg, app: a, log: log})
	}
	// Each sees the other alive, with its peer URL.
	deadline := time.Now().Add(30 * time.Second)
	for _, ga := range apps {
		for {
			var urls []string
			for _, p := range ga.app.Group.Peers() {
				urls = append(urls, p.PeerURL)
			}
			other := apps[0]
			if other == ga {
				other = apps[1]
			}
			if slices.Contains(urls, "https://"+other.cfg.Store.PeerAddr) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("appliance %s does not see %s among its peers (%v); log:\n%s", ga.name, other.name, urls, ga.log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return pki, apps
}

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestApplianceFetchesABlobFromItsPeer: an image added on
// appliance a (its blob on a's disk, its record in the shared store) is
// served by appliance b over b's ZTP content listener with a's bytes,
// fetched over the peer listeners' mutual TLS and kept on b's disk; an
// image whose blob no appliance holds gets the missing-blob answer (503,
// unavailable) with the fetch's failure in b's log; the background
// prefetch brings what b lacks; the peer listener refuses a client without
// a certificate.
func TestApplianceFetchesABlobFromItsPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd member and two appliances")
	}
	// The prefetch stays out of the way until the test runs a pass itself,
	// so the first GET proves the fetch on demand.
	defer func(d time.Duration) { prefetchFirst = d }(prefetchFirst)
	prefetchFirst = time.Hour
	pki, apps := startTwoAppliances(t)
	a, b := apps[0], apps[1]
	ctx := context.Background()

	content := make([]byte, 3<<20+17)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	im, _, err := a.app.Images.Add(ctx, bytes.NewReader(content), imagestore.Meta{Name: "sonic-a.bin", Kind: imagestore.KindSONiCInstaller}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.app.Images.BlobPath(im.SHA256)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("b holds the blob before asking for it: %v", err)
	}
	get := func(ga *groupAppliance, ref string) (int, []byte) {
		t.Helper()
		resp, err := http.Get("http://" + ga.cfg.HTTP.Addr + "/images/" + ref)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	code, body := get(b, "sonic-a.bin")
	if code != 200 || !bytes.Equal(body, content) {
		t.Fatalf("GET /images/sonic-a.bin on b: %d, %d bytes (sha256 %s), want %d bytes of %s; b's log:\n%s",
			code, len(body), sha256Hex(body), len(content), im.SHA256, b.log)
	}
	if st, err := os.Stat(b.app.Images.BlobPath(im.SHA256)); err != nil || st.Size() != im.Size {
		t.Fatalf("b's blob after the fetch: %v", err)
	}
	if !strings.Contains(b.log.String(), "fetched image blob from peer") ||
		!strings.Contains(b.log.String(), "peer=https://"+a.cfg.Store.PeerAddr) {
		t.Fatalf("b's log does not show the fetch from a:\n%s", b.log)
	}
	// Served again from b's own disk, by sha256 too.
	if code, body := get(b, im.SHA256); code != 200 || !bytes.Equal(body, content) {
		t.Fatalf("GET by sha256 on b: %d", code)
	}

	// A record whose blob no appliance holds: the one-box answer.
	lost, _, err := a.app.Images.Add(ctx, strings.NewReader("held nowhere"), imagestore.Meta{Name: "lost.bin", Kind: imagestore.KindFile}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(a.app.Images.BlobPath(lost.SHA256)); err != nil {
		t.Fatal(err)
	}
	code, body = get(b, "lost.bin")
	var refusal struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(body, &refusal)
	if code != http.StatusServiceUnavailable || refusal.Error.Code != "unavailable" {
		t.Fatalf("GET of a blob nobody holds: %d %s", code, body)
	}
	if l := b.log.String(); !strings.Contains(l, "does not hold the blob") || !strings.Contains(l, "not fetched from the peer appliances") {
		t.Fatalf("b's log lacks the fetch's failure:\n%s", l)
	}

	// At start, a blob missing in a group is news, not a warning.
	if err := b.app.warnMissingImageBlobs(); err != nil {
		t.Fatal(err)
	}
	if l := b.log.String(); !strings.Contains(l, "images whose content is not on this appliance yet") ||
		strings.Contains(l, "images without their content") {
		t.Fatalf("b's start check of missing blobs:\n%s", l)
	}

	// The prefetch: an image added on a reaches b without a device asking.
	iso := bytes.Repeat([]byte("binaries ISO "), 50000)
	im2, _, err := a.app.Images.Add(ctx, bytes.NewReader(iso), imagestore.Meta{Name: "v1.37.2.iso", Kind: imagestore.KindBinariesISO}, "")
	if err != nil {
		t.Fatal(err)
	}
	var running *blobPrefetch
	for _, r := range b.app.runners {
		if p, ok := r.(*blobPrefetch); ok {
			running = p
		}
	}
	if running == nil {
		t.Fatal("b runs no blob prefetch")
	}
	pass := &blobPrefetch{a: b.app, fetcher: running.fetcher, log: running.log, retry: map[string]prefetchRetryState{}}
	pass.pass(ctx)
	if got, err := os.ReadFile(b.app.Images.BlobPath(im2.SHA256)); err != nil || !bytes.Equal(got, iso) {
		t.Fatalf("b's blob of %s after a prefetch pass: %v", im2.Name, err)
	}
	if r, ok := pass.retry[lost.SHA256]; !ok || r.delay != prefetchRetry {
		t.Fatalf("the blob nobody holds is not put off after a failed prefetch: %+v", pass.retry)
	}
	if !strings.Contains(b.log.String(), "image blob prefetch: fetched") {
		t.Fatalf("b's log lacks the prefetch:\n%s", b.log)
	}

	// The peer listener serves only a client with a certificate of the CA.
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool}}}
	if resp, err := noCert.Get("https://" + a.cfg.Store.PeerAddr + peerblobs.PathPrefix + im.SHA256); err == nil {
		resp.Body.Close()
		t.Fatalf("a's peer listener answered a client without a certificate: %s", resp.Status)
	}
	client := pki.Issue("client")
	cert, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool, Certificates: []tls.Certificate{cert}}}}
	resp, err := withCert.Get("https://" + a.cfg.Store.PeerAddr + peerblobs.PathPrefix + im.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, content) {
		t.Fatalf("a's peer listener to a client of the CA: %s, %d bytes", resp.Status, len(got))
	}
}

// TestPeerListenerBoundFirst: Bind opens the peer listener with the others
// and refuses a busy store.peer_addr by name; one box, or a group without
// store.tls, binds none.
func TestPeerListenerBoundFirst(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := config.Default()
	cfg.HTTP.Addr = freeport.Addr(t)
	cfg.Store = config.Store{Backend: "etcd", Name: "a", Appliances: []string{"a", "b"}, PeerAddr: busy.Addr().String(),
		TLS: config.StoreTLS{CertFile: "c", KeyFile: "k", CAFile: "ca"}}
	_, err = Bind(cfg)
	if err == nil || !strings.Contains(err.Error(), "peer listener (store.peer_addr) "+busy.Addr().String()) {
		t.Fatalf("Bind with store.peer_addr in use: %v", err)
	}

	cfg.Store.PeerAddr = ""
	cfg.AdvertiseAddr = "127.0.0.1"
	if got := peerListenAddr(cfg); got != "127.0.0.1:8444" {
		t.Fatalf("default peer address: %q", got)
	}
	cfg.Store.PeerAddr = freeport.Addr(t)
	l, err := Bind(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if l.Peer == nil || l.Peer.Addr().String() != cfg.Store.PeerAddr {
		t.Fatalf("peer listener: %v", l.Peer)
	}
	l.Close()

	for name, mutate := range map[string]func(*config.Config){
		"one box": func(c *config.Config) { c.Store.Appliances = nil },
		"no tls":  func(c *config.Config) { c.Store.TLS = config.StoreTLS{} },
		"no addr": func(c *config.Config) { c.Store.PeerAddr, c.AdvertiseAddr = "", "" },
	} {
		c := cfg
		mutate(&c)
		l, err := Bind(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if l.Peer != nil {
			t.Fatalf("%s: a peer listener on %s", name, l.Peer.Addr())
		}
		l.Close()
	}
}

// TestPeerBlobOverIPv6: a group whose appliances advertise and serve on
// IPv6 (loopback ::1 here): each sees the other's peer URL bracketed, and
// b serves an image a holds, fetched over the peer listeners' mutual TLS
// on IPv6.
func TestPeerBlobOverIPv6(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd member and two appliances")
	}
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skip("no IPv6 loopback:", err)
	} else {
		ln.Close()
	}
	defer func(d time.Duration) { prefetchFirst = d }(prefetchFirst)
	prefetchFirst = time.Hour
	_, apps := startTwoAppliances(t, func(c *config.Config) {
		c.HTTP.Addr, c.AdvertiseAddr, c.Store.PeerAddr = freeport.On(t, "::1"), "::1", freeport.On(t, "::1")
	})
	a, b := apps[0], apps[1]
	if !strings.HasPrefix(a.cfg.Store.PeerAddr, "[::1]:") {
		t.Fatalf("peer address %s", a.cfg.Store.PeerAddr)
	}
	content := make([]byte, 1<<20+3)
	rand.Read(content)
	im, _, err := a.app.Images.Add(context.Background(), bytes.NewReader(content), imagestore.Meta{Name: "sonic-v6.bin", Kind: imagestore.KindSONiCInstaller}, "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + b.cfg.HTTP.Addr + "/images/" + im.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(body, content) {
		t.Fatalf("GET on b over IPv6: %d, %d bytes; b's log:\n%s", resp.StatusCode, len(body), b.log)
	}
	if !strings.Contains(b.log.String(), "peer=https://"+a.cfg.Store.PeerAddr) {
		t.Fatalf("b's log does not show the fetch from a over IPv6:\n%s", b.log)
	}
}
