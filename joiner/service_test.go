package joiner

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	yaml3 "go.yaml.in/yaml/v3"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/logcount"
)

var bg = context.Background()

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// env is the joiner and the clusters service driving it, over one store.
type env struct {
	t     *testing.T
	dir   string
	store core.Store
	svc   *Service
	cl    *clusters.Service
	clk   *clock
	logs  *logcount.Handler // the joiner's log, when opts.Log was nil
}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	f := storetest.Open(t)
	return newEnvOver(t, f, f.Store, opts)
}

// newRerunningEnv is newEnv over a store that runs every transaction twice
// (storetest.Rerunning), as a store shared by several appliances may.
func newRerunningEnv(t *testing.T, opts Options) *env {
	t.Helper()
	f := storetest.Open(t)
	return newEnvOver(t, f, storetest.Rerunning(f.Store), opts)
}

func newEnvOver(t *testing.T, f *storetest.Fixture, st core.Store, opts Options) *env {
	t.Helper()
	clk := &clock{t: time.Now().UTC().Truncate(time.Second)} // real time: TLS peers check certificate validity
	opts.Now = clk.now
	opts.Devices = recorder(t, st)
	logs := &logcount.Handler{}
	if opts.Log == nil {
		opts.Log = slog.New(logs)
	}
	svc, err := New(st, f.Keys, opts)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := clusters.New(st, svc, clusters.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(context.Background()) })
	return &env{t: t, dir: f.Dir, store: st, svc: svc, cl: cl, clk: clk, logs: logs}
}

// recorder is the devices service over st, as the app builds it for the
// joiner; it is closed before the store.
func recorder(tb testing.TB, st core.Store) *devices.Service {
	d := devices.New(devices.Options{Store: st, Log: slog.New(slog.DiscardHandler)})
	tb.Cleanup(func() { d.Close() })
	return d
}

// approveAll is an auto-approve rule matching every device, control planes
// included.
var approveAll = []Rule{{ControlPlane: true}}

// hold gives mac an active lease on ip: joins come from the holder of their
// address (core.HolderOf).
func (e *env) hold(ip, m string) string {
	e.t.Helper()
	now := e.clk.now()
	err := e.store.Update(func(tx core.Tx) error {
		return tx.Leases().Put(core.Lease{IP: ip, MAC: m, Subnet: "vms", State: core.LeaseActive, Start: now, Expiry: now.Add(24 * time.Hour)})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ip
}

func addrOf(i int) string { return fmt.Sprintf("10.99.%d.%d", 1+i/250, 1+i%250) }

// at is addrOf(i) as a request's address.
func at(i int) netip.Addr { return netip.MustParseAddr(addrOf(i)) }

// clusterSpec is a cluster the tests create through the clusters service,
// as the API does.
type clusterSpec struct {
	Name              string
	Size              int
	ControlNodes      int
	KubernetesVersion string // default 1.28.4
	JoinMethod        string
	Endpoint          string
	ExternalLBIP      string
	EtcdNodes         int
}

// cluster creates a cluster through the clusters service and waits until
// it is provisioned (Running).
func (e *env) cluster(spec clusterSpec) core.Cluster {
	e.t.Helper()
	if spec.KubernetesVersion == "" {
		spec.KubernetesVersion = "1.28.4"
	}
	v, err := e.cl.GetVersion(bg, "v"+spec.KubernetesVersion)
	if err != nil {
		v, err = e.cl.AddVersion(bg, clusters.LocalAdmin, clusters.VersionSpec{SemVer: spec.KubernetesVersion,
			URL: "http://10.99.0.1:8080/isos/v" + spec.KubernetesVersion + ".iso"})
		if err != nil {
			e.t.Fatal(err)
		}
	}
	c, j, err := e.cl.CreateCluster(bg, clusters.LocalAdmin, clusters.ClusterSpec{Name: spec.Name, ZoneID: e.cl.Zone().ID,
		VersionID: v.ID, ServiceOfferingID: clusters.Offerings[0].ID, Size: spec.Size, ControlNodes: spec.ControlNodes,
		JoinMethod: spec.JoinMethod, Endpoint: spec.Endpoint, ExternalLBIP: spec.ExternalLBIP, EtcdNodes: spec.EtcdNodes})
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitJob(j)
	if got := e.getCluster(c.ID); got.State != core.ClusterStarting {
		e.t.Fatalf("create job left %s %s, want Starting", c.Name, got.State)
	}
	e.healthy(c.ID)
	return e.getCluster(c.ID)
}

// healthy feeds the clusters service one healthy observation of the
// cluster (what ztpd's watch reports once its API server answers and its
// Nodes are Ready), so it moves Starting -> Running.
func (e *env) healthy(clusterID string) {
	e.t.Helper()
	c := e.getCluster(clusterID)
	cp := max(c.ControlNodes, 1)
	if err := e.cl.ObserveHealth(clusterID, clusters.Health{APIReachable: true, Nodes: cp + c.Size, ReadyNodes: cp + c.Size,
		ControlPlanes: cp, ReadyControlPlanes: cp}); err != nil {
		e.t.Fatal(err)
	}
}

// nodeReady tells the joiner the cluster shows b's Node with Ready status
// ready (True, False or Unknown), as the watch would.
func (e *env) nodeReady(b *Bundle, ready string) core.Membership {
	e.t.Helper()
	m, err := e.svc.Membership(bg, b.Device)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.svc.NodeSeen(m.Cluster, ObservedNode{Name: m.NodeName, Ready: ready, Created: e.clk.now()}); err != nil {
		e.t.Fatal(err)
	}
	m, err = e.svc.Membership(bg, b.Device)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// waitJob waits for a clusters job and fails the test unless it succeeded.
func (e *env) waitJob(j core.Job) core.Job {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	done, err := e.cl.WaitJob(ctx, j.ID)
	if err != nil || done.Status != core.JobSucceeded {
		e.t.Fatalf("%s: %+v %v", j.Command, done, err)
	}
	return done
}

func mac(i int) string {
	return fmt.Sprintf("02:00:00:%02x:%02x:%02x", (i>>16)&0xff, (i>>8)&0xff, i&0xff)
}

func (e *env) enroll(cluster, m, serial string) string {
	e.t.Helper()
	c, err := e.svc.Enroll(bg, EnrollRequest{Cluster: cluster, MAC: m, Serial: serial})
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Reveal()
}

func (e *env) join(cluster string, i int) (*Bundle, error) {
	m := mac(i)
	return e.svc.Join(bg, JoinRequest{Enrollment: e.enroll(cluster, m, ""), MAC: m, RemoteIP: e.hold(addrOf(i), m)})
}

func (e *env) must(b *Bundle, err error) *Bundle {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

type writeFile struct {
	Path, Permissions, Content string
}

func cloudFiles(t *testing.T, b *Bundle) map[string]string {
	t.Helper()
	var cc struct {
		WriteFiles []writeFile `yaml:"write_files"`
	}
	if err := yaml3.Unmarshal(b.CloudConfig, &cc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range cc.WriteFiles {
		out[f.Path] = f.Content
	}
	return out
}

func TestFirstControlPlaneThenWorkers(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, ReportURL: "http://10.99.0.1:8080/join/report"})
	c := e.cluster(clusterSpec{Name: "prod", Size: 2, ControlNodes: 1})

	cp := e.must(e.join("prod", 1))
	if cp.Role != RoleControlPlane || !cp.Init || cp.Method != MethodKubeadm || cp.APIEndpoint != "10.99.1.2:6443" {
		t.Fatalf("first bundle %v endpoint %s", cp, cp.APIEndpoint)
	}
	files := cloudFiles(t, cp)
	caPEM, _ := e.svc.CACertPEM(c.ID)
	if files["/etc/kubernetes/pki/ca.crt"] != string(caPEM) || !strings.Contains(files["/etc/kubernetes/pki/ca.key"], "PRIVATE KEY") {
		t.Fatal("first control plane lacks the cluster CA")
	}
	cfg := files["/etc/ztpd/kubeadm.yaml"]
	if !strings.Contains(cfg, "kind: InitConfiguration") || strings.Count(cfg, "token: ") != 2 {
		t.Fatalf("init configuration should create 2 node tokens:\n%s", cfg)
	}

	w := e.must(e.join("prod", 2))
	if w.Role != RoleWorker {
		t.Fatalf("second device role %s", w.Role)
	}
	wf := cloudFiles(t, w)
	if _, ok := wf["/etc/kubernetes/pki/ca.key"]; ok {
		t.Fatal("worker got the CA key")
	}
	jc := wf["/etc/ztpd/kubeadm.yaml"]
	if !strings.Contains(jc, "kind: JoinConfiguration") || !strings.Contains(jc, cp.CAHash) || strings.Contains(jc, "unsafe") {
		t.Fatalf("worker join configuration:\n%s", jc)
	}
	// The worker's token is one the init configuration creates, and the
	// stored record (id + hash) verifies it.
	tok := tokenIn(t, jc)
	if !slices.Contains(initTokens(t, cfg), tok.Reveal()) {
		t.Fatal("worker token is not in the init configuration")
	}
	rec := e.tokenRecord(tokens.KindKubeadm, tok.ID())
	if err := tokenRecord(rec).VerifyBootstrapToken(tok, e.clk.now()); err != nil || rec.Device != w.Device {
		t.Fatalf("stored token record: %v (device %s)", err, rec.Device)
	}

	// Desired size 2 workers, 1 control plane: a fourth device waits.
	if _, err := e.join("prod", 3); err != nil {
		t.Fatal(err)
	}
	_, err := e.join("prod", 4)
	var we *WaitError
	if !errors.As(err, &we) || !strings.Contains(we.Reason, "desired size") || we.RetryAfter != waitRetry {
		t.Fatalf("fourth device: %v", err)
	}
	got, _ := e.svc.Members(bg, "prod")
	if len(got) != 3 {
		t.Fatalf("%d members, want 3", len(got))
	}
	cl := e.getCluster(c.ID)
	if cl.Endpoint != "https://10.99.1.2:6443/" {
		t.Fatalf("cluster endpoint %q", cl.Endpoint)
	}
}

func tokenIn(t *testing.T, joinCfg string) tokens.BootstrapToken {
	t.Helper()
	for _, line := range strings.Split(joinCfg, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "token: "); ok {
			tok, err := tokens.ParseBootstrapToken(yamlScalar(t, v))
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
	}
	t.Fatal("no token in join configuration")
	return tokens.BootstrapToken{}
}

// yamlScalar reads one YAML scalar as a YAML parser would: the bundle's
// writer quotes a value a resolver would take for a number (a token
// starting "0x", "0o" or "0b" is one in about 400).
func yamlScalar(t *testing.T, v string) string {
	t.Helper()
	var s string
	if err := yaml3.Unmarshal([]byte(v), &s); err != nil {
		t.Fatalf("YAML scalar %q: %v", v, err)
	}
	return s
}

// initTokens are the bootstrap tokens an init configuration creates.
func initTokens(t *testing.T, initCfg string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(initCfg, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "token: "); ok {
			out = append(out, yamlScalar(t, v))
		}
	}
	return out
}

func (e *env) tokenRecord(kind tokens.Kind, id string) core.Token {
	e.t.Helper()
	var rec core.Token
	err := e.store.View(func(tx core.Tx) error {
		var err error
		rec, err = tx.Tokens().Get(string(kind), id)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

func (e *env) getCluster(id string) core.Cluster {
	var c core.Cluster
	e.store.View(func(tx core.Tx) error { var err error; c, err = tx.Clusters().Get(id); return err })
	return c
}

func TestRefusedJoins(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, EnrollmentTTL: 10 * time.Minute})
	e.cluster(clusterSpec{Name: "prod", Size: 5})
	m1 := mac(1)

	// Replayed enrollment secret.
	secret := e.enroll("prod", m1, "")
	e.must(e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: m1, RemoteIP: e.hold("10.99.1.1", m1)}))
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: m1, RemoteIP: "10.99.1.1"}); !errors.Is(err, ErrEnrollmentUsed) {
		t.Fatalf("replayed secret: %v", err)
	}

	// Wrong serial.
	m2 := mac(2)
	ip2 := e.hold("10.99.1.2", m2)
	bySerial, _ := e.svc.Enroll(bg, EnrollRequest{Cluster: "prod", Serial: "SN-A"})
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: bySerial.Reveal(), MAC: m2, Serial: "SN-B", RemoteIP: ip2}); !errors.Is(err, ErrBindingMismatch) {
		t.Fatalf("wrong serial: %v", err)
	}
	// Wrong MAC.
	byMAC := e.enroll("prod", m2, "")
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: byMAC, MAC: mac(3), RemoteIP: ip2}); !errors.Is(err, ErrBindingMismatch) {
		t.Fatalf("wrong MAC: %v", err)
	}
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: byMAC, MAC: mac(3), RemoteIP: e.hold("10.99.1.3", mac(3))}); !errors.Is(err, ErrBindingMismatch) {
		t.Fatalf("secret used by its holder's address for another MAC: %v", err)
	}
	// From an address nobody holds, and with no address at all.
	for _, ip := range []string{"10.99.1.250", ""} {
		if _, err := e.svc.Join(bg, JoinRequest{Enrollment: byMAC, MAC: m2, RemoteIP: ip}); !errors.Is(err, ErrNotHolder) {
			t.Fatalf("join from %q: %v", ip, err)
		}
	}
	// The failed attempts did not use the secrets up.
	e.must(e.svc.Join(bg, JoinRequest{Enrollment: bySerial.Reveal(), MAC: m2, Serial: "SN-A", RemoteIP: ip2}))

	// Expired enrollment secret.
	m4 := mac(4)
	late := e.enroll("prod", m4, "")
	e.clk.add(10 * time.Minute)
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: late, MAC: m4, RemoteIP: e.hold("10.99.1.4", m4)}); !errors.Is(err, ErrEnrollmentExpired) {
		t.Fatalf("expired secret: %v", err)
	}

	// Revoked enrollment secret.
	m5 := mac(5)
	rev, _ := e.svc.Enroll(bg, EnrollRequest{Cluster: "prod", MAC: m5})
	if err := e.svc.Revoke(bg, tokens.KindEnrollment, rev.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: rev.Reveal(), MAC: m5}); !errors.Is(err, ErrRevoked) {
		t.Fatalf("revoked secret: %v", err)
	}

	// Forged and malformed secrets.
	forged := byMAC[:len(byMAC)-4] + "zzzz"
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: forged, MAC: m2}); !errors.Is(err, ErrEnrollmentInvalid) {
		t.Fatalf("forged secret: %v", err)
	}
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: "abcdef.0123456789abcdef", MAC: m2}); !errors.Is(err, ErrEnrollmentInvalid) {
		t.Fatalf("malformed secret: %v", err)
	}
	for _, err := range []error{ErrEnrollmentUsed, ErrBindingMismatch, ErrEnrollmentExpired, ErrRevoked, ErrEnrollmentInvalid, ErrNotHolder, ErrAlreadyIssued} {
		if !IsUnauthorized(err) {
			t.Fatalf("%v not classed unauthorized", err)
		}
	}
}

// TestLeaseBinding: a secret used from an address whose lease belongs to
// another MAC is refused; with no claim at all, the lease names the device.
func TestLeaseBinding(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	e.cluster(clusterSpec{Name: "prod", Size: 3})
	now := e.clk.now()
	err := e.store.Update(func(tx core.Tx) error {
		for i, ip := range []string{"10.99.1.20", "10.99.1.21"} {
			l := core.Lease{IP: ip, MAC: mac(20 + i), Subnet: "vms", State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)}
			if err := tx.Leases().Put(l); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stolen := e.enroll("prod", mac(20), "")
	// Claims the right MAC, but asks from the address leased to mac(21).
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: stolen, MAC: mac(20), RemoteIP: "10.99.1.21"}); !errors.Is(err, ErrBindingMismatch) {
		t.Fatalf("secret used from another device's address: %v", err)
	}
	// cloud-init #include sends no identity: the lease supplies it.
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: stolen, RemoteIP: "10.99.1.20"}))
	if b.Device != mac(20) {
		t.Fatalf("device %s", b.Device)
	}
}

func TestApprovalRules(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: []Rule{
		{AssertedSerials: []string{"SN-OK"}, Cluster: "prod", ControlPlane: true},
		{AssertedProducts: []string{"Accton-AS7712"}, Subnets: []string{"10.99.7.0/24"}},
		{MACs: []string{"02-00-00-00-00-09", "02:00:00:00:00:0c"}},
		{CircuitIDs: []string{"rack7/port3"}, Cluster: "lab"},
	}})
	e.cluster(clusterSpec{Name: "prod", Size: 10})
	e.cluster(clusterSpec{Name: "lab", Size: 10})
	try := func(cluster string, i int, serial, product, ip string) error {
		m := mac(i)
		_, err := e.svc.Join(bg, JoinRequest{Enrollment: e.enroll(cluster, m, ""), MAC: m, Serial: serial, Product: product, RemoteIP: e.hold(ip, m)})
		return err
	}
	// lab's first control plane, approved by an operator (the rules below
	// that match lab approve workers only).
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: mac(100), MAC: mac(100), Kind: core.KindVM})
	})
	if _, err := e.svc.Approve(bg, mac(100), "lab"); err != nil {
		t.Fatal(err)
	}
	if err := try("lab", 100, "", "", "10.99.1.100"); err != nil {
		t.Fatalf("approved control plane: %v", err)
	}
	waits := func(err error) bool {
		var we *WaitError
		return errors.As(err, &we) && strings.Contains(we.Reason, "approval")
	}
	if err := try("prod", 1, "SN-OK", "", "10.99.1.1"); err != nil {
		t.Fatalf("serial rule: %v", err)
	}
	if err := try("lab", 2, "SN-OK", "", "10.99.1.2"); !waits(err) {
		t.Fatalf("serial rule is limited to prod: %v", err)
	}
	if err := try("lab", 3, "", "Accton-AS7712", "10.99.7.3"); err != nil {
		t.Fatalf("product+subnet rule: %v", err)
	}
	if err := try("lab", 4, "", "Accton-AS7712", "10.99.8.4"); !waits(err) {
		t.Fatalf("product outside the subnet: %v", err)
	}
	if err := try("prod", 9, "", "", "10.99.1.9"); err != nil {
		t.Fatalf("MAC rule: %v", err)
	}
	// Relay agent information is what the network says: it comes from the
	// device's DHCP requests, stored on its record.
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: mac(10), MAC: mac(10), Kind: core.KindVM, CircuitID: "rack7/port3"})
	})
	if err := try("lab", 10, "", "", "10.99.1.10"); err != nil {
		t.Fatalf("circuit id rule: %v", err)
	}
	if err := try("lab", 11, "", "", "10.99.1.11"); !waits(err) {
		t.Fatalf("no circuit id: %v", err)
	}
	// Control planes only where a rule names the role: the MAC rule
	// approves workers, so the first node of a new cluster waits.
	e.cluster(clusterSpec{Name: "edge", Size: 2})
	if err := try("edge", 12, "", "", "10.99.1.12"); !waits(err) || !strings.Contains(err.Error(), "control plane") {
		t.Fatalf("worker-only rule approved a control plane: %v", err)
	}
	// Manual approval lets the waiting device in; its secret is still good.
	m := mac(5)
	secret := e.enroll("prod", m, "")
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: m, RemoteIP: e.hold("10.99.1.5", m)}); !waits(err) {
		t.Fatalf("unapproved device: %v", err)
	}
	ms, _ := e.svc.Membership(bg, m)
	if ms.State != core.StateWaiting {
		t.Fatalf("waiting membership state %s", ms.State)
	}
	// Starting to wait is an event naming the device (its timeline and the
	// console's stream follow the event log); asking again while waiting
	// is not.
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: m, RemoteIP: "10.99.1.5"}); !waits(err) {
		t.Fatalf("unapproved device asking again: %v", err)
	}
	var waitingEvents []core.Event
	e.store.View(func(tx core.Tx) error {
		return tx.Events().List(core.StreamOf("join.waiting"), 0, func(ev core.Event) (bool, error) {
			if ev.Type == "join.waiting" && ev.Device == m {
				waitingEvents = append(waitingEvents, ev)
			}
			return true, nil
		})
	})
	if len(waitingEvents) != 1 || !strings.Contains(waitingEvents[0].Message, "approv") {
		t.Fatalf("join.waiting events for %s: %+v", m, waitingEvents)
	}
	if d, err := e.svc.Approve(bg, m, ""); err != nil || !d.Approved {
		t.Fatal(err)
	}
	e.must(e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: m, RemoteIP: "10.99.1.5"}))
	ms, _ = e.svc.Membership(bg, m)
	if ms.State != core.StateJoinIssued || len(ms.History) != 2 || ms.History[0].State != core.StateWaiting {
		t.Fatalf("history %+v", ms.History)
	}
}

// TestConcurrentJoinsNeverExceedDesiredSize races many devices for few slots.
func TestConcurrentJoinsNeverExceedDesiredSize(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	const size, devices = 40, 400
	c := e.cluster(clusterSpec{Name: "prod", Size: size, ControlNodes: 3})
	secrets := make([]string, devices)
	for i := range devices {
		secrets[i] = e.enroll("prod", mac(i), "")
		e.hold(addrOf(i), mac(i))
	}
	var issued, waited, inits atomic.Int64
	roles := sync.Map{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range devices {
		wg.Go(func() {
			<-start
			b, err := e.svc.Join(bg, JoinRequest{Enrollment: secrets[i], MAC: mac(i), RemoteIP: addrOf(i)})
			var we *WaitError
			switch {
			case err == nil:
				issued.Add(1)
				if b.Init {
					inits.Add(1)
				}
				v, _ := roles.LoadOrStore(b.Role, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			case errors.As(err, &we):
				waited.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	count := func(role string) int64 {
		v, ok := roles.Load(role)
		if !ok {
			return 0
		}
		return v.(*atomic.Int64).Load()
	}
	if issued.Load() != size+3 || waited.Load() != devices-size-3 {
		t.Fatalf("issued %d, waited %d; want %d and %d", issued.Load(), waited.Load(), size+3, devices-size-3)
	}
	if inits.Load() != 1 || count(RoleControlPlane) != 3 || count(RoleWorker) != size {
		t.Fatalf("roles: init %d, control %d, worker %d", inits.Load(), count(RoleControlPlane), count(RoleWorker))
	}
	members, _ := e.svc.Members(bg, c.ID)
	if len(members) != size+3 {
		t.Fatalf("%d membership records", len(members))
	}
	var rt core.JoinState
	e.store.View(func(tx core.Tx) error { var err error; rt, err = joinState(tx, c.ID); return err })
	if rt.Workers != size || rt.ControlPlanes != 3 {
		t.Fatalf("runtime counts %+v", rt)
	}
	// Every issued worker holds a distinct token.
	seen := map[string]bool{}
	for _, m := range members {
		mm, _ := e.svc.Membership(bg, m.Device)
		if mm.Device != rt.FirstControlPlane {
			if mm.TokenID == "" || seen[mm.TokenID] {
				t.Fatalf("member %s token %q reused or missing", m.Device, mm.TokenID)
			}
			seen[mm.TokenID] = true
		}
	}
}

// TestScaleReportAndSweep runs its transactions twice
// (storetest.Rerunning): what each says, and logs, is what one run does.
func TestScaleReportAndSweep(t *testing.T) {
	e := newRerunningEnv(t, Options{AutoApprove: approveAll, ReportURL: "http://10.99.0.1:8080/join/report", TokenTTL: 2 * time.Hour})
	c := e.cluster(clusterSpec{Name: "prod", Size: 3})
	var bundles []*Bundle
	for i := 1; i <= 4; i++ {
		bundles = append(bundles, e.must(e.join("prod", i)))
		e.clk.add(time.Second)
	}
	// A member's own report is a hint: it is kept, but joined is what the
	// cluster shows (its Node Ready), and the cluster record is the
	// clusters service's alone.
	before := e.getCluster(c.ID)
	if _, err := e.svc.Report(bg, bundles[0].ReportToken(), at(1), ReportJoined, ""); err != nil {
		t.Fatal(err)
	}
	if cl := e.getCluster(c.ID); !reflect.DeepEqual(cl, before) {
		t.Fatalf("a report changed the cluster record:\n%+v\n%+v", before, cl)
	}
	if m, _ := e.svc.Membership(bg, bundles[0].Device); m.State != core.StateJoinIssued || m.Reported != ReportJoined || m.NodeName == "" {
		t.Fatalf("a joined report moved the member: %+v", m)
	}
	if err := e.svc.APISeen(c.ID); err != nil {
		t.Fatal(err)
	}
	var rt core.JoinState
	e.store.View(func(tx core.Tx) error { var err error; rt, err = joinState(tx, c.ID); return err })
	if !rt.Initialized || rt.FirstControlPlane != bundles[0].Device {
		t.Fatalf("join state after the API server answered: %+v", rt)
	}
	if m := e.nodeReady(bundles[0], "True"); m.State != core.StateJoined || m.Node == nil || m.Node.Ready != "True" {
		t.Fatalf("member after its Node is Ready: %+v", m)
	}
	if d := e.device(bundles[0].Device); d.State != core.StateJoined || d.Cluster != c.ID || d.Role != RoleControlPlane {
		t.Fatalf("device record after its Node is Ready: %+v", d)
	}
	// NotReady and lost follow the Node; a failed report does not undo a
	// registered member.
	if m := e.nodeReady(bundles[0], "False"); m.State != core.StateNotReady {
		t.Fatalf("NotReady node: %s", m.State)
	}
	if m := e.nodeReady(bundles[0], "Unknown"); m.State != core.StateLost {
		t.Fatalf("Unknown node: %s", m.State)
	}
	if m, err := e.svc.Report(bg, bundles[0].ReportToken(), at(1), ReportFailed, "late"); err != nil || m.State != core.StateLost {
		t.Fatalf("failed report of a registered member: %v %s", err, m.State)
	}
	if m := e.nodeReady(bundles[0], "True"); m.State != core.StateJoined {
		t.Fatalf("Ready again: %s", m.State)
	}
	if n := e.logs.Count("member state from its Node"); n != 4 {
		t.Fatalf("%d member state changes logged, want 4 (joined, not-ready, lost, joined)", n)
	}
	ms, err := e.svc.Report(bg, bundles[1].ReportToken(), at(2), ReportFailed, "kubeadm step 1 failed")
	if err != nil || ms.State != core.StateFailed || !strings.Contains(ms.History[len(ms.History)-1].Reason, "kubeadm step 1 failed") {
		t.Fatalf("failed report: %v %+v", err, ms)
	}
	if _, err := e.svc.Report(bg, bundles[2].ReportToken()[:20]+strings.Repeat("x", 25), at(3), ReportJoined, ""); !errors.Is(err, ErrReportInvalid) {
		t.Fatalf("forged report: %v", err)
	}
	if _, err := e.svc.Report(bg, bundles[2].ReportToken(), at(3), "exploded", ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad state: %v", err)
	}

	// Scale down to 1 worker (through the clusters service, as the API
	// does): the two newest workers leave, tokens revoked.
	j, err := e.cl.ScaleCluster(bg, clusters.LocalAdmin, "prod", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	e.waitJob(j)
	if cl := e.getCluster(c.ID); cl.Size != 1 || cl.State != core.ClusterRunning {
		t.Fatalf("scaled cluster %+v", cl)
	}
	for i, b := range bundles {
		ms, _ := e.svc.Membership(bg, b.Device)
		if leaving := ms.State == core.StateLeaving; leaving != (i >= 2) {
			t.Fatalf("after scaling to 1 worker, member %d (%s) is %s", i, b.Role, ms.State)
		}
	}
	m, _ := e.svc.Membership(bg, bundles[3].Device)
	if m.State != core.StateLeaving || !e.tokenRecord(tokens.KindKubeadm, m.TokenID).Revoked {
		t.Fatalf("leaving member %+v", m)
	}
	dev := e.device(bundles[3].Device)
	if dev.State != core.StateLeaving {
		t.Fatalf("device state %s", dev.State)
	}
	// A revoked token verifies as revoked.
	tok, _ := tokens.DeriveBootstrapToken(e.svc.mustKeys(t, c.ID).seed, m.TokenID)
	rec := e.tokenRecord(tokens.KindKubeadm, m.TokenID)
	if err := tokenRecord(rec).VerifyBootstrapToken(tok, e.clk.now()); !errors.Is(err, tokens.ErrRevoked) {
		t.Fatalf("revoked token: %v", err)
	}
	// A new device waits: the cluster is at size 1.
	var we *WaitError
	if _, err := e.join("prod", 9); !errors.As(err, &we) {
		t.Fatalf("join beyond the new size: %v", err)
	}
	// The operator resets the leaving device: it has left.
	if _, err := e.cl.ResetDevice(bg, clusters.LocalAdmin, bundles[3].Device); err != nil {
		t.Fatal(err)
	}
	if ms, _ := e.svc.Membership(bg, bundles[3].Device); ms.State != core.StateLeft {
		t.Fatalf("left state %s", ms.State)
	}

	// An expired token fails verification, and the sweep deletes it.
	active, _ := e.svc.Membership(bg, bundles[1].Device)
	am := active
	atok, _ := tokens.DeriveBootstrapToken(e.svc.mustKeys(t, c.ID).seed, am.TokenID)
	e.clk.add(3 * time.Hour)
	arec := e.tokenRecord(tokens.KindKubeadm, am.TokenID)
	if err := tokenRecord(arec).VerifyBootstrapToken(atok, e.clk.now()); !errors.Is(err, tokens.ErrExpired) {
		t.Fatalf("expired token: %v", err)
	}
	n, err := e.svc.Sweep(bg)
	if err != nil || n == 0 {
		t.Fatalf("sweep deleted %d: %v", n, err)
	}
	err = e.store.View(func(tx core.Tx) error {
		_, err := tx.Tokens().Get(string(tokens.KindKubeadm), am.TokenID)
		if err == nil {
			return errors.New("expired token survived the sweep")
		}
		if errors.Is(err, core.ErrNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) device(id string) core.Device {
	var d core.Device
	e.store.View(func(tx core.Tx) error { var err error; d, err = tx.Devices().Get(id); return err })
	return d
}

func (s *Service) mustKeys(t *testing.T, cluster string) *clusterKeys {
	k, err := s.keysFor(cluster)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSONiCSwitchJoin(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	c := e.cluster(clusterSpec{Name: "fabric", Size: 4})
	// A switch before any control plane waits.
	sw := mac(50)
	secret := e.enroll("fabric", "", "SN-LEAF-1")
	leafCSR := switchCSR(t)
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: sw, MAC: sw, Kind: core.KindSONiC, Serial: "SN-LEAF-1", Product: "Accton-AS7712-32X", Hostname: "leaf-1"})
	})
	e.hold("10.99.5.1", sw)
	var we *WaitError
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: secret, Serial: "SN-LEAF-1", RemoteIP: "10.99.5.1", CSR: leafCSR}); !errors.As(err, &we) || we.RetryAfter != waitRetryFirstCP {
		t.Fatalf("switch before control plane: %v (asked to retry after %v)", err, we)
	}
	swDev := e.device(sw)
	if _, _, ok, err := e.svc.KubernetesMaster(bg, swDev, "fabric"); ok || err != nil {
		t.Fatalf("KUBERNETES_MASTER before any control plane: %v %v", ok, err)
	}
	e.must(e.join("fabric", 1))
	if h, p, ok, err := e.svc.KubernetesMaster(bg, swDev, "fabric"); !ok || err != nil || h != "10.99.1.2" || p != 6443 {
		t.Fatalf("KUBERNETES_MASTER: %s %d %v %v", h, p, ok, err)
	}
	if _, _, ok, _ := e.svc.KubernetesMaster(bg, e.device(mac(1)), "fabric"); ok {
		t.Fatal("a VM got a KUBERNETES_MASTER")
	}
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: secret, Serial: "SN-LEAF-1", RemoteIP: "10.99.5.1", CSR: leafCSR}))
	if b.Method != MethodSONiC || b.SONiC == nil || b.CloudConfig != nil {
		t.Fatalf("switch bundle %v", b)
	}
	d := b.Deliver()
	// The certificate and the CA: the switch made its key and keeps it.
	if !strings.Contains(string(d.ConfigDB), `"ip": "10.99.1.2"`) || len(d.Files) != 2 {
		t.Fatalf("delivery %s", d.ConfigDB)
	}
	cert, err := pki.ParseCertPEM([]byte(d.Files[0].Content))
	if err != nil {
		t.Fatal(err)
	}
	ca := e.svc.mustKeys(t, c.ID).ca
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: e.clk.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "system:bootstrap:leaf-1" {
		t.Fatalf("switch certificate CN %q", cert.Subject.CommonName)
	}
	if j, _ := b.MarshalJSON(); bytes.Contains(j, []byte("PRIVATE")) || strings.Contains(fmt.Sprint(b), "PRIVATE") {
		t.Fatal("bundle summary prints the key")
	}
}

func TestIssueKubeconfig(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	e.cluster(clusterSpec{Name: "prod", Size: 1})
	if _, err := e.svc.IssueKubeconfig(bg, "prod", "alice", "ztpd:cluster-admins", 0); !errors.Is(err, ErrClusterUnavailable) {
		t.Fatalf("kubeconfig before any control plane: %v", err)
	}
	e.must(e.join("prod", 1))
	kc, err := e.svc.IssueKubeconfig(bg, "prod", "alice", "ztpd:cluster-admins", 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Clusters["prod"].Server != "https://10.99.1.2:6443" || cfg.AuthInfos["alice"] == nil || kc.User != "alice" || kc.Serial == "" {
		t.Fatalf("kubeconfig %+v %+v", cfg, kc)
	}
}

// TestSecretsNotStoredPlain reads the raw bbolt file: no private key, no
// token secret, no enrollment secret.
func TestSecretsNotStoredPlain(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, ReportURL: "http://10.99.0.1/join/report"})
	c := e.cluster(clusterSpec{Name: "prod", Size: 2, ControlNodes: 2, KubernetesVersion: "1.31.2"})
	cp := e.must(e.join("prod", 1))
	pending, _ := e.svc.Enroll(bg, EnrollRequest{Cluster: "prod", MAC: mac(7)})
	w := e.must(e.join("prod", 2))
	keys := e.svc.mustKeys(t, c.ID)
	caKey, _ := keys.ca.PrivateKeyPEM()
	tok := tokenIn(t, cloudFiles(t, w)["/etc/ztpd/kubeadm.yaml"])
	secretOf := func(s string) string { return s[strings.LastIndexByte(s, '.')+1:] }
	needles := map[string]string{
		"CA key":              string(caKey[40:90]),
		"token secret":        secretOf(tok.Reveal()),
		"certificate key":     keys.certKey.Reveal(),
		"enrollment secret":   secretOf(pending.Reveal()),
		"report credential":   secretOf(cp.ReportToken()),
		"PEM private key tag": "PRIVATE KEY",
	}
	e.store.Close()
	raw, err := os.ReadFile(filepath.Join(e.dir, boltstore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	for what, n := range needles {
		if bytes.Contains(raw, []byte(n)) {
			t.Errorf("%s stored in plain text", what)
		}
	}
}

// TestSONiCJoinMethodCluster: a switch-only cluster (--join-method sonic,
// the shipped leaf/spine profiles' "fabric") provisions as a kubeadm
// cluster: its control plane is the first non-switch device admitted as a
// control plane (kubeadm init from its bundle); its switches join with
// certificates and get their node name and labels.
func TestSONiCJoinMethodCluster(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	c := e.cluster(clusterSpec{Name: "fabric", Size: 2, JoinMethod: MethodSONiC})
	if c.State != core.ClusterRunning {
		t.Fatalf("sonic cluster %s", c.State)
	}
	cp := e.must(e.join("fabric", 1))
	if cp.Method != MethodKubeadm || !cp.Init || cp.Role != RoleControlPlane {
		t.Fatalf("control plane of a sonic cluster: %v", cp)
	}
	// Its switches join with certificates: kubeadm init makes no token per
	// switch (only the one it needs itself).
	if toks := initTokens(t, cloudFiles(t, cp)["/etc/ztpd/kubeadm.yaml"]); len(toks) != 1 {
		t.Fatalf("init tokens of a 2-switch fabric: %d", len(toks))
	}
	sw := mac(51)
	secret := e.enroll("fabric", "", "SN-LEAF-2")
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: sw, MAC: sw, Kind: core.KindSONiC, Serial: "SN-LEAF-2", Product: "Accton-AS7712-32X",
			SONiCVer: "SONiC.202405.1", Hostname: "Leaf-2"})
	})
	e.hold("10.99.5.2", sw)
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: secret, Serial: "SN-LEAF-2", RemoteIP: "10.99.5.2", CSR: switchCSR(t)}))
	if b.Method != MethodSONiC || b.Role != RoleSONiC || b.NodeName != "leaf-2" ||
		b.NodeLabels["ztpd.io/hwsku"] != "Accton-AS7712-32X" || b.NodeLabels["ztpd.io/sonic_version"] != "SONiC.202405.1" {
		t.Fatalf("switch bundle %v name %q labels %v", b, b.NodeName, b.NodeLabels)
	}
	if m, _ := e.svc.Membership(bg, sw); m.NodeName != "leaf-2" {
		t.Fatalf("membership node name %q", m.NodeName)
	}
	if d := b.Deliver(); d.NodeName != "leaf-2" || d.NodeLabels["ztpd.io/role"] != "sonic" {
		t.Fatalf("delivery %q %v", d.NodeName, d.NodeLabels)
	}
	// Its kubelet certificate is requested with the certificate ztpd issued.
	if err := e.svc.CSRSeen(c.ID, "leaf-2", "system:bootstrap:leaf-2"); err != nil {
		t.Fatal(err)
	}
	if m, _ := e.svc.Membership(bg, sw); m.KubeletCertBy != "system:bootstrap:leaf-2" || m.Impostor != "" {
		t.Fatalf("switch's requester: %+v", m)
	}
}

// TestKubeletCertificateRequesterMustBeTheMember: a Node counts as a member
// only if its kubelet certificate was requested with the credential ztpd
// issued to that member (or renewed by the node itself); another device's
// token asking for this member's node name makes it an impostor's.
func TestKubeletCertificateRequesterMustBeTheMember(t *testing.T) {
	e := newRerunningEnv(t, Options{AutoApprove: approveAll})
	c := e.cluster(clusterSpec{Name: "prod", Size: 2})
	cp := e.must(e.join("prod", 1))
	w1 := e.must(e.join("prod", 2))
	w2 := e.must(e.join("prod", 3))
	m1, _ := e.svc.Membership(bg, w1.Device)
	m2, _ := e.svc.Membership(bg, w2.Device)
	if m1.TokenID == "" || m1.TokenID == m2.TokenID {
		t.Fatalf("workers' tokens %q %q", m1.TokenID, m2.TokenID)
	}
	// The first control plane's kubelet has no ztpd-issued bootstrap
	// credential to compare with: accepted.
	mcp, _ := e.svc.Membership(bg, cp.Device)
	if err := e.svc.CSRSeen(c.ID, mcp.NodeName, "system:bootstrap:abcdef"); err != nil {
		t.Fatal(err)
	}
	if m := e.nodeReady(cp, "True"); m.State != core.StateJoined {
		t.Fatalf("control plane %s", m.State)
	}
	// Worker 1 with its own token, then a renewal by the node itself.
	if err := e.svc.CSRSeen(c.ID, m1.NodeName, "system:bootstrap:"+m1.TokenID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.CSRSeen(c.ID, m1.NodeName, "system:node:"+m1.NodeName); err != nil {
		t.Fatal(err)
	}
	if m := e.nodeReady(w1, "True"); m.State != core.StateJoined || m.Impostor != "" || m.KubeletCertBy != "system:node:"+m1.NodeName {
		t.Fatalf("worker 1: %+v", m)
	}
	// Worker 2's node name certified with worker 1's token: an impostor.
	if err := e.svc.CSRSeen(c.ID, m2.NodeName, "system:bootstrap:"+m1.TokenID); err != nil {
		t.Fatal(err)
	}
	m := e.nodeReady(w2, "True")
	if m.State != core.StateFailed || m.Impostor != "system:bootstrap:"+m1.TokenID ||
		!strings.Contains(m.History[len(m.History)-1].Reason, "not by the credential ztpd issued") {
		t.Fatalf("impostor's Node counted: %+v", m)
	}
	if d := e.device(w2.Device); d.State != core.StateFailed {
		t.Fatalf("device %s", d.State)
	}
	if n := e.logs.Count("kubelet certificate requested by another identity"); n != 1 {
		t.Fatalf("impostor warned about %d times, want once", n)
	}
}
