package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
	"github.com/ztpd/ztpd/internal/store/kv"
	"github.com/ztpd/ztpd/testenv/freeport"
)

// dump is every record and sequence of a store, for comparing copies.
type dump struct {
	records map[string]string
	seqs    map[string]uint64
}

func (d *dump) Put(b kv.Bucket, key string, value []byte) error {
	d.records[string(b)+"/"+key] = string(value)
	return nil
}

func (d *dump) SetSequence(b kv.Bucket, n uint64) error {
	d.seqs[string(b)] = n
	return nil
}

func dumpBolt(t *testing.T, dir string) dump {
	t.Helper()
	st, err := boltstore.Open(dir, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d := dump{records: map[string]string{}, seqs: map[string]uint64{}}
	if _, err := st.Copy(&d, nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// seedStore writes devices, leases, clusters, tokens, memberships and
// events through the repositories.
func seedStore(t *testing.T, dir string) {
	t.Helper()
	st, err := boltstore.Open(dir, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	err = st.Update(func(tx core.Tx) error {
		if err := tx.Clusters().Put(core.Cluster{ID: "c1", Name: "edge-1", State: "Running", Created: now}); err != nil {
			return err
		}
		for i := 0; i < 50; i++ {
			mac := fmt.Sprintf("02:00:00:00:01:%02x", i)
			ip := fmt.Sprintf("10.99.1.%d", i+10)
			if err := tx.Devices().Put(core.Device{ID: mac, MAC: mac, Kind: core.KindSONiC, Serial: fmt.Sprintf("SN%d", i), State: core.StateLeased,
				IP: ip, FirstSeen: now, LastSeen: now, UpdatedAt: now}); err != nil {
				return err
			}
			if err := tx.Leases().Put(core.Lease{IP: ip, MAC: mac, Subnet: "10.99.0.0/16", Start: now, Expiry: now.Add(time.Hour)}); err != nil {
				return err
			}
			if _, err := tx.Events().Append(core.Event{Time: now, Type: "dhcp.ack", Device: mac}); err != nil {
				return err
			}
			if i < 5 {
				if err := tx.Memberships().Put(core.Membership{Device: mac, Cluster: "c1", Role: "worker", State: "joined"}); err != nil {
					return err
				}
			}
		}
		if err := tx.Tokens().Put(core.Token{ID: "abcdef", Kind: "kubeadm", SecretHash: "h", Cluster: "c1", Created: now}); err != nil {
			return err
		}
		return tx.Tokens().PoolAdd("c1", "abcdef")
	})
	if err != nil {
		t.Fatal(err)
	}
}

// writeOneMemberConfig writes dir/ztpd.yaml: appliance a1 on a one-member
// embedded etcd at peer (peer URL) and client (client URL), data in
// dir/data; it returns the file's path.
func writeOneMemberConfig(t *testing.T, dir, peer, client string) string {
	t.Helper()
	cfg := filepath.Join(dir, "ztpd.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`data_dir: %s
store:
  backend: etcd-embedded
  name: a1
  peers: [{name: a1, url: "%s"}]
  client_url: %s
`, filepath.Join(dir, "data"), peer, client)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestStoreMigrateRoundTrip copies a bbolt store into an embedded etcd
// member and back, and requires the copy to equal the original record for
// record and sequence for sequence.
func TestStoreMigrateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	old, back := filepath.Join(dir, "old"), filepath.Join(dir, "back")
	seedStore(t, old)
	cfg := writeOneMemberConfig(t, dir, freeport.URL(t, "http"), freeport.URL(t, "http"))
	out, err := runCLI(t, "--config", cfg, "store", "migrate", "--to", "etcd", "--from", old, "-o", "json")
	if err != nil {
		t.Fatalf("migrate --to etcd: %v\n%s", err, out)
	}
	var res migrateResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Buckets["devices"] != 50 || res.Buckets["leases"] != 50 || res.Buckets["events"] != 50 || res.Buckets["memberships"] != 5 ||
		res.Buckets["tokens"] != 1 || res.Buckets["clusters"] != 1 {
		t.Fatalf("copied %v", res.Buckets)
	}

	// A second copy into the same store is refused unless asked to replace.
	if _, err := runCLI(t, "--config", cfg, "store", "migrate", "--to", "etcd", "--from", old); err == nil || !strings.Contains(err.Error(), "--replace") {
		t.Fatalf("copy into a non-empty etcd store: %v", err)
	}
	if out, err := runCLI(t, "--config", cfg, "store", "migrate", "--to", "etcd", "--from", old, "--replace", "--yes", "-o", "json"); err != nil {
		t.Fatalf("--replace: %v\n%s", err, out)
	}

	if out, err := runCLI(t, "--config", cfg, "store", "migrate", "--to", "bolt", "--into", back, "-o", "json"); err != nil {
		t.Fatalf("migrate --to bolt: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "--config", cfg, "store", "migrate", "--to", "bolt", "--into", back); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("copy over an existing bbolt store: %v", err)
	}
	want, got := dumpBolt(t, old), dumpBolt(t, back)
	if len(want.records) < 200 {
		t.Fatalf("seeded store has only %d records", len(want.records))
	}
	if !reflect.DeepEqual(want.seqs, got.seqs) {
		t.Fatalf("sequences: got %v, want %v", got.seqs, want.seqs)
	}
	for k, v := range want.records {
		if got.records[k] != v {
			t.Fatalf("record %s: got %q, want %q", k, got.records[k], v)
		}
	}
	if len(got.records) != len(want.records) {
		t.Fatalf("%d records after the round trip, want %d", len(got.records), len(want.records))
	}
	// The copy is a working store: the event sequence goes on.
	st, err := boltstore.Open(back, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var seq uint64
	if err := st.Update(func(tx core.Tx) error {
		var err error
		seq, err = tx.Events().Append(core.Event{Type: "test"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if seq != want.seqs["events"]+1 {
		t.Fatalf("next event sequence %d, want %d", seq, want.seqs["events"]+1)
	}
}

// TestStoreMemberCommands: `store member list` reads the running member
// through store.client_url; replace refuses this appliance, a name not
// among the peers, and a one-box store (etcdstore's test replaces a member
// of a three-member cluster).
func TestStoreMemberCommands(t *testing.T) {
	dir := t.TempDir()
	peer, client := freeport.URL(t, "http"), freeport.URL(t, "http")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := etcdstore.StartMember(ctx, etcdstore.MemberConfig{Name: "a1", Dir: filepath.Join(dir, "etcd"),
		Peers: map[string]string{"a1": peer}, ClientURL: client})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg := writeOneMemberConfig(t, dir, peer, client)
	out, err := runCLI(t, "--config", cfg, "store", "member", "list", "-o", "json")
	if err != nil {
		t.Fatalf("member list: %v\n%s", err, out)
	}
	var ms []etcdstore.MemberInfo
	if err := json.Unmarshal([]byte(out), &ms); err != nil || len(ms) != 1 || ms[0].Name != "a1" || !ms[0].Started ||
		len(ms[0].PeerURLs) != 1 || ms[0].PeerURLs[0] != peer {
		t.Fatalf("member list: %v %s", err, out)
	}
	if _, err := runCLI(t, "--config", cfg, "store", "member", "replace", "a1", "--yes"); err == nil || !strings.Contains(err.Error(), "this appliance") {
		t.Fatalf("replace of this appliance: %v", err)
	}
	if _, err := runCLI(t, "--config", cfg, "store", "member", "replace", "a9", "--yes"); err == nil || !strings.Contains(err.Error(), "not among store.peers") {
		t.Fatalf("replace of an unknown name: %v", err)
	}
	bolt := filepath.Join(dir, "bolt.yaml")
	if err := os.WriteFile(bolt, []byte("data_dir: "+filepath.Join(dir, "bolt")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "--config", bolt, "store", "member", "list"); err == nil || !strings.Contains(err.Error(), "etcd-embedded") {
		t.Fatalf("member list on a one-box store: %v", err)
	}
}
