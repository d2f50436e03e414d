package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/testenv/fleet"
)

// A fleet larger than the pool (10.99.0.0/16 leases at most maxDevices
// addresses, and the lab may use no other) is the storm's fleet plus
// devices written into the stopped appliance's store as copies of the
// storm's records: onboarded switches whose ZTP leases lapsed after they
// took their static management address (SONiC's MGMT_INTERFACE), as a
// fabric's switches do. Each copy has the records the storm wrote for its
// template (device, membership and roster entry, the device's tokens) and
// no lease; it belongs to one of the extra clusters storm-<clusters>...,
// made with the storm's. What the storm measures (its time, p99, CPU per
// device) is the stormed devices'; what runs on the whole store (restart,
// RSS after it, the API, the backup, bytes per device) is the whole
// fleet's.

// split is the stormed part of a fleet of n (at most maxStormed, which
// main caps at the pool) and the clusters of each part.
func split(n, maxStormed int) (stormed, stormClusters, extraClusters int) {
	stormed = min(n, maxStormed)
	stormClusters = (stormed + perCluster - 1) / perCluster
	extraClusters = (n - stormed + perCluster - 1) / perCluster
	return
}

// extendFleet writes devices b.stormed .. b.n-1 into the stopped
// appliance's store.
func (b *bench) extendFleet() error {
	if b.n <= b.stormed {
		return nil
	}
	st, err := boltstore.Open(b.app.DataDir, boltstore.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	extra := make([]string, 0, b.extraClusters) // cluster IDs
	tokens := map[string][]core.Token{}         // by device, the templates'
	err = st.View(func(tx core.Tx) error {
		for c := 0; c < b.extraClusters; c++ {
			cl, err := tx.Clusters().ByName(fmt.Sprintf("storm-%02d", b.clusters+c))
			if err != nil {
				return fmt.Errorf("extra cluster storm-%02d: %w", b.clusters+c, err)
			}
			extra = append(extra, cl.ID)
		}
		return tx.Tokens().List("", func(t core.Token) (bool, error) {
			if t.Device != "" {
				tokens[t.Device] = append(tokens[t.Device], t)
			}
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	const batch = 2000
	for start := b.stormed; start < b.n; start += batch {
		err := st.Update(func(tx core.Tx) error {
			for i := start; i < min(start+batch, b.n); i++ {
				if err := cloneDevice(tx, fleet.MAC(i%b.stormed).String(), i, extra[(i-b.stormed)/perCluster], tokens); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// cloneDevice writes device i as a copy of template's records, a member of
// cluster, without a lease.
func cloneDevice(tx core.Tx, template string, i int, cluster string, tokens map[string][]core.Token) error {
	d, err := tx.Devices().Get(template)
	if err != nil {
		return fmt.Errorf("template %s: %w", template, err)
	}
	m, err := tx.Memberships().Get(template)
	if err != nil {
		return fmt.Errorf("template %s membership: %w", template, err)
	}
	mac := fleet.MAC(i).String()
	serial := fmt.Sprintf("STORM-X-%06d", i)
	d.ID, d.MAC, d.Serial, d.IP = mac, mac, serial, ""
	d.Hostname = "sw-" + strings.ToLower(serial)
	if err := tx.Devices().Put(d); err != nil {
		return err
	}
	m.Device, m.Cluster = mac, cluster
	m.NodeName = d.Hostname
	if err := tx.Memberships().Put(m); err != nil {
		return err
	}
	if err := tx.Memberships().Enlist(cluster, mac, m.Role); err != nil {
		return err
	}
	for n, t := range tokens[template] {
		// The ID keeps its kind's shape (kubeadm's is [a-z0-9]{6}), unique
		// among the copies; one taken by a stormed device's random ID is
		// passed over.
		for try := 0; ; try++ {
			t.ID = cloneID(i*8+n+try*1_000_000_007, len(t.ID))
			if _, err := tx.Tokens().Get(t.Kind, t.ID); errors.Is(err, core.ErrNotFound) {
				break
			} else if err != nil {
				return err
			}
		}
		t.Device, t.Cluster = mac, cluster
		if t.BindMAC != "" {
			t.BindMAC = mac
		}
		if t.BindSerial != "" {
			t.BindSerial = serial
		}
		if err := tx.Tokens().Put(t); err != nil {
			return err
		}
	}
	return nil
}

// cloneID is k in base 36, zero-padded to width.
func cloneID(k, width int) string {
	id := strconv.FormatInt(int64(k), 36)
	if len(id) < width {
		id = strings.Repeat("0", width-len(id)) + id
	}
	return id
}
