package content

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
)

func previewOpts(e *env, base string) PreviewOptions {
	return PreviewOptions{DefaultProfile: e.svc.opt.DefaultProfile, Base: base, MetadataBase: "http://10.99.42.1", Images: e.images}
}

// TestPreviewAgreesWithServing: `ztpd profile check` shows what the server
// hands out. For a VM (every meta-data entry, availability-zone included:
// the check used to show the profile's raw value where the server falls
// back to the subnet; and user-data) and for a switch (ztp.json, with its
// firmware URL when its version differs, and config_db.json, byte for
// byte), the preview of the stored device equals the server's answer.
func TestPreviewAgreesWithServing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	base := e.svc.BaseURL(nil)
	opt := previewOpts(e, base)

	vm := core.Device{ID: "1e:00:42:00:00:07", MAC: "1e:00:42:00:00:07", Kind: core.KindVM, IP: "10.99.42.7", Subnet: "rack7",
		Labels: map[string]string{"service-offering": "large"}}
	e.putDevice(t, vm, vm.IP)
	c := &Client{Addr: netip.MustParseAddr(vm.IP), Transport: "http"}
	stored := e.device(t, vm.ID)
	pv, err := PreviewDevice(e.svc.Profiles(), &stored, opt)
	if err != nil {
		t.Fatal(err)
	}
	if pv.Profile == "" || pv.Metadata == nil {
		t.Fatalf("no VM preview: %+v", pv)
	}
	for _, k := range MetadataKeys {
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
	ud, err := e.svc.UserData(ctx, c)
	if err != nil || string(ud) != string(pv.UserData) {
		t.Errorf("user-data: server %q %v, profile check %q", ud, err, pv.UserData)
	}

	im := e.addImage(t, "sonic 202405.1", imagestore.Meta{Name: "sonic-broadcom-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"})
	for i, version := range []string{"SONiC.202405.1", "N.A"} {
		sw := core.Device{ID: "52:54:00:40:00:7" + string(rune('7'+i)), Kind: core.KindSONiC, Serial: "LEAF007" + string(rune('7'+i)),
			IP: "10.99.40.7" + string(rune('7'+i)), Product: "Accton-AS7712-32X", SONiCVer: version}
		sw.MAC = sw.ID
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
		pv, err = PreviewDevice(e.svc.Profiles(), &stored, opt)
		if err != nil {
			t.Fatal(err)
		}
		if pv.Profile != served.Profile || string(pv.ZTPJSON) != string(served.Body) || string(pv.ConfigDB) != string(cdb.Body) {
			t.Fatalf("switch: server %s\n%s\n%s\nprofile check %s\n%s\n%s", served.Profile, served.Body, cdb.Body, pv.Profile, pv.ZTPJSON, pv.ConfigDB)
		}
		firmware := strings.Contains(string(pv.ZTPJSON), im.SHA256)
		if firmware != (version == "N.A") || len(pv.Warnings) > 0 {
			t.Fatalf("%s: firmware %v, warnings %v\n%s", version, firmware, pv.Warnings, pv.ZTPJSON)
		}
	}
}

// TestPreviewONIEAgreesWithServing: an ONIE switch's preview names the
// installer the server sends it (its profile's pinned image, else by
// platform), and warns with the server's refusal when there is none.
func TestPreviewONIEAgreesWithServing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	opt := previewOpts(e, e.svc.BaseURL(nil))
	check := func(d core.Device, want core.Image) {
		t.Helper()
		d.MAC = d.ID
		e.putDevice(t, d, d.IP)
		served, _, serr := e.svc.ONIEInstaller(ctx, &Client{Addr: netip.MustParseAddr(d.IP)}, "")
		stored := e.device(t, d.ID)
		pv, err := PreviewDevice(e.svc.Profiles(), &stored, opt)
		if err != nil {
			t.Fatal(err)
		}
		if pv.ZTPJSON != nil || pv.ConfigDB != nil || pv.Metadata != nil || pv.UserData != nil {
			t.Fatalf("ONIE preview shows documents ONIE never fetches: %+v", pv)
		}
		if len(pv.Fetches) != 1 || !strings.HasSuffix(pv.Fetches[0].URL, "/onie/installer") {
			t.Fatalf("fetches %+v", pv.Fetches)
		}
		if want.SHA256 == "" {
			if serr == nil || pv.Installer != nil || len(pv.Warnings) != 1 || !strings.Contains(pv.Warnings[0], refusal(serr)) {
				t.Fatalf("no installer: server %v, preview %+v %v", serr, pv.Installer, pv.Warnings)
			}
			return
		}
		if serr != nil || served.SHA256 != want.SHA256 || pv.Installer == nil || pv.Installer.SHA256 != served.SHA256 || len(pv.Warnings) > 0 {
			t.Fatalf("%s: server %s %v, preview %+v %v", d.ID, served.Name, serr, pv.Installer, pv.Warnings)
		}
	}
	// Nothing stored yet: refused, and the preview says so.
	check(core.Device{ID: "52:54:00:49:00:64", Kind: core.KindONIE, Platform: "x86_64-celestica_e1031-r0", IP: "10.99.49.64"}, core.Image{})
	acc := e.addImage(t, "accton", imagestore.Meta{Name: "onie-accton.bin", Kind: "onie-installer", Platform: "x86_64-accton_as7712_32x-r0"})
	pinned := e.addImage(t, "sonic 202405.1", imagestore.Meta{Name: "sonic-broadcom-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"})
	check(core.Device{ID: "52:54:00:49:00:62", Kind: core.KindONIE, Serial: "ONIE62", VendorClass: "onie_vendor:x86_64-accton_as7712_32x-r0", IP: "10.99.49.62"}, acc)
	check(core.Device{ID: "52:54:00:40:00:63", Kind: core.KindONIE, Product: "Accton-AS7712-32X", VendorClass: "onie_vendor:x86_64-accton_as7712_32x-r0", IP: "10.99.40.63"}, pinned)
	// No image for its platform: the stored image without a platform.
	check(core.Device{ID: "52:54:00:49:00:65", Kind: core.KindONIE, Platform: "x86_64-celestica_e1031-r0", IP: "10.99.49.65"}, pinned)
}

// TestPreviewShowsOnlyWhatEachKindFetches: the sample VM has no switch
// facts and gets meta-data and user-data only; the sample switch no VM
// documents.
func TestPreviewShowsOnlyWhatEachKindFetches(t *testing.T) {
	set, err := profile.Load([]string{"../../examples/profiles"})
	if err != nil {
		t.Fatal(err)
	}
	vm := SampleDevice(core.KindVM)
	if vm.Serial != "" || vm.Product != "" || vm.Platform != "" || vm.SONiCVer != "" || vm.VendorClass != "" {
		t.Fatalf("sample VM with switch facts: %+v", vm)
	}
	vm.IP = "10.99.42.7"
	pv, err := PreviewDevice(set, &vm, PreviewOptions{Base: "http://10.99.0.1:8080", MetadataBase: "http://10.99.42.1"})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Profile != "vm-worker" || pv.ZTPJSON != nil || pv.ConfigDB != nil || pv.Installer != nil || pv.Metadata == nil || pv.UserData == nil {
		t.Fatalf("VM preview: %+v", pv)
	}
	if len(pv.Fetches) != 2 || pv.Fetches[0].URL != "http://10.99.42.1/latest/meta-data/" || pv.Fetches[1].URL != "http://10.99.42.1/latest/user-data" {
		t.Fatalf("VM fetches %+v", pv.Fetches)
	}
	sw := SampleDevice(core.KindSONiC)
	sw.IP, sw.SONiCVer = "10.99.40.10", "N.A"
	pv, err = PreviewDevice(set, &sw, PreviewOptions{Base: "http://10.99.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Profile != "leaf" || pv.ZTPJSON == nil || pv.ConfigDB == nil || pv.Metadata != nil || pv.UserData != nil {
		t.Fatalf("switch preview: %+v", pv)
	}
	var what []string
	for _, f := range pv.Fetches {
		what = append(what, f.What)
	}
	if got := strings.Join(what, "; "); got != "ztp.json; firmware: SONiC 202405.1; config_db.json (merge)" {
		t.Fatalf("switch fetches %s", got)
	}
}

// TestCheckReferences: profiles naming a cluster or an image the store
// lacks get a warning at their line, with the near name when there is one.
func TestCheckReferences(t *testing.T) {
	set, err := profile.Load([]string{"../../examples/profiles"})
	if err != nil {
		t.Fatal(err)
	}
	images := listedImages{{SHA256: strings.Repeat("a", 64), Name: "other.bin", Kind: "sonic-installer", Version: "202311.1"}}
	warns := CheckReferences(set, images, []ClusterRef{{ID: "c1", Name: "fabrik"}})
	all := strings.Join(warns, "\n")
	for _, want := range []string{
		`leaf.yaml:27: profile "leaf": cluster "fabric" does not exist (did you mean "fabrik"?)`,
		`profile "vm-worker": cluster "k8s-prod" does not exist:`,
		`leaf.yaml:23: profile "leaf": SONiC image "sonic-broadcom-202405.1.bin" is not in the image store`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
	var names []string
	for _, p := range set.Profiles() {
		if p.Cluster != "" {
			names = append(names, p.Cluster)
		}
	}
	var cs []ClusterRef
	for _, n := range names {
		cs = append(cs, ClusterRef{ID: "id-" + n, Name: n})
	}
	var ims listedImages
	for _, p := range set.Profiles() {
		if sc := p.SONiC(); sc != nil {
			ims = append(ims, core.Image{SHA256: strings.Repeat("b", 63) + string(rune('0'+len(ims))), Name: sc.Image, Kind: "sonic-installer", Version: sc.Version})
		}
	}
	if w := CheckReferences(set, ims, cs); len(w) != 0 {
		t.Fatalf("everything exists, warnings %v", w)
	}
	if w := CheckReferences(set, nil, nil); len(w) != 0 {
		t.Fatalf("nothing checked, warnings %v", w)
	}
}

// listedImages is an image store of a few records, by name only.
type listedImages []core.Image

func (l listedImages) Resolve(ref string) (core.Image, error) {
	for _, im := range l {
		if im.Name == ref {
			return im, nil
		}
	}
	return core.Image{}, core.ErrNotFound
}

func (l listedImages) List(kind string) ([]core.Image, error) {
	var out []core.Image
	for _, im := range l {
		if kind == "" || im.Kind == kind {
			out = append(out, im)
		}
	}
	return out, nil
}

func (l listedImages) OpenContext(context.Context, core.Image) (*os.File, error) {
	return nil, os.ErrNotExist
}
