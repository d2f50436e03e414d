package core

import (
	"fmt"
	"strings"
	"time"
)

// Typed accessors over a Tx. They keep secondary indexes consistent, so callers
// never write the index bucket themselves.

func indexKey(name, value string) string { return name + "/" + value }

// GetDevice loads a device by ID.
func GetDevice(tx Tx, id string) (Device, error) {
	var d Device
	ok, err := tx.Get(BucketDevices, id, &d)
	if err != nil {
		return d, err
	}
	if !ok {
		return d, fmt.Errorf("device %s: %w", id, ErrNotFound)
	}
	return d, nil
}

// PutDevice stores d and maintains the serial-number and fixed-address
// indexes.
func PutDevice(tx Tx, d Device) error {
	if d.ID == "" {
		return fmt.Errorf("device without id")
	}
	var old Device
	had, err := tx.Get(BucketDevices, d.ID, &old)
	if err != nil {
		return err
	}
	if had && old.Serial != "" && old.Serial != d.Serial {
		if err := tx.Delete(BucketIndex, indexKey("serial", old.Serial)); err != nil {
			return err
		}
	}
	if d.Serial != "" && (!had || old.Serial != d.Serial) {
		if err := tx.Put(BucketIndex, indexKey("serial", d.Serial), d.ID); err != nil {
			return err
		}
	}
	if had && old.FixedIP != "" && old.FixedIP != d.FixedIP {
		if err := tx.Delete(BucketIndex, fixedIPIndexKey(old.FixedIP)); err != nil {
			return err
		}
	}
	if d.FixedIP != "" && (!had || old.FixedIP != d.FixedIP) {
		var other string
		if ok, err := tx.Get(BucketIndex, fixedIPIndexKey(d.FixedIP), &other); err != nil {
			return err
		} else if ok && other != d.ID {
			return fmt.Errorf("fixed address %s is already bound to device %s", d.FixedIP, other)
		}
		if err := tx.Put(BucketIndex, fixedIPIndexKey(d.FixedIP), d.ID); err != nil {
			return err
		}
	}
	return tx.Put(BucketDevices, d.ID, d)
}

// DeviceBySerial finds a device by its serial number.
func DeviceBySerial(tx Tx, serial string) (Device, error) {
	var id string
	ok, err := tx.Get(BucketIndex, indexKey("serial", serial), &id)
	if err != nil {
		return Device{}, err
	}
	if !ok {
		return Device{}, fmt.Errorf("device with serial %q: %w", serial, ErrNotFound)
	}
	return GetDevice(tx, id)
}

// GetLease loads the lease of an address.
func GetLease(tx Tx, ip string) (Lease, error) {
	var l Lease
	ok, err := tx.Get(BucketLeases, ip, &l)
	if err != nil {
		return l, err
	}
	if !ok {
		return l, fmt.Errorf("lease %s: %w", ip, ErrNotFound)
	}
	return l, nil
}

// GetCluster loads a cluster by ID.
func GetCluster(tx Tx, id string) (Cluster, error) {
	var c Cluster
	ok, err := tx.Get(BucketClusters, id, &c)
	if err != nil {
		return c, err
	}
	if !ok {
		return c, fmt.Errorf("cluster %s: %w", id, ErrNotFound)
	}
	return c, nil
}

// PutCluster stores c and maintains the cluster-name index.
func PutCluster(tx Tx, c Cluster) error {
	if c.ID == "" || c.Name == "" {
		return fmt.Errorf("cluster needs an id and a name")
	}
	var old Cluster
	had, err := tx.Get(BucketClusters, c.ID, &old)
	if err != nil {
		return err
	}
	if had && old.Name != c.Name {
		if err := tx.Delete(BucketIndex, indexKey("cluster-name", old.Name)); err != nil {
			return err
		}
	}
	var owner string
	if ok, err := tx.Get(BucketIndex, indexKey("cluster-name", c.Name), &owner); err != nil {
		return err
	} else if ok && owner != c.ID {
		return fmt.Errorf("cluster name %q is already used by cluster %s", c.Name, owner)
	}
	if err := tx.Put(BucketIndex, indexKey("cluster-name", c.Name), c.ID); err != nil {
		return err
	}
	return tx.Put(BucketClusters, c.ID, c)
}

// DeleteCluster removes a cluster record and its name index entry.
func DeleteCluster(tx Tx, id string) error {
	c, err := GetCluster(tx, id)
	if err != nil {
		return err
	}
	if err := tx.Delete(BucketIndex, indexKey("cluster-name", c.Name)); err != nil {
		return err
	}
	return tx.Delete(BucketClusters, id)
}

// ClusterByName finds a cluster by its unique name.
func ClusterByName(tx Tx, name string) (Cluster, error) {
	var id string
	ok, err := tx.Get(BucketIndex, indexKey("cluster-name", name), &id)
	if err != nil {
		return Cluster{}, err
	}
	if !ok {
		return Cluster{}, fmt.Errorf("cluster %q: %w", name, ErrNotFound)
	}
	return GetCluster(tx, id)
}

// GetVersion loads a Kubernetes version by ID.
func GetVersion(tx Tx, id string) (Version, error) {
	var v Version
	ok, err := tx.Get(BucketVersions, id, &v)
	if err != nil {
		return v, err
	}
	if !ok {
		return v, fmt.Errorf("kubernetes version %s: %w", id, ErrNotFound)
	}
	return v, nil
}

// GetImage loads an image record by sha256.
func GetImage(tx Tx, sha string) (Image, error) {
	var im Image
	ok, err := tx.Get(BucketImages, sha, &im)
	if err != nil {
		return im, err
	}
	if !ok {
		return im, fmt.Errorf("image %s: %w", sha, ErrNotFound)
	}
	return im, nil
}

// Events come in two streams with one sequence: the audit trail (what
// operators and API keys did, which credentials were issued, who was
// approved, reset or joined) and device events (DHCP, ZTP fetches,
// refusals). They are kept apart so that device noise, however loud, never
// pushes the audit trail out: each has its own retention.
var auditPrefixes = []string{"apikey.", "cluster.", "version.", "token.", "kubeconfig.", "join.", "api.",
	"device.approved", "device.reset", "device.declared"}

// IsAudit reports whether events of type typ belong to the audit trail.
func IsAudit(typ string) bool {
	for _, p := range auditPrefixes {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

// EventBucket is where events of type typ are stored.
func EventBucket(typ string) Bucket {
	if IsAudit(typ) {
		return BucketAudit
	}
	return BucketEvents
}

// AppendEvent stores e under the next sequence number (shared by both
// streams, so they merge in order) and returns it.
func AppendEvent(tx Tx, e Event) (uint64, error) {
	seq, err := tx.NextSequence(BucketEvents)
	if err != nil {
		return 0, err
	}
	e.Seq = seq
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	return seq, tx.Put(EventBucket(e.Type), EventKey(seq), e)
}

// EventKey is the storage key of an event: zero-padded so byte order is
// sequence order.
func EventKey(seq uint64) string { return fmt.Sprintf("%020d", seq) }

// PruneEvents deletes the oldest events of one stream (BucketEvents or
// BucketAudit) so that at most keep remain, at most maxPrune per call so a
// long-neglected log is trimmed in bounded transactions; more reports
// whether some are left to prune.
func PruneEvents(tx Tx, b Bucket, keep int) (n int, more bool, err error) {
	const maxPrune = 50000
	total, err := tx.Count(b)
	if err != nil || total <= keep {
		return 0, false, err
	}
	excess := total - keep
	var doomed []string
	err = tx.Scan(b, "", func(k string, _ []byte) (bool, error) {
		doomed = append(doomed, k)
		return len(doomed) < min(excess, maxPrune), nil
	})
	if err != nil {
		return 0, false, err
	}
	for _, k := range doomed {
		if err := tx.Delete(b, k); err != nil {
			return 0, false, err
		}
	}
	return len(doomed), excess > len(doomed), nil
}
