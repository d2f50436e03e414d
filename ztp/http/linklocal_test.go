package ztphttp_test

import (
	"context"
	"net"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/endpoints"
	ztphttp "github.com/ztpd/ztpd/ztp/http"
)

func TestEUI64MAC(t *testing.T) {
	for _, c := range []struct{ addr, mac string }{
		{"fe80::5054:ff:fe40:10%eth0", "52:54:00:40:00:10"},
		{"fe80::1", ""},                        // not EUI-64
		{"fe80::1234:5678:9abc:def0%eth0", ""}, // stable privacy (RFC 7217)
	} {
		mac, ok := ztphttp.EUI64MAC(netip.MustParseAddr(c.addr))
		if ok != (c.mac != "") || ok && mac.String() != c.mac {
			t.Errorf("%s: %v %v, want %q", c.addr, mac, ok, c.mac)
		}
	}
	// Only a link-local neighbour is looked up.
	if _, ok := ztphttp.NeighborMAC(netip.MustParseAddr("fd99::5054:ff:fe40:10")); ok {
		t.Error("a MAC for a ULA address")
	}
}

// TestLinkLocalServesOnlyTheInstaller: on the link-local listener the
// waterfall names answer with the installer and record the neighbour as an
// ONIE device without a lease; nothing else is served there.
func TestLinkLocalServesOnlyTheInstaller(t *testing.T) {
	f := storetest.Open(t)
	devs := devices.New(devices.Options{Store: f.Store})
	t.Cleanup(func() { devs.Close() })
	ims, err := imagestore.Open(f.Store, f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ims.Add(context.Background(), strings.NewReader("onie installer"), imagestore.Meta{Name: "onie.bin", Kind: "onie-installer", Platform: "x86_64-accton_as7712_32x-r0"}, ""); err != nil {
		t.Fatal(err)
	}
	ep, _ := endpoints.New("", "[::]:8080")
	svc, err := content.New(content.Options{Store: f.Store, Devices: devs, Images: ims, Endpoints: ep, FilesDir: filepath.Join(f.Dir, "files")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	const mac = "02:00:00:86:00:01"
	neighbor := func(a netip.Addr) (net.HardwareAddr, bool) {
		if a.String() != "fe80::99%eth1" {
			t.Errorf("neighbour asked for %s", a)
		}
		hw, _ := net.ParseMAC(mac)
		return hw, true
	}
	h := ztphttp.New(svc, nil, ztphttp.FrontDoor{}, nil).LinkLocalHandler(neighbor)
	get := func(path string, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = "[fe80::99%eth1]:40000"
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, p := range []string{"/ztp/ztp.json", "/latest/meta-data/", "/join", "/images/onie.bin", "/anything"} {
		if rec := get(p, nil); rec.Code != 404 {
			t.Errorf("%s on link-local: %d", p, rec.Code)
		}
	}
	rec := get("/onie-installer-x86_64-accton_as7712_32x-r0", map[string]string{"ONIE-SERIAL-NUMBER": "LL0001", "ONIE-ARCH": "x86_64",
		"ONIE-MACHINE": "accton_as7712_32x", "ONIE-MACHINE-REV": "0"})
	if rec.Code != 200 || rec.Body.String() != "onie installer" {
		t.Fatalf("installer: %d %s", rec.Code, rec.Body)
	}
	svc.Flush()
	storetest.View(t, f.Store, func(tx core.Tx) error {
		d, err := tx.Devices().Get(mac)
		if err != nil {
			t.Fatalf("neighbour not recorded: %v", err)
		}
		if d.Kind != core.KindONIE || d.Serial != "LL0001" || d.State != core.StateImageServed {
			t.Errorf("device: kind %s serial %q state %s", d.Kind, d.Serial, d.State)
		}
		if _, err := tx.Leases().Get(d.IP); err == nil {
			t.Errorf("a lease for %s", d.IP)
		}
		return nil
	})
}
