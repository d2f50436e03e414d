package halab

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
)

// The lab: a bridge namespace with one port per appliance and one for the
// fleet. Appliance i is 10.99.0.1<i>/16 (ha0) in its own namespace; the
// fleet is 10.99.0.2/16, a relay whose helper address is the link's
// broadcast, so every appliance receives every DISCOVER and REQUEST (what
// load balancing needs) and answers the relay by unicast. The pool's /24s
// are local routes in the fleet's namespace (each switch talks HTTP from
// the address it leased) and routed to the relay from every appliance.
const (
	relayAddr           = "10.99.0.2"
	broadcastAddr       = "255.255.255.255"
	poolFirst, poolLast = 1, 12 // 10.99.1.0 - 10.99.12.254
	// sessionTTL is every appliance's store.session_ttl: the bound on how
	// long a dead or cut-off appliance's clients go unanswered.
	sessionTTL = 3 * time.Second
)

// appliance is one `ztpd serve` of the group.
type appliance struct {
	name, ip string
	ns       *netns.NS
	work     string
	app      *lab.Appliance
	http     *http.Client
}

// group is the lab: the namespaces, the appliances, the fleet's namespace.
type group struct {
	t      *testing.T
	prefix string
	br     *netns.NS
	cli    *netns.NS
	apps   []*appliance
	work   string
	procs  []*lab.Proc
	nss    []*netns.NS // the appliances' and the fleet's
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string // removed by TestMain
)

// requireLab skips t unless the lab can run here, and returns the ztpd
// binary (built once per test binary).
func requireLab(t *testing.T, tools ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts three ztpd appliances on embedded etcd in network namespaces; skipped in -short mode")
	}
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	for _, tool := range append([]string{"tcpdump", "go"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: needs %s", tool)
		}
	}
	buildOnce.Do(func() {
		builtBin = filepath.Join(buildDir, "ztpd")
		buildErr = lab.BuildBinaries(map[string]string{builtBin: "github.com/ztpd/ztpd/cmd/ztpd"})
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// startGroup builds the lab and starts n appliances, and returns once
// every bucket is answered by exactly one of them. tag keeps the
// namespaces of the package's tests apart.
func startGroup(t *testing.T, bin, tag string, n int) *group {
	t.Helper()
	g := &group{t: t, prefix: fmt.Sprintf("halab%x%s", os.Getpid()&0xffff, tag), work: t.TempDir()}
	if keep := os.Getenv("HALAB_KEEP"); keep != "" {
		// Kept for a look afterwards: logs, configs, the capture.
		g.work = filepath.Join(keep, t.Name())
		if err := os.RemoveAll(g.work); err != nil {
			t.Fatal(err)
		}
	}
	cleanupStale()
	t.Cleanup(g.close)
	var err error
	g.br, err = netns.Add(g.prefix + "-br")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.br.IP("link", "add", "br0", "type", "bridge"); err != nil {
		t.Fatal(err)
	}
	if err := g.br.IP("link", "set", "br0", "up"); err != nil {
		t.Fatal(err)
	}
	if g.cli, err = g.plug("cl", relayAddr); err != nil {
		t.Fatal(err)
	}
	for i := poolFirst; i <= poolLast; i++ {
		if err := g.cli.IP("route", "add", "local", fmt.Sprintf("10.99.%d.0/24", i), "dev", "lo"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= n; i++ {
		a := &appliance{name: fmt.Sprintf("a%d", i), ip: fmt.Sprintf("10.99.0.1%d", i)}
		a.work = filepath.Join(g.work, a.name)
		if err := os.MkdirAll(a.work, 0o755); err != nil {
			t.Fatal(err)
		}
		if a.ns, err = g.plug(a.name, a.ip); err != nil {
			t.Fatal(err)
		}
		for p := poolFirst; p <= poolLast; p++ {
			if err := a.ns.IP("route", "add", fmt.Sprintf("10.99.%d.0/24", p), "via", relayAddr); err != nil {
				t.Fatal(err)
			}
		}
		a.http = lab.NSClient(a.ns)
		a.http.Timeout = 3 * time.Second
		g.apps = append(g.apps, a)
	}
	if err := g.writeShared(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	errs := make(chan error, n)
	for _, a := range g.apps {
		go func(a *appliance) {
			var err error
			a.app, err = lab.StartAppliance(ctx, a.ns, bin, a.work, g.config(a), "http://"+a.ip+":8080")
			if err != nil {
				err = fmt.Errorf("%s: %w", a.name, err)
			}
			errs <- err
		}(a)
	}
	for range g.apps {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	start := time.Now()
	if err := g.waitBuckets(60*time.Second, g.apps, nil); err != nil {
		t.Fatalf("the buckets never settled: %v", err)
	}
	t.Logf("%d appliances up; every bucket answered once %.1fs after the last became healthy: %s",
		n, time.Since(start).Seconds(), g.statusLine(g.apps))
	return g
}

// plug makes namespace <prefix>-<name> with ha0 = addr/16 on the bridge.
func (g *group) plug(name, addr string) (*netns.NS, error) {
	ns, err := netns.Add(g.prefix + "-" + name)
	if err != nil {
		return nil, err
	}
	g.nss = append(g.nss, ns)
	port := "p" + name
	if err := netns.Veth(ns, "ha0", addr+"/16", g.br, port, ""); err != nil {
		return nil, err
	}
	return ns, g.br.IP("link", "set", port, "master", "br0")
}

// close stops what the lab runs, shows the appliances' logs when the test
// failed, and removes the namespaces.
func (g *group) close() {
	for _, p := range g.procs {
		p.Stop(3 * time.Second)
	}
	for _, a := range g.apps {
		if a.app != nil {
			a.app.Proc.Stop(10 * time.Second)
		}
	}
	if g.t.Failed() {
		for _, a := range g.apps {
			out, err := os.ReadFile(filepath.Join(a.work, "ztpd.out"))
			if err != nil {
				continue
			}
			var keep []string // what the group did, not every device's state change
			for _, l := range strings.Split(string(out), "\n") {
				if !strings.Contains(l, "device state changed") && !strings.Contains(l, "Failed to watch") {
					keep = append(keep, l)
				}
			}
			where := "HALAB_KEEP=<dir> keeps the logs, configs and capture"
			if os.Getenv("HALAB_KEEP") != "" {
				where = filepath.Join(a.work, "ztpd.out")
			}
			g.t.Logf("%s ztpd.out (tail; %s):\n%s", a.name, where, tailLines(strings.Join(keep, "\n"), 30))
		}
	}
	for _, ns := range g.nss {
		ns.Close()
	}
	if g.br != nil {
		g.br.Close()
	}
}

// cleanupStale removes the namespaces of earlier runs of this package whose
// test process is gone (a run killed before its cleanups), and stops what
// still runs inside them.
func cleanupStale() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "halab") {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(f[0], "halab%x", &pid); err != nil || pid == os.Getpid()&0xffff {
			continue
		}
		if procAlive(pid) {
			continue
		}
		if pids, err := exec.Command("ip", "netns", "pids", f[0]).Output(); err == nil {
			for _, p := range strings.Fields(string(pids)) {
				var n int
				if _, err := fmt.Sscanf(p, "%d", &n); err == nil && n > 1 {
					_ = syscall.Kill(n, syscall.SIGKILL)
				}
			}
		}
		_ = exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// procAlive reports whether a process whose pid ends in the 16 bits
// recorded in a namespace name may still run: any test binary of ours
// whose pid matches keeps its namespaces.
func procAlive(pid16 int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		var p int
		if _, err := fmt.Sscanf(e.Name(), "%d", &p); err != nil || p&0xffff != pid16 {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p)); err == nil && strings.HasSuffix(exe, "halab.test") {
			return true
		}
	}
	return false
}

// writeShared writes the group's CA, every appliance's certificate (its
// address and loopback as SANs, server and client use), the shared at-rest
// key (each appliance gets a copy) and the boot storm's profiles, as
// bench/ha/appliance.sh does with openssl.
func (g *group) writeShared() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ztpd appliances"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	if err := writePEM(filepath.Join(g.work, "ca.pem"), "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	for i, a := range g.apps {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: a.name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IPAddresses: []net.IP{net.ParseIP(a.ip), net.IPv4(127, 0, 0, 1)},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(a.work, "cert.pem"), "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(a.work, "key.pem"), "EC PRIVATE KEY", kder, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(a.work, "secret.key"), secret, 0o600); err != nil {
			return err
		}
	}
	var prof strings.Builder
	for c := 0; c < stormClusters; c++ {
		fmt.Fprintf(&prof, "---\nname: storm-%02d\nmatch:\n  serial: \"STORM-%02d-*\"\nhostname: 'sw-{{ .Serial | lower }}'\ncluster: storm-%02d\nrole: sonic\n", c, c, c)
	}
	if err := os.MkdirAll(filepath.Join(g.work, "profiles"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(g.work, "profiles", "storm.yaml"), []byte(prof.String()), 0o644)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// config is appliance a's configuration: the boot storm's (bench
// bootstorm) with the store of bench/ha/appliance.sh.
func (g *group) config(a *appliance) string {
	var peers strings.Builder
	for _, m := range g.apps {
		fmt.Fprintf(&peers, "    - {name: %s, url: \"https://%s:2380\"}\n", m.name, m.ip)
	}
	return fmt.Sprintf(`data_dir: %[1]s/data
key_file: %[1]s/secret.key
advertise_addr: %[2]s
log: {level: info, format: json}
http: {addr: "%[2]s:8080"}
dhcp:
  interfaces: [ha0]
  lease_time: 1h
  subnets:
    - {name: lab, subnet: 10.99.0.0/16, interface: ha0, pools: ["10.99.%[3]d.0-10.99.%[4]d.254"], router: %[5]s}
profiles: [%[6]s]
joiner:
  auto_approve: [{subnets: [10.99.0.0/16], roles: [control-plane, worker]}]
events: {keep: 1000000}
store:
  backend: etcd-embedded
  name: %[7]s
  session_ttl: %[8]s
  client_url: https://127.0.0.1:2379
  peer_addr: %[2]s:8444
  tls: {cert_file: %[1]s/cert.pem, key_file: %[1]s/key.pem, ca_file: %[9]s}
  peers:
%[10]s`, a.work, a.ip, poolFirst, poolLast, relayAddr, filepath.Join(g.work, "profiles"), a.name, sessionTTL,
		filepath.Join(g.work, "ca.pem"), peers.String())
}

// health is the group part of an appliance's /healthz.
func (a *appliance) health() (ha.Status, error) {
	resp, err := a.http.Get("http://" + a.ip + ":8080/healthz")
	if err != nil {
		return ha.Status{}, err
	}
	defer resp.Body.Close()
	var body struct {
		Group *ha.Status `json:"group"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return ha.Status{}, fmt.Errorf("%s /healthz: %w", a.name, err)
	}
	if body.Group == nil {
		return ha.Status{}, fmt.Errorf("%s /healthz has no group", a.name)
	}
	return *body.Group, nil
}

// primaries counts the buckets whose primary is a (its share when all are
// alive).
func (g *group) primaries(a *appliance) int {
	names := g.names()
	n := 0
	for b := 0; b < ha.Buckets; b++ {
		if ha.Primary(names, b) == a.name {
			n++
		}
	}
	return n
}

func (g *group) names() []string {
	var out []string
	for _, a := range g.apps {
		out = append(out, a.name)
	}
	return out
}

// waitBuckets waits until the appliances of set answer every bucket
// between them (their /healthz buckets sum to 256, each sees exactly set
// live) and check, if given, holds for the statuses.
func (g *group) waitBuckets(limit time.Duration, set []*appliance, check func(map[string]ha.Status) error) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		last = g.bucketsOnce(set, check)
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

func (g *group) bucketsOnce(set []*appliance, check func(map[string]ha.Status) error) error {
	sum := 0
	sts := map[string]ha.Status{}
	var want []string
	for _, a := range set {
		want = append(want, a.name)
	}
	for _, a := range set {
		st, err := a.health()
		if err != nil {
			return err
		}
		if !st.Alive {
			return fmt.Errorf("%s: session not alive", a.name)
		}
		if strings.Join(st.Live, ",") != strings.Join(want, ",") {
			return fmt.Errorf("%s sees %v live, want %v", a.name, st.Live, want)
		}
		sum += st.Buckets
		sts[a.name] = st
	}
	if sum != ha.Buckets {
		return fmt.Errorf("buckets answered sum to %d (%s)", sum, fmtStatus(sts))
	}
	if check != nil {
		return check(sts)
	}
	return nil
}

func (g *group) statusLine(set []*appliance) string {
	sts := map[string]ha.Status{}
	for _, a := range set {
		if st, err := a.health(); err == nil {
			sts[a.name] = st
		}
	}
	return fmtStatus(sts)
}

func fmtStatus(sts map[string]ha.Status) string {
	var parts []string
	for _, n := range []string{"a1", "a2", "a3"} {
		if st, ok := sts[n]; ok {
			lead := ""
			if st.IsLeader {
				lead = " leader"
			}
			parts = append(parts, fmt.Sprintf("%s=%d buckets%s", n, st.Buckets, lead))
		}
	}
	return strings.Join(parts, ", ")
}

// capture runs tcpdump in the fleet's namespace, writing every DHCP reply
// (UDP from port 67) to path, and returns a function that stops it and
// reports how many packets the kernel dropped.
func (g *group) capture(path string) func() (dropped int) {
	g.t.Helper()
	errPath := path + ".err"
	ef, err := os.Create(errPath)
	if err != nil {
		g.t.Fatal(err)
	}
	defer ef.Close()
	cmd := g.cli.Command(context.Background(), "tcpdump", "-i", "ha0", "-n", "-U", "-B", "16384", "-s", "1500",
		"-w", path, "udp and src port 67")
	cmd.Stdout, cmd.Stderr = ef, ef
	p, err := lab.StartProc(cmd)
	if err != nil {
		g.t.Fatal(err)
	}
	g.procs = append(g.procs, p)
	for i := 0; i < 100; i++ {
		if b, _ := os.ReadFile(errPath); strings.Contains(string(b), "listening on") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return func() int {
		time.Sleep(time.Second) // the last replies in flight
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
			p.Stop(time.Second)
		}
		b, _ := os.ReadFile(errPath)
		var dropped int
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "dropped by kernel") {
				fmt.Sscanf(strings.TrimSpace(line), "%d", &dropped)
			}
		}
		return dropped
	}
}

// kill ends appliance a with SIGKILL (`ip netns exec` execs ztpd in
// place: the process is ztpd itself) and waits until it is gone.
func (a *appliance) kill() error {
	if err := a.app.Proc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-a.app.Proc.Done()
	return nil
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// metrics reads the unlabelled samples of a's /metrics (ztpd's and its
// embedded etcd member's; /metrics reads no store, so it answers while the
// appliance is cut off).
func (a *appliance) metrics() (map[string]float64, error) {
	resp, err := a.http.Get("http://" + a.ip + ":8080/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.Contains(line, "{") {
			continue
		}
		var name string
		var v float64
		if _, err := fmt.Sscanf(line, "%s %g", &name, &v); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// raftLeader is the appliance whose etcd member leads the cluster.
func (g *group) raftLeader() *appliance {
	g.t.Helper()
	for i := 0; i < 50; i++ {
		for _, a := range g.apps {
			if m, err := a.metrics(); err == nil && m["etcd_server_is_leader"] == 1 {
				return a
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	g.t.Fatal("no appliance's etcd member leads the cluster")
	return nil
}

// roles says which of the group's leaderships a holds.
func (g *group) roles(a *appliance) string {
	var r []string
	if m, err := a.metrics(); err == nil && m["etcd_server_is_leader"] == 1 {
		r = append(r, "etcd leader")
	}
	if st, err := a.health(); err == nil && st.IsLeader {
		r = append(r, "group leader")
	}
	if len(r) == 0 {
		return "no leader"
	}
	return strings.Join(r, ", ")
}
