package rest

import (
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
)

// TestRESTAmbiguousSerialIsRefused: device B states device A's serial from
// its own lease (a ZTP header, reported to the devices service as content
// does). Every path that resolves a device by that serial (show, approve)
// is refused with a conflict naming both devices, their addresses and when
// they were seen; A's record shows the conflict; acting by MAC still works.
func TestRESTAmbiguousSerialIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	apitest.Seed(t, e.st, 3) // 02:00:00:00:00:00 holds SN00000
	const a, b = "02:00:00:00:00:00", "02:00:00:00:00:01"
	svc := devices.New(devices.Options{Store: e.st})
	defer svc.Close()
	storeB := core.Device{ID: b, MAC: b, Kind: core.KindUnknown, IP: "10.99.1.2", State: core.StateLeased}
	if err := e.st.Update(func(tx core.Tx) error { return tx.Devices().Put(storeB) }); err != nil {
		t.Fatal(err)
	}
	svc.Progress(devices.Progress{Device: core.Device{ID: b, MAC: b, Kind: core.KindSONiC, Serial: "SN00000", IP: "10.99.1.2"},
		Next: core.StateZTPServed, Event: core.Event{Time: time.Now().UTC(), Type: "ztp.json.served", Device: b}})
	svc.Flush()

	c := e.rest(e.admin.APIKey, e.adminSec)
	for _, req := range []struct{ method, path string }{
		{"GET", "/api/v1/devices/SN00000"},
		{"POST", "/api/v1/devices/SN00000/approve"},
	} {
		var body any
		if req.method == "POST" {
			body = map[string]string{}
		}
		r := c.Do(req.method, req.path, body)
		raw := string(r.Raw)
		if r.Status != 409 || !strings.Contains(raw, `"conflict"`) || !strings.Contains(raw, a) || !strings.Contains(raw, b) ||
			!strings.Contains(raw, "10.99.1.1") || !strings.Contains(raw, "10.99.1.2") || !strings.Contains(raw, "last seen") {
			t.Fatalf("%s %s: %d %s; want a conflict naming both devices", req.method, req.path, r.Status, raw)
		}
	}
	var d core.Device
	c.Do("GET", "/api/v1/devices/"+a, nil).Decode(t, &d)
	if d.Approved || d.Serial != "SN00000" || d.SerialConflict == nil || len(d.SerialConflict.With) != 1 || d.SerialConflict.With[0] != b {
		t.Fatalf("holder's view: %+v", d)
	}
	d = core.Device{}
	c.Do("GET", "/api/v1/devices/"+b, nil).Decode(t, &d)
	if d.Serial != "" || d.SerialConflict == nil || d.SerialConflict.Serial != "SN00000" {
		t.Fatalf("claimant's view: %+v", d)
	}
	if r := c.Do("POST", "/api/v1/devices/"+a+"/approve", map[string]string{}); r.Status != 200 {
		t.Fatalf("approve by MAC: %d %s", r.Status, r.Raw)
	}
}
