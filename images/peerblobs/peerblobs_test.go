package peerblobs

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
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/testenv/freeport"
	"github.com/ztpd/ztpd/testenv/testpki"
)

// appliance is one ztpd appliance's blob side: its store, image store and
// a peer listener that requires and verifies client certificates.
type appliance struct {
	fx       *storetest.Fixture
	ims      *imagestore.Store
	cert     *testpki.Cert
	srv      *httptest.Server
	requests atomic.Int64
}

// newAppliance starts the peer listener with Handler, wrapped by wrap when
// it is not nil (to count, hold or falsify answers).
func newAppliance(t *testing.T, ca *testpki.TestCA, name string, wrap func(http.Handler) http.Handler) *appliance {
	t.Helper()
	a := &appliance{fx: storetest.Open(t)}
	var err error
	if a.ims, err = imagestore.Open(a.fx.Store, a.fx.Dir); err != nil {
		t.Fatal(err)
	}
	a.cert = ca.Issue(name, loopback)
	h := Handler(a.ims)
	if wrap != nil {
		h = wrap(h)
	}
	a.srv = startPeer(t, ca, a.cert, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	return a
}

// startPeer serves h over TLS with cert, requiring client certificates
// issued by ca.
func startPeer(t *testing.T, ca *testpki.TestCA, cert *testpki.Cert, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{cert.TLS},
		ClientCAs:    ca.Pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	srv.Config.ErrorLog = quietLog()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// loopback is the IP SAN of the appliances' certificates.
var loopback = net.ParseIP("127.0.0.1")

// quietLog drops the server's handshake-failure lines the refusal tests
// cause on purpose.
func quietLog() *log.Logger { return log.New(io.Discard, "", 0) }

// addBlob adds random content of size bytes to a's image store.
func (a *appliance) addBlob(t *testing.T, name string, size int) (core.Image, []byte) {
	t.Helper()
	content := make([]byte, size)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	im, _, err := a.ims.Add(context.Background(), bytes.NewReader(content), imagestore.Meta{Name: name, Kind: imagestore.KindFile}, "")
	if err != nil {
		t.Fatal(err)
	}
	return im, content
}

// shareRecord writes im's record into a's store, as the shared store would
// show another appliance's add.
func (a *appliance) shareRecord(t *testing.T, im core.Image) {
	t.Helper()
	storetest.Update(t, a.fx.Store, func(tx core.Tx) error {
		if err := tx.Images().Put(im); err != nil {
			return err
		}
		return tx.Images().SetName(im.Name, im.SHA256)
	})
}

// fetcher is a's Fetcher over peers, authenticated with a's certificate.
func (a *appliance) fetcher(ca *testpki.TestCA, logs io.Writer, peers ...string) *Fetcher {
	if logs == nil {
		logs = io.Discard
	}
	return &Fetcher{
		Store: a.ims,
		Peers: func() []string { return peers },
		TLS:   &tls.Config{Certificates: []tls.Certificate{a.cert.TLS}, RootCAs: ca.Pool},
		Log:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"fetcher": strconv.FormatInt(fetchers.Add(1), 10)},
			fetcherMetrics),
	}
}

// fetcherMetrics holds every test fetcher's metrics, each labelled with
// its fetcher.
var (
	fetcherMetrics = prometheus.NewRegistry()
	fetchers       atomic.Int64
)

// metricSum sums the series of family name whose labels include want.
func metricSum(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := fetcherMetrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == k && lp.GetValue() == v)
				}
				if !found {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// hashFile is the sha256 of the file at path.
func hashFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// count is the current ztpd_peer_blob_fetches_total{result}.
func count(t *testing.T, result string) float64 {
	t.Helper()
	return metricSum(t, "ztpd_peer_blob_fetches_total", map[string]string{"result": result})
}

func fetchedBytesNow(t *testing.T) float64 {
	t.Helper()
	return metricSum(t, "ztpd_peer_blob_fetch_bytes_total", nil)
}

// counts snapshots every result's counter.
func counts(t *testing.T) map[string]float64 {
	out := map[string]float64{}
	for _, r := range []string{ResultOK, ResultNotFound, ResultSizeMismatch, ResultSHAMismatch, ResultError} {
		out[r] = count(t, r)
	}
	return out
}

// syncBuffer is a log sink the fetcher's goroutines share.
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

// leftovers lists what an appliance's image tmp directory still holds.
func leftovers(t *testing.T, a *appliance) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(a.fx.Dir, "images", "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestEnsureFetchesFromPeerOverMutualTLS(t *testing.T) {
	ca := testpki.New(t, "appliances")
	holder := newAppliance(t, ca, "holder", nil)
	empty := newAppliance(t, ca, "empty", nil)
	im, _ := holder.addBlob(t, "sonic-202405.bin", 3<<20+17)
	empty.shareRecord(t, im)

	before, bytesBefore := counts(t), fetchedBytesNow(t)
	var logs syncBuffer
	f := empty.fetcher(ca, &logs, holder.srv.URL)
	if err := f.Ensure(context.Background(), im); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if got := hashFile(t, empty.ims.BlobPath(im.SHA256)); got != im.SHA256 {
		t.Fatalf("fetched blob hashes to %s, want %s", got, im.SHA256)
	}
	if err := empty.ims.Verify(im); err != nil {
		t.Fatalf("imagestore.Verify after the fetch: %v", err)
	}
	if n := holder.requests.Load(); n != 1 {
		t.Fatalf("holder saw %d requests, want 1", n)
	}
	if d := count(t, ResultOK) - before[ResultOK]; d != 1 {
		t.Fatalf("ok fetches grew by %v, want 1", d)
	}
	if d := fetchedBytesNow(t) - bytesBefore; d != float64(im.Size) {
		t.Fatalf("fetched bytes grew by %v, want %d", d, im.Size)
	}
	for _, want := range []string{`level=INFO msg="fetched image blob from peer"`, "peer=" + holder.srv.URL, "image=sonic-202405.bin"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("logs lack %q:\n%s", want, logs.String())
		}
	}
	if l := leftovers(t, empty); len(l) != 0 {
		t.Fatalf("tmp holds %v after the fetch", l)
	}

	// Present now: answered from the disk, no request.
	if err := f.Ensure(context.Background(), im); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if n := holder.requests.Load(); n != 1 {
		t.Fatalf("second Ensure made a request (%d in all)", n)
	}
	// The holder's own Ensure needs no peers at all.
	hf := holder.fetcher(ca, nil)
	if err := hf.Ensure(context.Background(), im); err != nil {
		t.Fatalf("holder's Ensure: %v", err)
	}
}

func TestEnsureSkipsBadPeersAndUsesTheNextGoodOne(t *testing.T) {
	ca := testpki.New(t, "appliances")
	holder := newAppliance(t, ca, "holder", nil)
	empty := newAppliance(t, ca, "empty", nil)
	other := newAppliance(t, ca, "other", nil) // holds nothing: 404
	im, content := holder.addBlob(t, "k8s-1.37.2.iso", 1<<20)
	empty.shareRecord(t, im)

	// Right length, wrong bytes: only the sha256 can tell.
	forged := append([]byte(nil), content...)
	forged[len(forged)/2] ^= 0xff
	liar := startPeer(t, ca, ca.Issue("liar", loopback), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1048576")
		_, _ = w.Write(forged)
	}))
	// Announces another length.
	short := startPeer(t, ca, ca.Issue("short", loopback), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(content[:1000])
	}))
	// No Content-Length (chunked), and more bytes than the image has.
	flood := startPeer(t, ca, ca.Issue("flood", loopback), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		for range 3 {
			_, _ = w.Write(content)
		}
	}))
	// Refuses connections: a port that was just closed.
	refused := freeport.URL(t, "https")

	before := counts(t)
	var logs syncBuffer
	f := empty.fetcher(ca, &logs, refused, other.srv.URL, liar.URL, short.URL, flood.URL, holder.srv.URL)
	if err := f.Ensure(context.Background(), im); err != nil {
		t.Fatalf("Ensure: %v\n%s", err, logs.String())
	}
	if got := hashFile(t, empty.ims.BlobPath(im.SHA256)); got != im.SHA256 {
		t.Fatalf("installed blob hashes to %s, want %s", got, im.SHA256)
	}
	want := map[string]float64{ResultError: 1, ResultNotFound: 1, ResultSHAMismatch: 1, ResultSizeMismatch: 2, ResultOK: 1}
	for r, d := range want {
		if got := count(t, r) - before[r]; got != d {
			t.Errorf("%s fetches grew by %v, want %v", r, got, d)
		}
	}
	out := logs.String()
	var shaWarn string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "sha256 is wrong") {
			shaWarn = line
		}
	}
	if !strings.Contains(shaWarn, "level=WARN") || !strings.Contains(shaWarn, "peer="+liar.URL) || !strings.Contains(shaWarn, "image=k8s-1.37.2.iso") {
		t.Fatalf("no warning naming the peer that sent wrong bytes:\n%s", out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "peer="+refused) {
		t.Fatalf("no warning naming the unreachable peer:\n%s", out)
	}
	if l := leftovers(t, empty); len(l) != 0 {
		t.Fatalf("tmp holds %v after rejected downloads", l)
	}
}

func TestEnsureFailsWhenNoPeerGivesTheBlob(t *testing.T) {
	ca := testpki.New(t, "appliances")
	holder := newAppliance(t, ca, "holder", nil)
	empty := newAppliance(t, ca, "empty", nil)
	other := newAppliance(t, ca, "other", nil)
	im, _ := holder.addBlob(t, "onie.bin", 4096)
	empty.shareRecord(t, im)

	err := empty.fetcher(ca, nil, other.srv.URL).Ensure(context.Background(), im)
	if core.KindOf(err) != core.KindUnavailable || !strings.Contains(err.Error(), other.srv.URL+": does not hold the blob") {
		t.Fatalf("want unavailable naming the peer, got %v", err)
	}
	err = empty.fetcher(ca, nil).Ensure(context.Background(), im)
	if core.KindOf(err) != core.KindUnavailable || !strings.Contains(err.Error(), "no peers") {
		t.Fatalf("without peers: %v", err)
	}
	if _, err := os.Stat(empty.ims.BlobPath(im.SHA256)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a blob appeared: %v", err)
	}
	bad := core.Image{SHA256: "../../etc/passwd", Name: "x"}
	if err := empty.fetcher(ca, nil, holder.srv.URL).Ensure(context.Background(), bad); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("a bad digest: %v", err)
	}
	// A peer address that is not an https base URL is skipped.
	err = empty.fetcher(ca, nil, "http://"+strings.TrimPrefix(holder.srv.URL, "https://"), holder.srv.URL+"/x").Ensure(context.Background(), im)
	if core.KindOf(err) != core.KindUnavailable || !strings.Contains(err.Error(), "https://host:port") {
		t.Fatalf("bad peer URLs: %v", err)
	}
	if n := holder.requests.Load(); n != 0 {
		t.Fatalf("holder saw %d requests through bad URLs", n)
	}
}

func TestFetcherVerifiesThePeerCertificate(t *testing.T) {
	ca := testpki.New(t, "appliances")
	empty := newAppliance(t, ca, "empty", nil)
	im := core.Image{SHA256: strings.Repeat("ab", 32), Name: "x.bin", Size: 10}
	empty.shareRecord(t, im)
	var served atomic.Int64
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) })

	// An appliance certificate for another address: its SAN is checked
	// against the peer's URL.
	elsewhere := startPeer(t, ca, ca.Issue("elsewhere", net.ParseIP("10.99.0.3")), serve)
	// The right address, but not the appliances' CA.
	stranger := testpki.New(t, "stranger")
	impostor := startPeer(t, ca, stranger.Issue("impostor", loopback), serve)

	var logs syncBuffer
	err := empty.fetcher(ca, &logs, elsewhere.URL, impostor.URL).Ensure(context.Background(), im)
	if core.KindOf(err) != core.KindUnavailable {
		t.Fatalf("want unavailable, got %v", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1") || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("want a SAN and an unknown-authority refusal, got %v", err)
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("a request reached an unverified peer (%d)", n)
	}
	// ServerName in the given config does not override the peer's address.
	f := empty.fetcher(ca, nil, elsewhere.URL)
	f.TLS.ServerName = "10.99.0.3"
	if err := f.Ensure(context.Background(), im); err == nil {
		t.Fatal("ServerName let a certificate for another address pass")
	}
	// Configurations that cannot authenticate are refused before any dial.
	for name, cfg := range map[string]*tls.Config{
		"insecure":  {InsecureSkipVerify: true, RootCAs: ca.Pool, Certificates: []tls.Certificate{empty.cert.TLS}},
		"no roots":  {Certificates: []tls.Certificate{empty.cert.TLS}},
		"no client": {RootCAs: ca.Pool},
	} {
		f := empty.fetcher(ca, nil, elsewhere.URL)
		f.TLS = cfg
		if err := f.Ensure(context.Background(), im); core.KindOf(err) != core.KindUnavailable {
			t.Errorf("%s: want unavailable, got %v", name, err)
		}
	}
}

func TestPeerListenerRefusesClientsWithoutAnApplianceCertificate(t *testing.T) {
	ca := testpki.New(t, "appliances")
	holder := newAppliance(t, ca, "holder", nil)
	im, _ := holder.addBlob(t, "blob.bin", 2048)
	url := holder.srv.URL + PathPrefix + im.SHA256

	// The client presents cert whatever CAs the server asks for (Go's
	// client would otherwise send nothing that the server's CAs did not
	// issue); nil presents none.
	get := func(cert *tls.Certificate) error {
		cfg := &tls.Config{RootCAs: ca.Pool}
		if cert != nil {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	err := get(nil)
	if err == nil || !strings.Contains(err.Error(), "tls: certificate required") {
		t.Fatalf("without a certificate: want a TLS refusal, got %v", err)
	}
	stranger := testpki.New(t, "stranger")
	foreign := stranger.Issue("stranger", loopback).TLS
	err = get(&foreign)
	if err == nil || !strings.Contains(err.Error(), "tls: unknown certificate authority") {
		t.Fatalf("with another CA's certificate: want a TLS refusal, got %v", err)
	}
	if n := holder.requests.Load(); n != 0 {
		t.Fatalf("%d refused clients reached the handler", n)
	}
	// The fetcher with another CA's certificate fails the same way.
	empty := newAppliance(t, ca, "empty", nil)
	empty.shareRecord(t, im)
	f := empty.fetcher(ca, nil, holder.srv.URL)
	f.TLS.Certificates = nil
	f.TLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil }
	if err := f.Ensure(context.Background(), im); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Fatalf("fetcher with another CA's certificate: %v", err)
	}
	if err := get(&empty.cert.TLS); err != nil {
		t.Fatalf("with an appliance certificate: %v", err)
	}
}

func TestHandlerRefusesRequestsWithoutVerifiedClientCertificate(t *testing.T) {
	st, err := imagestore.Open(storetest.Store(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := Handler(st)
	path := PathPrefix + strings.Repeat("0", 64)
	for name, state := range map[string]*tls.ConnectionState{"plain HTTP": nil, "TLS without a client certificate": {}} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.TLS = state
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusForbidden || errorCode(t, w.Body.Bytes()) != "forbidden" {
			t.Fatalf("%s: %d %s", name, w.Code, w.Body)
		}
	}
	// Mounted on a plain listener by mistake: still refused.
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("plain listener: %d", resp.StatusCode)
	}
}

// errorCode is the code of an httpserve error body.
func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var eb httpserve.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("not an error body: %q", body)
	}
	return eb.Error.Code
}

func TestHandlerPaths(t *testing.T) {
	ca := testpki.New(t, "appliances")
	holder := newAppliance(t, ca, "holder", nil)
	im, content := holder.addBlob(t, "blob.bin", 70000)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca.Pool, Certificates: []tls.Certificate{ca.Issue("client", loopback).TLS}}}}
	defer client.CloseIdleConnections()

	do := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, holder.srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Path, req.URL.RawPath = path, "" // as given: no cleaning on the way
		if strings.Contains(path, "%") {
			req.URL.Opaque = path // sent escaped, decoded by the server
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}

	resp, body := do(http.MethodGet, PathPrefix+im.SHA256)
	if resp.StatusCode != 200 || !bytes.Equal(body, content) || resp.ContentLength != im.Size {
		t.Fatalf("GET: %d, %d bytes, Content-Length %d", resp.StatusCode, len(body), resp.ContentLength)
	}
	resp, body = do(http.MethodHead, PathPrefix+im.SHA256)
	if resp.StatusCode != 200 || len(body) != 0 || resp.Header.Get("Content-Length") != "70000" {
		t.Fatalf("HEAD: %d, %d bytes, Content-Length %q", resp.StatusCode, len(body), resp.Header.Get("Content-Length"))
	}
	for _, p := range []string{
		PathPrefix + "../../etc/passwd",
		PathPrefix + "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
		PathPrefix + "..%2f..%2f..%2fetc%2fpasswd",
		PathPrefix + strings.ToUpper(im.SHA256),
		PathPrefix + im.SHA256[:63],
		PathPrefix + im.SHA256 + "0",
		PathPrefix + im.SHA256 + "/",
		PathPrefix + "sha256:" + im.SHA256,
		PathPrefix + im.SHA256[:63] + "g",
		PathPrefix,
	} {
		resp, body := do(http.MethodGet, p)
		if resp.StatusCode != http.StatusBadRequest || errorCode(t, body) != "invalid" {
			t.Errorf("GET %s: %d %s", p, resp.StatusCode, body)
		}
	}
	resp, body = do(http.MethodGet, PathPrefix+strings.Repeat("0", 64))
	if resp.StatusCode != http.StatusNotFound || errorCode(t, body) != "not_found" {
		t.Fatalf("a blob not held: %d %s", resp.StatusCode, body)
	}
	resp, body = do(http.MethodGet, "/peer/v1/other")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("outside the prefix: %d %s", resp.StatusCode, body)
	}
	resp, body = do(http.MethodPost, PathPrefix+im.SHA256)
	if resp.StatusCode != http.StatusMethodNotAllowed || errorCode(t, body) != httpserve.CodeMethodNotAllowed {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
}

func TestConcurrentEnsureSharesOneDownload(t *testing.T) {
	ca := testpki.New(t, "appliances")
	release := make(chan struct{})
	holder := newAppliance(t, ca, "holder", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release // hold the download until every caller has joined it
			h.ServeHTTP(w, r)
		})
	})
	empty := newAppliance(t, ca, "empty", nil)
	im, _ := holder.addBlob(t, "iso.bin", 2<<20)
	empty.shareRecord(t, im)
	f := empty.fetcher(ca, nil, holder.srv.URL)

	const callers = 8
	errs := make(chan error, callers)
	for range callers {
		go func() { errs <- f.Ensure(context.Background(), im) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		joined := 0
		if fl := f.flights[im.SHA256]; fl != nil {
			joined = fl.waiters
		}
		f.mu.Unlock()
		if joined == callers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d callers joined the download", joined, callers)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	for range callers {
		if err := <-errs; err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	if n := holder.requests.Load(); n != 1 {
		t.Fatalf("%d downloads for %d concurrent callers, want 1", n, callers)
	}
	if got := hashFile(t, empty.ims.BlobPath(im.SHA256)); got != im.SHA256 {
		t.Fatalf("blob hashes to %s", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.flights) != 0 {
		t.Fatalf("flights left: %v", f.flights)
	}
}

func TestDownloadStopsWhenEveryCallerGivesUp(t *testing.T) {
	ca := testpki.New(t, "appliances")
	gone := make(chan struct{})
	holder := newAppliance(t, ca, "holder", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // never answers; sees the fetcher hang up
			close(gone)
		})
	})
	empty := newAppliance(t, ca, "empty", nil)
	im, _ := holder.addBlob(t, "iso.bin", 1024)
	empty.shareRecord(t, im)
	f := empty.fetcher(ca, nil, holder.srv.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := f.Ensure(ctx, im); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the caller's deadline, got %v", err)
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the download went on after its only caller left")
	}
}

func TestStalledPeerIsSkipped(t *testing.T) {
	ca := testpki.New(t, "appliances")
	holder := newAppliance(t, ca, "holder", nil)
	empty := newAppliance(t, ca, "empty", nil)
	im, content := holder.addBlob(t, "iso.bin", 1<<20)
	empty.shareRecord(t, im)
	staller := startPeer(t, ca, ca.Issue("staller", loopback), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1048576")
		_, _ = w.Write(content[:4096])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	var logs syncBuffer
	f := empty.fetcher(ca, &logs, staller.URL, holder.srv.URL)
	f.StallTimeout = 300 * time.Millisecond
	start := time.Now()
	if err := f.Ensure(context.Background(), im); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
	if !strings.Contains(logs.String(), "sent nothing for too long") || !strings.Contains(logs.String(), "peer="+staller.URL) {
		t.Fatalf("no warning about the stalled peer:\n%s", logs.String())
	}
}

func TestInstallBlobNeedsTheRecordAndKeepsNothingBad(t *testing.T) {
	ca := testpki.New(t, "appliances")
	a := newAppliance(t, ca, "a", nil)
	content := []byte("the content of an image")
	sum := sha256.Sum256(content)
	sha := hex.EncodeToString(sum[:])
	ctx := context.Background()

	if _, err := a.ims.InstallBlob(ctx, bytes.NewReader(content), sha, int64(len(content))); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("without a record: %v", err)
	}
	a.shareRecord(t, core.Image{SHA256: sha, Name: "c.txt", Kind: imagestore.KindFile, Size: int64(len(content))})
	if _, err := a.ims.InstallBlob(ctx, bytes.NewReader(content[1:]), sha, int64(len(content))); !errors.Is(err, imagestore.ErrSizeMismatch) {
		t.Fatalf("short: %v", err)
	}
	if _, err := a.ims.InstallBlob(ctx, bytes.NewReader(append(content, 'x')), sha, int64(len(content))); !errors.Is(err, imagestore.ErrSizeMismatch) {
		t.Fatalf("long: %v", err)
	}
	bad := bytes.ToUpper(content)
	if _, err := a.ims.InstallBlob(ctx, bytes.NewReader(bad), sha, int64(len(content))); !errors.Is(err, imagestore.ErrDigestMismatch) {
		t.Fatalf("other bytes: %v", err)
	}
	if _, err := os.Stat(a.ims.BlobPath(sha)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused blob is in place: %v", err)
	}
	if n, err := a.ims.InstallBlob(ctx, bytes.NewReader(content), sha, int64(len(content))); err != nil || n != int64(len(content)) {
		t.Fatalf("install: %d %v", n, err)
	}
	if got := hashFile(t, a.ims.BlobPath(sha)); got != sha {
		t.Fatalf("installed blob hashes to %s", got)
	}
	if l := leftovers(t, a); len(l) != 0 {
		t.Fatalf("tmp holds %v", l)
	}
}

func TestCurlFetchesWithACertificateAndIsRefusedWithout(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed: the real-client check needs it")
	}
	ca := testpki.New(t, "appliances")
	holder := newAppliance(t, ca, "holder", nil)
	im, _ := holder.addBlob(t, "blob.bin", 300000)
	dir := t.TempDir()
	caFile := ca.File
	client := ca.Issue("curl-client", loopback)
	url := holder.srv.URL + PathPrefix + im.SHA256
	out := filepath.Join(dir, "blob")

	cmd := exec.Command(curl, "-sS", "--fail", "--max-time", "20", "--cacert", caFile,
		"--cert", client.CertFile, "--key", client.KeyFile, "-o", out, url)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("curl with a certificate: %v\n%s", err, b)
	}
	if got := hashFile(t, out); got != im.SHA256 {
		t.Fatalf("curl's copy hashes to %s", got)
	}

	os.Remove(out)
	cmd = exec.Command(curl, "-sS", "--fail", "--max-time", "20", "--cacert", caFile, "-o", out, url)
	b, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("curl without a certificate succeeded:\n%s", b)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 22 { // 22: an HTTP error, i.e. the handshake passed
		t.Fatalf("curl without a certificate: want a TLS failure, got %v\n%s", err, b)
	}
	if _, err := os.Stat(out); err == nil {
		if data, _ := os.ReadFile(out); len(data) > 0 {
			t.Fatalf("curl without a certificate wrote %d bytes", len(data))
		}
	}
	t.Logf("curl without a certificate: exit %d: %s", exit.ExitCode(), strings.TrimSpace(string(b)))

	foreign := testpki.New(t, "stranger").Issue("curl-stranger", loopback)
	cmd = exec.Command(curl, "-sS", "--fail", "--max-time", "20", "--cacert", caFile,
		"--cert", foreign.CertFile, "--key", foreign.KeyFile, "-o", out, url)
	b, err = cmd.CombinedOutput()
	if !errors.As(err, &exit) || exit.ExitCode() == 22 {
		t.Fatalf("curl with another CA's certificate: want a TLS failure, got %v\n%s", err, b)
	}
	t.Logf("curl with another CA's certificate: exit %d: %s", exit.ExitCode(), strings.TrimSpace(string(b)))
	if n := holder.requests.Load(); n != 1 {
		t.Fatalf("the handler saw %d requests, want only the authenticated one", n)
	}
}
