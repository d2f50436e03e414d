package ztphttp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/testenv/e2etest"
)

// switchSim is what a SONiC switch knows about itself while ZTP runs.
type switchSim struct {
	ip, serial, mac, product, version string
	hostname                          string // changes when configdb-json applies
}

func (s *switchSim) headers() []string {
	return []string{"-H", "PRODUCT-NAME: " + s.product, "-H", "SERIAL-NUMBER: " + s.serial,
		"-H", "BASE-MAC-ADDRESS: " + s.mac, "-H", "SONiC-VERSION: " + s.version}
}

// fetch downloads url the way sonic-ztp's Downloader does (curl -f -v -s -o
// dst -A SONiC-ZTP/0.1 --connect-timeout 30 --retry 3 -H ...), from the
// switch's own address.
func (s *switchSim) fetch(t *testing.T, lab *e2etest.Lab, url string) []byte {
	t.Helper()
	dst := filepath.Join(lab.Dir, fmt.Sprintf("dl-%d", time.Now().UnixNano()))
	args := append([]string{"-f", "-v", "-s", "-o", dst, "-A", "SONiC-ZTP/0.1", "--connect-timeout", "30", "--retry", "3",
		"--interface", s.ip}, s.headers()...)
	out, err := lab.Run("curl", append(args, "--", url)...)
	if err != nil {
		t.Fatalf("switch %s: curl %s failed: %v\n%s\nserver log:\n%s", s.serial, url, err, out, lab.Log())
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(dst)
	return b
}

// resolveURL turns a url or dynamic-url object into the URL string exactly
// as sonic-ztp's URL and DynamicURL classes do: source (string or
// {"source": ...}); prefix + identifier value + suffix.
func (s *switchSim) resolveURL(t *testing.T, key string, v any) string {
	t.Helper()
	if key == "url" {
		switch u := v.(type) {
		case string:
			return u
		case map[string]any:
			src, ok := u["source"].(string)
			if !ok {
				t.Fatalf("url object without a string source: %v", u)
			}
			return src
		}
		t.Fatalf("url of type %T", v)
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("dynamic-url of type %T", v)
	}
	src, ok := m["source"].(map[string]any)
	if !ok || src["identifier"] == nil {
		t.Fatalf("dynamic-url without source.identifier: %v", m)
	}
	url := ""
	if p, ok := src["prefix"].(string); ok {
		url = p
	}
	switch id := src["identifier"].(type) {
	case string:
		switch id {
		case "hostname", "hostname-fqdn":
			url += s.hostname
		case "serial-number":
			url += s.serial
		case "product-name":
			url += s.product
		case "mac":
			url += s.mac
		case "sonic-version":
			url += s.version
		default:
			url += id
		}
	default:
		t.Fatalf("identifier %v not supported by this test", id)
	}
	if sfx, ok := src["suffix"].(string); ok {
		url += sfx
	}
	return url
}

// urlsIn collects every url / dynamic-url object of a section, in a fixed
// order (map keys sorted, lists in order).
func urlsIn(v any, out *[][2]any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "url" || k == "dynamic-url" {
				*out = append(*out, [2]any{k, x[k]})
				continue
			}
			urlsIn(x[k], out)
		}
	case []any:
		for _, e := range x {
			urlsIn(e, out)
		}
	}
}

type labContent struct {
	firmware core.Image
	onie     core.Image
	motd     string
	files    map[string]string // files/<path> -> content
}

func setupLab(t *testing.T) (*e2etest.Lab, labContent) {
	e2etest.RequireRoot(t, "curl")
	lab := e2etest.NewLab(t, "zh", 47, nil, []int{11, 12, 13, 20, 30, 31})
	lc := labContent{motd: "welcome to the lab\n", files: map[string]string{}}
	lab.Seed(func(db *boltstore.Store, ims *imagestore.Store) {
		ctx := context.Background()
		fw := strings.Repeat("SONiC 202405.1 installer image\n", 40000) // ~1.2 MB
		var err error
		lc.firmware, _, err = ims.Add(ctx, strings.NewReader(fw), imagestore.Meta{Name: "lab-sonic-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ims.Add(ctx, strings.NewReader(lc.motd), imagestore.Meta{Name: "motd.txt", Kind: "file"}, ""); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ims.Add(ctx, strings.NewReader("ISO9660 stand-in"), imagestore.Meta{Name: "k8s-1.31.4.iso", Kind: "binaries-iso", Version: "1.31.4"}, ""); err != nil {
			t.Fatal(err)
		}
		lc.onie, _, err = ims.Add(ctx, strings.NewReader(strings.Repeat("ONIE installer for celestica\n", 1000)),
			imagestore.Meta{Name: "onie-cel.bin", Kind: "onie-installer", Platform: "x86_64-cel_e1031-r0"}, "")
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx core.Tx) error {
			for i, h := range []int{11, 12, 13} {
				mac := fmt.Sprintf("52:54:00:47:00:%02x", h)
				d := core.Device{ID: mac, MAC: mac, Kind: core.KindSONiC, Serial: fmt.Sprintf("LAB%04d", h),
					IP: lab.Addr(h), Subnet: "lab", State: core.StateLeased, ClientID: "SONiC##Lab-Switch##" + fmt.Sprint(i)}
				if err := tx.Devices().Put(d); err != nil {
					return err
				}
				if err := tx.Leases().Put(core.Lease{IP: d.IP, MAC: mac, Subnet: "lab", State: core.LeaseActive}); err != nil {
					return err
				}
			}
			od := core.Device{ID: "52:54:00:47:00:1e", MAC: "52:54:00:47:00:1e", Kind: core.KindONIE, IP: lab.Addr(30), Subnet: "lab",
				VendorClass: "onie_vendor:x86_64-cel_e1031-r0", State: core.StateLeased}
			if err := tx.Devices().Put(od); err != nil {
				return err
			}
			if err := tx.Leases().Put(core.Lease{IP: od.IP, MAC: od.MAC, Subnet: "lab", State: core.LeaseActive}); err != nil {
				return err
			}
			vm := core.Device{ID: "1e:00:47:00:00:14", MAC: "1e:00:47:00:00:14", Kind: core.KindVM, IP: lab.Addr(20), Subnet: "lab", State: core.StateLeased}
			if err := tx.Devices().Put(vm); err != nil {
				return err
			}
			return tx.Leases().Put(core.Lease{IP: vm.IP, MAC: vm.MAC, Subnet: "lab", State: core.LeaseActive})
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	files := filepath.Join(lab.DataDir, "files")
	os.MkdirAll(filepath.Join(files, "minigraph"), 0o755)
	for _, h := range []int{11, 12, 13} {
		sn := fmt.Sprintf("LAB%04d", h)
		lc.files["frr-lab-"+strings.ToLower(sn)+".conf"] = "hostname lab-" + strings.ToLower(sn) + "\n"
		lc.files["minigraph/"+sn+".xml"] = "<DeviceMiniGraph><Hostname>" + sn + "</Hostname></DeviceMiniGraph>\n"
		lc.files["post-"+sn+".sh"] = "#!/bin/sh\necho provisioned " + sn + "\n"
	}
	for name, body := range lc.files {
		if err := os.WriteFile(filepath.Join(files, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(lab.Dir, "secret.txt"), []byte("secret"), 0o644)
	os.Symlink(filepath.Join(lab.Dir, "secret.txt"), filepath.Join(files, "escape"))
	prof, _ := filepath.Abs("testdata/profiles")
	lab.Start(fmt.Sprintf(`advertise_addr: %s
http:
  addr: %s:8080
  metadata_addr: %s:80
profiles: [%s]
`, lab.SrvIP, lab.SrvIP, lab.SrvIP, prof))
	return lab, lc
}

// TestSwitchRunsEveryURLOfItsZTPJSON is a SONiC switch's ZTP run: fetch
// ztp.json with the ZTP headers, then every url and dynamic-url of every
// section, in section string order, each with curl as sonic-ztp runs it.
func TestSwitchRunsEveryURLOfItsZTPJSON(t *testing.T) {
	lab, lc := setupLab(t)
	base := "http://" + lab.SrvIP + ":8080"
	for _, h := range []int{11, 12} {
		sw := &switchSim{ip: lab.Addr(h), serial: fmt.Sprintf("LAB%04d", h), mac: fmt.Sprintf("52:54:00:47:00:%02x", h),
			product: "Lab-Switch", version: "SONiC.202311.1", hostname: "sonic"}
		raw := sw.fetch(t, lab, base+"/ztp/ztp.json")
		var doc map[string]map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("ztp.json: %v\n%s", err, raw)
		}
		ztp := doc["ztp"]
		if ztp["ztp-json-version"] != "1.0" {
			t.Fatalf("ztp-json-version: %v", ztp["ztp-json-version"])
		}
		var sections []string
		for k, v := range ztp {
			if _, ok := v.(map[string]any); ok {
				sections = append(sections, k)
			}
		}
		sort.Strings(sections) // sonic-ztp runs sections in plain string order
		want := []string{"01-firmware", "02-configdb-json", "03-snmp", "04-download", "05-graphservice", "06-post-install"}
		if strings.Join(sections, ",") != strings.Join(want, ",") {
			t.Fatalf("sections %v, want %v", sections, want)
		}
		fetched := 0
		for _, name := range sections {
			var urls [][2]any
			urlsIn(ztp[name], &urls)
			for _, u := range urls {
				url := sw.resolveURL(t, u[0].(string), u[1])
				body := sw.fetch(t, lab, url)
				fetched++
				path := strings.TrimPrefix(url, base)
				switch {
				case strings.HasPrefix(path, "/images/") && name == "01-firmware":
					if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != lc.firmware.SHA256 {
						t.Fatalf("firmware sha256 mismatch")
					}
				case strings.HasPrefix(path, "/ztp/config/"):
					var cfg map[string]map[string]map[string]any
					if err := json.Unmarshal(body, &cfg); err != nil {
						t.Fatalf("config_db.json: %v\n%s", err, body)
					}
					host, _ := cfg["DEVICE_METADATA"]["localhost"]["hostname"].(string)
					if host != "lab-"+strings.ToLower(sw.serial) {
						t.Fatalf("hostname %q", host)
					}
					if _, ok := cfg["MGMT_INTERFACE"]["eth0|"+sw.ip+"/24"]; !ok {
						t.Fatalf("MGMT_INTERFACE %v", cfg["MGMT_INTERFACE"])
					}
					sw.hostname = host // configdb-json applies the host name
				case path == "/images/motd.txt":
					if string(body) != lc.motd {
						t.Fatalf("motd %q", body)
					}
				case strings.HasPrefix(path, "/files/"):
					if want := lc.files[strings.TrimPrefix(path, "/files/")]; string(body) != want {
						t.Fatalf("%s: got %q want %q", path, body, want)
					}
				default:
					t.Fatalf("unexpected URL %s in section %s", url, name)
				}
			}
		}
		if fetched != 6 {
			t.Fatalf("fetched %d URLs, want 6", fetched)
		}
	}
	// Progress: the store records ztp-served -> config-served -> image-served.
	lab.Stop()
	lab.Seed(func(db *boltstore.Store, _ *imagestore.Store) {
		db.View(func(tx core.Tx) error {
			d, err := tx.Devices().Get("52:54:00:47:00:0b")
			if err != nil {
				t.Fatal(err)
			}
			if d.State != core.StateImageServed || d.Profile != "lab-switch" || d.Product != "Lab-Switch" {
				t.Errorf("device after ZTP: state %s profile %s product %s", d.State, d.Profile, d.Product)
			}
			types := map[string]int{}
			tx.Events().List(core.DeviceEvents, 0, func(ev core.Event) (bool, error) {
				if ev.Device == d.ID {
					types[ev.Type]++
				}
				return true, nil
			})
			if types["ztp.json.served"] != 1 || types["ztp.config.served"] != 1 || types["image.served"] != 2 {
				t.Errorf("events of the device: %v", types)
			}
			return nil
		})
	})
}

func TestRefusals(t *testing.T) {
	lab, _ := setupLab(t)
	base := "http://" + lab.SrvIP + ":8080"
	code := func(src string, args ...string) (string, string) {
		t.Helper()
		out, err := lab.Run("curl", append([]string{"-s", "--interface", src, "-w", "\n%{http_code}"}, args...)...)
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		i := strings.LastIndex(out, "\n")
		return out[i+1:], out[:i]
	}
	// An address without a lease: 403 with a JSON reason.
	c, body := code(lab.Addr(31), "-A", "SONiC-ZTP/0.1", base+"/ztp/ztp.json")
	var e httpserve.ErrorBody
	if c != "403" || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error.Message, "holds no lease") || e.Error.Code != "refused" {
		t.Fatalf("unknown device: %s %s", c, body)
	}
	// Another switch's config: 403.
	if c, body := code(lab.Addr(12), base+"/ztp/config/52:54:00:47:00:0b/config_db.json"); c != "403" {
		t.Fatalf("foreign config: %s %s", c, body)
	}
	// Traversal, encoded or not, and a symlink out of the files directory.
	for _, p := range []string{"/images/..%2f..%2fztpd.db", "/images/%2e%2e%2fztpd.db", "/files/..%2f..%2fztpd.db",
		"/files/escape", "/isos/..%2fztpd.db", "/files/%2fetc%2fpasswd"} {
		c, body := code(lab.Addr(11), "--path-as-is", base+p)
		if c != "403" && c != "404" {
			t.Errorf("%s: %s %s", p, c, body)
		}
		if strings.Contains(body, "secret") || strings.Contains(body, "root:") {
			t.Errorf("%s leaked content", p)
		}
	}
	if c, _ := code(lab.Addr(11), "--path-as-is", base+"/files/../../etc/passwd"); c == "200" {
		t.Error("path traversal answered 200")
	}
}

// TestSpoofedSwitchGetsNothing: a second host on the management network
// quoting a switch's serial and base MAC (headers sonic-ztp would send) gets
// 403 for ztp.json and config_db.json, and nothing stored changes; the same
// headers from the lease holder work.
func TestSpoofedSwitchGetsNothing(t *testing.T) {
	lab, _ := setupLab(t)
	base := "http://" + lab.SrvIP + ":8080"
	victim := &switchSim{ip: lab.Addr(13), serial: "LAB0013", mac: "52:54:00:47:00:0d", product: "Lab-Switch", version: "SONiC.202311.1"}
	get := func(src, url string) (string, string) {
		t.Helper()
		args := append([]string{"-s", "--interface", src, "-A", "SONiC-ZTP/0.1", "-w", "\n%{http_code}"}, victim.headers()...)
		out, err := lab.Run("curl", append(args, "--", url)...)
		if err != nil {
			t.Fatalf("curl %s: %v\n%s", url, err, out)
		}
		i := strings.LastIndex(out, "\n")
		return out[i+1:], out[:i]
	}
	cfgURL := base + "/ztp/config/" + victim.mac + "/config_db.json"
	// From an address without a lease (31) and from another switch's (12).
	for _, src := range []string{lab.Addr(31), lab.Addr(12)} {
		for _, u := range []string{base + "/ztp/ztp.json", cfgURL} {
			if c, body := get(src, u); c != "403" || strings.Contains(body, "DEVICE_METADATA") || strings.Contains(body, "ztp-json-version") {
				t.Fatalf("%s from %s: %s %s", u, src, c, body)
			}
		}
	}
	// The lease holder with the same headers is served.
	if c, body := get(victim.ip, base+"/ztp/ztp.json"); c != "200" || !strings.Contains(body, "ztp-json-version") {
		t.Fatalf("holder: %s %s", c, body)
	}
	if c, body := get(victim.ip, cfgURL); c != "200" || !strings.Contains(body, "DEVICE_METADATA") {
		t.Fatalf("holder's config: %s %s", c, body)
	}
	lab.Stop()
	lab.Seed(func(db *boltstore.Store, _ *imagestore.Store) {
		db.View(func(tx core.Tx) error {
			for _, h := range []int{12, 13} {
				d, err := tx.Devices().Get(fmt.Sprintf("52:54:00:47:00:%02x", h))
				if err != nil {
					t.Fatal(err)
				}
				if d.Serial != fmt.Sprintf("LAB%04d", h) || d.IP != lab.Addr(h) {
					t.Errorf("device %s changed by the spoofed requests: serial %s ip %s", d.ID, d.Serial, d.IP)
				}
			}
			if _, err := tx.Devices().Get("52:54:00:47:00:1f"); err == nil {
				t.Error("a record was created for the host without a lease")
			}
			n, _ := tx.Devices().Count()
			if n != 5 {
				t.Errorf("%d device records, want the 5 seeded", n)
			}
			return nil
		})
	})
}

func TestImagesRangeETagAndISOs(t *testing.T) {
	lab, lc := setupLab(t)
	url := "http://" + lab.SrvIP + ":8080/images/" + lc.firmware.Name
	out, err := lab.Run("curl", "-s", "-D", "-", "-o", "/dev/null", url)
	if err != nil || !strings.Contains(out, `Etag: "`+lc.firmware.SHA256+`"`) || !strings.Contains(out, fmt.Sprintf("Content-Length: %d", lc.firmware.Size)) {
		t.Fatalf("headers: %v\n%s", err, out)
	}
	out, _ = lab.Run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", `If-None-Match: "`+lc.firmware.SHA256+`"`, url)
	if out != "304" {
		t.Fatalf("If-None-Match: %s", out)
	}
	out, _ = lab.Run("curl", "-s", "-r", "31-61", url)
	if out != "SONiC 202405.1 installer image\n" {
		t.Fatalf("range: %q", out)
	}
	// Interrupted download resumed with -C -.
	dst := filepath.Join(lab.Dir, "resume.bin")
	lab.Run("curl", "-s", "-r", "0-99999", "-o", dst, url)
	if out, err := lab.Run("curl", "-s", "-C", "-", "-o", dst, url); err != nil {
		t.Fatalf("resume: %v %s", err, out)
	}
	b, _ := os.ReadFile(dst)
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != lc.firmware.SHA256 {
		t.Fatal("resumed download differs")
	}
	for _, p := range []string{"/isos/k8s-1.31.4", "/isos/k8s-1.31.4.iso", "/images/" + lc.firmware.SHA256, "/images/" + lc.firmware.SHA256[:16]} {
		out, _ := lab.Run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://"+lab.SrvIP+":8080"+p)
		if out != "200" {
			t.Errorf("%s: %s", p, out)
		}
	}
	if out, _ := lab.Run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://"+lab.SrvIP+":8080/isos/motd.txt"); out != "404" {
		t.Errorf("a non-ISO under /isos: %s", out)
	}
}

// TestONIEInstaller fetches option 114's URL as ONIE does: by its headers
// (user agent onie/1.0), and by the DHCP vendor class of its lease alone.
func TestONIEInstaller(t *testing.T) {
	lab, lc := setupLab(t)
	url := "http://" + lab.SrvIP + ":8080/onie/installer"
	dst := filepath.Join(lab.Dir, "onie.bin")
	check := func(name string, args ...string) {
		t.Helper()
		u := url
		if n := len(args); n > 0 && strings.HasPrefix(args[n-1], "http://") {
			u, args = args[n-1], args[:n-1]
		}
		out, err := lab.Run("curl", append([]string{"-sf", "-A", "onie/1.0", "-o", dst}, append(args, u)...)...)
		if err != nil {
			t.Fatalf("%s: %v %s\n%s", name, err, out, lab.Log())
		}
		b, _ := os.ReadFile(dst)
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != lc.onie.SHA256 {
			t.Fatalf("%s: wrong installer (%d bytes)", name, len(b))
		}
	}
	check("headers", "--interface", lab.Addr(31), "-H", "ONIE-ARCH: x86_64", "-H", "ONIE-MACHINE: cel_e1031",
		"-H", "ONIE-MACHINE-REV: 0", "-H", "ONIE-SERIAL-NUMBER: CEL123", "-H", "ONIE-ETH-ADDR: 52:54:00:47:00:1f", "-H", "ONIE-OPERATION: os-install")
	check("vendor class of the lease", "--interface", lab.Addr(30))
	// Without option 114 ONIE walks its waterfall of names at the server root;
	// the name alone (no headers, no lease) selects the platform.
	root := "http://" + lab.SrvIP + ":8080/"
	check("waterfall, full name", "--interface", lab.Addr(31), root+"onie-installer-x86_64-cel_e1031-r0")
	check("waterfall, no revision, .bin", "--interface", lab.Addr(31), root+"onie-installer-x86_64-cel_e1031.bin")
	check("waterfall, bare name, lease", "--interface", lab.Addr(30), root+"onie-installer")
	if out, _ := lab.Run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", root+"onie-installerX"); out != "404" {
		t.Errorf("a name outside the waterfall: %s", out)
	}
	// A platform with no installer of its own gets the installer stored
	// without a platform (here the SONiC image), never another platform's.
	out, _ := lab.Run("curl", "-s", "-D", "-", "-o", "/dev/null", "--interface", lab.Addr(31), "-H", "ONIE-ARCH: arm64",
		"-H", "ONIE-MACHINE: nobody_box", url)
	if !strings.Contains(out, "X-Checksum-Sha256: "+lc.firmware.SHA256) {
		t.Fatalf("unknown platform: %s", out)
	}
}

// TestCloudInitCloudStackDatasource walks the metadata service as cloud-init's
// CloudStack datasource does: wait for instance-id, read user-data, crawl the
// meta-data index, then ask the password server on port 8080.
func TestCloudInitCloudStackDatasource(t *testing.T) {
	lab, _ := setupLab(t)
	vm := lab.Addr(20)
	get := func(url string, hdr ...string) (string, string) {
		args := []string{"-s", "--interface", vm, "-w", "\n%{http_code}"}
		for _, h := range hdr {
			args = append(args, "-H", h)
		}
		out, err := lab.Run("curl", append(args, url)...)
		if err != nil {
			t.Fatalf("%s: %v %s", url, err, out)
		}
		i := strings.LastIndex(out, "\n")
		return out[i+1:], out[:i]
	}
	md := "http://" + lab.SrvIP + "/latest/" // port 80: the metadata listener
	if c, v := get(md + "meta-data/instance-id"); c != "200" || v == "" {
		t.Fatalf("instance-id: %s %q", c, v)
	}
	if c, v := get(md + "user-data"); c != "200" || !strings.HasPrefix(v, "#cloud-config\nhostname: \"vm-1e0047000014\"") {
		t.Fatalf("user-data: %s %q", c, v)
	}
	c, idx := get(md + "meta-data/")
	if c != "200" {
		t.Fatalf("index: %s", c)
	}
	got := map[string]string{}
	for _, k := range strings.Fields(idx) {
		c, v := get(md + "meta-data/" + k)
		if c != "200" {
			t.Fatalf("%s: %s", k, c)
		}
		got[k] = v
	}
	want := map[string]string{"local-hostname": "vm-1e0047000014", "local-ipv4": vm, "availability-zone": "lab-zone",
		"service-offering": "small", "public-keys": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl lab@example"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("meta-data %s = %q, want %q", k, got[k], v)
		}
	}
	if got["vm-id"] != got["instance-id"] {
		t.Errorf("vm-id %q != instance-id %q", got["vm-id"], got["instance-id"])
	}
	if c, v := get("http://"+lab.SrvIP+":8080/", "DomU_Request: send_my_password"); c != "200" || v != "saved_password" {
		t.Errorf("password server: %s %q", c, v)
	}
	// An address without a lease gets nothing.
	out, _ := lab.Run("curl", "-s", "--interface", lab.Addr(31), "-o", "/dev/null", "-w", "%{http_code}", md+"meta-data/instance-id")
	if out != "403" {
		t.Errorf("unknown VM: %s", out)
	}
}
