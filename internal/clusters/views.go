package clusters

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/fnv"
	"hash/maphash"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// ClusterView is a cluster with what front ends show alongside it.
type ClusterView struct {
	Cluster  core.Cluster
	Version  core.Version // zero when the version record is gone
	Offering Offering     // zero when unknown
	Zone     Zone
	Domain   Domain
	// Members are the devices in the cluster (left members excluded),
	// shared with other views of the same data: read only.
	Members []Member
	// Fingerprint changes whenever anything the view holds may have
	// changed (the cluster's record, its version's, or what a member
	// shows); 0 means unknown (a store that does not count
	// writes, or a view of a cluster not read from the store). Front ends
	// may cache renderings by (cluster ID, Fingerprint).
	Fingerprint uint64
}

// Member is one device of a cluster's roster as views render it: the parts
// of its membership and of its device record they show. A cached roster
// holds these rather than both records (the copies were a sixth
// of the heap at 100,000 members).
type Member struct {
	DeviceID string
	Role     string
	State    core.DeviceState
	Version  string
	NodeName string
	Reported string
	Created  time.Time
	Node     *core.NodeObservation // the Node as the cluster last showed it; nil before
	// From the device record; DeviceKnown is false when it is gone.
	DeviceKnown  bool
	IP, Hostname string
}

// Nodes is the desired node count (control plane plus workers).
func (v ClusterView) Nodes() int { return v.Cluster.ControlNodes + v.Cluster.Size }

// Cores is the advertised vCPU total: each role's offering vCPUs times
// its nodes (CloudStack's cpunumber).
func (v ClusterView) Cores() int {
	return v.RoleOffering(NodeControl).CPU*v.Cluster.ControlNodes + v.RoleOffering(NodeWorker).CPU*v.Cluster.Size +
		v.RoleOffering(NodeEtcd).CPU*v.Cluster.EtcdNodes
}

// MemoryMB is the advertised memory total in MiB (CloudStack's memory).
func (v ClusterView) MemoryMB() int {
	return v.RoleOffering(NodeControl).MemoryMB*v.Cluster.ControlNodes + v.RoleOffering(NodeWorker).MemoryMB*v.Cluster.Size +
		v.RoleOffering(NodeEtcd).MemoryMB*v.Cluster.EtcdNodes
}

// EtcdIPs are the addresses of the cluster's etcd nodes by node name
// (CloudStack's etcdips); nil when it has none.
func (v ClusterView) EtcdIPs() map[string]string {
	var out map[string]string
	for _, m := range v.Members {
		if m.Role != NodeEtcd || m.IP == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		name := m.NodeName
		if name == "" {
			name = m.DeviceID
		}
		out[name] = m.IP
	}
	return out
}

// RoleOffering is the offering the cluster's nodes of type t get (zero
// when unknown).
func (v ClusterView) RoleOffering(t string) Offering {
	off, _ := RoleOffering(v.Cluster, t)
	return off
}

// Endpoint is the API server URL: the stored endpoint (external load
// balancer or what the joiner recorded), else the first control-plane
// member's address.
func (v ClusterView) Endpoint() (url, ip string) {
	if v.Cluster.ExternalLBIP != "" {
		return endpointURL(v.Cluster.ExternalLBIP), v.Cluster.ExternalLBIP
	}
	for _, m := range v.Members {
		if m.Role == "control-plane" && m.IP != "" {
			if v.Cluster.Endpoint != "" {
				return v.Cluster.Endpoint, m.IP
			}
			return endpointURL(m.IP), m.IP
		}
	}
	return v.Cluster.Endpoint, ""
}

// views renders clusters with versions, offerings and their members (the
// clusters' rosters, as the joiner keeps them). fromStore: the clusters were
// read from the store after gen was noted, so the views get fingerprints.
//
// Members are kept per cluster for the generation of memberships and
// devices they were read at (s.members) and shared by the views that
// reuse them: a write to clusters alone (a health observation, a state)
// then costs the cluster records, not every member again (at
// 100,000 members a listing read them for seconds); after a write to
// memberships or devices only the members whose records changed are
// decoded (readMembers). Fingerprints follow
// the cluster's own record and what its members show, so a front end's
// rendering of an unchanged cluster survives other clusters' writes and
// writes to devices that are not its members or that change nothing it
// shows (a renewal's last-seen).
func (s *Service) views(ctx context.Context, cs []core.Cluster, gen uint64, fromStore bool) ([]ClusterView, error) {
	out := make([]ClusterView, len(cs))
	if len(cs) == 0 {
		return out, nil
	}
	// Noted before reading, as gen: a cached member list is at least as
	// new as anything the reading transaction could see.
	// Generation 0 (a store opened and not yet written) counts like any
	// other: the first listing after a restart keeps its members, so the
	// next one after a write reads only what changed (at
	// 100,000 members the first counted listing decoded them all while
	// every request waited).
	var mgen uint64
	g, counted := s.st.(core.Generations)
	counted = counted && fromStore
	if counted {
		mgen = g.Generation(core.AggMemberships, core.AggDevices)
	}
	err := s.st.View(func(tx core.Tx) error {
		versions := map[string]core.Version{}
		for i, c := range cs {
			v, ok := versions[c.VersionID]
			if !ok {
				var err error
				if v, err = tx.Versions().Get(c.VersionID); err != nil && !errors.Is(err, core.ErrNotFound) {
					return err
				}
				versions[c.VersionID] = v
			}
			off, _ := OfferingByID(c.ServiceOfferingID)
			view := ClusterView{Cluster: c, Version: v, Offering: off, Zone: s.zone, Domain: s.domain}
			var r roster
			current := false
			if counted {
				r, current = s.members.get(c.ID, mgen)
			}
			if !current {
				var err error
				if r, err = readMembers(tx, c.ID, r); err != nil {
					return err
				}
				if counted {
					r.gen = mgen
					s.members.put(c.ID, r)
				}
			}
			view.Members = r.members
			if counted {
				view.Fingerprint = fingerprint(r.sum, c, v)
			}
			out[i] = view
		}
		return nil
	})
	return out, err
}

// readMembers reads cluster's roster: control planes first, then by
// device. A member whose membership and device records have the Stamps
// they had in base is base's Member as it was; only the others are
// decoded. So a roster of 100,000 is read again after a few devices
// changed at the cost of stamping the records (hashing stored bytes), not
// decoding them, and without the store caching every decoded member
// (such caches were a third of the heap at 100,000 devices).
func readMembers(tx core.Tx, cluster string, base roster) (roster, error) {
	prev := make(map[string]int, len(base.members))
	for i, m := range base.members {
		prev[m.DeviceID] = i
	}
	type entry struct {
		m  Member
		st memberStamps
	}
	var es []entry
	err := tx.Memberships().Roster(cluster, func(device, _ string) (bool, error) {
		var st memberStamps
		var err error
		if st.membership, err = tx.Memberships().Stamp(device); errors.Is(err, core.ErrNotFound) {
			return true, nil
		} else if err != nil {
			return false, err
		}
		if st.device, err = tx.Devices().Stamp(device); err != nil && !errors.Is(err, core.ErrNotFound) {
			return false, err
		}
		if i, ok := prev[device]; ok && base.stamps[i] == st {
			es = append(es, entry{base.members[i], st})
			return true, nil
		}
		m, err := tx.Memberships().Get(device)
		if err != nil {
			return false, err
		}
		if m.Cluster != cluster || m.State == core.StateLeft {
			return true, nil
		}
		e := entry{Member{DeviceID: m.Device, Role: m.Role, State: m.State, Version: m.Version,
			NodeName: m.NodeName, Reported: m.Reported, Created: m.Created, Node: m.Node}, st}
		if st.device != (core.Stamp{}) {
			d, err := tx.Devices().Get(device)
			if err != nil {
				return false, err
			}
			e.m.DeviceKnown, e.m.IP, e.m.Hostname = true, d.IP, d.Hostname
		}
		es = append(es, e)
		return true, nil
	})
	if err != nil {
		return roster{}, err
	}
	sort.Slice(es, func(a, b int) bool {
		if es[a].m.Role != es[b].m.Role {
			return es[a].m.Role == "control-plane"
		}
		return es[a].m.DeviceID < es[b].m.DeviceID
	})
	r := roster{members: make([]Member, len(es)), stamps: make([]memberStamps, len(es))}
	for i, e := range es {
		r.members[i], r.stamps[i] = e.m, e.st
	}
	r.sum = sumMembers(r.members)
	return r, nil
}

// fingerprint is a view's: what its members show (sumMembers), its
// cluster record and its version record.
func fingerprint(members uint64, c core.Cluster, v core.Version) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], members)
	h.Write(b[:])
	enc := json.NewEncoder(h)
	_ = enc.Encode(c) // records always encode; an error would only weaken the cache
	_ = enc.Encode(v)
	return h.Sum64()
}

// roster is a cluster's members, the Stamps of the records each was read
// from, the hash of what they show, and the generation of memberships and
// devices they were read at.
type roster struct {
	members []Member
	stamps  []memberStamps // members[i]'s
	sum     uint64
	gen     uint64
}

type memberStamps struct{ membership, device core.Stamp }

var memberSeed = maphash.MakeSeed()

// sumMembers hashes every field of the members, in order: equal sums
// mean views that render the same (within this process).
func sumMembers(ms []Member) uint64 {
	var h maphash.Hash
	h.SetSeed(memberSeed)
	var b [8]byte
	num := func(n uint64) {
		binary.LittleEndian.PutUint64(b[:], n)
		h.Write(b[:])
	}
	str := func(s string) {
		num(uint64(len(s)))
		h.WriteString(s)
	}
	at := func(t time.Time) {
		num(uint64(t.Unix()))
		num(uint64(t.Nanosecond()))
	}
	for _, m := range ms {
		str(m.DeviceID)
		str(m.Role)
		str(string(m.State))
		str(m.Version)
		str(m.NodeName)
		str(m.Reported)
		at(m.Created)
		str(m.IP)
		str(m.Hostname)
		if m.DeviceKnown {
			str("known")
		} else {
			str("")
		}
		if n := m.Node; n != nil {
			str(n.Ready)
			str(n.Reason)
			at(n.Registered)
			at(n.Seen)
			str(strconv.FormatBool(n.ControlPlane) + strconv.FormatBool(n.Deleted))
		} else {
			str("no node")
		}
	}
	return h.Sum64()
}

// memberCache keeps each cluster's newest roster: current while the
// generation of memberships and devices is the one it was read at, and the
// base the next reading reuses unchanged members from after that.
type memberCache struct {
	mu sync.Mutex
	m  map[string]roster
}

// get returns cluster's newest roster (shared: read only) and whether it
// was read at gen.
func (c *memberCache) get(cluster string, gen uint64) (roster, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.m[cluster]
	return r, r.members != nil && r.gen == gen
}

func (c *memberCache) put(cluster string, r roster) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[cluster]; ok && old.gen > r.gen {
		return // an older reading: the cache already holds newer members
	}
	if c.m == nil {
		c.m = map[string]roster{}
	}
	c.m[cluster] = r
}

// forget drops a deleted cluster's roster. (A cluster a peer appliance
// deleted keeps its roster here until this process restarts.)
func (c *memberCache) forget(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, cluster)
}

// ClusterFilter selects clusters; empty fields match all.
type ClusterFilter struct {
	ID      string
	Name    string
	State   string
	Keyword string // substring of name or description
	Type    string // CloudStack's clustertype: CloudManaged or ExternalManaged; "" both
	// ListAll lists every account's clusters to an admin (CloudStack's
	// listall=true); without it an admin lists its own account's, unless
	// it asks for one ID. Callers that are not admins list their own.
	ListAll bool
	// Account lists only that account's clusters (within what the caller
	// may list).
	Account string
}

// ListClusters returns the matching clusters the caller may list, oldest
// first: one page of views (page from 1; pageSize <= 0 means all) and the
// total match count.
func (s *Service) ListClusters(ctx context.Context, caller Caller, f ClusterFilter, page, pageSize int) ([]ClusterView, int, error) {
	// As CloudStack's buildACLSearchParameters: a user lists its account's;
	// an admin too, unless listall or an id widens it.
	account := caller.AccountName()
	everyone := caller.Admin && (f.ListAll || f.ID != "" || f.Account != "")
	var matched []core.Cluster
	gen, _ := s.ViewsGeneration()
	err := s.st.View(func(tx core.Tx) error {
		return tx.Clusters().List("", func(c core.Cluster) (bool, error) {
			if !everyone && core.ClusterAccount(c) != account || f.Account != "" && core.ClusterAccount(c) != f.Account {
				return true, nil
			}
			if f.ID != "" && c.ID != f.ID {
				return true, nil
			}
			if f.Name != "" && c.Name != f.Name {
				return true, nil
			}
			if f.State != "" && !strings.EqualFold(string(c.State), f.State) {
				return true, nil
			}
			if f.Type != "" && !strings.EqualFold(c.TypeName(), f.Type) {
				return true, nil
			}
			if f.Keyword != "" {
				k := strings.ToLower(f.Keyword)
				if !strings.Contains(strings.ToLower(c.Name), k) && !strings.Contains(strings.ToLower(c.Description), k) {
					return true, nil
				}
			}
			matched = append(matched, c)
			return true, nil
		})
	})
	if err != nil {
		return nil, 0, err
	}
	sort.SliceStable(matched, func(i, j int) bool {
		if !matched[i].Created.Equal(matched[j].Created) {
			return matched[i].Created.Before(matched[j].Created)
		}
		return matched[i].ID < matched[j].ID
	})
	total := len(matched)
	if pageSize > 0 {
		if page < 1 {
			page = 1
		}
		start := (page - 1) * pageSize
		if start >= len(matched) {
			matched = nil
		} else {
			matched = matched[start:min(start+pageSize, len(matched))]
		}
	}
	views, err := s.views(ctx, matched, gen, true)
	return views, total, err
}

// AccountClusters returns the IDs of the clusters the caller's account
// owns (front ends filter devices, leases and events by them).
func (s *Service) AccountClusters(ctx context.Context, caller Caller) (map[string]bool, error) {
	out := map[string]bool{}
	account := caller.AccountName()
	err := s.st.View(func(tx core.Tx) error {
		return tx.Clusters().List("", func(c core.Cluster) (bool, error) {
			if core.ClusterAccount(c) == account {
				out[c.ID] = true
			}
			return true, nil
		})
	})
	return out, err
}

// GetCluster returns one cluster view, by ID or name, that caller sees.
func (s *Service) GetCluster(ctx context.Context, caller Caller, ref string) (ClusterView, error) {
	var c core.Cluster
	gen, _ := s.ViewsGeneration()
	err := s.st.View(func(tx core.Tx) error {
		var err error
		c, err = clusterFor(tx, caller, ref)
		return err
	})
	if err != nil {
		return ClusterView{}, err
	}
	vs, err := s.views(ctx, []core.Cluster{c}, gen, true)
	if err != nil {
		return ClusterView{}, err
	}
	return vs[0], nil
}

// View renders one stored cluster (for example a job's result) with its
// current version, offering and members.
func (s *Service) View(ctx context.Context, c core.Cluster) (ClusterView, error) {
	vs, err := s.views(ctx, []core.Cluster{c}, 0, false)
	if err != nil {
		return ClusterView{}, err
	}
	return vs[0], nil
}
