package content

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

var update = flag.Bool("update", false, "rewrite golden files")

type env struct {
	svc    *Service
	db     *boltstore.Store
	images *imagestore.Store
}

// fakeJoiner stands in for the joiner (another part of ztpd) behind the
// JoinProvider interface.
type fakeJoiner struct{}

func (fakeJoiner) ZTPSection(_ context.Context, d core.Device, r profile.Result) (map[string]any, error) {
	return map[string]any{"plugin": map[string]any{"url": "http://10.99.40.1:8080/join/" + d.ID + "/plugin"}, "cluster": r.Cluster}, nil
}
func (fakeJoiner) KubernetesMaster(context.Context, core.Device, profile.Result) (*KubeMaster, error) {
	return &KubeMaster{Host: "10.99.40.2", Port: 6443}, nil
}
func (fakeJoiner) UserData(_ context.Context, d core.Device, r profile.Result) ([]byte, error) {
	return []byte("#cloud-config\n# join " + r.Cluster + " as " + r.Role + "\n"), nil
}
func (fakeJoiner) JoinData(_ context.Context, d core.Device, r profile.Result, _ EtcdCSRs) ([]byte, error) {
	return []byte(`{"cluster":"` + r.Cluster + `"}`), nil
}

func newEnv(t *testing.T, join JoinProvider, defaultProfile string) *env {
	return newEnvWith(t, join, defaultProfile, nil)
}

// testEndpoints: devices are told 10.99.40.1:8080.
func testEndpoints(tb testing.TB, advertise, httpAddr string) endpoints.Endpoints {
	tb.Helper()
	ep, err := endpoints.New(advertise, httpAddr)
	if err != nil {
		tb.Fatal(err)
	}
	return ep
}

// newDevices is the devices service over db, closed before the store.
func newDevices(tb testing.TB, db core.Store) *devices.Service {
	d := devices.New(devices.Options{Store: db})
	tb.Cleanup(func() { d.Close() })
	return d
}

func newEnvWith(t *testing.T, join JoinProvider, defaultProfile string, pending core.DeviceFinder) *env {
	t.Helper()
	dir := t.TempDir()
	db, ims := openStores(t, dir)
	svc, err := New(Options{Store: db, Devices: newDevices(t, db), Images: ims, Join: join, Pending: pending,
		Endpoints: testEndpoints(t, "10.99.40.1", ":8080"), DefaultProfile: defaultProfile, FilesDir: filepath.Join(dir, "files")})
	if err != nil {
		t.Fatal(err)
	}
	set, err := profile.Load([]string{"../../examples/profiles"})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.SetProfiles(set); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	svc.now = func() time.Time { return fixed }
	return &env{svc: svc, db: db, images: ims}
}

func (e *env) addImage(t *testing.T, content string, m imagestore.Meta) core.Image {
	t.Helper()
	im, _, err := e.images.Add(context.Background(), strings.NewReader(content), m, "")
	if err != nil {
		t.Fatal(err)
	}
	return im
}

func (e *env) putDevice(t *testing.T, d core.Device, leaseIP string) {
	t.Helper()
	err := e.db.Update(func(tx core.Tx) error {
		if d.State == "" {
			d.State = core.StateLeased
		}
		if err := tx.Devices().Put(d); err != nil {
			return err
		}
		if leaseIP != "" {
			return tx.Leases().Put(core.Lease{IP: leaseIP, MAC: d.ID, Subnet: d.Subnet, State: core.LeaseActive})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) device(t *testing.T, id string) core.Device {
	t.Helper()
	e.svc.Flush()
	var d core.Device
	if err := e.db.View(func(tx core.Tx) error { var err error; d, err = tx.Devices().Get(id); return err }); err != nil {
		t.Fatal(err)
	}
	return d
}

func (e *env) events(t *testing.T) []core.Event {
	t.Helper()
	e.svc.Flush()
	var out []core.Event
	e.db.View(func(tx core.Tx) error {
		return tx.Events().List(core.DeviceEvents, 0, func(ev core.Event) (bool, error) {
			out = append(out, ev)
			return true, nil
		})
	})
	return out
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func sonicClient(ip, serial, mac, product, version string) *Client {
	return &Client{Addr: netip.MustParseAddr(ip), Transport: "http", Serial: serial, BaseMAC: mac, Product: product, SONiCVersion: version}
}

// TestGolden renders ztp.json and config_db.json of every sample profile.
func TestGolden(t *testing.T) {
	ctx := context.Background()
	for _, withJoin := range []bool{false, true} {
		var j JoinProvider
		suffix := ""
		if withJoin {
			j, suffix = fakeJoiner{}, ".join"
		}
		e := newEnv(t, j, "")
		e.addImage(t, "sonic 202405.1 broadcom", imagestore.Meta{Name: "sonic-broadcom-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"})
		e.addImage(t, "#!/bin/sh\necho post-config\n", imagestore.Meta{Name: "post-config.sh", Kind: "file"})
		cases := []struct {
			profile string
			dev     core.Device
			ip      string
			client  *Client
		}{
			{"leaf", core.Device{ID: "52:54:00:40:00:10", MAC: "52:54:00:40:00:10", Kind: core.KindSONiC, Serial: "LEAF0010",
				Platform: "x86_64-accton_as7712_32x-r0", Subnet: "rack1", IP: "10.99.40.10"}, "10.99.40.10",
				sonicClient("10.99.40.10", "LEAF0010", "52:54:00:40:00:10", "Accton-AS7712-32X", "SONiC.202311.1")},
			{"spine", core.Device{ID: "52:54:00:41:00:01", MAC: "52:54:00:41:00:01", Kind: core.KindSONiC, Serial: "SPN0001", IP: "10.99.41.50"}, "10.99.41.50",
				sonicClient("10.99.41.50", "SPN0001", "52:54:00:41:00:01", "Dell-S6000", "N.A")},
			{"default-sonic", core.Device{ID: "52:54:00:49:00:99", MAC: "52:54:00:49:00:99", Kind: core.KindSONiC, IP: "10.99.49.99"}, "10.99.49.99",
				sonicClient("10.99.49.99", "ODD-99", "52:54:00:49:00:99", "Mystery-1", "SONiC.202405.1")},
		}
		for _, c := range cases {
			e.putDevice(t, c.dev, c.ip)
			got, err := e.svc.ZTPJSON(ctx, c.client)
			if err != nil {
				t.Fatalf("%s: ztp.json: %v", c.profile, err)
			}
			if got.Profile != c.profile {
				t.Fatalf("device %s got profile %s, want %s", c.dev.ID, got.Profile, c.profile)
			}
			checkZTPJSON(t, got.Body)
			golden(t, c.profile+suffix+".ztp.json", got.Body)
			cfg, err := e.svc.ConfigDB(ctx, c.client, c.dev.ID)
			if err != nil {
				t.Fatalf("%s: config_db: %v", c.profile, err)
			}
			if !json.Valid(cfg.Body) {
				t.Fatalf("%s: config_db.json is not JSON", c.profile)
			}
			golden(t, c.profile+suffix+".config_db.json", cfg.Body)
		}
		// The VM profile: cloud-init data.
		vm := core.Device{ID: "1e:00:42:00:00:07", MAC: "1e:00:42:00:00:07", Kind: core.KindVM, Subnet: "vms", IP: "10.99.42.7"}
		e.putDevice(t, vm, "10.99.42.7")
		vc := &Client{Addr: netip.MustParseAddr("10.99.42.7"), Transport: "http"}
		var md bytes.Buffer
		for _, k := range MetadataKeys {
			v, err := e.svc.Metadata(ctx, vc, k)
			if err != nil {
				t.Fatalf("meta-data %s: %v", k, err)
			}
			md.WriteString(k + ": " + v + "\n")
		}
		golden(t, "vm-worker"+suffix+".meta-data.txt", md.Bytes())
		ud, err := e.svc.UserData(ctx, vc)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "vm-worker"+suffix+".user-data", ud)
	}
}

// checkZTPJSON checks the shape SONiC's ztp-engine expects.
func checkZTPJSON(t *testing.T, b []byte) {
	t.Helper()
	var doc map[string]map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("ztp.json: %v", err)
	}
	z := doc["ztp"]
	if z["ztp-json-version"] != "1.0" {
		t.Errorf("ztp-json-version %v", z["ztp-json-version"])
	}
	n := 0
	for k, v := range z {
		if _, ok := v.(map[string]any); !ok {
			continue
		}
		n++
		if len(k) < 4 || k[2] != '-' || k[0] < '0' || k[0] > '9' || k[1] < '0' || k[1] > '9' {
			t.Errorf("section %q is not zero-padded", k)
		}
	}
	if n == 0 {
		t.Error("no sections")
	}
}

// staticBindings declares addresses the way DHCP reservations do.
type staticBindings map[netip.Addr]core.Binding

func (b staticBindings) BindingFor(ip netip.Addr) (core.Binding, bool) {
	bd, ok := b[ip]
	return bd, ok
}

func (e *env) countDevices(t *testing.T) int {
	t.Helper()
	e.svc.Flush()
	var n int
	if err := e.db.View(func(tx core.Tx) error { var err error; n, err = tx.Devices().Count(); return err }); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantRefusal(t *testing.T, what string, err error, status int, kind string) {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != status || (kind != "" && ce.Kind != kind) {
		t.Fatalf("%s: got %v, want %d %s", what, err, status, kind)
	}
}

// TestIdentityIsTheAddressHolder: a device is the holder of the address it
// asks from; its headers only select among what that address is entitled
// to. Every attack here worked against header-based identification.
func TestIdentityIsTheAddressHolder(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	e.addImage(t, "sonic 202405.1", imagestore.Meta{Name: "sonic-broadcom-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"})
	victim := core.Device{ID: "52:54:00:40:00:20", MAC: "52:54:00:40:00:20", Kind: core.KindSONiC, Serial: "LEAF0020", IP: "10.99.40.20",
		BaseMAC: "52:54:00:40:00:20"}
	e.putDevice(t, victim, "10.99.40.20")
	other := core.Device{ID: "52:54:00:40:00:21", MAC: "52:54:00:40:00:21", Kind: core.KindSONiC, Serial: "LEAF0021", IP: "10.99.40.21"}
	e.putDevice(t, other, "10.99.40.21")
	devicesBefore := e.countDevices(t)

	// 1. Another host quoting the victim's serial or base MAC: refused,
	// nothing stored or changed.
	for _, c := range []*Client{
		sonicClient("10.99.40.200", "LEAF0020", "", "Evil-1", "SONiC.202405.1"),
		sonicClient("10.99.40.200", "", "52:54:00:40:00:20", "Evil-1", "SONiC.202405.1"),
	} {
		_, err := e.svc.ZTPJSON(ctx, c)
		wantRefusal(t, "spoofed headers from an address without a lease", err, 403, RefusedNoHolder)
		_, err = e.svc.ConfigDB(ctx, c, victim.ID)
		wantRefusal(t, "victim's config_db from another address", err, 403, RefusedNoHolder)
	}
	// ... and from an address another device holds.
	_, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.40.21", "LEAF0020", "", "", ""))
	wantRefusal(t, "another device's serial from a leased address", err, 403, RefusedMismatch)
	_, err = e.svc.ZTPJSON(ctx, sonicClient("10.99.40.21", "", "52:54:00:40:00:20", "", ""))
	if err != nil {
		t.Fatalf("a base MAC on a record without one is learnt: %v", err)
	}
	_, err = e.svc.ConfigDB(ctx, sonicClient("10.99.40.21", "LEAF0020", "", "", ""), victim.ID)
	wantRefusal(t, "victim's config_db to another lease holder", err, 403, "")
	if v := e.device(t, victim.ID); v.Serial != "LEAF0020" || v.Product != "" || v.IP != "10.99.40.20" || v.State != core.StateLeased {
		t.Fatalf("victim's record changed: %+v", v)
	}

	// 2. Made-up devices from an address nobody holds create nothing.
	for i := 0; i < 50; i++ {
		c := sonicClient(fmt.Sprintf("10.99.43.%d", 10+i), fmt.Sprintf("FAKE%02d", i), fmt.Sprintf("52:54:00:43:00:%02x", i), "Fake", "N.A")
		_, err := e.svc.ZTPJSON(ctx, c)
		wantRefusal(t, "made-up device", err, 403, RefusedNoHolder)
	}
	if n := e.countDevices(t); n != devicesBefore {
		t.Fatalf("%d device records after 50 made-up devices, want %d", n, devicesBefore)
	}
	for _, ev := range e.events(t) {
		if ev.Fields["addr"] != "" && strings.HasPrefix(ev.Fields["addr"], "10.99.43.") || strings.HasPrefix(ev.Fields["addr"], "10.99.40.200") {
			t.Fatalf("event stored for a request nobody holds the address of: %+v", ev)
		}
	}

	// 3. The lease holder: served without headers (TFTP) and with its own;
	// what it says adds facts the record lacks.
	got, err := e.svc.ZTPJSON(ctx, &Client{Addr: netip.MustParseAddr("10.99.40.20"), Transport: "tftp"})
	if err != nil || got.Device.ID != victim.ID {
		t.Fatalf("by lease: %v", err)
	}
	got, err = e.svc.ZTPJSON(ctx, sonicClient("10.99.40.20", "LEAF0020", "52:54:00:40:00:20", "Accton-AS7712-32X", "SONiC.202405.1"))
	if err != nil || got.Device.ID != victim.ID {
		t.Fatalf("holder with its headers: %v", err)
	}
	if bytes.Contains(got.Body, []byte("firmware")) {
		t.Errorf("firmware section although the switch already runs 202405.1:\n%s", got.Body)
	}
	dev := e.device(t, victim.ID)
	if dev.State != core.StateZTPServed || dev.Product != "Accton-AS7712-32X" || dev.SONiCVer != "SONiC.202405.1" || dev.Profile != "leaf" {
		t.Fatalf("device after ztp.json: %+v", dev)
	}
	// Once known, a fact is never replaced: a different product or base
	// MAC from the holder itself is refused.
	_, err = e.svc.ZTPJSON(ctx, sonicClient("10.99.40.20", "", "", "Other-Product", ""))
	wantRefusal(t, "changed product", err, 403, RefusedMismatch)
	_, err = e.svc.ZTPJSON(ctx, sonicClient("10.99.40.20", "", "52:54:00:99:99:99", "", ""))
	wantRefusal(t, "changed base MAC", err, 403, RefusedMismatch)
	// Values outside the character sets never reach a record.
	for _, c := range []*Client{
		sonicClient("10.99.40.21", `X"}}, "TACPLUS_SERVER": {"10.6.6.6": {`, "", "", ""),
		sonicClient("10.99.40.21", "", "", "P\nroduct", ""),
		sonicClient("10.99.40.21", "", "", "", "SONiC.2024 05;rm"),
		sonicClient("10.99.40.21", "", "not-a-mac", "", ""),
	} {
		_, err = e.svc.ZTPJSON(ctx, c)
		wantRefusal(t, "hostile fact", err, 400, RefusedFact)
	}
	if o := e.device(t, other.ID); o.Serial != "LEAF0021" || o.Product != "" {
		t.Fatalf("record changed by a refused request: %+v", o)
	}
	types := map[string]int{}
	for _, ev := range e.events(t) {
		types[ev.Type]++
	}
	if types["ztp.json.served"] != 3 || types["ztp.refused"] != 8 {
		t.Fatalf("events %v", types)
	}
}

// TestLeaseMustBeCurrent: an expired or released lease entitles nobody.
func TestLeaseMustBeCurrent(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "vm-worker")
	for i, l := range []core.Lease{
		{State: core.LeaseActive, Expiry: time.Date(2026, 1, 2, 3, 4, 4, 0, time.UTC)}, // a second before "now"
		{State: core.LeaseReleased},
		{State: core.LeaseExpired},
	} {
		ip := fmt.Sprintf("10.99.42.%d", 60+i)
		mac := fmt.Sprintf("1e:00:42:00:00:%02x", 60+i)
		l.IP, l.MAC = ip, mac
		if err := e.db.Update(func(tx core.Tx) error {
			if err := tx.Devices().Put(core.Device{ID: mac, MAC: mac, Kind: core.KindVM, IP: ip, State: core.StateLeased}); err != nil {
				return err
			}
			return tx.Leases().Put(l)
		}); err != nil {
			t.Fatal(err)
		}
		c := &Client{Addr: netip.MustParseAddr(ip), Transport: "http"}
		_, err := e.svc.UserData(ctx, c)
		wantRefusal(t, "user-data on a "+string(l.State)+" lease", err, 403, RefusedNoHolder)
		_, err = e.svc.Metadata(ctx, c, "instance-id")
		wantRefusal(t, "meta-data on a "+string(l.State)+" lease", err, 403, RefusedNoHolder)
	}
}

// TestStaticDeviceByBinding: without a lease, an operator-declared binding
// (a reservation) is the only way in, and its serial must be the one the
// device states.
func TestStaticDeviceByBinding(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	e.addImage(t, "sonic 202405.1", imagestore.Meta{Name: "sonic-broadcom-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"})
	bySerial := netip.MustParseAddr("10.99.40.80")
	byMAC := netip.MustParseAddr("10.99.40.81")
	e.svc.opt.Bindings = staticBindings{
		bySerial: {IP: bySerial, Serial: "STATIC80", Kind: core.KindSONiC},
		byMAC:    {IP: byMAC, MAC: "52:54:00:40:00:81", Kind: core.KindSONiC},
	}
	_, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.40.80", "OTHER", "52:54:00:40:00:80", "Accton-AS7712-32X", "SONiC.202405.1"))
	wantRefusal(t, "wrong serial at a serial binding", err, 403, RefusedMismatch)
	_, err = e.svc.ZTPJSON(ctx, sonicClient("10.99.40.80", "STATIC80", "", "Accton-AS7712-32X", "SONiC.202405.1"))
	wantRefusal(t, "serial binding without a MAC", err, 403, RefusedFact)
	got, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.40.80", "STATIC80", "52:54:00:40:00:80", "Accton-AS7712-32X", "SONiC.202405.1"))
	if err != nil || got.Device.ID != "52:54:00:40:00:80" {
		t.Fatalf("static device by serial: %v", err)
	}
	if d := e.device(t, "52:54:00:40:00:80"); d.Serial != "STATIC80" || d.IP != "10.99.40.80" || d.Kind != core.KindSONiC {
		t.Fatalf("static device record %+v", d)
	}
	// Its second fetch finds the record by the binding's serial.
	if got, err = e.svc.ZTPJSON(ctx, &Client{Addr: bySerial, Transport: "tftp"}); err != nil || got.Device.ID != "52:54:00:40:00:80" {
		t.Fatalf("second fetch: %v", err)
	}
	got, err = e.svc.ZTPJSON(ctx, sonicClient("10.99.40.81", "MAC81", "", "Accton-AS7712-32X", "SONiC.202405.1"))
	if err != nil || got.Device.ID != "52:54:00:40:00:81" {
		t.Fatalf("static device by MAC: %v", err)
	}
	// An approved device with a fixed address is a binding too.
	fixed := core.Device{ID: "52:54:00:40:00:82", MAC: "52:54:00:40:00:82", Kind: core.KindSONiC, Serial: "FIX82", FixedIP: "10.99.40.82"}
	e.putDevice(t, fixed, "")
	_, err = e.svc.ZTPJSON(ctx, sonicClient("10.99.40.82", "FIX82", "", "", ""))
	wantRefusal(t, "fixed address before approval", err, 403, RefusedNoHolder)
	fixed.Approved = true
	e.putDevice(t, fixed, "")
	if got, err = e.svc.ZTPJSON(ctx, sonicClient("10.99.40.82", "FIX82", "", "", "")); err != nil || got.Device.ID != fixed.ID {
		t.Fatalf("approved fixed-address device: %v", err)
	}
}

// devicesInMemory is what the DHCP server knows before its device records
// are committed (the real one is tested in ztp/dhcp).
type devicesInMemory map[netip.Addr]core.Device

func (m devicesInMemory) DeviceByIP(ip netip.Addr) (core.Device, bool) {
	d, ok := m[ip]
	return d, ok
}

func TestLeaseAheadOfDeviceRecord(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	addr := netip.MustParseAddr("10.99.42.31")
	vm := core.Device{ID: "1e:00:42:00:00:31", MAC: "1e:00:42:00:00:31", Kind: core.KindVM, IP: addr.String(), State: core.StateLeased}
	// The lease is committed (it always is before the ACK), the device record not yet.
	if err := e.db.Update(func(tx core.Tx) error {
		return tx.Leases().Put(core.Lease{IP: addr.String(), MAC: vm.MAC, State: core.LeaseActive})
	}); err != nil {
		t.Fatal(err)
	}
	c := &Client{Addr: addr, Transport: "http"}
	if _, err := e.svc.Metadata(ctx, c, "local-hostname"); err == nil {
		t.Fatal("a lease alone identified the VM as a VM")
	}
	e.svc.opt.Pending = devicesInMemory{addr: vm} // as the app passes the DHCP server
	if v, err := e.svc.Metadata(ctx, c, "local-hostname"); err != nil || v != "worker-1e0042000031" {
		t.Fatalf("with the DHCP server's view: %q %v", v, err)
	}
	if d := e.device(t, vm.ID); d.Kind != core.KindVM || d.State != core.StateConfigServed {
		t.Fatalf("recorded device %+v", d)
	}
}

func TestUnmatchedGetsDefaultProfileOr404(t *testing.T) {
	ctx := context.Background()
	vm := core.Device{ID: "1e:00:49:00:00:01", MAC: "1e:00:49:00:00:01", Kind: core.KindVM, IP: "10.99.49.5"}
	e := newEnv(t, nil, "")
	e.putDevice(t, vm, "10.99.49.5")
	c := &Client{Addr: netip.MustParseAddr("10.99.49.5"), Transport: "http"}
	_, err := e.svc.Metadata(ctx, c, "instance-id")
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != 404 || !strings.Contains(ce.Reason, "no profile matches") {
		t.Fatalf("want 404 no profile, got %v", err)
	}
	e2 := newEnv(t, nil, "vm-worker")
	e2.putDevice(t, vm, "10.99.49.5")
	if v, err := e2.svc.Metadata(ctx, c, "local-hostname"); err != nil || v != "worker-1e0049000001" {
		t.Fatalf("default profile: %q %v", v, err)
	}
	if _, err := New(Options{DefaultProfile: "nope"}); err != nil {
		t.Fatal(err)
	}
	s, _ := New(Options{DefaultProfile: "nope"})
	if err := s.SetProfiles(e.svc.Profiles()); err == nil {
		t.Fatal("a default profile that does not exist was accepted")
	}
}

func TestConfigIsBoundToItsDevice(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	a := core.Device{ID: "52:54:00:40:00:31", MAC: "52:54:00:40:00:31", Kind: core.KindSONiC, Serial: "LEAF0031", IP: "10.99.40.31", Product: "Accton-AS7712-32X"}
	b := core.Device{ID: "52:54:00:40:00:32", MAC: "52:54:00:40:00:32", Kind: core.KindSONiC, Serial: "LEAF0032", IP: "10.99.40.32", Product: "Accton-AS7712-32X"}
	e.putDevice(t, a, "10.99.40.31")
	e.putDevice(t, b, "10.99.40.32")
	// b asks for a's config, by lease and by headers: refused.
	for _, c := range []*Client{
		{Addr: netip.MustParseAddr("10.99.40.32")},
		sonicClient("10.99.40.32", "LEAF0032", "", "", ""),
		{Addr: netip.MustParseAddr("10.99.49.9")},
	} {
		_, err := e.svc.ConfigDB(ctx, c, a.ID)
		var ce *Error
		if !errors.As(err, &ce) || ce.Status != 403 {
			t.Fatalf("config of a served to %+v: %v", c, err)
		}
	}
	got, err := e.svc.ConfigDB(ctx, &Client{Addr: netip.MustParseAddr("10.99.40.31")}, strings.ToUpper(a.ID))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]map[string]map[string]any
	if err := json.Unmarshal(got.Body, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["DEVICE_METADATA"]["localhost"]["hostname"] != "leaf0031" {
		t.Errorf("hostname %v", cfg["DEVICE_METADATA"]["localhost"])
	}
	if _, ok := cfg["MGMT_INTERFACE"]["eth0|10.99.40.31/24"]; !ok {
		t.Errorf("MGMT_INTERFACE %v", cfg["MGMT_INTERFACE"])
	}
	if _, ok := cfg["KUBERNETES_MASTER"]; ok {
		t.Error("KUBERNETES_MASTER without a joiner")
	}
	if e.device(t, a.ID).State != core.StateConfigServed {
		t.Error("state not advanced to config-served")
	}
	if _, err := e.svc.ConfigDB(ctx, &Client{}, "not-a-mac"); err == nil {
		t.Error("bad id accepted")
	}
}

func TestStatesNeverGoBackwards(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	d := core.Device{ID: "52:54:00:49:00:40", MAC: "52:54:00:49:00:40", Kind: core.KindSONiC, IP: "10.99.49.40", State: core.StateJoined}
	e.putDevice(t, d, "10.99.49.40")
	if _, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.49.40", "X40", "", "", "N.A")); err != nil {
		t.Fatal(err)
	}
	if st := e.device(t, d.ID).State; st != core.StateJoined {
		t.Fatalf("state went back to %s", st)
	}
}

func TestMissingFirmwareImageIsAClearError(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	d := core.Device{ID: "52:54:00:40:00:50", MAC: "52:54:00:40:00:50", Kind: core.KindSONiC, Serial: "LEAF0050", IP: "10.99.40.50"}
	e.putDevice(t, d, "10.99.40.50")
	_, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.40.50", "LEAF0050", "", "Accton-AS7712-32X", "SONiC.202311.1"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != 503 || !strings.Contains(ce.Reason, "sonic-broadcom-202405.1.bin") {
		t.Fatalf("want 503 naming the image, got %v", err)
	}
}

func TestONIEInstallerSelection(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "")
	generic := e.addImage(t, "generic", imagestore.Meta{Name: "onie-generic.bin", Kind: "onie-installer"})
	acc := e.addImage(t, "accton", imagestore.Meta{Name: "onie-accton.bin", Kind: "onie-installer", Platform: "x86_64-accton_as7712_32x-r0"})
	dell := e.addImage(t, "dell", imagestore.Meta{Name: "sonic-dell.bin", Kind: "sonic-installer", Platform: "x86_64-dell_s6000_s1220-r0"})
	pinned := e.addImage(t, "sonic 202405.1", imagestore.Meta{Name: "sonic-broadcom-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"})

	hdr := func(arch, machine, rev string) *Client {
		return &Client{Addr: netip.MustParseAddr("10.99.49.60"), ONIE: &ONIE{Arch: arch, Machine: machine, MachineRev: rev}}
	}
	cases := []struct {
		c    *Client
		hint string
		want core.Image
	}{
		{hdr("x86_64", "accton_as7712_32x", "0"), "", acc},
		{hdr("x86_64", "dell_s6000_s1220", "0"), "", dell},
		{hdr("x86_64", "celestica_e1031", "0"), "", generic},
		{&Client{Addr: netip.MustParseAddr("10.99.49.61")}, "x86_64-dell_s6000_s1220-r0", dell},
	}
	for _, c := range cases {
		im, _, err := e.svc.ONIEInstaller(ctx, c.c, c.hint)
		if err != nil || im.SHA256 != c.want.SHA256 {
			t.Errorf("%+v hint %q: got %s %v, want %s", c.c.ONIE, c.hint, im.Name, err, c.want.Name)
		}
	}
	// Platform from the DHCP vendor class of the lease.
	od := core.Device{ID: "52:54:00:49:00:62", MAC: "52:54:00:49:00:62", Kind: core.KindONIE, VendorClass: "onie_vendor:x86_64-accton_as7712_32x-r0", IP: "10.99.49.62"}
	e.putDevice(t, od, "10.99.49.62")
	im, _, err := e.svc.ONIEInstaller(ctx, &Client{Addr: netip.MustParseAddr("10.99.49.62")}, "")
	if err != nil || im.SHA256 != acc.SHA256 {
		t.Fatalf("vendor class: %s %v", im.Name, err)
	}
	if st := e.device(t, od.ID).State; st != core.StateImageServed {
		t.Fatalf("state %s", st)
	}
	// A leaf-rack ONIE box gets the image its profile pins.
	ld := core.Device{ID: "52:54:00:40:00:63", MAC: "52:54:00:40:00:63", Kind: core.KindONIE, Product: "Accton-AS7712-32X",
		VendorClass: "onie_vendor:x86_64-accton_as7712_32x-r0", IP: "10.99.40.63"}
	e.putDevice(t, ld, "10.99.40.63")
	im, _, err = e.svc.ONIEInstaller(ctx, &Client{Addr: netip.MustParseAddr("10.99.40.63")}, "")
	if err != nil || im.SHA256 != pinned.SHA256 {
		t.Fatalf("pinned: %s %v", im.Name, err)
	}
}

func TestFilesRefuseTraversal(t *testing.T) {
	e := newEnv(t, nil, "")
	root := e.svc.opt.FilesDir
	os.WriteFile(filepath.Join(root, "ok.txt"), []byte("ok"), 0o644)
	os.WriteFile(filepath.Join(filepath.Dir(root), "secret"), []byte("s"), 0o644)
	os.Symlink("../secret", filepath.Join(root, "link"))
	for _, n := range []string{"../secret", "/etc/passwd", "link", "a/../../secret"} {
		f, err := e.svc.OpenFile(n)
		var ce *Error
		if err == nil {
			f.Close()
			t.Errorf("%q opened", n)
		} else if !errors.As(err, &ce) || ce.Status != 403 {
			t.Errorf("%q: %v, want 403", n, err)
		}
	}
	f, err := e.svc.OpenFile("ok.txt")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func openStores(tb testing.TB, dir string) (*boltstore.Store, *imagestore.Store) {
	tb.Helper()
	db := storetest.OpenIn(tb, dir).Store
	ims, err := imagestore.Open(db, dir)
	if err != nil {
		tb.Fatal(err)
	}
	return db, ims
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func TestJoinMaterialOnlyToTheDevicesAddress(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, fakeJoiner{}, "")
	e.addImage(t, "sonic 202405.1", imagestore.Meta{Name: "sonic-broadcom-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"})
	d := core.Device{ID: "52:54:00:40:00:70", MAC: "52:54:00:40:00:70", Kind: core.KindSONiC, Serial: "LEAF0070", IP: "10.99.40.70", Product: "Accton-AS7712-32X"}
	e.putDevice(t, d, "10.99.40.70")
	_, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.40.71", "LEAF0070", "", "Accton-AS7712-32X", "SONiC.202405.1"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != 403 {
		t.Fatalf("join section served to another address: %v", err)
	}
	got, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.40.70", "LEAF0070", "", "Accton-AS7712-32X", "SONiC.202405.1"))
	if err != nil || !bytes.Contains(got.Body, []byte(`"03-join"`)) && !bytes.Contains(got.Body, []byte(`-join"`)) {
		t.Fatalf("own address: %v\n%s", err, got.Body)
	}
}

// TestConcurrentRequests mixes documents for many devices from many
// goroutines (run with -race); every fetch ends up recorded.
func TestConcurrentRequests(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "default-sonic")
	e.addImage(t, "sonic 202405.1", imagestore.Meta{Name: "sonic-broadcom-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"})
	const n = 40
	for k := 0; k < n; k++ {
		ip := fmt.Sprintf("10.99.40.%d", 100+k)
		e.putDevice(t, core.Device{ID: fmt.Sprintf("52:54:00:40:01:%02x", k), MAC: fmt.Sprintf("52:54:00:40:01:%02x", k),
			Kind: core.KindSONiC, Serial: fmt.Sprintf("C%03d", k), IP: ip, Product: "Accton-AS7712-32X"}, ip)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				k := (g*50 + i) % n
				c := sonicClient(fmt.Sprintf("10.99.40.%d", 100+k), fmt.Sprintf("C%03d", k), "", "Accton-AS7712-32X", "SONiC.202311.1")
				if _, err := e.svc.ZTPJSON(ctx, c); err != nil {
					t.Error(err)
					return
				}
				if _, err := e.svc.ConfigDB(ctx, c, fmt.Sprintf("52:54:00:40:01:%02x", k)); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	served := 0
	for _, ev := range e.events(t) {
		if ev.Type == "ztp.json.served" || ev.Type == "ztp.config.served" {
			served++
		}
	}
	if served != 8*50*2 {
		t.Fatalf("%d fetches recorded, want %d", served, 8*50*2)
	}
	for k := 0; k < n; k++ {
		if st := e.device(t, fmt.Sprintf("52:54:00:40:01:%02x", k)).State; st != core.StateConfigServed {
			t.Fatalf("device %d state %s", k, st)
		}
	}
}

func TestONIEInstallerName(t *testing.T) {
	for name, want := range map[string]string{
		"onie-installer-x86_64-accton_as7712_32x-r0": "x86_64-accton_as7712_32x-r0",
		"onie-installer-x86_64-accton_as7712_32x":    "x86_64-accton_as7712_32x",
		"onie-installer-accton_as7712_32x.bin":       "accton_as7712_32x",
		"onie-installer-x86_64":                      "x86_64",
		"onie-installer.bin":                         "",
		"onie-installer":                             "",
	} {
		if got, ok := ONIEInstallerName(name); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"onie-installerX", "favicon.ico", "", "x-onie-installer"} {
		if _, ok := ONIEInstallerName(name); ok {
			t.Errorf("%q taken for an ONIE name", name)
		}
	}
}

// TestStatedSerialNeverRedirects: a device fetches ztp.json from its own
// lease stating the serial of a switch that waits for approval. It is
// served as itself; the serial index still names the switch, the
// requester's record does not take the serial, and resolving the serial
// is refused as ambiguous, naming both.
func TestStatedSerialNeverRedirects(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil, "default-sonic")
	victim := core.Device{ID: "52:54:00:40:00:30", MAC: "52:54:00:40:00:30", Kind: core.KindSONiC, Serial: "VICTIM01", IP: "10.99.40.30"}
	e.putDevice(t, victim, "10.99.40.30")
	attacker := core.Device{ID: "52:54:00:40:00:31", MAC: "52:54:00:40:00:31", Kind: core.KindUnknown, IP: "10.99.40.31"}
	e.putDevice(t, attacker, "10.99.40.31")
	served, err := e.svc.ZTPJSON(ctx, sonicClient("10.99.40.31", "VICTIM01", "", "", ""))
	if err != nil {
		t.Fatalf("the requester is served as itself: %v", err)
	}
	if served.Device.ID != attacker.ID || served.Device.Serial != "" {
		t.Fatalf("served as %+v", served.Device)
	}
	if a := e.device(t, attacker.ID); a.Serial != "" || a.SerialConflict == nil || a.SerialConflict.Serial != "VICTIM01" {
		t.Fatalf("requester's record took the serial: %+v", a)
	}
	if v := e.device(t, victim.ID); v.Serial != "VICTIM01" || v.SerialConflict == nil {
		t.Fatalf("victim's record: %+v", v)
	}
	err = e.db.View(func(tx core.Tx) error {
		holder, _, err := tx.Devices().SerialHolder("VICTIM01")
		if err != nil || holder != victim.ID {
			t.Fatalf("serial index names %q (%v), want the victim", holder, err)
		}
		_, err = tx.Devices().BySerial("VICTIM01")
		if core.KindOf(err) != core.KindConflict || !strings.Contains(err.Error(), victim.ID) || !strings.Contains(err.Error(), attacker.ID) {
			t.Fatalf("ambiguous serial: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var conflicts int
	for _, ev := range e.events(t) {
		if ev.Type == "device.serial_conflict" {
			conflicts++
		}
	}
	if conflicts != 2 {
		t.Fatalf("%d serial conflict events, want one on each device", conflicts)
	}
}
