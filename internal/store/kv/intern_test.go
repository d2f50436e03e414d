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
