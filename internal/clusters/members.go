package clusters

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/ztpd/ztpd/internal/core"
)

// ClusterView is a cluster with what front ends show alongside it.
type ClusterView struct {
	Cluster  core.Cluster
	Version  core.Version // zero when the version record is gone
	Offering Offering     // zero when unknown
	Zone     Zone
	Domain   Domain
	Members  []Member // devices in the cluster (left members excluded)
	// Fingerprint changes whenever any record the view was built from
	// changes; 0 means unknown (a view of a cluster not read from the store).
	// Front ends may cache renderings by (cluster ID, Fingerprint).
	Fingerprint uint64
}

// Member is one device's membership with its device record.
type Member struct {
	core.Membership
	Device *core.Device // nil when the device record is gone; shared, read-only
	gen    uint64       // generations of the membership and device decodes
}

// Nodes is the desired node count (control plane plus workers).
func (v ClusterView) Nodes() int { return v.Cluster.ControlNodes + v.Cluster.Size }

// Cores is the advertised vCPU total: offering vCPUs times nodes (CloudStack's cpunumber).
func (v ClusterView) Cores() int { return v.Offering.CPU * v.Nodes() }

// MemoryMB is the advertised memory total in MiB (CloudStack's memory).
func (v ClusterView) MemoryMB() int { return v.Offering.MemoryMB * v.Nodes() }

// Endpoint is the API server URL: the stored endpoint (external load
// balancer or what the joiner recorded), else the first control-plane
// member's address.
func (v ClusterView) Endpoint() (url, ip string) {
	if v.Cluster.ExternalLBIP != "" {
		return endpointURL(v.Cluster.ExternalLBIP), v.Cluster.ExternalLBIP
	}
	for _, m := range v.Members {
		if m.Role == "control-plane" && m.Device != nil && m.Device.IP != "" {
			if v.Cluster.Endpoint != "" {
				return v.Cluster.Endpoint, m.Device.IP
			}
			return endpointURL(m.Device.IP), m.Device.IP
		}
	}
	return v.Cluster.Endpoint, ""
}

// views renders clusters with versions, offerings and members. Members come
// from the joiner when wired, else from the memberships bucket in one pass.
// gens are the clusters' decode generations (nil when not read from the store).
func (s *Service) views(ctx context.Context, cs []core.Cluster, gens []uint64) ([]ClusterView, error) {
	out := make([]ClusterView, len(cs))
	if len(cs) == 0 {
		return out, nil
	}
	members := map[string][]Member{}
	// Members from the joiner carry no generations: such views get no
	// fingerprint (the joiner's records may live outside the store).
	memberGens := false
	if m := s.membership(); m != nil {
		for _, c := range cs {
			ms, err := m.Members(ctx, c.ID)
			if err != nil {
				return nil, fmt.Errorf("members of cluster %s: %w", c.Name, err)
			}
			for _, x := range ms {
				members[c.ID] = append(members[c.ID], Member{Membership: x})
			}
		}
	} else {
		memberGens = true
		want := map[string]bool{}
		for _, c := range cs {
			want[c.ID] = true
		}
		if err := s.st.View(func(tx core.Tx) error { return s.scanMemberships(tx, want, members) }); err != nil {
			return nil, err
		}
	}
	err := s.st.View(func(tx core.Tx) error {
		type verGen struct {
			v   core.Version
			gen uint64
		}
		versions := map[string]verGen{}
		for i, c := range cs {
			vg, ok := versions[c.VersionID]
			if !ok {
				raw, err := core.RawGet(tx, core.BucketVersions, c.VersionID)
				if err != nil {
					return err
				}
				if raw != nil {
					v, gen, err := s.verMemo.decode(c.VersionID, raw)
					if err != nil {
						return err
					}
					vg.v, vg.gen = *v, gen
				}
				versions[c.VersionID] = vg
			}
			off, _ := OfferingByID(c.ServiceOfferingID)
			view := ClusterView{Cluster: c, Version: vg.v, Offering: off, Zone: s.zone, Domain: s.domain, Members: []Member{}}
			ms := members[c.ID]
			sort.Slice(ms, func(a, b int) bool {
				if ms[a].Role != ms[b].Role {
					return ms[a].Role == "control-plane"
				}
				return ms[a].Membership.Device < ms[b].Membership.Device
			})
			for _, m := range ms {
				if m.State == core.StateLeft {
					continue
				}
				mem := m
				raw, err := core.RawGet(tx, core.BucketDevices, m.Membership.Device)
				if err != nil {
					return err
				}
				if raw != nil {
					d, gen, err := s.devMemo.decode(m.Membership.Device, raw)
					if err != nil {
						return err
					}
					mem.Device = d
					mem.gen = mem.gen*31 + gen
				}
				view.Members = append(view.Members, mem)
			}
			if gens != nil && gens[i] != 0 && vg.gen != 0 && memberGens {
				h := fnv.New64a()
				var b [8]byte
				for _, g := range append([]uint64{gens[i], vg.gen}, memberGenList(view.Members)...) {
					binary.LittleEndian.PutUint64(b[:], g)
					h.Write(b[:])
				}
				view.Fingerprint = h.Sum64()
			}
			out[i] = view
		}
		return nil
	})
	return out, err
}

var clusterField = []byte(`"cluster":"`)

// scanMemberships collects memberships of the wanted clusters. It reads the
// cluster field from the raw JSON before decoding, so listing a few clusters
// in a store of many devices decodes only their members.
func memberGenList(ms []Member) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.gen
	}
	return out
}

func (s *Service) scanMemberships(tx core.Tx, want map[string]bool, into map[string][]Member) error {
	return tx.Scan(core.BucketMemberships, "", func(key string, raw []byte) (bool, error) {
		i := bytes.Index(raw, clusterField)
		if i < 0 {
			return true, nil
		}
		rest := raw[i+len(clusterField):]
		j := bytes.IndexByte(rest, '"')
		if j < 0 || !want[string(rest[:j])] {
			return true, nil
		}
		m, gen, err := s.memMemo.decode(key, raw)
		if err != nil {
			return false, err
		}
		into[m.Cluster] = append(into[m.Cluster], Member{Membership: *m, gen: gen})
		return true, nil
	})
}

// ApproveDevice admits a device (into clusterRef when given) through the
// joiner. Without a joiner it only marks the record approved and assigned.
func (s *Service) ApproveDevice(ctx context.Context, caller Caller, deviceID, clusterRef string) (core.Device, error) {
	if !caller.Admin {
		return core.Device{}, errorf(KindPermission, "approving devices is for admins only")
	}
	if id, err := core.NormalizeMAC(deviceID); err == nil {
		deviceID = id
	}
	var clusterID string
	var d core.Device
	err := s.st.View(func(tx core.Tx) error {
		var err error
		if d, err = core.GetDevice(tx, deviceID); err != nil {
			return errorf(KindNotFound, "device %s not found", deviceID)
		}
		if clusterRef != "" {
			c, err := clusterByRef(tx, clusterRef)
			if err != nil {
				return err
			}
			clusterID = c.ID
		}
		return nil
	})
	if err != nil {
		return d, err
	}
	if m := s.membership(); m != nil {
		var out core.Device
		err := s.call(ctx, func(ctx context.Context) error {
			var err error
			out, err = m.Approve(ctx, deviceID, clusterID)
			return err
		})
		if err != nil {
			return out, err
		}
		err = s.st.Update(func(tx core.Tx) error {
			return appendWrite(tx, caller, "approveDevice", out.Cluster, out.ID, "device "+out.ID+" approved", nil)
		})
		return out, err
	}
	err = s.st.Update(func(tx core.Tx) error {
		var err error
		if d, err = core.GetDevice(tx, deviceID); err != nil {
			return err
		}
		d.Approved = true
		if clusterID != "" {
			d.Cluster = clusterID
		}
		d.UpdatedAt = now()
		if err := core.PutDevice(tx, d); err != nil {
			return err
		}
		_, err = core.AppendEvent(tx, core.Event{Type: "device.approved", Device: d.ID, Cluster: d.Cluster,
			Message: fmt.Sprintf("device %s approved", d.ID)})
		if err != nil {
			return err
		}
		return appendWrite(tx, caller, "approveDevice", d.Cluster, d.ID, "device "+d.ID+" approved", nil)
	})
	return d, err
}

// ResetDevice is `ztpd device reset`: the operator's decision that a device
// is being re-installed and may be issued join material once more (secrets
// are otherwise handed out once). Admins only; it needs the joiner.
func (s *Service) ResetDevice(ctx context.Context, caller Caller, deviceID string) (core.Device, error) {
	if !caller.Admin {
		return core.Device{}, errorf(KindPermission, "resetting devices is for admins only")
	}
	if id, err := core.NormalizeMAC(deviceID); err == nil {
		deviceID = id
	}
	err := s.st.View(func(tx core.Tx) error {
		if _, err := core.GetDevice(tx, deviceID); err != nil {
			if _, err := core.DeviceBySerial(tx, deviceID); err != nil {
				return errorf(KindNotFound, "device %s not found", deviceID)
			}
		}
		return nil
	})
	if err != nil {
		return core.Device{}, err
	}
	m := s.membership()
	if m == nil {
		return core.Device{}, errorf(KindUnavailable, "no joiner: there is no join material to reset")
	}
	var out core.Device
	err = s.call(ctx, func(ctx context.Context) error {
		var err error
		out, err = m.ResetDevice(ctx, deviceID)
		return err
	})
	return out, err
}

// RevokeToken revokes a join token through the joiner; without a joiner it
// marks the stored record revoked. ref is "<kind>/<id>" or a bare id.
func (s *Service) RevokeToken(ctx context.Context, caller Caller, ref string) (core.Token, error) {
	if !caller.Admin {
		return core.Token{}, errorf(KindPermission, "revoking tokens is for admins only")
	}
	var key string
	var t core.Token
	err := s.st.View(func(tx core.Tx) error {
		var err error
		key, t, err = tokenByRef(tx, ref)
		return err
	})
	if err != nil {
		return t, err
	}
	if m := s.membership(); m != nil {
		if err := s.call(ctx, func(ctx context.Context) error { return m.RevokeToken(ctx, t.ID) }); err != nil {
			return t, err
		}
		t.Revoked = true
		err := s.st.Update(func(tx core.Tx) error {
			return appendWrite(tx, caller, "revokeToken", t.Cluster, t.Device, t.Kind+" token "+t.ID+" revoked", map[string]string{"token": t.ID})
		})
		return t, err
	}
	err = s.st.Update(func(tx core.Tx) error {
		if _, err := tx.Get(core.BucketTokens, key, &t); err != nil {
			return err
		}
		if t.Revoked {
			return nil
		}
		t.Revoked = true
		if err := tx.Put(core.BucketTokens, key, t); err != nil {
			return err
		}
		_, err := core.AppendEvent(tx, core.Event{Type: "token.revoked", Cluster: t.Cluster, Device: t.Device,
			Message: fmt.Sprintf("%s token %s revoked", t.Kind, t.ID)})
		if err != nil {
			return err
		}
		return appendWrite(tx, caller, "revokeToken", t.Cluster, t.Device, t.Kind+" token "+t.ID+" revoked", map[string]string{"token": t.ID})
	})
	return t, err
}

// tokenByRef finds a token by its store key ("<kind>/<id>") or its bare id.
func tokenByRef(tx core.Tx, ref string) (string, core.Token, error) {
	var t core.Token
	if ok, err := tx.Get(core.BucketTokens, ref, &t); err != nil {
		return "", t, err
	} else if ok {
		return ref, t, nil
	}
	var key string
	var n int
	err := tx.Scan(core.BucketTokens, "", func(k string, raw []byte) (bool, error) {
		var c core.Token
		if err := core.Decode(raw, &c); err != nil {
			return false, err
		}
		if c.ID == ref {
			key, t = k, c
			n++
		}
		return n < 2, nil
	})
	if err != nil {
		return "", t, err
	}
	switch n {
	case 0:
		return "", t, errorf(KindNotFound, "token %s not found", ref)
	case 1:
		return key, t, nil
	}
	return "", t, errorf(KindInvalid, "token id %s is ambiguous; give <kind>/<id>", ref)
}
