package ztphttp

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// FuzzHeaderIdentification feeds arbitrary SONiC and ONIE header values,
// from the lease holder's address or any other, through identification,
// profile matching and rendering: every outcome is a document or a
// content.Error with a status, never a panic or a half answer; and no header
// ever replaces the holder's recorded serial or creates a device record.
func FuzzHeaderIdentification(f *testing.F) {
	dir := f.TempDir()
	db := storetest.OpenIn(f, dir).Store
	devs := devices.New(devices.Options{Store: db})
	f.Cleanup(func() { devs.Close() })
	ims, err := imagestore.Open(db, dir)
	if err != nil {
		f.Fatal(err)
	}
	ims.Add(context.Background(), strings.NewReader("img"), imagestore.Meta{Name: "sonic-broadcom-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"}, "")
	db.Update(func(tx core.Tx) error {
		if err := tx.Leases().Put(core.Lease{IP: "10.99.40.10", MAC: "52:54:00:40:00:10", State: core.LeaseActive}); err != nil {
			return err
		}
		return tx.Devices().Put(core.Device{ID: "52:54:00:40:00:10", MAC: "52:54:00:40:00:10", Kind: core.KindSONiC,
			Serial: "LEAF0010", IP: "10.99.40.10", State: core.StateLeased})
	})
	ep, err := endpoints.New("", ":8080")
	if err != nil {
		f.Fatal(err)
	}
	svc, err := content.New(content.Options{Store: db, Devices: devs, Images: ims, Endpoints: ep, FilesDir: filepath.Join(dir, "files")})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { svc.Close() })
	set, err := profile.Load([]string{"../../examples/profiles"})
	if err != nil {
		f.Fatal(err)
	}
	svc.SetProfiles(set)

	f.Add("LEAF0010", "52:54:00:40:00:10", "Accton-AS7712-32X", "SONiC.202311.1", "x86_64", "accton_as7712_32x", "0", "10.99.40.10")
	f.Add("", "zz:zz", "", "N.A", "", "", "", "10.99.40.11")
	f.Add("X\x00Y", "52-54-00-40-00-10", strings.Repeat("P", 200), "SONiC-OS-", "arm64", "../../etc", "r0", "[::1]")
	f.Fuzz(func(t *testing.T, serial, mac, product, version, arch, machine, rev, addr string) {
		req := httptest.NewRequest("GET", "/ztp/ztp.json", nil)
		req.RemoteAddr = addr + ":40000"
		set := func(k, v string) {
			if strings.ContainsAny(v, "\r\n") {
				return // not a header an HTTP server would hand over
			}
			req.Header.Set(k, v)
		}
		set("SERIAL-NUMBER", serial)
		set("BASE-MAC-ADDRESS", mac)
		set("PRODUCT-NAME", product)
		set("SONiC-VERSION", version)
		set("ONIE-ARCH", arch)
		set("ONIE-MACHINE", machine)
		set("ONIE-MACHINE-REV", rev)
		c := ClientFrom(req)
		for _, fn := range []func() error{
			func() error { _, err := svc.ZTPJSON(context.Background(), c); return err },
			func() error { _, err := svc.ConfigDB(context.Background(), c, mac); return err },
			func() error { _, _, err := svc.ONIEInstaller(context.Background(), c, machine); return err },
		} {
			err := fn()
			var ce *content.Error
			if err != nil && !errors.As(err, &ce) {
				var fe *profile.FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("unclassified error %T: %v", err, err)
				}
			}
		}
		svc.Flush()
		db.View(func(tx core.Tx) error {
			d, err := tx.Devices().Get("52:54:00:40:00:10")
			if err != nil || d.Serial != "LEAF0010" || d.IP != "10.99.40.10" {
				t.Fatalf("holder's record changed: %+v %v", d, err)
			}
			if n, _ := tx.Devices().Count(); n != 1 {
				t.Fatalf("%d device records", n)
			}
			return nil
		})
	})
}
