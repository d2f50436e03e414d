// Package ipv6test runs the ztpd binary on a dual-stack link between two
// network namespaces and talks to it over IPv6 with real clients: curl -6
// for ztp.json, config_db.json, the device HTTPS listener, the metadata
// listener, the API and the console; tftp-hpa, busybox and atftp over
// IPv6; and ONIE's discovery without DHCP (ping6 ff02::1, then the
// waterfall names at the neighbour's link-local address). Addresses are
// 10.99.86.0/24, ULA fd99:86::/64 and link-local only.
package ipv6test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/testenv/e2etest"
)

const (
	srv6     = "fd99:86::1"
	sonic6   = "fd99:86::10" // a SONiC switch holding an IPv6 address
	vm6      = "fd99:86::11" // a VM holding an IPv6 address
	sonicMAC = "52:54:00:86:00:10"
	vmMAC    = "1e:00:86:00:00:11"
	sonic4   = 10            // the switch's IPv4 address, 10.99.86.10 (a second switch)
	stranger = "fd99:86::99" // an address nobody leased
	mac4     = "52:54:00:86:00:0a"
	platform = "x86_64-accton_as7712_32x-r0"
)

const profiles = `name: lab6-switch
match:
  kind: sonic
hostname: 'lab6-{{ .Serial | lower }}'
sonic:
  version: "202405.1"
  image: lab6-sonic-202405.1.bin
config_db:
  inline: |
    {"DEVICE_METADATA": {"localhost": {"type": "LeafRouter"}}}
sections:
  - name: download
    data:
      files:
        - url:
            source: '{{ .BaseURL }}/files/motd.txt'
            destination: /etc/motd
---
name: lab6-vm
match:
  kind: vm
hostname: 'vm6-{{ .MAC | macHex }}'
vm:
  availability_zone: lab-zone
  service_offering: small
  user_data:
    inline: |
      #cloud-config
      hostname: {{ .Hostname }}
`

type v6lab struct {
	*e2etest.Lab
	onieSHA string
}

func startV6Lab(t *testing.T) *v6lab {
	e2etest.RequireRoot(t, "curl", "tftp", "busybox", "atftp")
	lab := e2etest.NewLabPrefix(t, "z6", "w", 86, nil, nil)
	// ULA addresses without duplicate address detection, and the
	// link-local ones waited for, so the test does not race DAD.
	for _, a := range []struct{ ns, ifc, addr string }{
		{lab.Srv, lab.IfSrv, srv6 + "/64"}, {lab.Cli, lab.IfC, sonic6 + "/64"}, {lab.Cli, lab.IfC, vm6 + "/64"},
		{lab.Cli, lab.IfC, stranger + "/64"},
	} {
		if out, err := lab.RunIn(a.ns, "ip", "addr", "add", a.addr, "dev", a.ifc, "nodad"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	for _, n := range []struct{ ns, ifc string }{{lab.Srv, lab.IfSrv}, {lab.Cli, lab.IfC}} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, _ := lab.RunIn(n.ns, "ip", "-6", "addr", "show", "dev", n.ifc, "tentative")
			if strings.TrimSpace(out) == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: addresses still tentative:\n%s", n.ns, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	l := &v6lab{Lab: lab}
	onie := "#!/bin/sh\necho onie installer for accton over link-local\n"
	sum := sha256.Sum256([]byte(onie))
	l.onieSHA = hex.EncodeToString(sum[:])
	lab.Seed(func(db *boltstore.Store, ims *imagestore.Store) {
		ctx := context.Background()
		if _, _, err := ims.Add(ctx, strings.NewReader(strings.Repeat("SONiC 202405.1\n", 1000)), imagestore.Meta{Name: "lab6-sonic-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"}, ""); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ims.Add(ctx, strings.NewReader(onie), imagestore.Meta{Name: "onie-accton.bin", Kind: "onie-installer", Platform: platform}, ""); err != nil {
			t.Fatal(err)
		}
		// The leases DHCPv6 (and DHCPv4 for the second switch) would have
		// granted: identity on IPv6 is the same holder rule.
		err := db.Update(func(tx core.Tx) error {
			for _, d := range []core.Device{
				{ID: sonicMAC, MAC: sonicMAC, Kind: core.KindSONiC, Serial: "V6LAB0010", IP: sonic6, State: core.StateLeased},
				{ID: vmMAC, MAC: vmMAC, Kind: core.KindVM, IP: vm6, State: core.StateLeased},
				{ID: mac4, MAC: mac4, Kind: core.KindSONiC, Serial: "V4LAB0010", IP: lab.Addr(sonic4), State: core.StateLeased},
			} {
				if err := tx.Devices().Put(d); err != nil {
					return err
				}
				if err := tx.Leases().Put(core.Lease{IP: d.IP, MAC: d.MAC, State: core.LeaseActive, Reserved: true}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	files := filepath.Join(lab.DataDir, "files")
	os.MkdirAll(files, 0o755)
	os.WriteFile(filepath.Join(files, "motd.txt"), []byte("served over IPv6\n"), 0o644)
	big := make([]byte, 300*1024+17)
	for i := range big {
		big[i] = byte(i * 7)
	}
	os.WriteFile(filepath.Join(files, "big.bin"), big, 0o644)
	prof := filepath.Join(lab.Dir, "profiles.yaml")
	os.WriteFile(prof, []byte(profiles), 0o644)
	lab.Start(fmt.Sprintf(`advertise_addr: %s
advertise_addr6: '[%s]'
profiles: [%s]
http:
  addr: '[::]:8080'
  metadata_addr: '[%s]:80'
  onie_link_local: [%s]
  tls: {enabled: true, addr: '[::]:443'}
api: {addr: '[%s]:8443'}
tftp: {enabled: true, addr: '[::]:69', window: 8}
`, lab.SrvIP, srv6, prof, srv6, lab.IfSrv, srv6))
	return l
}

// curl6 runs curl -6 from the client namespace with source address src.
func (l *v6lab) curl6(t *testing.T, src string, args ...string) string {
	t.Helper()
	out, err := l.Run("curl", append([]string{"-6", "-sS", "--fail-with-body", "-m", "10", "--interface", src}, args...)...)
	if err != nil {
		t.Fatalf("curl %v: %v\n%s\nserver log (tail):\n%s", args, err, out, tail(l.Log(), 30))
	}
	return out
}

var urlRE = regexp.MustCompile(`https?://[^"\s]+`)

// TestIPv6Everywhere: one dual-stack appliance, every device-facing door
// and the API over IPv6, and URLs in the family each device asked over.
func TestIPv6Everywhere(t *testing.T) {
	l := startV6Lab(t)
	base6 := "http://[" + srv6 + "]:8080"

	t.Run("ztp.json over IPv6 has bracketed IPv6 URLs", func(t *testing.T) {
		doc := l.curl6(t, sonic6, "-H", "SERIAL-NUMBER: V6LAB0010", "-H", "SONiC-VERSION: N.A", base6+"/ztp/ztp.json")
		var v map[string]any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("ztp.json: %v\n%s", err, doc)
		}
		urls := urlRE.FindAllString(doc, -1)
		if len(urls) < 3 {
			t.Fatalf("ztp.json names %d URLs:\n%s", len(urls), doc)
		}
		for _, u := range urls {
			if !strings.HasPrefix(u, base6+"/") {
				t.Errorf("URL %s is not on %s", u, base6)
			}
		}
		// config_db.json, fetched from the URL ztp.json names.
		var cfgURL string
		for _, u := range urls {
			if strings.HasSuffix(u, "/config_db.json") {
				cfgURL = u
			}
		}
		if cfgURL == "" {
			t.Fatalf("no config_db.json URL in:\n%s", doc)
		}
		if out := l.curl6(t, sonic6, cfgURL); !strings.Contains(out, "LeafRouter") {
			t.Errorf("config_db.json: %s", out)
		}
		if out := l.curl6(t, sonic6, base6+"/files/motd.txt"); out != "served over IPv6\n" {
			t.Errorf("motd: %q", out)
		}
	})

	t.Run("the same appliance answers IPv4 in IPv4", func(t *testing.T) {
		doc, err := l.Run("curl", "-4", "-sS", "--fail-with-body", "-m", "10", "-H", "SERIAL-NUMBER: V4LAB0010", "-H", "SONiC-VERSION: N.A",
			"http://"+l.SrvIP+":8080/ztp/ztp.json")
		if err != nil {
			t.Fatalf("%v: %s", err, doc)
		}
		for _, u := range urlRE.FindAllString(doc, -1) {
			if !strings.HasPrefix(u, "http://"+l.SrvIP+":8080/") {
				t.Errorf("IPv4 device got %s", u)
			}
		}
	})

	t.Run("device HTTPS listener over IPv6", func(t *testing.T) {
		doc := l.curl6(t, sonic6, "-k", "-H", "SERIAL-NUMBER: V6LAB0010", "-H", "SONiC-VERSION: N.A", "https://["+srv6+"]/ztp/ztp.json")
		if !strings.Contains(doc, base6+"/") {
			t.Errorf("ztp.json over HTTPS without IPv6 URLs:\n%s", doc)
		}
	})

	t.Run("metadata listener over IPv6", func(t *testing.T) {
		out := l.curl6(t, vm6, "http://["+srv6+"]/latest/meta-data/local-hostname")
		if !strings.HasPrefix(out, "vm6-") {
			t.Errorf("local-hostname: %q", out)
		}
	})

	t.Run("a stranger over IPv6 is refused", func(t *testing.T) {
		out, err := l.Run("curl", "-6", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-m", "10", "--interface", stranger,
			base6+"/ztp/ztp.json")
		if err != nil || out != "403" {
			t.Errorf("stranger: %v %s", err, out)
		}
	})

	t.Run("API and console over IPv6", func(t *testing.T) {
		api := "https://[" + srv6 + "]:8443"
		out, err := l.Run("curl", "-6", "-sk", "-m", "10", "-w", "\n%{http_code}", api+"/api/v1/devices")
		if err != nil || !strings.HasSuffix(out, "\n401") || !strings.Contains(out, `"error"`) {
			t.Errorf("unsigned API request over IPv6: %v\n%s", err, out)
		}
		page := l.curl6(t, sonic6, "-k", api+"/devices")
		if !strings.Contains(page, "signin-form") {
			t.Errorf("console sign-in page over IPv6:\n%s", tail(page, 10))
		}
	})

	t.Run("TFTP over IPv6", func(t *testing.T) {
		want := sha(t, filepath.Join(l.DataDir, "files", "big.bin"))
		dst := filepath.Join(l.Dir, "got.bin")
		for name, cmd := range map[string][]string{
			"tftp-hpa -6":       {"tftp", "-6", "-m", "binary", srv6, "-c", "get", "big.bin", dst},
			"busybox tftp":      {"busybox", "tftp", "-b", "1428", "-g", "-r", "big.bin", "-l", dst, srv6},
			"atftp windowsize":  {"atftp", "--option", "blksize 1428", "--option", "windowsize 8", "-g", "-r", "big.bin", "-l", dst, srv6},
			"curl tftp over v6": {"curl", "-6", "-sS", "--tftp-blksize", "1428", "-o", dst, "tftp://[" + srv6 + "]/big.bin"},
		} {
			os.Remove(dst)
			out, err := l.Run(cmd[0], cmd[1:]...)
			if err != nil {
				t.Errorf("%s: %v\n%s", name, err, out)
				continue
			}
			if got := sha(t, dst); got != want {
				t.Errorf("%s: sha256 %s, want %s\n%s", name, got, want, out)
			}
		}
		// RFC 7440: the window was granted over IPv6.
		out, err := l.Run("atftp", "--trace", "--option", "blksize 1428", "--option", "windowsize 8", "-g", "-r", "big.bin", "-l", "/dev/null", srv6)
		if err != nil || !strings.Contains(out, "windowsize: 8") {
			t.Errorf("windowsize over IPv6: %v\n%s", err, firstLines(out, 10))
		}
	})

	t.Run("ONIE discovers the installer by link-local neighbour", func(t *testing.T) {
		// As ONIE's discover, with its busybox: ping6 ff02::1 on the
		// management port, then every IPv6 neighbour's waterfall names
		// over HTTP, port 80.
		if out, err := l.Run("busybox", "ping6", "-I", l.IfC, "-c", "2", "-w", "5", "ff02::1"); err != nil {
			t.Fatalf("ping6 ff02::1: %v\n%s", err, out)
		}
		neigh, _ := l.Run("ip", "-6", "neigh", "show", "dev", l.IfC)
		srvLL := l.linkLocal(t, l.Srv, l.IfSrv)
		if !strings.Contains(neigh, srvLL.String()) {
			t.Fatalf("the appliance's %s is not among the neighbours:\n%s", srvLL, neigh)
		}
		url := fmt.Sprintf("http://[%s%%25%s]/onie-installer-%s", srvLL, l.IfC, platform)
		dst := filepath.Join(l.Dir, "onie-installer")
		out, err := l.Run("curl", "-6", "-sS", "--fail-with-body", "-m", "10", "-o", dst,
			"-H", "ONIE-ARCH: x86_64", "-H", "ONIE-MACHINE: accton_as7712_32x", "-H", "ONIE-MACHINE-REV: 0",
			"-H", "ONIE-VENDOR-ID: 259", "-H", "ONIE-SERIAL-NUMBER: ONIE6LL01", url)
		if err != nil {
			t.Fatalf("%s: %v\n%s\nserver log (tail):\n%s", url, err, out, tail(l.Log(), 30))
		}
		if got := sha(t, dst); got != l.onieSHA {
			t.Fatalf("installer sha256 %s, want %s", got, l.onieSHA)
		}
		// Only the waterfall is served on link-local.
		code, _ := l.Run("curl", "-6", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "5", fmt.Sprintf("http://[%s%%25%s]/ztp/ztp.json", srvLL, l.IfC))
		if code != "404" {
			t.Errorf("ztp.json on the link-local listener: %s", code)
		}
		// The neighbour is recorded as an ONIE device, its MAC from the
		// link, without a lease.
		cliMAC, err := macOf(l, l.Cli, l.IfC)
		if err != nil {
			t.Fatal(err)
		}
		l.Stop()
		l.Seed(func(db *boltstore.Store, _ *imagestore.Store) {
			db.View(func(tx core.Tx) error {
				d, err := tx.Devices().Get(cliMAC)
				if err != nil {
					t.Fatalf("no device %s after the link-local fetch: %v\nserver log (tail):\n%s", cliMAC, err, tail(l.Log(), 30))
				}
				if d.Kind != core.KindONIE || d.State != core.StateImageServed || d.Serial != "ONIE6LL01" {
					t.Errorf("device %s: kind %s state %s serial %q ip %s", d.ID, d.Kind, d.State, d.Serial, d.IP)
				}
				if _, err := tx.Leases().Get(d.IP); err == nil {
					t.Errorf("a lease exists for %s", d.IP)
				}
				return nil
			})
		})
	})
}

// linkLocal is the fe80:: address of ifc in namespace ns.
func (l *v6lab) linkLocal(t *testing.T, ns, ifc string) netip.Addr {
	t.Helper()
	out, err := l.RunIn(ns, "ip", "-6", "-o", "addr", "show", "dev", ifc, "scope", "link")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, f := range strings.Fields(out) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().IsLinkLocalUnicast() {
			return p.Addr()
		}
	}
	t.Fatalf("%s has no link-local address:\n%s", ifc, out)
	return netip.Addr{}
}

func macOf(l *v6lab, ns, ifc string) (string, error) {
	out, err := l.RunIn(ns, "cat", "/sys/class/net/"+ifc+"/address")
	return strings.TrimSpace(out), err
}

func sha(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
