package content

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
)

// TestPreviewAgreesWithServing: `ztpd profile check` shows what the server
// hands out. For a VM (every previewed meta-data entry, availability-zone
// included: the check used to show the profile's raw value where the
// server falls back to the subnet) and for a switch (ztp.json and
// config_db.json, byte for byte), the preview of the stored device equals
// the server's answer.
func TestPreviewAgreesWithServing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	base := e.svc.BaseURL(nil)

	vm := core.Device{ID: "1e:00:42:00:00:07", MAC: "1e:00:42:00:00:07", Kind: core.KindVM, IP: "10.99.42.7", Subnet: "rack7",
		Labels: map[string]string{"service-offering": "large"}}
	e.putDevice(t, vm, vm.IP)
	c := &Client{Addr: netip.MustParseAddr(vm.IP), Transport: "http"}
	stored := e.device(t, vm.ID)
	pv, err := PreviewDevice(e.svc.Profiles(), e.svc.opt.DefaultProfile, "", &stored, base)
	if err != nil {
		t.Fatal(err)
	}
	if pv.Profile == "" || pv.Metadata == nil {
		t.Fatalf("no VM preview: %+v", pv)
	}
	for _, k := range MetadataPreviewKeys {
		got, err := e.svc.Metadata(ctx, c, k)
		if err != nil {
			t.Fatal(err)
		}
		if got != pv.Metadata[k] {
			t.Errorf("meta-data %s: server %q, profile check %q", k, got, pv.Metadata[k])
		}
	}
	if pv.Metadata["availability-zone"] == "" {
		t.Error("availability-zone previewed empty")
	}

	sw := core.Device{ID: "52:54:00:40:00:77", MAC: "52:54:00:40:00:77", Kind: core.KindSONiC, Serial: "LEAF0077", IP: "10.99.40.77",
		Product: "Accton-AS7712-32X", SONiCVer: "SONiC.202405.1"}
	e.putDevice(t, sw, sw.IP)
	served, err := e.svc.ZTPJSON(ctx, sonicClient(sw.IP, sw.Serial, "", sw.Product, sw.SONiCVer))
	if err != nil {
		t.Fatal(err)
	}
	cdb, err := e.svc.ConfigDB(ctx, sonicClient(sw.IP, sw.Serial, "", sw.Product, sw.SONiCVer), sw.ID)
	if err != nil {
		t.Fatal(err)
	}
	stored = e.device(t, sw.ID)
	pv, err = PreviewDevice(e.svc.Profiles(), e.svc.opt.DefaultProfile, "", &stored, base)
	if err != nil {
		t.Fatal(err)
	}
	if pv.Profile != served.Profile || string(pv.ZTPJSON) != string(served.Body) || string(pv.ConfigDB) != string(cdb.Body) {
		t.Fatalf("switch: server %s\n%s\n%s\nprofile check %s\n%s\n%s", served.Profile, served.Body, cdb.Body, pv.Profile, pv.ZTPJSON, pv.ConfigDB)
	}
}
