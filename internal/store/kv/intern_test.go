package kv

import (
	"encoding/json"
	"fmt"
	"testing"
	"unsafe"

	"github.com/ztpd/ztpd/internal/core"
)

// Two decoded devices share the bytes of the strings they repeat, and
// decoding is otherwise unchanged.
func TestDecodedRecordsShareRepeatedStrings(t *testing.T) {
	var c decodeCache[core.Device]
	dev := func(id string) []byte {
		raw, _ := json.Marshal(core.Device{ID: id, MAC: id, Kind: core.KindSONiC, State: core.StateJoinIssued,
			Subnet: "mgmt", Cluster: "c1", Role: "worker", Labels: map[string]string{"rack": "r1"}})
		return raw
	}
	a, err := c.decode(BucketDevices, "a", dev("0c:00:00:00:00:01"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.decode(BucketDevices, "b", dev("0c:00:00:00:00:02"))
	if err != nil {
		t.Fatal(err)
	}
	if b.ID != "0c:00:00:00:00:02" || b.Subnet != "mgmt" || b.State != core.StateJoinIssued || b.Labels["rack"] != "r1" {
		t.Fatalf("decoded %+v", b)
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(a.Subnet, b.Subnet) || !same(a.Cluster, b.Cluster) || !same(string(a.State), string(b.State)) || !same(a.Labels["rack"], b.Labels["rack"]) {
		t.Fatal("repeated strings are separate copies")
	}
}

// The table stays bounded whatever devices state: past internMax it starts
// over, and long strings never enter it.
func TestInternTableIsBounded(t *testing.T) {
	var tab internTable
	for i := range 3 * internMax {
		if got := tab.of(fmt.Sprint("host-", i)); got != fmt.Sprint("host-", i) {
			t.Fatalf("of changed %q", got)
		}
	}
	if len(tab.m) > internMax {
		t.Fatalf("%d entries, max %d", len(tab.m), internMax)
	}
	long := string(make([]byte, internMaxLen+1))
	tab.of(long)
	if _, ok := tab.m[long]; ok {
		t.Fatal("a long string was kept")
	}
}

// The decode cache holds a working set: past decodeCacheMax records a new
// one evicts one other (the rest stay hits), and what it returns is always
// the record's current bytes decoded.
func TestDecodeCacheIsBounded(t *testing.T) {
	var c decodeCache[core.Device]
	raw := func(id, ip string) []byte {
		b, _ := json.Marshal(core.Device{ID: id, MAC: id, IP: ip})
		return b
	}
	n := decodeCacheMax + 100
	for i := range n {
		id := fmt.Sprint("d", i)
		if d, err := c.decode(BucketDevices, id, raw(id, "10.99.0.1")); err != nil || d.ID != id {
			t.Fatalf("decode %s: %+v %v", id, d, err)
		}
	}
	if len(c.m) != decodeCacheMax {
		t.Fatalf("%d records cached, want %d", len(c.m), decodeCacheMax)
	}
	kept := 0
	for i := range n {
		if _, ok := c.m[fmt.Sprint("d", i)]; ok {
			kept++
		}
	}
	if kept != decodeCacheMax {
		t.Fatalf("%d of the decoded records kept, want %d", kept, decodeCacheMax)
	}
	// A cached record rewritten decodes to its new bytes, without growing
	// the cache.
	for id := range c.m {
		if d, err := c.decode(BucketDevices, id, raw(id, "10.99.0.2")); err != nil || d.IP != "10.99.0.2" {
			t.Fatalf("rewritten %s decoded as %+v %v", id, d, err)
		}
		break
	}
	if len(c.m) != decodeCacheMax {
		t.Fatalf("%d records cached after a rewrite, want %d", len(c.m), decodeCacheMax)
	}
}
