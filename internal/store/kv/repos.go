package kv

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Index key formats. Stored data depends on them: change only with a
// migration.
func serialKey(serial string) string       { return "serial/" + serial }
func fixedIPKey(ip string) string          { return "fixed-ip/" + ip }
func clusterNameKey(name string) string    { return "cluster-name/" + name }
func imageNameKey(name string) string      { return "image-name/" + name }
func poolKey(cluster, token string) string { return "pool/" + cluster + "/" + token }
func memberKey(cluster, device string) string {
	return "member/" + cluster + "/" + device
}
func enrollKey(k core.EnrollmentKey) string {
	if k.MAC != "" {
		return "enroll/" + k.MAC
	}
	return "enroll/serial:" + k.Serial
}
func tokenKey(kind, id string) string    { return kind + "/" + id }
func joinStateKey(cluster string) string { return "joiner/cluster/" + cluster }

// deviceStateKey is device id's entry in the devices-by-state index
// (value: the ID): a state-filtered device page walks the state's range
// instead of every device.
func deviceStateKey(state core.DeviceState, id string) string {
	return deviceStatePrefix(state) + id
}

func deviceStatePrefix(state core.DeviceState) string { return "device-state/" + string(state) + "/" }

// deviceClusterKey is device id's entry in the devices-by-cluster index
// (value: the ID), kept for devices in a cluster: a user's listing walks
// its clusters' ranges instead of the fleet.
func deviceClusterKey(cluster, id string) string { return deviceClusterPrefix(cluster) + id }

func deviceClusterPrefix(cluster string) string { return "device-cluster/" + cluster + "/" }

// leaseMACKey is the lease of ip's entry in the leases-by-MAC index
// (value: the address): a user's lease listing reads only its devices'
// leases. MAC and address are joined by '@', not '/', so that on etcd a
// deletion moves the index's one delete marker rather than one per MAC
// (etcdstore's markerDir).
func leaseMACKey(mac, ip string) string { return leaseMACPrefix(mac) + ip }

func leaseMACPrefix(mac string) string { return "lease-mac/" + mac + "@" }

// eventKey is fmt.Sprintf("%020d", seq), without fmt: every event write
// formats one.
func eventKey(seq uint64) string {
	var b [20]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = '0' + byte(seq%10)
		seq /= 10
	}
	return string(b[:])
}

// deviceEventKey indexes an event of stream s by the device it names
// (Event.Device): one device's events are a contiguous key range in
// sequence order, so its newest events are read without the rest of the
// log. The value is the event's key.
func deviceEventKey(s core.EventStream, device string, seq uint64) string {
	return deviceEventPrefix(s, device) + eventKey(seq)
}

func deviceEventPrefix(s core.EventStream, device string) string {
	return "device-event/" + string(streamBucket(s)) + "/" + device + "/"
}

// --- devices ---

type devices struct{ t *Tx }

func (r devices) Get(id string) (core.Device, error) {
	return r.t.c.devices.getFresh(r.t, BucketDevices, id, "device", id, freshDevice)
}

func (r devices) Put(d core.Device) error {
	if d.ID == "" {
		return fmt.Errorf("device without id")
	}
	t := r.t
	// The old record through the decode cache: a writer that just read it
	// (every merge does) does not decode it again.
	old, had, err := t.c.devices.get(t, BucketDevices, d.ID)
	if err != nil {
		return err
	}
	if had && old.Serial != "" && old.Serial != d.Serial {
		if err := r.unindexSerial(old.Serial, d.ID); err != nil {
			return err
		}
	}
	if d.Serial != "" && (!had || old.Serial != d.Serial) {
		// The index stays with a device whose record holds the serial:
		// another device stating it never moves it (devices records the
		// conflict on both).
		holder, ok, err := r.SerialHolder(d.Serial)
		if err != nil {
			return err
		}
		if !ok || holder == d.ID {
			if err := t.indexPut(core.AggDevices, serialKey(d.Serial), d.ID); err != nil {
				return err
			}
		}
	}
	if had && old.State != d.State {
		if err := t.indexDel(core.AggDevices, deviceStateKey(old.State, d.ID)); err != nil {
			return err
		}
	}
	if !had || old.State != d.State {
		if err := t.indexPut(core.AggDevices, deviceStateKey(d.State, d.ID), d.ID); err != nil {
			return err
		}
	}
	if had && old.Cluster != "" && old.Cluster != d.Cluster {
		if err := t.indexDel(core.AggDevices, deviceClusterKey(old.Cluster, d.ID)); err != nil {
			return err
		}
	}
	if d.Cluster != "" && (!had || old.Cluster != d.Cluster) {
		if err := t.indexPut(core.AggDevices, deviceClusterKey(d.Cluster, d.ID), d.ID); err != nil {
			return err
		}
	}
	if had && old.FixedIP != "" && old.FixedIP != d.FixedIP {
		if err := t.indexDel(core.AggDevices, fixedIPKey(old.FixedIP)); err != nil {
			return err
		}
	}
	if d.FixedIP != "" && (!had || old.FixedIP != d.FixedIP) {
		if other, ok, err := t.indexGet(fixedIPKey(d.FixedIP)); err != nil {
			return err
		} else if ok && other != d.ID {
			return core.Errorf(core.KindConflict, "fixed address %s is already bound to device %s", d.FixedIP, other)
		}
		if err := t.indexPut(core.AggDevices, fixedIPKey(d.FixedIP), d.ID); err != nil {
			return err
		}
	}
	t.buf = appendDevice(t.buf[:0], &d)
	return t.putRaw(core.AggDevices, BucketDevices, d.ID, t.buf)
}

func (r devices) Delete(id string) error {
	t := r.t
	var old core.Device
	had, err := t.get(BucketDevices, id, &old)
	if err != nil || !had {
		return err
	}
	if old.Serial != "" {
		if err := r.unindexSerial(old.Serial, id); err != nil {
			return err
		}
	}
	if err := t.indexDel(core.AggDevices, deviceStateKey(old.State, id)); err != nil {
		return err
	}
	if old.Cluster != "" {
		if err := t.indexDel(core.AggDevices, deviceClusterKey(old.Cluster, id)); err != nil {
			return err
		}
	}
	if old.FixedIP != "" {
		if err := t.indexDel(core.AggDevices, fixedIPKey(old.FixedIP)); err != nil {
			return err
		}
	}
	return t.del(core.AggDevices, BucketDevices, id)
}

// unindexSerial removes serial's index entry if it names id.
func (r devices) unindexSerial(serial, id string) error {
	cur, ok, err := r.t.indexGet(serialKey(serial))
	if err != nil || !ok || cur != id {
		return err
	}
	return r.t.indexDel(core.AggDevices, serialKey(serial))
}

// SerialHolder is the device whose record holds serial, as the index
// names it; an entry whose device no longer carries the serial counts as
// none.
func (r devices) SerialHolder(serial string) (string, bool, error) {
	id, ok, err := r.t.indexGet(serialKey(serial))
	if err != nil || !ok {
		return "", false, err
	}
	d, had, err := r.t.c.devices.get(r.t, BucketDevices, id)
	if err != nil || !had {
		return "", false, err
	}
	return id, d.Serial == serial, nil
}

func (r devices) BySerial(serial string) (core.Device, error) {
	id, ok, err := r.t.indexGet(serialKey(serial))
	if err != nil {
		return core.Device{}, err
	}
	if !ok {
		return core.Device{}, fmt.Errorf("device with serial %q: %w", serial, core.ErrNotFound)
	}
	d, err := r.Get(id)
	if err != nil {
		return d, err
	}
	if c := d.SerialConflict; c != nil && c.Serial == serial && len(c.With) > 0 {
		candidates := []core.Device{d}
		for _, other := range c.With {
			o, err := r.Get(other)
			if errors.Is(err, core.ErrNotFound) {
				continue // pruned or deleted since
			}
			if err != nil {
				return core.Device{}, err
			}
			candidates = append(candidates, o)
		}
		if len(candidates) > 1 {
			return core.Device{}, core.AmbiguousSerial(serial, candidates)
		}
	}
	return d, nil
}

func (r devices) ByFixedIP(ip string) (core.Device, error) {
	id, ok, err := r.t.indexGet(fixedIPKey(ip))
	if err != nil {
		return core.Device{}, err
	}
	if !ok {
		return core.Device{}, fmt.Errorf("device with fixed address %s: %w", ip, core.ErrNotFound)
	}
	return r.Get(id)
}

func (r devices) Stamp(id string) (core.Stamp, error) {
	return r.t.stamp(BucketDevices, id, "device", id)
}

func (r devices) ListStamps(after string, fn func(id string, s core.Stamp) (bool, error)) error {
	return r.t.raw.Scan(BucketDevices, after, func(id string, raw []byte) (bool, error) {
		return fn(id, sumRecord(raw))
	})
}

func (r devices) List(after string, fn core.Visit[core.Device]) error {
	return scanCached(r.t, &r.t.c.devices, BucketDevices, after, freshDevice, fn)
}

// ListState walks the state's range of the index from after and reads
// each device it names: a page of k devices costs k index entries and k
// reads, however many devices are in other states.
func (r devices) ListState(state core.DeviceState, after string, fn core.Visit[core.Device]) error {
	prefix := deviceStatePrefix(state)
	from := prefix
	if after != "" {
		from = prefix + after
	}
	c := &r.t.c.devices
	return r.t.raw.Scan(BucketIndex, from, func(k string, _ []byte) (bool, error) {
		if !strings.HasPrefix(k, prefix) {
			return false, nil // past the state's range
		}
		id := k[len(prefix):]
		raw, err := r.t.raw.Get(BucketDevices, id)
		if err != nil || raw == nil {
			return err == nil, err // an entry without its device: not expected, skipped
		}
		d, err := c.decode(BucketDevices, id, raw)
		if err != nil {
			return false, fmt.Errorf("corrupt device %s: %w", id, err)
		}
		if d.State != state {
			return true, nil // an entry left behind: not expected, skipped
		}
		return fn(freshDevice(d))
	})
}

// ListCluster walks the cluster's range of the devices-by-cluster index
// from after and reads each device it names, as ListState does a state's:
// a user's listing costs its clusters' devices, not the fleet.
func (r devices) ListCluster(cluster, after string, fn core.Visit[core.Device]) error {
	if cluster == "" {
		return nil // devices in no cluster are not indexed
	}
	prefix := deviceClusterPrefix(cluster)
	from := prefix
	if after != "" {
		from = prefix + after
	}
	c := &r.t.c.devices
	return r.t.raw.Scan(BucketIndex, from, func(k string, _ []byte) (bool, error) {
		if !strings.HasPrefix(k, prefix) {
			return false, nil // past the cluster's range
		}
		id := k[len(prefix):]
		raw, err := r.t.raw.Get(BucketDevices, id)
		if err != nil || raw == nil {
			return err == nil, err // an entry without its device: not expected, skipped
		}
		d, err := c.decode(BucketDevices, id, raw)
		if err != nil {
			return false, fmt.Errorf("corrupt device %s: %w", id, err)
		}
		if d.Cluster != cluster {
			// An entry left behind (not expected), or one of a cluster
			// whose ID extends this one past a '/': skipped.
			return true, nil
		}
		return fn(freshDevice(d))
	})
}

// IndexDeviceStates builds the devices-by-state index of a store written
// before it existed (the 3 -> 4 migration); it only adds entries.
func IndexDeviceStates(raw Raw) error {
	var entries []indexEntry
	err := raw.Scan(BucketDevices, "", func(k string, v []byte) (bool, error) {
		var d struct {
			State core.DeviceState `json:"state"`
		}
		if err := json.Unmarshal(v, &d); err != nil {
			return false, fmt.Errorf("device %s: %w", k, err)
		}
		entries = append(entries, indexEntry{deviceStateKey(d.State, k), k})
		return true, nil
	})
	if err != nil {
		return err
	}
	return putIndexEntries(raw, entries)
}

// IndexTenancy builds the devices-by-cluster and leases-by-MAC indexes of
// a store written before they existed (the 5 -> 6 migration). It only
// adds entries, so running it again, or after a crash, gives the same
// indexes. A record that does not decode is left out rather than keeping
// the store from opening (the fleet's listings report it).
func IndexTenancy(raw Raw) error {
	var entries []indexEntry
	err := raw.Scan(BucketDevices, "", func(k string, v []byte) (bool, error) {
		var d struct {
			Cluster string `json:"cluster"`
		}
		if json.Unmarshal(v, &d) == nil && d.Cluster != "" {
			entries = append(entries, indexEntry{deviceClusterKey(d.Cluster, k), k})
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	err = raw.Scan(BucketLeases, "", func(k string, v []byte) (bool, error) {
		var l struct {
			MAC string `json:"mac"`
		}
		if json.Unmarshal(v, &l) == nil && l.MAC != "" {
			entries = append(entries, indexEntry{leaseMACKey(l.MAC, k), k})
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	return putIndexEntries(raw, entries)
}

// TenancyIndexProblems lists how raw's devices-by-cluster and
// leases-by-MAC indexes differ from what its records say: entries missing
// and entries left behind. The listings skip an entry left behind, so only
// this sees one (the tests of every engine ask it).
func TenancyIndexProblems(raw Raw) ([]string, error) {
	want := map[string]string{}
	err := raw.Scan(BucketDevices, "", func(k string, v []byte) (bool, error) {
		var d struct {
			Cluster string `json:"cluster"`
		}
		if err := json.Unmarshal(v, &d); err == nil && d.Cluster != "" {
			want[deviceClusterKey(d.Cluster, k)] = k
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	err = raw.Scan(BucketLeases, "", func(k string, v []byte) (bool, error) {
		var l struct {
			MAC string `json:"mac"`
		}
		if err := json.Unmarshal(v, &l); err == nil && l.MAC != "" {
			want[leaseMACKey(l.MAC, k)] = k
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, prefix := range []string{"device-cluster/", "lease-mac/"} {
		err := raw.ScanPrefix(BucketIndex, prefix, func(k string, v []byte) (bool, error) {
			var id string
			switch id0, ok := want[k]; {
			case !ok:
				problems = append(problems, "left behind: "+k)
			case json.Unmarshal(v, &id) != nil || id != id0:
				problems = append(problems, fmt.Sprintf("%s names %s, want %s", k, v, id0))
			}
			delete(want, k)
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		problems = append(problems, "missing: "+k)
	}
	return problems, nil
}

// indexEntry is an index key and the primary key it names.
type indexEntry struct{ key, id string }

// putIndexEntries writes a migration's index entries in key order, so the
// engine's writes stay sequential.
func putIndexEntries(raw Raw, entries []indexEntry) error {
	slices.SortFunc(entries, func(a, b indexEntry) int { return strings.Compare(a.key, b.key) })
	for _, e := range entries {
		value, _ := json.Marshal(e.id)
		if err := raw.Put(BucketIndex, e.key, value); err != nil {
			return err
		}
	}
	return nil
}

// freshDevice is a cached device safe to change: its labels are its own.
func freshDevice(d core.Device) core.Device {
	d.Labels = maps.Clone(d.Labels)
	if c := d.SerialConflict; c != nil {
		d.SerialConflict = &core.SerialConflict{Serial: c.Serial, With: slices.Clone(c.With)}
	}
	return d
}

func (r devices) Count() (int, error) { return r.t.raw.Count(BucketDevices) }

// --- leases ---

type leases struct{ t *Tx }

func (r leases) Get(ip string) (core.Lease, error) {
	return r.t.c.leases.getFresh(r.t, BucketLeases, ip, "lease", ip, nil)
}

func (r leases) Put(l core.Lease) error {
	if l.IP == "" {
		return fmt.Errorf("lease without address")
	}
	t := r.t
	oldMAC, err := r.storedMAC(l.IP)
	if err != nil {
		return err
	}
	if oldMAC != "" && oldMAC != l.MAC {
		if err := t.indexDel(core.AggLeases, leaseMACKey(oldMAC, l.IP)); err != nil {
			return err
		}
	}
	if l.MAC != "" && oldMAC != l.MAC {
		if err := t.indexPut(core.AggLeases, leaseMACKey(l.MAC, l.IP), l.IP); err != nil {
			return err
		}
	}
	t.buf = appendLease(t.buf[:0], &l)
	return t.putRaw(core.AggLeases, BucketLeases, l.IP, t.buf)
}

func (r leases) Delete(ip string) error {
	oldMAC, err := r.storedMAC(ip)
	if err != nil {
		return err
	}
	if oldMAC != "" {
		if err := r.t.indexDel(core.AggLeases, leaseMACKey(oldMAC, ip)); err != nil {
			return err
		}
	}
	return r.t.del(core.AggLeases, BucketLeases, ip)
}

// storedMAC is the MAC of the lease stored at ip ("" without one): read
// from the record's head (leaseRecordMAC), else decoded through the decode
// cache. A record that does not decode is overwritten or deleted as
// before; the index entry it may leave behind names a lease that no longer
// has that MAC, which ListMAC skips.
func (r leases) storedMAC(ip string) (string, error) {
	raw, err := r.t.raw.Get(BucketLeases, ip)
	if err != nil || raw == nil {
		return "", err
	}
	if mac, ok := leaseRecordMAC(raw); ok {
		return mac, nil
	}
	l, err := r.t.c.leases.decode(BucketLeases, ip, raw)
	if err != nil {
		return "", nil
	}
	return l.MAC, nil
}

// ListMAC walks the MAC's range of the leases-by-MAC index and reads each
// lease it names, in address order.
func (r leases) ListMAC(mac string, fn core.Visit[core.Lease]) error {
	if mac == "" {
		return nil // leases without a MAC are not indexed
	}
	prefix := leaseMACPrefix(mac)
	c := &r.t.c.leases
	return r.t.raw.ScanPrefix(BucketIndex, prefix, func(k string, _ []byte) (bool, error) {
		ip := k[len(prefix):]
		raw, err := r.t.raw.Get(BucketLeases, ip)
		if err != nil || raw == nil {
			return err == nil, err // an entry without its lease: not expected, skipped
		}
		l, err := c.decode(BucketLeases, ip, raw)
		if err != nil {
			return false, fmt.Errorf("corrupt lease %s: %w", ip, err)
		}
		if l.MAC != mac {
			return true, nil // an entry left behind: skipped
		}
		return fn(l)
	})
}

func (r leases) List(after string, fn core.Visit[core.Lease]) error {
	return scanCached(r.t, &r.t.c.leases, BucketLeases, after, func(l core.Lease) core.Lease { return l }, fn)
}

func (r leases) Count() (int, error) { return r.t.raw.Count(BucketLeases) }

// --- clusters ---

type clusters struct{ t *Tx }

func (r clusters) Get(id string) (core.Cluster, error) {
	return r.t.c.clusters.getFresh(r.t, BucketClusters, id, "cluster", id, freshCluster)
}

// freshCluster is a cached cluster safe to change: its observation is its
// own.
func freshCluster(c core.Cluster) core.Cluster {
	if c.Observed != nil {
		o := *c.Observed
		c.Observed = &o
	}
	return c
}

func (r clusters) Put(c core.Cluster) error {
	if c.ID == "" || c.Name == "" {
		return fmt.Errorf("cluster needs an id and a name")
	}
	t := r.t
	old, had, err := t.c.clusters.get(t, BucketClusters, c.ID)
	if err != nil {
		return err
	}
	if had && old.Name != c.Name {
		if err := t.indexDel(core.AggClusters, clusterNameKey(old.Name)); err != nil {
			return err
		}
	}
	if owner, ok, err := t.indexGet(clusterNameKey(c.Name)); err != nil {
		return err
	} else if ok && owner != c.ID {
		return core.Errorf(core.KindConflict, "cluster name %q is already used by cluster %s", c.Name, owner)
	}
	if err := t.indexPut(core.AggClusters, clusterNameKey(c.Name), c.ID); err != nil {
		return err
	}
	return t.put(core.AggClusters, BucketClusters, c.ID, c)
}

func (r clusters) Delete(id string) error {
	c, err := r.Get(id)
	if err != nil {
		return err
	}
	if err := r.t.indexDel(core.AggClusters, clusterNameKey(c.Name)); err != nil {
		return err
	}
	return r.t.del(core.AggClusters, BucketClusters, id)
}

func (r clusters) ByName(name string) (core.Cluster, error) {
	id, ok, err := r.t.indexGet(clusterNameKey(name))
	if err != nil {
		return core.Cluster{}, err
	}
	if !ok {
		return core.Cluster{}, fmt.Errorf("cluster %q: %w", name, core.ErrNotFound)
	}
	return r.Get(id)
}

func (r clusters) List(after string, fn core.Visit[core.Cluster]) error {
	return scanCached(r.t, &r.t.c.clusters, BucketClusters, after, freshCluster, fn)
}

func (r clusters) JoinState(cluster string) (core.JoinState, error) {
	// A JoinState has no references: the cached value is safe to hand out.
	return r.t.c.joinStates.getFresh(r.t, BucketMeta, joinStateKey(cluster), "join state of cluster", cluster, nil)
}

func (r clusters) PutJoinState(cluster string, st core.JoinState) error {
	return r.t.put(core.AggClusters, BucketMeta, joinStateKey(cluster), st)
}

func (r clusters) DeleteJoinState(cluster string) error {
	return r.t.del(core.AggClusters, BucketMeta, joinStateKey(cluster))
}

func (r clusters) JoinStates(fn func(string, core.JoinState) (bool, error)) error {
	p := joinStateKey("")
	return r.t.raw.ScanPrefix(BucketMeta, p, func(k string, raw []byte) (bool, error) {
		var st core.JoinState
		if err := json.Unmarshal(raw, &st); err != nil {
			return false, fmt.Errorf("corrupt record %s/%s: %w", BucketMeta, k, err)
		}
		return fn(k[len(p):], st)
	})
}

// --- versions ---

type versions struct{ t *Tx }

func (r versions) Get(id string) (core.Version, error) {
	var v core.Version
	ok, err := r.t.get(BucketVersions, id, &v)
	if err == nil && !ok {
		err = notFound("kubernetes version", id)
	}
	return v, err
}

func (r versions) Put(v core.Version) error {
	if v.ID == "" {
		return fmt.Errorf("version without id")
	}
	return r.t.put(core.AggVersions, BucketVersions, v.ID, v)
}

func (r versions) Delete(id string) error { return r.t.del(core.AggVersions, BucketVersions, id) }

func (r versions) List(after string, fn core.Visit[core.Version]) error {
	return scan(r.t, BucketVersions, after, fn)
}

// --- memberships ---

type memberships struct{ t *Tx }

func (r memberships) Get(device string) (core.Membership, error) {
	return r.t.c.memberships.getFresh(r.t, BucketMemberships, device, "membership of device", device, freshMembership)
}

// freshMembership is a cached membership safe to change: its history and
// Node observation are its own.
func freshMembership(m core.Membership) core.Membership {
	m.History = slices.Clone(m.History)
	if m.Node != nil {
		n := *m.Node
		m.Node = &n
	}
	return m
}

func (r memberships) Put(m core.Membership) error {
	if m.Device == "" {
		return fmt.Errorf("membership without device")
	}
	return r.t.put(core.AggMemberships, BucketMemberships, m.Device, m)
}

func (r memberships) Delete(device string) error {
	return r.t.del(core.AggMemberships, BucketMemberships, device)
}

func (r memberships) List(after string, fn core.Visit[core.Membership]) error {
	return scanCached(r.t, &r.t.c.memberships, BucketMemberships, after, freshMembership, fn)
}

func (r memberships) Enlist(cluster, device, role string) error {
	return r.t.indexPut(core.AggMemberships, memberKey(cluster, device), role)
}

func (r memberships) Delist(cluster, device string) error {
	return r.t.indexDel(core.AggMemberships, memberKey(cluster, device))
}

func (r memberships) Roster(cluster string, fn func(device, role string) (bool, error)) error {
	return r.t.indexScan(memberKey(cluster, ""), fn)
}

func (r memberships) Stamp(device string) (core.Stamp, error) {
	return r.t.stamp(BucketMemberships, device, "membership of device", device)
}

// --- tokens ---

type tokens struct{ t *Tx }

func (r tokens) Get(kind, id string) (core.Token, error) {
	var tok core.Token
	ok, err := r.t.get(BucketTokens, tokenKey(kind, id), &tok)
	if err == nil && !ok {
		err = notFound(kind+" token", id)
	}
	return tok, err
}

func (r tokens) Put(tok core.Token) error {
	if tok.Kind == "" || tok.ID == "" {
		return fmt.Errorf("token needs a kind and an id")
	}
	return r.t.put(core.AggTokens, BucketTokens, tokenKey(tok.Kind, tok.ID), tok)
}

func (r tokens) Delete(kind, id string) error {
	return r.t.del(core.AggTokens, BucketTokens, tokenKey(kind, id))
}

func (r tokens) List(after string, fn core.Visit[core.Token]) error {
	return scan(r.t, BucketTokens, after, fn)
}

func (r tokens) ListKind(kind string, fn core.Visit[core.Token]) error {
	return scanPrefix(r.t, BucketTokens, kind+"/", fn)
}

func (r tokens) PoolAdd(cluster, id string) error {
	return r.t.indexPut(core.AggTokens, poolKey(cluster, id), "")
}

func (r tokens) PoolRemove(cluster, id string) error {
	return r.t.indexDel(core.AggTokens, poolKey(cluster, id))
}

func (r tokens) Pool(cluster string, fn func(id string) (bool, error)) error {
	return r.t.indexScan(poolKey(cluster, ""), func(id, _ string) (bool, error) { return fn(id) })
}

func (r tokens) Enrollment(k core.EnrollmentKey) (string, bool, error) {
	return r.t.indexGet(enrollKey(k))
}

func (r tokens) SetEnrollment(k core.EnrollmentKey, id string) error {
	return r.t.indexPut(core.AggTokens, enrollKey(k), id)
}

func (r tokens) ClearEnrollment(k core.EnrollmentKey) error {
	return r.t.indexDel(core.AggTokens, enrollKey(k))
}

// --- secrets ---

type secrets struct{ t *Tx }

func (r secrets) Get(owner string) ([]byte, bool, error) {
	raw, err := r.t.raw.Get(BucketSecrets, owner)
	if err != nil || raw == nil {
		return nil, false, err
	}
	return append([]byte(nil), raw...), true, nil
}

func (r secrets) Put(owner string, sealed []byte) error {
	// Stored as given, so Get returns exactly these bytes; every record is
	// a JSON document, and so must this one be.
	if !json.Valid(sealed) {
		return fmt.Errorf("secrets of %s: not a JSON document", owner)
	}
	return r.t.putRaw(core.AggSecrets, BucketSecrets, owner, sealed)
}

func (r secrets) Delete(owner string) error { return r.t.del(core.AggSecrets, BucketSecrets, owner) }

func (r secrets) List(fn func(owner string, sealed []byte) (bool, error)) error {
	return r.t.raw.Scan(BucketSecrets, "", func(k string, v []byte) (bool, error) {
		return fn(k, append([]byte(nil), v...))
	})
}

// --- events ---

type events struct{ t *Tx }

func streamBucket(s core.EventStream) Bucket {
	if s == core.AuditEvents {
		return BucketAudit
	}
	return BucketEvents
}

func (r events) Append(e core.Event) (uint64, error) {
	seq, err := r.t.raw.NextSequence(BucketEvents) // one sequence for both streams
	if err != nil {
		return 0, err
	}
	e.Seq = seq
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	s := core.StreamOf(e.Type)
	if e.Device != "" {
		if err := r.t.indexPut(core.AggEvents, deviceEventKey(s, e.Device, seq), eventKey(seq)); err != nil {
			return 0, err
		}
	}
	r.t.buf = appendEvent(r.t.buf[:0], &e)
	return seq, r.t.putRaw(core.AggEvents, streamBucket(s), eventKey(seq), r.t.buf)
}

// ListDevice and ListDeviceBackward walk the device's index range and read
// each event it names. An index key whose rest is not a sequence belongs
// to a device whose ID merely starts with this one and a "/" (never a
// MAC): it is skipped. An entry whose event is gone (not expected: Prune
// removes both) is skipped too.
func (r events) ListDevice(s core.EventStream, device string, after uint64, fn core.Visit[core.Event]) error {
	prefix := deviceEventPrefix(s, device)
	from := prefix
	if after > 0 {
		from = prefix + eventKey(after)
	}
	return r.visitDevice(s, prefix, fn, func(visit func(string, []byte) (bool, error)) error {
		return r.t.raw.Scan(BucketIndex, from, visit)
	})
}

func (r events) ListDeviceBackward(s core.EventStream, device string, before uint64, fn core.Visit[core.Event]) error {
	prefix := deviceEventPrefix(s, device)
	to := prefix + ":" // ':' sorts right after the digits: past every sequence
	if before > 0 {
		to = prefix + eventKey(before)
	}
	return r.visitDevice(s, prefix, fn, func(visit func(string, []byte) (bool, error)) error {
		return r.t.raw.ScanReverse(BucketIndex, to, visit)
	})
}

func (r events) visitDevice(s core.EventStream, prefix string, fn core.Visit[core.Event],
	scan func(func(string, []byte) (bool, error)) error) error {
	b := streamBucket(s)
	c := &r.t.c.events
	var bad corrupt
	err := scan(func(k string, _ []byte) (bool, error) {
		if !strings.HasPrefix(k, prefix) {
			return false, nil // past the device's range
		}
		key := k[len(prefix):]
		if len(key) != len(eventKey(0)) || strings.Contains(key, "/") {
			return true, nil
		}
		raw, err := r.t.raw.Get(b, key)
		if err != nil || raw == nil {
			return err == nil, err
		}
		e, err := c.decode(b, key, raw)
		if err != nil {
			bad.add(key, err)
			return true, nil
		}
		return fn(freshEvent(e))
	})
	return bad.result(b, err)
}

func (r events) List(s core.EventStream, after uint64, fn core.Visit[core.Event]) error {
	from := ""
	if after > 0 {
		from = eventKey(after)
	}
	return scanCached(r.t, &r.t.c.events, streamBucket(s), from, freshEvent, fn)
}

func (r events) ListBackward(s core.EventStream, before uint64, fn core.Visit[core.Event]) error {
	to := ""
	if before > 0 {
		to = eventKey(before)
	}
	return scanCachedReverse(r.t, &r.t.c.events, streamBucket(s), to, freshEvent, fn)
}

// freshEvent is a cached event safe to change: its fields are its own.
func freshEvent(e core.Event) core.Event {
	e.Fields = maps.Clone(e.Fields)
	return e
}

func (r events) Count(s core.EventStream) (int, error) { return r.t.raw.Count(streamBucket(s)) }

func (r events) Prune(s core.EventStream, keep int) (n int, more bool, err error) {
	const maxPrune = 50000
	b := streamBucket(s)
	total, err := r.t.raw.Count(b)
	if err != nil || total <= keep {
		return 0, false, err
	}
	excess := total - keep
	var doomed, indexed []string
	err = r.t.raw.Scan(b, "", func(k string, raw []byte) (bool, error) {
		doomed = append(doomed, k)
		if ik := deviceEventIndexOf(s, k, raw); ik != "" {
			indexed = append(indexed, ik)
		}
		return len(doomed) < min(excess, maxPrune), nil
	})
	if err != nil {
		return 0, false, err
	}
	for _, k := range doomed {
		if err := r.t.del(core.AggEvents, b, k); err != nil {
			return 0, false, err
		}
	}
	for _, k := range indexed {
		if err := r.t.indexDel(core.AggEvents, k); err != nil {
			return 0, false, err
		}
	}
	return len(doomed), excess > len(doomed), nil
}

// deviceEventIndexOf is the device index key of the event of stream s
// stored at key as raw, or "" when it names no device (or cannot be
// decoded: an index entry left behind is skipped by the listings).
func deviceEventIndexOf(s core.EventStream, key string, raw []byte) string {
	var e struct {
		Device string `json:"device"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Device == "" {
		return ""
	}
	return deviceEventPrefix(s, e.Device) + key
}

// IndexDeviceEvents adds the device index entry of every stored event
// that lacks one (schema migration to the device event index). It only
// puts, so running it again, or after a crash, gives the same index.
func IndexDeviceEvents(raw Raw) error {
	for _, s := range []core.EventStream{core.DeviceEvents, core.AuditEvents} {
		var entries []indexEntry
		err := raw.Scan(streamBucket(s), "", func(k string, v []byte) (bool, error) {
			if ik := deviceEventIndexOf(s, k, v); ik != "" {
				entries = append(entries, indexEntry{ik, k})
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		if err := putIndexEntries(raw, entries); err != nil {
			return err
		}
	}
	return nil
}

// --- images ---

type images struct{ t *Tx }

func (r images) Get(sha string) (core.Image, error) {
	var im core.Image
	ok, err := r.t.get(BucketImages, sha, &im)
	if err == nil && !ok {
		err = notFound("image", sha)
	}
	return im, err
}

func (r images) Put(im core.Image) error {
	if im.SHA256 == "" {
		return fmt.Errorf("image without sha256")
	}
	return r.t.put(core.AggImages, BucketImages, im.SHA256, im)
}

func (r images) Delete(sha string) error { return r.t.del(core.AggImages, BucketImages, sha) }

func (r images) List(after string, fn core.Visit[core.Image]) error {
	return scan(r.t, BucketImages, after, fn)
}

func (r images) Count() (int, error) { return r.t.raw.Count(BucketImages) }

func (r images) ByName(name string) (string, error) {
	sha, ok, err := r.t.indexGet(imageNameKey(name))
	if err == nil && !ok {
		err = fmt.Errorf("image %q: %w", name, core.ErrNotFound)
	}
	return sha, err
}

func (r images) SetName(name, sha string) error {
	return r.t.indexPut(core.AggImages, imageNameKey(name), sha)
}

func (r images) DeleteName(name string) error {
	return r.t.indexDel(core.AggImages, imageNameKey(name))
}

func (r images) Names(fn func(name, sha string) (bool, error)) error {
	return r.t.indexScan(imageNameKey(""), fn)
}

func (r images) WithPrefix(prefix string, fn core.Visit[core.Image]) error {
	return scanPrefix(r.t, BucketImages, prefix, fn)
}

// --- API keys ---

type apiKeys struct{ t *Tx }

func (r apiKeys) Get(key string) (core.APIKey, error) {
	var k core.APIKey
	ok, err := r.t.get(BucketAPIKeys, key, &k)
	if err == nil && !ok {
		err = notFound("API key", key)
	}
	return k, err
}

func (r apiKeys) Put(k core.APIKey) error {
	if k.APIKey == "" {
		return fmt.Errorf("API key record without key")
	}
	return r.t.put(core.AggAPIKeys, BucketAPIKeys, k.APIKey, k)
}

func (r apiKeys) Delete(key string) error { return r.t.del(core.AggAPIKeys, BucketAPIKeys, key) }

func (r apiKeys) List(fn core.Visit[core.APIKey]) error { return scan(r.t, BucketAPIKeys, "", fn) }

func (r apiKeys) Count() (int, error) { return r.t.raw.Count(BucketAPIKeys) }

// --- jobs ---

type jobs struct{ t *Tx }

func (r jobs) Get(id string) (core.Job, error) {
	var j core.Job
	ok, err := r.t.get(BucketJobs, id, &j)
	if err == nil && !ok {
		err = notFound("job", id)
	}
	return j, err
}

func (r jobs) Put(j core.Job) error {
	if j.ID == "" {
		return fmt.Errorf("job without id")
	}
	return r.t.put(core.AggJobs, BucketJobs, j.ID, j)
}

func (r jobs) Delete(id string) error { return r.t.del(core.AggJobs, BucketJobs, id) }

func (r jobs) List(fn core.Visit[core.Job]) error { return scan(r.t, BucketJobs, "", fn) }

// --- desired states ---

type desired struct{ t *Tx }

func (r desired) Get(device string) (core.DesiredState, error) {
	var d core.DesiredState
	ok, err := r.t.get(BucketDesired, device, &d)
	if err == nil && !ok {
		err = notFound("desired state of device", device)
	}
	return d, err
}

func (r desired) Put(d core.DesiredState) error {
	if d.Device == "" {
		return fmt.Errorf("desired state without device")
	}
	return r.t.put(core.AggDesired, BucketDesired, d.Device, d)
}

func (r desired) Delete(device string) error {
	return r.t.del(core.AggDesired, BucketDesired, device)
}

func (r desired) List(after string, fn core.Visit[core.DesiredState]) error {
	return scan(r.t, BucketDesired, after, fn)
}

// --- rollouts ---

type rollouts struct{ t *Tx }

func (r rollouts) Get(id string) (core.Rollout, error) {
	var ro core.Rollout
	ok, err := r.t.get(BucketRollouts, id, &ro)
	if err == nil && !ok {
		err = notFound("rollout", id)
	}
	return ro, err
}

func (r rollouts) Put(ro core.Rollout) error {
	if ro.ID == "" {
		return fmt.Errorf("rollout without id")
	}
	return r.t.put(core.AggRollouts, BucketRollouts, ro.ID, ro)
}

func (r rollouts) Delete(id string) error { return r.t.del(core.AggRollouts, BucketRollouts, id) }

func (r rollouts) List(after string, fn core.Visit[core.Rollout]) error {
	return scan(r.t, BucketRollouts, after, fn)
}

// --- settings ---

type settings struct{ t *Tx }

// reserved meta keys that are not settings.
func reservedMeta(name string) bool {
	return name == "schema_version" || strings.HasPrefix(name, "joiner/")
}

func (r settings) Get(name string) (string, bool, error) {
	if reservedMeta(name) {
		return "", false, fmt.Errorf("setting name %q is reserved", name)
	}
	var v string
	ok, err := r.t.get(BucketMeta, name, &v)
	return v, ok, err
}

func (r settings) Put(name, value string) error {
	if name == "" || reservedMeta(name) {
		return fmt.Errorf("setting name %q is reserved", name)
	}
	return r.t.put(core.AggSettings, BucketMeta, name, value)
}
