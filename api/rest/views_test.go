package rest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fullDevice has every field set, so a view that drops, renames or
// reorders one shows.
func fullDevice(t0 time.Time) core.Device {
	return core.Device{ID: "02:00:00:00:0c:01", Kind: core.KindSONiC, MAC: "02:00:00:00:0c:01", Serial: "SN-C1",
		Product: "Accton-AS7726-32X", Platform: "x86_64-accton_as7726_32x-r0", Hostname: "leaf-c1", ClientID: "SONiC##x##SN-C1",
		VendorClass: "SONiC-ZTP", SONiCVer: "202405.1", IP: "10.99.12.1", Subnet: "fabric", RelayAddr: "10.99.12.254",
		CircuitID: "rack7/port3", RemoteID: "tor-7", BaseMAC: "02:00:00:00:0c:00", FixedIP: "10.99.12.1",
		State: core.StateJoined, Approved: true, Cluster: "c-1", Role: "worker", Profile: "leaf",
		Labels:  map[string]string{"rack": "7", "<row>": "b&c"},
		Refusal: core.Refusal{What: "ztp.json", Kind: "no-profile", Reason: `no profile matches "<x>"`, At: t0}, FirstSeen: t0, LastSeen: t0.Add(time.Second), UpdatedAt: t0.Add(2 * time.Second)}
}

// TestRESTViewsKeepTheAnswersClientsKnow: REST answered devices, leases,
// events, versions, images and offerings with their stored JSON, the
// domain types' encoding. The view types are mapped explicitly now; their
// JSON must stay byte for byte what clients were reading (names, order,
// omissions, escaping).
func TestRESTViewsKeepTheAnswersClientsKnow(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC)
	d := fullDevice(t0)
	l := core.Lease{IP: "10.99.12.1", MAC: d.MAC, ClientID: "01:02", Hostname: "leaf-c1", Subnet: "fabric", State: core.LeaseActive,
		Start: t0, Expiry: t0.Add(time.Hour), Reserved: true, UpdatedAt: t0}
	e := core.Event{Seq: 42, Time: t0, Type: "dhcp.ack", Device: d.ID, Cluster: "c-1", Message: `lease "10.99.12.1" <ok>`,
		Fields: map[string]string{"b": "2", "a": "1"}}
	v := core.Version{ID: "v1", Name: "v1.31.4", SemVer: "1.31.4", ImageID: strings.Repeat("ab", 32), ISOName: "v1.31.4.iso",
		ISOURL: "http://10.99.0.1:8080/isos/v1.31.4.iso", Checksum: "{SHA-256}ab", ZoneID: "z", State: "Enabled", MinCPU: 2,
		MinMemoryMB: 2048, Created: t0, UpdatedAt: t0}
	im := core.Image{SHA256: strings.Repeat("cd", 32), Name: "sonic.bin", Kind: "sonic-installer", Platform: "x86_64-accton_as7726_32x-r0",
		Version: "202405.1", Size: 1 << 30, Created: t0}
	sparse := core.Device{ID: "02:00:00:00:0c:02", Kind: core.KindUnknown, MAC: "02:00:00:00:0c:02", State: core.StateDiscovered}
	for _, c := range []struct {
		what       string
		view, want any
	}{
		{"device", restDeviceOf(d), d},
		{"sparse device", restDeviceOf(sparse), sparse},
		{"lease", restLeaseOf(l), l},
		{"event", restEventOf(e), e},
		{"version", VersionOf(v), v},
		{"image", client.Image{SHA256: im.SHA256, Name: im.Name, Kind: im.Kind, Platform: im.Platform, Version: im.Version, Size: im.Size, Created: im.Created}, im},
	} {
		if got, want := mustMarshal(t, c.view), mustMarshal(t, c.want); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", c.what, got, want)
		}
	}
	for _, o := range clusters.Offerings {
		view := client.Offering{ID: o.ID, Name: o.Name, DisplayText: o.DisplayText, CPU: o.CPU, MemoryMB: o.MemoryMB, CPUSpeedMHz: o.CPUSpeedMHz}
		if got, want := mustMarshal(t, view), mustMarshal(t, o); !bytes.Equal(got, want) {
			t.Errorf("offering:\n got %s\nwant %s", got, want)
		}
	}
}

// TestRESTDeviceAnswersMatchTheDocument: a device with every field (relay
// identifiers, base MAC, fixed address, labels) is answered as stored, in
// the list and alone, and both answers match openapi.json.
func TestRESTDeviceAnswersMatchTheDocument(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := fullDevice(time.Now().UTC())
	if err := e.st.Update(func(tx core.Tx) error { return tx.Devices().Put(d) }); err != nil {
		t.Fatal(err)
	}
	c := e.rest(e.admin.APIKey, e.adminSec)
	want := mustMarshal(t, d)
	r := c.Do("GET", "/api/v1/devices/"+d.ID, nil)
	if r.Status != 200 || !bytes.Equal(bytes.TrimSpace(r.Raw), want) {
		t.Fatalf("device: %d\n got %s\nwant %s", r.Status, r.Raw, want)
	}
	var p struct{ Items []json.RawMessage }
	c.Do("GET", "/api/v1/devices", nil).Decode(t, &p)
	if len(p.Items) != 1 || !bytes.Equal(p.Items[0], want) {
		t.Fatalf("device list: %s", p.Items)
	}
}

// TestRESTEventCursors: event cursors stay opaque but keep the form they
// had (a 20-digit sequence number), so a client paging across an upgrade
// goes on where it was; since=<seq> is a cursor too; a cursor that is not
// one is refused.
func TestRESTEventCursors(t *testing.T) {
	e := newEnv(t, envOpts{})
	apitest.Seed(t, e.st, 20) // events 3..22 (two apikey.created come first)
	c := e.rest(e.admin.APIKey, e.adminSec)
	var p client.Page[core.Event]
	c.Do("GET", "/api/v1/events?stream=device&limit=5", nil).Decode(t, &p)
	if len(p.Items) != 5 || p.Items[4].Seq != 7 || p.NextCursor != base64.RawURLEncoding.EncodeToString([]byte("00000000000000000007")) {
		t.Fatalf("first page: %+v", p)
	}
	var next, since client.Page[core.Event]
	c.Do("GET", "/api/v1/events?stream=device&limit=5&cursor="+p.NextCursor, nil).Decode(t, &next)
	c.Do("GET", "/api/v1/events?stream=device&limit=5&since=7", nil).Decode(t, &since)
	if len(next.Items) != 5 || next.Items[0].Seq != 8 || len(since.Items) != 5 || since.Items[0].Seq != 8 {
		t.Fatalf("next page %+v, since %+v", next.Items, since.Items)
	}
	// The later of cursor and since wins.
	var last client.Page[core.Event]
	c.Do("GET", "/api/v1/events?stream=all&limit=5&since=20&cursor="+p.NextCursor, nil).Decode(t, &last)
	if len(last.Items) != 2 || last.Items[0].Seq != 21 || last.NextCursor != "" {
		t.Fatalf("since past the cursor: %+v", last)
	}
	if r := c.Do("GET", "/api/v1/events?cursor="+base64.RawURLEncoding.EncodeToString([]byte("devices/x")), nil); r.Status != 400 {
		t.Fatalf("a device cursor for events: %d %s", r.Status, r.Raw)
	}
}

// TestRESTInternalErrorsShowOnlyARequestID: a storage failure is answered
// 500 with code internal and a request id; its text is in the log only.
func TestRESTInternalErrorsShowOnlyARequestID(t *testing.T) {
	e := newEnv(t, envOpts{})
	u := e.rest(e.user.APIKey, e.userSec)
	if r := u.Do("GET", "/api/v1/leases", nil); r.Status != 200 { // the key is looked up and kept
		t.Fatalf("leases: %d %s", r.Status, r.Raw)
	}
	e.st.Close()
	r := u.Do("GET", "/api/v1/leases", nil)
	var body httpserve.ErrorBody
	r.Decode(t, &body)
	if r.Status != 500 || body.Error.Code != "internal" || body.Error.RequestID == "" || strings.Contains(body.Error.Message, "database") {
		t.Fatalf("storage failure: %d %s", r.Status, r.Raw)
	}
	if !strings.Contains(e.logs.String(), body.Error.RequestID) {
		t.Fatalf("request id %s not in the log", body.Error.RequestID)
	}
}
