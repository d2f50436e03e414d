// Package apitest holds what the API's doors' tests share: a store with
// the domain services over it and an admin and a user API key, and the
// stand-ins for the joiner, the cluster's Nodes and its members. Each
// door's tests compose the doors they exercise over it.
package apitest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// Fixture is a real bbolt store with the services the API's doors use.
type Fixture struct {
	Dir         string
	Store       *boltstore.Store
	Keys        *apikeys.Service
	Clusters    *clusters.Service
	Log         *slog.Logger
	Logs        *SyncBuffer // Log's output
	Admin       apikeys.Info
	AdminSecret string
	User        apikeys.Info
	UserSecret  string
	Clock       *Clock
	// Day-2 operations over fake Nodes and members; agents are the
	// tests' own loops.
	Desired  *desired.Service
	Rollouts *rollout.Engine
	Nodes    *Nodes
	Members  *Members
}

// NewFixture opens the store and builds the services; noJoiner leaves
// the clusters service without a joiner. The clusters service closes with
// the test.
func NewFixture(t *testing.T, noJoiner bool) *Fixture {
	t.Helper()
	f := storetest.Open(t)
	e := &Fixture{Dir: f.Dir, Store: f.Store, Logs: &SyncBuffer{}, Clock: &Clock{}}
	e.Keys = apikeys.New(e.Store, f.Keys)
	e.Log = slog.New(slog.NewTextHandler(e.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var mem clusters.Membership
	if !noJoiner {
		mem = &Membership{St: e.Store}
	}
	var err error
	if e.Clusters, err = clusters.New(e.Store, mem, clusters.Options{Log: e.Log, Now: e.Clock.Now, Profiles: Profiles}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Clusters.Close(context.Background()) })
	if e.Admin, e.AdminSecret, err = e.Keys.Create("ops", apikeys.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if e.User, e.UserSecret, err = e.Keys.Create("dev", apikeys.RoleUser); err != nil {
		t.Fatal(err)
	}
	e.Nodes, e.Members = &Nodes{}, &Members{st: e.Store}
	e.Desired = desired.New(e.Store, desired.Options{Auth: CredentialIsDevice{}, Log: e.Log})
	if e.Rollouts, err = rollout.New(e.Store, rollout.Options{Nodes: e.Nodes, Agents: e.Desired, Members: e.Members, Log: e.Log}); err != nil {
		t.Fatal(err)
	}
	return e
}

// Profiles are the profiles node templates may name in API tests: name
// to the cluster the profile assigns its devices to.
var Profiles = StaticProfiles{"leaf-worker": "", "vm-control": "", "pinned-elsewhere": "core-1"}

// StaticProfiles is a fixed clusters.ProfileCatalog: profile name to the
// cluster it names ("" for none).
type StaticProfiles map[string]string

func (p StaticProfiles) ProfileCluster(name string) (string, bool) {
	c, ok := p[name]
	return c, ok
}

func (p StaticProfiles) LoadedProfiles() []clusters.ProfileSummary {
	out := make([]clusters.ProfileSummary, 0, len(p))
	for name, c := range p {
		out = append(out, clusters.ProfileSummary{Name: name, Cluster: c})
	}
	return out
}

// Membership is a joiner stand-in for API tests: it issues a kubeconfig
// and reads memberships from the store, nothing else.
type Membership struct {
	St core.Store
	mu sync.Mutex
	n  map[string]int
}

func (m *Membership) Count(op string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[op]++
	return nil
}
func (m *Membership) Provision(context.Context, core.Cluster) error { return m.Count("provision") }
func (m *Membership) Resize(context.Context, core.Cluster) error    { return m.Count("resize") }
func (m *Membership) SetVersion(context.Context, core.Cluster, core.Version) error {
	return m.Count("setversion")
}
func (m *Membership) Stop(context.Context, core.Cluster) error    { return m.Count("stop") }
func (m *Membership) Start(context.Context, core.Cluster) error   { return m.Count("start") }
func (m *Membership) Destroy(context.Context, core.Cluster) error { return m.Count("destroy") }
func (m *Membership) Kubeconfig(_ context.Context, c core.Cluster, req clusters.KubeconfigRequest) (clusters.IssuedKubeconfig, error) {
	return clusters.IssuedKubeconfig{Config: []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: %s\nusers:\n- name: %s\n", c.Name, req.User)),
		User: req.User, Group: req.Group, Serial: "1", NotAfter: time.Now().Add(req.Validity)}, nil
}
func (m *Membership) Approve(_ context.Context, id, cluster string) (core.Device, error) {
	var d core.Device
	err := m.St.Update(func(tx core.Tx) error {
		var err error
		if d, err = tx.Devices().Get(id); err != nil {
			return err
		}
		d.Approved = true
		if cluster != "" {
			d.Cluster = cluster
		}
		return tx.Devices().Put(d)
	})
	return d, err
}
func (m *Membership) RevokeToken(context.Context, string) error { return nil }

func (m *Membership) ResetDevice(_ context.Context, id string) (core.Device, error) {
	return core.Device{ID: id, MAC: id, State: core.StateLeased}, m.Count("reset")
}

// SyncBuffer is a log sink safe for concurrent writers.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Clock is time.Now moved by Advance.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// Nodes is a cluster whose Nodes are all Ready at v1.36.3 until
// deleted, and do whatever they are told.
type Nodes struct {
	mu  sync.Mutex
	log []string
}

func (n *Nodes) record(what string) {
	n.mu.Lock()
	n.log = append(n.log, what)
	n.mu.Unlock()
}

func (n *Nodes) Node(_ context.Context, _, node string) (rollout.NodeInfo, bool, error) {
	return rollout.NodeInfo{KubeletVersion: "v1.36.3", Ready: true}, true, nil
}
func (n *Nodes) Cordon(_ context.Context, _, node, _ string) (bool, error) {
	n.record("cordon " + node)
	return true, nil
}
func (n *Nodes) Uncordon(_ context.Context, _, node string) error {
	n.record("uncordon " + node)
	return nil
}
func (n *Nodes) Drain(_ context.Context, _, node string, _ time.Duration) error {
	n.record("drain " + node)
	return nil
}
func (n *Nodes) WaitReady(context.Context, string, string, string, time.Duration) error {
	return nil
}
func (n *Nodes) DeleteNode(_ context.Context, _, node string) error {
	n.record("delete " + node)
	return nil
}

// Members ends memberships in the store, as the joiner does.
type Members struct{ st core.Store }

func (m *Members) MemberLeft(_ context.Context, device, _ string) error {
	return m.st.Update(func(tx core.Tx) error {
		ms, err := tx.Memberships().Get(device)
		if err != nil {
			return err
		}
		ms.State = core.StateLeft
		if err := tx.Memberships().Put(ms); err != nil {
			return err
		}
		return tx.Memberships().Delist(ms.Cluster, device)
	})
}
func (m *Members) RevokeAgent(context.Context, string, string) error { return nil }
func (m *Members) ResetDevice(_ context.Context, device string) (core.Device, error) {
	return core.Device{ID: device}, nil
}

// CredentialIsDevice: the test agents' credential is their device ID.
type CredentialIsDevice struct{}

func (CredentialIsDevice) AuthenticateAgent(_ context.Context, cred string, _ netip.Addr) (string, error) {
	return cred, nil
}

// SeedBench fills st with the benchmarks' fleet: 10,000 devices, 10
// clusters of 20 members each.
func SeedBench(b testing.TB, st core.Store, cs *clusters.Service) {
	now := time.Now().UTC()
	for start := 0; start < 10000; start += 2000 {
		err := st.Update(func(tx core.Tx) error {
			for i := start; i < start+2000; i++ {
				mac := fmt.Sprintf("02:5e:00:00:%02x:%02x", i>>8&255, i&255)
				d := core.Device{ID: mac, Kind: core.KindSONiC, MAC: mac, Serial: fmt.Sprintf("SN%07d", i), Hostname: fmt.Sprintf("leaf-%05d", i),
					IP: fmt.Sprintf("10.99.%d.%d", 1+i/250, 1+i%250), Subnet: "fabric", State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now}
				if err := tx.Devices().Put(d); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	v, err := cs.AddVersion(ctx, clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.31.4", URL: "http://x/y.iso"})
	if err != nil {
		b.Fatal(err)
	}
	for c := 0; c < 10; c++ {
		cl, j, err := cs.CreateCluster(ctx, clusters.LocalAdmin, clusters.ClusterSpec{Name: fmt.Sprintf("b%d", c),
			ZoneID: cs.Zone().ID, VersionID: v.ID, ServiceOfferingID: "ztpd-medium", Size: 19})
		if err != nil {
			b.Fatal(err)
		}
		cs.WaitJob(ctx, j.ID)
		err = st.Update(func(tx core.Tx) error {
			for m := 0; m < 20; m++ {
				i := c*20 + m
				mac := fmt.Sprintf("02:5e:00:00:%02x:%02x", i>>8&255, i&255)
				if err := tx.Memberships().Put(core.Membership{Device: mac, Cluster: cl.ID, Role: "worker", State: core.StateJoined}); err != nil {
					return err
				}
				if err := tx.Memberships().Enlist(cl.ID, mac, "worker"); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchRequest serves req to h in parallel, each answer 200.
func BenchRequest(b *testing.B, h http.Handler, req *http.Request) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req.Clone(context.Background()))
			if rec.Code != 200 {
				b.Fatalf("HTTP %d: %.200s", rec.Code, rec.Body.String())
			}
		}
	})
}

// Healthy feeds the cluster one observation of a healthy cluster (its API
// server answers, every desired Node Ready), as ztpd's watch would: the
// create job leaves a cluster Starting, this makes it Running.
func (e *Fixture) Healthy(t testing.TB, ref string) {
	t.Helper()
	var c core.Cluster
	if err := e.Store.View(func(tx core.Tx) error {
		var err error
		c, err = clusters.ByRef(tx, ref)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cp := max(c.ControlNodes, 1)
	if err := e.Clusters.ObserveHealth(c.ID, clusters.Health{APIReachable: true, Nodes: cp + c.Size, ReadyNodes: cp + c.Size,
		ControlPlanes: cp, ReadyControlPlanes: cp}); err != nil {
		t.Fatal(err)
	}
}

// MakeCluster creates a Running cluster owned by caller through the
// clusters service: the create job leaves it Starting, one healthy
// observation (as ztpd's watch would feed) makes it Running.
func (e *Fixture) MakeCluster(t testing.TB, caller clusters.Caller, name string) core.Cluster {
	t.Helper()
	ctx := context.Background()
	vs, _ := e.Clusters.ListVersions(ctx, clusters.VersionFilter{})
	var vid string
	if len(vs) > 0 {
		vid = vs[0].ID
	} else {
		v, err := e.Clusters.AddVersion(ctx, clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.30.2", URL: "http://10.99.0.1/k.iso"})
		if err != nil {
			t.Fatal(err)
		}
		vid = v.ID
	}
	c, j, err := e.Clusters.CreateCluster(ctx, caller, clusters.ClusterSpec{Name: name, ZoneID: e.Clusters.Zone().ID,
		VersionID: vid, ServiceOfferingID: "ztpd-medium", Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	if j, err = e.Clusters.WaitJob(ctx, j.ID); err != nil || j.Status != core.JobSucceeded {
		t.Fatalf("create %s: %v %+v", name, err, j)
	}
	e.Healthy(t, c.ID)
	if c.State = e.ClusterState(t, c.ID); c.State != core.ClusterRunning {
		t.Fatalf("cluster %s after a healthy observation: %s", name, c.State)
	}
	return c
}

// AdminCaller is the admin key as the clusters service sees it.
func (e *Fixture) AdminCaller() clusters.Caller {
	return clusters.Caller{APIKey: e.Admin.APIKey, Name: e.Admin.Name, Account: e.Admin.Account, Admin: true}
}

// Tenancy sets up tenancy: the user key "dev" owns cluster "mine", another user key
// "eve" (its own account) owns "theirs", and the admin owns "ops". One
// device is a member of each of "mine" and "theirs", with a lease.
func (e *Fixture) Tenancy(t testing.TB) (eve apikeys.Info, eveSec string, mine, theirs, ops core.Cluster) {
	var err error
	if eve, eveSec, err = e.Keys.Create("eve", apikeys.RoleUser); err != nil {
		t.Fatal(err)
	}
	mine = e.MakeCluster(t, clusters.Caller{APIKey: e.User.APIKey, Name: "dev", Account: e.User.Account}, "mine")
	theirs = e.MakeCluster(t, clusters.Caller{APIKey: eve.APIKey, Name: "eve", Account: eve.Account}, "theirs")
	ops = e.MakeCluster(t, e.AdminCaller(), "ops")
	now := time.Now().UTC()
	err = e.Store.Update(func(tx core.Tx) error {
		for i, c := range []core.Cluster{mine, theirs} {
			mac := []string{"02:00:00:00:0a:01", "02:00:00:00:0b:01"}[i]
			ip := []string{"10.99.10.1", "10.99.11.1"}[i]
			if err := tx.Devices().Put(core.Device{ID: mac, MAC: mac, Kind: core.KindVM, IP: ip, Cluster: c.ID,
				State: core.StateJoined, FirstSeen: now, LastSeen: now, UpdatedAt: now}); err != nil {
				return err
			}
			if err := tx.Memberships().Put(core.Membership{Device: mac, Cluster: c.ID, Role: "worker", State: core.StateJoined}); err != nil {
				return err
			}
			if err := tx.Memberships().Enlist(c.ID, mac, "worker"); err != nil {
				return err
			}
			if err := tx.Leases().Put(core.Lease{IP: ip, MAC: mac, Subnet: "lab", State: core.LeaseActive,
				Start: now, Expiry: now.Add(time.Hour), UpdatedAt: now}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return
}

// ClusterState is the stored state of cluster id.
func (e *Fixture) ClusterState(t testing.TB, id string) core.ClusterState {
	t.Helper()
	var c core.Cluster
	if err := e.Store.View(func(tx core.Tx) error { var err error; c, err = tx.Clusters().Get(id); return err }); err != nil {
		t.Fatal(err)
	}
	return c.State
}

// AppendBenchEvents appends n device events spread round-robin over the
// MACs of SeedBench's first devices (at most 65,536), and an audit event
// every tenth.
func AppendBenchEvents(b testing.TB, st core.Store, n, devices int) {
	err := st.Update(func(tx core.Tx) error {
		for i := 0; i < n; i++ {
			d := i % devices
			mac := fmt.Sprintf("02:5e:00:00:%02x:%02x", d>>8&255, d&255)
			if _, err := tx.Events().Append(core.Event{Type: "dhcp.ack", Device: mac, Message: "lease 10.99.1.1",
				Fields: map[string]string{"ip": "10.99.1.1", "subnet": "fabric"}}); err != nil {
				return err
			}
			if i%10 == 0 {
				if _, err := tx.Events().Append(core.Event{Type: "api.write", Message: "scale", Fields: map[string]string{"account": "admin"}}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchREST serves a signed GET of path?q to h, as BenchRequest.
func BenchREST(b *testing.B, h http.Handler, path string, q url.Values, key, secret string) {
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req := httptest.NewRequest("GET", target, nil)
	req.Header.Set("Authorization", signing.RESTAuthorization("GET", path, q, nil, key, []byte(secret), time.Now().Add(10*time.Minute)))
	BenchRequest(b, h, req)
}

// RunAgents runs an agent for each device until the test ends: it reads
// its document and reports each step running, then succeeded.
func (e *Fixture) RunAgents(t testing.TB, devices ...string) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr := netip.MustParseAddr("10.99.0.10")
	for _, id := range devices {
		go func() {
			for ctx.Err() == nil {
				time.Sleep(3 * time.Millisecond)
				doc, err := e.Desired.AgentDocument(ctx, id, addr)
				if err != nil || doc.Operation == nil {
					continue
				}
				for _, st := range doc.Operation.Steps {
					rep := desired.Report{Operation: doc.Operation.ID, Step: st.Name, State: core.StepRunning, BootID: "boot-1", AgentVersion: "1"}
					if e.Desired.AgentReport(ctx, id, addr, rep) != nil {
						break
					}
					rep.State, rep.Output = core.StepSucceeded, st.Action+" done"
					if e.Desired.AgentReport(ctx, id, addr, rep) != nil {
						break
					}
				}
			}
		}()
	}
}

// The day-2 fabric (Fixture.Fabric): its cluster's ID, its SONiC image's
// and its hook script's SHA-256.
const (
	LabID    = "c-lab"
	ImageSHA = "aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11"
	HookSHA  = "bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22"
)

// DayDevice is the MAC (and ID) of the fabric's device i.
func DayDevice(i int) string { return fmt.Sprintf("02:00:00:00:0d:%02x", i) }

// Fabric stores cluster "lab" (c-lab) with a control plane (device 0, a
// VM) and two SONiC workers (devices 1 and 2), a standalone switch
// (device 3), a SONiC image, a hook script and the version v1.37.2.
func (e *Fixture) Fabric(t testing.TB) {
	t.Helper()
	now := time.Now().UTC()
	err := e.Store.Update(func(tx core.Tx) error {
		if err := tx.Clusters().Put(core.Cluster{ID: LabID, Name: "lab", State: core.ClusterRunning, Created: now, UpdatedAt: now}); err != nil {
			return err
		}
		if err := tx.Clusters().PutJoinState(LabID, core.JoinState{FirstControlPlane: DayDevice(0)}); err != nil {
			return err
		}
		for i := 0; i <= 3; i++ {
			id := DayDevice(i)
			kind, role := core.KindSONiC, "worker"
			if i == 0 {
				kind, role = core.KindVM, "control-plane"
			}
			d := core.Device{ID: id, MAC: id, Kind: kind, Serial: fmt.Sprintf("SN-D%d", i), State: core.StateJoined, FirstSeen: now, LastSeen: now, UpdatedAt: now}
			if i == 3 {
				d.State = core.StateLeased
			} else {
				d.Cluster, d.Role = LabID, role
			}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			if i == 3 {
				continue
			}
			m := core.Membership{Device: id, Cluster: LabID, Role: role, State: core.StateJoined, NodeName: fmt.Sprintf("node-%d", i), Created: now, UpdatedAt: now}
			if err := tx.Memberships().Put(m); err != nil {
				return err
			}
			if err := tx.Memberships().Enlist(LabID, id, role); err != nil {
				return err
			}
		}
		for _, im := range []core.Image{{SHA256: ImageSHA, Name: "sonic-202411.bin", Kind: "sonic-installer", Size: 1 << 20, Created: now},
			{SHA256: HookSHA, Name: "snap.sh", Kind: "file", Size: 100, Created: now}} {
			if err := tx.Images().Put(im); err != nil {
				return err
			}
			if err := tx.Images().SetName(im.Name, im.SHA256); err != nil {
				return err
			}
		}
		return tx.Versions().Put(core.Version{ID: "ver-1372", Name: "v1.37.2", SemVer: "1.37.2", State: "Enabled", Created: now, UpdatedAt: now})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// AddMembers approves each device into the cluster, as the joiner's
// admission path does (clusters.NodeAdder).
func (m *Membership) AddMembers(ctx context.Context, c core.Cluster, devices []string) error {
	for _, d := range devices {
		if _, err := m.Approve(ctx, d, c.ID); err != nil {
			return err
		}
	}
	return m.Count("addmembers")
}

// RemoveMembers marks each named member leaving (clusters.NamedRemover).
func (m *Membership) RemoveMembers(_ context.Context, c core.Cluster, devices []string) error {
	err := m.St.Update(func(tx core.Tx) error {
		for _, d := range devices {
			ms, err := tx.Memberships().Get(d)
			if err != nil {
				return err
			}
			ms.State = core.StateLeaving
			if err := tx.Memberships().Put(ms); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return m.Count("removemembers")
}
