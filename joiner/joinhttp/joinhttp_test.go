package joinhttp

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/joiner/agent"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/testenv/testpki"
)

type fixture struct {
	svc     *joiner.Service
	srv     *httptest.Server
	st      *boltstore.Store
	cl      *clusters.Service
	cluster string

	mu     sync.Mutex
	bodies []string // every POST /join body, as the server received it
}

// recording keeps the body of every POST /join before h answers it.
func (f *fixture) recording(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/join" {
			b, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			f.bodies = append(f.bodies, string(b))
			f.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, r)
	})
}

// joinBodies are the POST /join bodies received so far.
func (f *fixture) joinBodies() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.bodies)
}

// csrBody is a switch's join body with a request for a key made for it.
func csrBody(t *testing.T, fields map[string]any) string {
	t.Helper()
	_, csr, err := testpki.DeviceCSR()
	if err != nil {
		t.Fatal(err)
	}
	fields["csr"] = string(csr)
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// running feeds the clusters service what ztpd's watch reports once the
// cluster's API server answers and its control plane is Ready.
func (f *fixture) running(t *testing.T) {
	t.Helper()
	if err := f.cl.ObserveHealth(f.cluster, clusters.Health{APIReachable: true, Nodes: 1, ReadyNodes: 1,
		ControlPlanes: 1, ReadyControlPlanes: 1}); err != nil {
		t.Fatal(err)
	}
}

func setup(t *testing.T, rules []joiner.Rule) *fixture {
	t.Helper()
	return setupWith(t, rules, nil)
}

// setupWith is setup with the joiner's options changed by tune first.
func setupWith(t *testing.T, rules []joiner.Rule, tune func(*joiner.Options)) *fixture {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	fs := storetest.Open(t)
	f := &fixture{st: fs.Store}
	f.srv = httptest.NewUnstartedServer(nil)
	var err error
	dev := devices.New(devices.Options{Store: fs.Store})
	t.Cleanup(func() { dev.Close() })
	applianceCA, err := pki.NewCA("ztpd appliance", pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	agentFiles := func(credential string) ([]bundle.File, error) { // the device agent, as ztpd installs it
		return agent.Files(agent.InstallConfig{URL: "https://127.0.0.1:8443/agent/v1", Credential: credential,
			CAPEM: string(applianceCA.CertPEM())})
	}
	opts := joiner.Options{AutoApprove: rules, BaseURL: "http://" + f.srv.Listener.Addr().String(),
		Devices: dev, AgentFiles: agentFiles}
	if tune != nil {
		tune(&opts)
	}
	f.svc, err = joiner.New(fs.Store, fs.Keys, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Config.Handler = f.recording(New(f.svc, nil))
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	// The cluster, created as the API creates it.
	ctx := context.Background()
	cl, err := clusters.New(fs.Store, f.svc, clusters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(ctx) })
	v, err := cl.AddVersion(ctx, clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.29.3", URL: "http://10.99.0.1:8080/isos/v1.29.3.iso"})
	if err != nil {
		t.Fatal(err)
	}
	_, j, err := cl.CreateCluster(ctx, clusters.LocalAdmin, clusters.ClusterSpec{Name: "prod", ZoneID: cl.Zone().ID, VersionID: v.ID,
		ServiceOfferingID: clusters.Offerings[0].ID, Size: 3})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if j, err = cl.WaitJob(wctx, j.ID); err != nil || j.Status != core.JobSucceeded {
		t.Fatalf("create cluster: %+v %v", j, err)
	}
	f.cl, f.cluster = cl, j.InstanceID
	return f
}

// hold gives mac an active lease on ip: joins come from the holder of
// their address. Devices of one test ask from their own loopback address
// (curl --interface 127.0.0.N); 127.0.0.1 is the default source.
func (f *fixture) hold(t *testing.T, ip, mac string) {
	t.Helper()
	now := time.Now().UTC()
	err := f.st.Update(func(tx core.Tx) error {
		return tx.Leases().Put(core.Lease{IP: ip, MAC: mac, State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) enroll(t *testing.T, mac, serial string) string {
	t.Helper()
	c, err := f.svc.Enroll(context.Background(), joiner.EnrollRequest{Cluster: "prod", MAC: mac, Serial: serial})
	if err != nil {
		t.Fatal(err)
	}
	return c.Reveal()
}

// curl runs the real curl and returns the status code, headers and body.
func curl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	out, err := exec.Command("curl", append([]string{"-sS", "-D", "/dev/stderr", "-w", "\n%{http_code}"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %v: %v\n%s", args, err, out)
	}
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	code := 0
	for _, c := range s[i+1:] {
		code = code*10 + int(c-'0')
	}
	return code, s[:i], s[:i]
}

func TestCloudStackVMJoinsWithCurl(t *testing.T) {
	f := setup(t, []joiner.Rule{{ControlPlane: true}})
	f.hold(t, "127.0.0.1", "02:00:00:00:00:01")
	secret := f.enroll(t, "02:00:00:00:00:01", "")
	// cloud-init's "#include" style: GET with the secret in the URL.
	code, _, body := curl(t, f.srv.URL+"/join/cloud-config?mac=02:00:00:00:00:01&enrollment="+secret)
	if code != 200 || !strings.Contains(body, "#cloud-config") || !strings.Contains(body, "kind: InitConfiguration") {
		t.Fatalf("cloud-config: %d\n%s", code, body)
	}
	if !strings.Contains(body, "Content-Type: text/cloud-config") {
		t.Fatalf("content type:\n%s", body[:300])
	}
	// Replaying the secret is refused with one generic message.
	code, _, body = curl(t, f.srv.URL+"/join/cloud-config?mac=02:00:00:00:00:01&enrollment="+secret)
	if code != 403 || strings.Contains(body, "already used") {
		t.Fatalf("replay: %d %s", code, body)
	}
}

func TestSONiCJoinAndReportWithCurl(t *testing.T) {
	f := setup(t, []joiner.Rule{{ControlPlane: true}})
	// First control plane, so switches have an API server to join.
	f.hold(t, "127.0.0.2", "02:00:00:00:00:01")
	f.hold(t, "127.0.0.1", "0c:29:ef:00:00:01")
	cp := f.enroll(t, "02:00:00:00:00:01", "")
	// The control plane's secret from the switch's address is refused.
	if code, _, b := curl(t, "-X", "POST", "--data", `{"enrollment":"`+cp+`","mac":"02:00:00:00:00:01"}`, f.srv.URL+"/join"); code != 403 {
		t.Fatalf("secret used from another device's address: %d %s", code, b)
	}
	if code, _, b := curl(t, "--interface", "127.0.0.2", "-X", "POST", "-H", "Content-Type: application/json", "--data",
		`{"enrollment":"`+cp+`","mac":"02:00:00:00:00:01","hostname":"cp-1"}`, f.srv.URL+"/join"); code != 200 {
		t.Fatalf("control plane: %d %s", code, b)
	}
	err := f.st.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: "0c:29:ef:00:00:01", MAC: "0c:29:ef:00:00:01", Kind: core.KindSONiC, Serial: "SN-LEAF-1", Hostname: "leaf-1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	secret := f.enroll(t, "", "SN-LEAF-1")
	// Exactly what SONiC ZTP's curl sends, plus the secret.
	args := []string{"-X", "POST", "-A", "SONiC-ZTP/0.1",
		"-H", "PRODUCT-NAME: Accton-AS7712-32X", "-H", "SERIAL-NUMBER: SN-LEAF-1",
		"-H", "BASE-MAC-ADDRESS: 0c:29:ef:00:00:01", "-H", "SONiC-VERSION: N.A",
		"-H", "Authorization: Bearer " + secret, f.srv.URL + "/join"}
	// Without a request for a key the switch made, nothing is issued: the
	// plugin that sent it is older than ztpd.
	if code, _, body := curl(t, args...); code != 400 || !strings.Contains(body, "this join plugin is too old") {
		t.Fatalf("switch join without a CSR: %d\n%s", code, body)
	}
	// A request for a key ztpd does not certify: refused with the reason.
	weak, _ := rsa.GenerateKey(rand.Reader, 1024)
	weakDER, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, weak)
	weakBody, _ := json.Marshal(map[string]string{"csr": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: weakDER}))})
	if code, _, body := curl(t, append([]string{"-H", "Content-Type: application/json", "--data", string(weakBody)}, args...)...); code != 400 ||
		!strings.Contains(body, "certificate signing request refused: RSA key of 1024 bits") {
		t.Fatalf("switch join with an RSA-1024 CSR: %d\n%s", code, body)
	}
	// Both refusals are on the switch's audit trail; nothing was issued.
	var refused []string
	f.st.View(func(tx core.Tx) error {
		return tx.Events().ListDevice(core.AuditEvents, "0c:29:ef:00:00:01", 0, func(ev core.Event) (bool, error) {
			if ev.Type == "join.refused" {
				refused = append(refused, ev.Fields["reason"]+": "+ev.Message)
			}
			return true, nil
		})
	})
	if len(refused) != 2 || !strings.HasPrefix(refused[0], "no-csr: this join plugin is too old") || !strings.HasPrefix(refused[1], "bad-csr: ") {
		t.Fatalf("join.refused events: %q", refused)
	}
	if _, err := f.svc.Membership(context.Background(), "0c:29:ef:00:00:01"); err == nil {
		t.Fatal("a refused switch has a membership")
	}
	args = append([]string{"-H", "Content-Type: application/json", "--data", csrBody(t, map[string]any{})}, args...)
	// The cluster is Starting: the switch waits (its kubelet would
	// bootstrap the moment it had its certificate).
	code, hdr, body := curl(t, args...)
	if code != 202 || !strings.Contains(body, "control plane to be Running") || !strings.Contains(hdr, "Retry-After: 5") {
		t.Fatalf("switch join while Starting: %d\n%s\n%s", code, hdr, body)
	}
	f.running(t)
	code, _, body = curl(t, args...)
	if code != 200 {
		t.Fatalf("switch join: %d\n%s", code, body)
	}
	var d joiner.Delivery
	if err := json.Unmarshal([]byte(body[strings.Index(body, "{"):]), &d); err != nil {
		t.Fatal(err)
	}
	// The switch's two files (its certificate and the CA: it keeps its
	// key), then the device agent's five.
	if d.Method != "sonic" || len(d.Files) != 2+5 || !d.Agent || d.Files[0].Path != bundle.SonicClientCertPath || d.ReportToken == "" {
		t.Fatalf("delivery %+v", d)
	}
	if strings.Contains(body, "PRIVATE KEY") {
		t.Fatal("a switch's delivery carries a private key")
	}
	var db map[string]map[string]map[string]string
	if err := json.Unmarshal(d.ConfigDB, &db); err != nil || db["KUBERNETES_MASTER"]["SERVER"]["port"] != "6443" {
		t.Fatalf("config_db %s", d.ConfigDB)
	}
	// Report back with the bundle's credential.
	code, _, body = curl(t, "-X", "POST", "-H", "Authorization: Bearer "+d.ReportToken, "--data", `{"state":"joined"}`, d.ReportURL)
	// Recorded as a hint; the member is joined once its Node is Ready.
	if code != 200 || !strings.Contains(body, `"reported":"joined"`) || !strings.Contains(body, `"state":"join-issued"`) {
		t.Fatalf("report: %d %s", code, body)
	}
	code, _, _ = curl(t, "-X", "POST", "-H", "Authorization: Bearer "+cp, "--data", `{"state":"joined"}`, d.ReportURL)
	if code != 403 {
		t.Fatalf("report with an enrollment secret: %d", code)
	}
}

func TestWaitingAndBadRequests(t *testing.T) {
	f := setup(t, nil) // no auto-approval
	f.hold(t, "127.0.0.1", "02:00:00:00:00:09")
	secret := f.enroll(t, "02:00:00:00:00:09", "")
	code, body, _ := curl(t, "-X", "POST", "--data", `{"enrollment":"`+secret+`","mac":"02:00:00:00:00:09"}`, f.srv.URL+"/join")
	if code != 202 || !strings.Contains(body, "Retry-After: 30") || !strings.Contains(body, "awaiting approval") {
		t.Fatalf("waiting: %d\n%s", code, body)
	}
	for _, c := range []struct {
		data string
		want int
	}{
		{`{"enrollment":`, 400},
		{`{"enrollment":"x","mac":"zz"}`, 403},
		{`{"enrollment":"` + secret + `","mac":"not-a-mac"}`, 400},
		{`{"enrollment":"` + secret + `","mac":"02:00:00:00:00:09","bogus":1}`, 400},
		{`{"enrollment":"` + secret + `","mac":"02:00:00:00:00:09","kind":"toaster"}`, 400},
	} {
		if code, _, b := curl(t, "-X", "POST", "--data", c.data, f.srv.URL+"/join"); code != c.want {
			t.Errorf("%s: %d, want %d (%s)", c.data, code, c.want, b)
		}
	}
}

// TestSONiCZTPPluginEndToEnd runs the plugin the way SONiC ZTP does: fetched
// over HTTP, run with python3 on the section ztpd rendered for the switch.
func TestSONiCZTPPluginEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	f := setup(t, []joiner.Rule{{AssertedSerials: []string{"SN-LEAF-1"}}, {MACs: []string{"02:00:00:00:00:01"}, ControlPlane: true}})
	f.hold(t, "127.0.0.2", "02:00:00:00:00:01")
	f.hold(t, "127.0.0.1", "0c:29:ef:00:00:01") // the plugin's requests come from 127.0.0.1
	cp := f.enroll(t, "02:00:00:00:00:01", "")
	if code, _, b := curl(t, "--interface", "127.0.0.2", "-X", "POST", "--data", `{"enrollment":"`+cp+`","mac":"02:00:00:00:00:01"}`, f.srv.URL+"/join"); code != 200 {
		t.Fatalf("control plane: %d %s", code, b)
	}
	dev := core.Device{ID: "0c:29:ef:00:00:01", MAC: "0c:29:ef:00:00:01", Kind: core.KindSONiC, Serial: "SN-LEAF-1"}
	if err := f.st.Update(func(tx core.Tx) error { return tx.Devices().Put(dev) }); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plugin := filepath.Join(dir, "plugin")
	if code, _, b := curl(t, "-o", plugin, f.srv.URL+joiner.PluginPath); code != 200 {
		t.Fatalf("plugin download: %d %s", code, b)
	}
	sec, err := f.svc.ZTPSection(context.Background(), dev, "prod", "leaf-1")
	if err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "input.json")
	raw, _ := json.Marshal(map[string]any{"09-join": sec})
	os.WriteFile(input, raw, 0o600)
	root := filepath.Join(dir, "root")
	keyPath := root + bundle.SonicClientKeyPath
	// The cluster is Starting: the switch makes its key, asks, is told to
	// wait longer than it may, and gives up; its key stays for the retry.
	cmd := exec.Command("python3", plugin, input)
	cmd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "ZTPD_MAX_WAIT=1")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "gave up waiting") {
		t.Fatalf("plugin while Starting: %v\n%s", err, out)
	}
	firstKey, err := os.ReadFile(keyPath)
	if err != nil || !strings.Contains(string(firstKey), "BEGIN EC PRIVATE KEY") {
		t.Fatalf("the switch's key after a first try: %v\n%s", err, firstKey)
	}
	f.running(t)
	cmd = exec.Command("python3", plugin, input)
	cmd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "ZTPD_MAX_WAIT=5")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("plugin: %v\n%s", err, out)
	}
	for path, mode := range map[string]os.FileMode{
		"/etc/sonic/credentials/restapiserver.crt": 0o644,
		"/etc/sonic/credentials/restapiserver.key": 0o600,
	} {
		fi, err := os.Stat(root + path)
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v mode %v\n%s", path, err, fi, out)
		}
	}
	// The agent script came gzip+base64 encoded (the plugin asks for it)
	// and is installed as it is.
	if got, err := os.ReadFile(root + agent.ScriptPath); err != nil || !bytes.Equal(got, agent.Script()) {
		t.Fatalf("installed agent script: %v, %d bytes, want the %d of agent.Script()", err, len(got), len(agent.Script()))
	}
	if fi, err := os.Stat(root + agent.ScriptPath); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("agent script mode: %v %v", fi, err)
	}
	crt, _ := os.ReadFile(root + "/etc/sonic/credentials/restapiserver.crt")
	key, _ := os.ReadFile(keyPath)
	if _, err := tls.X509KeyPair(crt, key); err != nil {
		t.Fatalf("installed certificate and key do not pair: %v", err)
	}
	if !bytes.Equal(key, firstKey) {
		t.Fatal("the retry made a new key instead of using the switch's")
	}
	if !strings.Contains(string(out), "skipped: sonic-cfggen") {
		t.Fatalf("plugin output:\n%s", out)
	}
	// What went over the wire: requests for the key, never the key.
	var asked int
	for _, b := range f.joinBodies() {
		if !strings.Contains(b, `"csr"`) {
			continue
		}
		asked++
		var body struct{ CSR string }
		if err := json.Unmarshal([]byte(b), &body); err != nil {
			t.Fatal(err)
		}
		csr, err := pki.ParseCSR([]byte(body.CSR))
		if err != nil {
			t.Fatalf("the plugin's request: %v\n%s", err, body.CSR)
		}
		cert, _ := pki.ParseCertPEM(crt)
		if !cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(csr.PublicKey()) {
			t.Fatal("the plugin asked for another key than the one it kept")
		}
		if strings.Contains(b, "PRIVATE KEY") {
			t.Fatalf("a join body carries a private key:\n%s", b)
		}
		for _, line := range strings.Split(string(key), "\n") {
			if len(line) > 16 && !strings.HasPrefix(line, "-----") && strings.Contains(b, line) {
				t.Fatalf("a join body carries the switch's key material %q", line)
			}
		}
	}
	if asked != 2 {
		t.Fatalf("%d join requests with a CSR, want the first try's and the retry's", asked)
	}
	// The section's secret is used up: running the plugin again is refused.
	cmd = exec.Command("python3", plugin, input)
	cmd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "ZTPD_MAX_WAIT=5")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "refused (403)") {
		t.Fatalf("replayed section: %v\n%s", err, out)
	}
}

// TestJoinCompressesFilesOnlyForDevicesThatAsk: a device that lists
// gzip+base64 in file_encodings gets its large non-secret files so; one
// that does not, and every secret, gets them as they are.
func TestJoinCompressesFilesOnlyForDevicesThatAsk(t *testing.T) {
	f := setup(t, []joiner.Rule{{MACs: []string{"02:00:00:00:00:01"}, ControlPlane: true}, {MACs: []string{"0c:29:ef:00:00:01", "0c:29:ef:00:00:02", "0c:29:ef:00:00:03"}}})
	f.hold(t, "127.0.0.2", "02:00:00:00:00:01")
	cp := f.enroll(t, "02:00:00:00:00:01", "")
	if code, _, b := curl(t, "--interface", "127.0.0.2", "-X", "POST", "--data", `{"enrollment":"`+cp+`","mac":"02:00:00:00:00:01"}`, f.srv.URL+"/join"); code != 200 {
		t.Fatalf("control plane: %d %s", code, b)
	}
	f.running(t)
	join := func(ip, mac, extra string) []joiner.DeliveredFile {
		t.Helper()
		f.hold(t, ip, mac)
		tok := f.enroll(t, mac, "")
		_, csr, err := testpki.DeviceCSR()
		if err != nil {
			t.Fatal(err)
		}
		csrJSON, _ := json.Marshal(string(csr))
		code, _, b := curl(t, "--interface", ip, "-X", "POST", "-H", "User-Agent: SONiC-ZTP/0.1",
			"--data", `{"enrollment":"`+tok+`","mac":"`+mac+`","kind":"sonic","csr":`+string(csrJSON)+extra+`}`, f.srv.URL+"/join")
		if code != 200 {
			t.Fatalf("join %s: %d %s", mac, code, b)
		}
		var d struct{ Files []joiner.DeliveredFile }
		t.Logf("%s%s: bundle of %d bytes", mac, extra, len(b)-strings.Index(b, "{"))
		if err := json.Unmarshal([]byte(b[strings.Index(b, "{"):]), &d); err != nil {
			t.Fatal(err)
		}
		return d.Files
	}
	plain := join("127.0.0.3", "0c:29:ef:00:00:01", "")
	packed := join("127.0.0.4", "0c:29:ef:00:00:02", `,"file_encodings":["gzip+base64"]`)
	if len(plain) != len(packed) || len(plain) < 5 {
		t.Fatalf("%d files plain, %d compressed", len(plain), len(packed))
	}
	compressed := 0
	for i, p := range plain {
		c := packed[i]
		if p.Encoding != "" {
			t.Fatalf("%s: encoded %q for a device that did not ask", p.Path, p.Encoding)
		}
		if c.Path != p.Path || c.Mode != p.Mode {
			t.Fatalf("file %d: %s %s vs %s %s", i, c.Path, c.Mode, p.Path, p.Mode)
		}
		if c.Encoding == "" {
			if len(c.Content) >= 4096 && c.Path != agent.ConfigPath {
				t.Fatalf("%s: %d bytes sent as they are", c.Path, len(c.Content))
			}
			continue
		}
		if c.Encoding != joiner.FileEncodingGzip {
			t.Fatalf("%s: encoding %q", c.Path, c.Encoding)
		}
		if c.Path == agent.ConfigPath || strings.Contains(c.Path, ".key") {
			t.Fatalf("%s: a secret was compressed", c.Path)
		}
		got, err := c.Decoded()
		if err != nil {
			t.Fatal(err)
		}
		if c.Path == agent.ScriptPath && !bytes.Equal(got, agent.Script()) {
			t.Fatalf("agent script decodes to %d bytes, not agent.Script()", len(got))
		}
		if string(got) != p.Content {
			t.Fatalf("%s: decodes to other content than the plain bundle's", c.Path)
		}
		if len(c.Content) > len(p.Content)/2 {
			t.Fatalf("%s: %d bytes compressed from %d", c.Path, len(c.Content), len(p.Content))
		}
		compressed++
	}
	if compressed == 0 {
		t.Fatal("nothing compressed: the agent script is over 30 KB")
	}
	// An encoding it does not know is no encoding: the plain bundle.
	other := join("127.0.0.5", "0c:29:ef:00:00:03", `,"file_encodings":["zstd"]`)
	for _, c := range other {
		if c.Encoding != "" {
			t.Fatalf("%s: encoding %q for a device that asked for zstd", c.Path, c.Encoding)
		}
	}
}

// TestReportFromAnotherAddressIsRefused: a report token is worth something
// only from the address the member's device holds, like every other device
// credential: from an address nobody holds, or another device's, the
// report is refused (403) and changes nothing.
func TestReportFromAnotherAddressIsRefused(t *testing.T) {
	f := setup(t, []joiner.Rule{{ControlPlane: true}})
	f.hold(t, "127.0.0.2", "02:00:00:00:00:01")
	f.hold(t, "127.0.0.4", "02:00:00:00:00:04") // another device
	cp := f.enroll(t, "02:00:00:00:00:01", "")
	code, _, body := curl(t, "--interface", "127.0.0.2", "-X", "POST", "--data",
		`{"enrollment":"`+cp+`","mac":"02:00:00:00:00:01","hostname":"cp-1"}`, f.srv.URL+"/join")
	if code != 200 {
		t.Fatalf("control plane: %d %s", code, body)
	}
	var d joiner.Delivery
	if err := json.Unmarshal([]byte(body[strings.Index(body, "{"):]), &d); err != nil {
		t.Fatal(err)
	}
	before, err := f.svc.Membership(context.Background(), "02:00:00:00:00:01")
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{"127.0.0.3", "127.0.0.4"} { // nobody's; another device's
		code, _, body := curl(t, "--interface", from, "-X", "POST", "-H", "Authorization: Bearer "+d.ReportToken,
			"--data", `{"state":"failed","detail":"forged"}`, d.ReportURL)
		if code != 403 {
			t.Fatalf("report from %s: %d %s", from, code, body)
		}
	}
	if m, _ := f.svc.Membership(context.Background(), "02:00:00:00:00:01"); m.State != before.State || m.Reported != "" || len(m.History) != len(before.History) {
		t.Fatalf("refused reports changed the membership: %+v", m)
	}
	code, _, body = curl(t, "--interface", "127.0.0.2", "-X", "POST", "-H", "Authorization: Bearer "+d.ReportToken,
		"--data", `{"state":"failed","detail":"kubeadm init failed"}`, d.ReportURL)
	if code != 200 || !strings.Contains(body, `"state":"failed"`) {
		t.Fatalf("report from the member's address: %d %s", code, body)
	}
}

// TestPluginPinnedTransport: with tls-pin and an https join URL the plugin
// talks through curl with the server's key pinned. curl checks the pin
// even with -k (no CA is trusted): a server with another key stops the
// plugin at once, saying why, and sees nothing; one of the pins matching
// (several, separated by ";") lets the join through.
func TestPluginPinnedTransport(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	// The device HTTPS listener, known once started below: the switch's
	// join answer names its report URL and pins.
	var secureBase, pins string
	f := setupWith(t, []joiner.Rule{{AssertedSerials: []string{"SN-LEAF-1"}}, {MACs: []string{"02:00:00:00:00:01"}, ControlPlane: true}},
		func(o *joiner.Options) {
			o.SecureBaseURL = func() string { return secureBase }
			o.DevicePins = func() string { return pins }
		})
	f.hold(t, "127.0.0.2", "02:00:00:00:00:01")
	f.hold(t, "127.0.0.1", "0c:29:ef:00:00:01")
	cp := f.enroll(t, "02:00:00:00:00:01", "")
	if code, _, b := curl(t, "--interface", "127.0.0.2", "-X", "POST", "--data", `{"enrollment":"`+cp+`","mac":"02:00:00:00:00:01"}`, f.srv.URL+"/join"); code != 200 {
		t.Fatalf("control plane: %d %s", code, b)
	}
	f.running(t)
	dev := core.Device{ID: "0c:29:ef:00:00:01", MAC: "0c:29:ef:00:00:01", Kind: core.KindSONiC, Serial: "SN-LEAF-1"}
	if err := f.st.Update(func(tx core.Tx) error { return tx.Devices().Put(dev) }); err != nil {
		t.Fatal(err)
	}
	tlsSrv := httptest.NewTLSServer(f.srv.Config.Handler) // its own self-signed certificate: no CA the switch knows
	t.Cleanup(tlsSrv.Close)
	pinOf := func(spki []byte) string {
		sum := sha256.Sum256(spki)
		return "sha256//" + base64.StdEncoding.EncodeToString(sum[:])
	}
	right := pinOf(tlsSrv.Certificate().RawSubjectPublicKeyInfo)
	other, err := pki.NewCA("not ztpd", pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wrong := pinOf(other.Certificate().RawSubjectPublicKeyInfo)
	secureBase, pins = tlsSrv.URL, right

	dir := t.TempDir()
	plugin := filepath.Join(dir, "plugin")
	if err := os.WriteFile(plugin, Plugin(), 0o755); err != nil {
		t.Fatal(err)
	}
	sec, err := f.svc.ZTPSection(context.Background(), dev, "prod", "leaf-1")
	if err != nil {
		t.Fatal(err)
	}
	sec["join-url"] = tlsSrv.URL + "/join"
	run := func(pin string) (string, error) {
		sec["tls-pin"] = pin
		raw, _ := json.Marshal(map[string]any{"09-join": sec})
		input := filepath.Join(dir, "input.json")
		os.WriteFile(input, raw, 0o600)
		cmd := exec.Command("python3", plugin, input)
		cmd.Env = append(os.Environ(), "ZTPD_ROOT="+filepath.Join(dir, "root"), "ZTPD_MAX_WAIT=60")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if time.Since(start) > 20*time.Second {
			t.Errorf("the plugin took %s: it retried", time.Since(start))
		}
		return string(out), err
	}
	before := len(f.joinBodies())
	out, err := run(wrong)
	if err == nil || !strings.Contains(out, "matches no tls-pin") || strings.Contains(out, "retrying") || strings.Contains(out, "cannot reach") {
		t.Fatalf("wrong pin: %v\n%s", err, out)
	}
	if n := len(f.joinBodies()); n != before {
		t.Fatalf("the server behind a wrong pin received %d join requests", n-before)
	}
	out, err = run(wrong + ";" + right)
	if err != nil || !strings.Contains(out, "admitted to cluster prod") {
		t.Fatalf("right pin among two: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "root", bundle.SonicClientCertPath)); err != nil {
		t.Fatal(err)
	}
	// report.env sends the report over the pinned listener: what reports
	// uses curl -k --pinnedpubkey with its pin, and the credential never
	// crosses in clear.
	env, err := os.ReadFile(filepath.Join(dir, "root", "etc/sonic/ztpd/report.env"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(env)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = strings.Trim(v, "'")
	}
	if vars["ZTPD_REPORT_URL"] != tlsSrv.URL+"/join/report" || vars["ZTPD_REPORT_PIN"] != right {
		t.Fatalf("report.env:\n%s", env)
	}
	if code, _, b := curl(t, "-k", "--pinnedpubkey", vars["ZTPD_REPORT_PIN"], "-X", "POST", "-H", "Authorization: Bearer "+vars["ZTPD_REPORT_TOKEN"],
		"--data", `{"state":"joined"}`, vars["ZTPD_REPORT_URL"]); code != 200 {
		t.Fatalf("the report over the pinned listener: %d %s", code, b)
	}
	// The secret is used up: the refusal comes through the pinned
	// connection with its status, not as a transport error.
	if out, err := run(right); err == nil || !strings.Contains(out, "refused (403)") {
		t.Fatalf("replay through the pinned connection: %v\n%s", err, out)
	}
}
