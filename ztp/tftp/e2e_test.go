package tftp_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/testenv/e2etest"
)

const (
	devHost  = 11 // a SONiC switch with a lease
	strange  = 30 // an address without a lease
	imgName  = "lab-image.bin"
	imgSize  = 3*1024*1024 + 777 // not a multiple of any block size
	devMAC   = "52:54:00:48:00:0b"
	devSer   = "TLAB0011"
	labNet   = 48
	labShort = "zt"
)

type tlab struct {
	*e2etest.Lab
	sha string
}

func startLab(t *testing.T, tftpYAML string, mtu int) *tlab {
	return startLabOpts(t, tftpYAML, mtu, true)
}

// startLabOpts with wildcard false... binds TFTP to 0.0.0.0 and gives the
// server a second address (.2), without an advertise address.
func startLabOpts(t *testing.T, tftpYAML string, mtu int, specific bool) *tlab {
	e2etest.RequireRoot(t, "curl", "tftp", "atftp")
	var extraSrv []int
	if !specific {
		extraSrv = []int{2}
	}
	lab := e2etest.NewLab(t, labShort, labNet, extraSrv, []int{devHost, strange})
	if mtu > 0 {
		if out, err := lab.RunIn(lab.Srv, "ip", "link", "set", lab.IfSrv, "mtu", fmt.Sprint(mtu)); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		if out, err := lab.Run("ip", "link", "set", lab.IfC, "mtu", fmt.Sprint(mtu)); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	img := make([]byte, imgSize)
	rand.Read(img)
	sum := sha256.Sum256(img)
	tl := &tlab{Lab: lab, sha: hex.EncodeToString(sum[:])}
	lab.Seed(func(db *boltstore.Store, ims *imagestore.Store) {
		if _, _, err := ims.Add(context.Background(), strings.NewReader(string(img)), imagestore.Meta{Name: imgName, Kind: "sonic-installer", Version: "202405.1"}, ""); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ims.Add(context.Background(), strings.NewReader("onie installer for accton"), imagestore.Meta{Name: "onie-accton.bin", Kind: "onie-installer", Platform: "x86_64-accton_as7712_32x-r0"}, ""); err != nil {
			t.Fatal(err)
		}
		err := db.Update(func(tx core.Tx) error {
			d := core.Device{ID: devMAC, MAC: devMAC, Kind: core.KindSONiC, Serial: devSer, IP: lab.Addr(devHost), State: core.StateLeased,
				VendorClass: "onie_vendor:x86_64-accton_as7712_32x-r0"}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			return tx.Leases().Put(core.Lease{IP: d.IP, MAC: d.MAC, State: core.LeaseActive})
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	files := filepath.Join(lab.DataDir, "files")
	os.MkdirAll(filepath.Join(files, "pxe"), 0o755)
	os.WriteFile(filepath.Join(files, "pxe", "boot.cfg"), []byte("boot config\n"), 0o644)
	os.WriteFile(filepath.Join(lab.Dir, "secret.txt"), []byte("secret"), 0o644)
	os.Symlink(filepath.Join(lab.Dir, "secret.txt"), filepath.Join(files, "escape"))
	prof, _ := filepath.Abs("testdata/profiles")
	if specific {
		lab.Start(fmt.Sprintf("advertise_addr: %s\nhttp: {addr: '%s:8080'}\nprofiles: [%s]\ntftp: {enabled: true, addr: '%s:69'%s}\n",
			lab.SrvIP, lab.SrvIP, prof, lab.SrvIP, tftpYAML))
	} else {
		lab.Start(fmt.Sprintf("http: {addr: ':8080'}\nprofiles: [%s]\ntftp: {enabled: true, addr: ':69'%s}\n", prof, tftpYAML))
	}
	return tl
}

func (tl *tlab) sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v\nserver log:\n%s", err, tl.Log())
	}
	os.Remove(path)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fetchAll fetches the image with curl, tftp-hpa and atftp and checks the
// sha256 of each copy.
func (tl *tlab) fetchAll(t *testing.T) {
	dst := filepath.Join(tl.Dir, "got.bin")
	clients := map[string][]string{
		"curl 1468":      {"curl", "-sS", "--tftp-blksize", "1468", "-o", dst, "tftp://" + tl.SrvIP + "/" + imgName},
		"curl default":   {"curl", "-sS", "-o", dst, "tftp://" + tl.SrvIP + "/images/" + imgName},
		"curl by sha256": {"curl", "-sS", "--tftp-blksize", "1024", "-o", dst, "tftp://" + tl.SrvIP + "/images/" + tl.sha},
		"tftp-hpa":       {"tftp", "-m", "binary", tl.SrvIP, "-c", "get", imgName, dst},
		"atftp":          {"atftp", "--option", "blksize 1468", "--option", "tsize 0", "-g", "-r", imgName, "-l", dst, tl.SrvIP},
	}
	for name, cmd := range clients {
		out, err := tl.Run(cmd[0], cmd[1:]...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if got := tl.sha256File(t, dst); got != tl.sha {
			t.Fatalf("%s: sha256 %s, want %s (output %s)", name, got, tl.sha, out)
		}
	}
}

func TestClientsFetchImages(t *testing.T) {
	tl := startLab(t, "", 0)
	tl.fetchAll(t)
	if p := replyPort(t, tl); p == "69" {
		t.Fatalf("default mode answered from port 69")
	}
	// blksize: 8000 requested over a 1500-byte MTU is capped at 1468.
	out, err := tl.Run("atftp", "--trace", "--option", "blksize 8000", "-g", "-r", imgName, "-l", "/dev/null", tl.SrvIP)
	if err != nil || !strings.Contains(out, "blksize: 1468") {
		t.Fatalf("blksize cap: %v\n%s", err, firstLines(out, 8))
	}
	if m := regexp.MustCompile(`received OACK <[^>]*tsize: (\d+)`).FindStringSubmatch(mustRun(t, tl, "atftp", "--trace", "--option", "tsize 0", "-g", "-r", imgName, "-l", "/dev/null", tl.SrvIP)); m == nil || m[1] != fmt.Sprint(imgSize) {
		t.Fatalf("tsize answer %v", m)
	}
	// Files directory and ONIE waterfall names.
	if out := mustRun(t, tl, "curl", "-sS", "tftp://"+tl.SrvIP+"/pxe/boot.cfg"); out != "boot config\n" {
		t.Fatalf("files: %q", out)
	}
	for _, n := range []string{"onie-installer-x86_64-accton_as7712_32x-r0", "onie-installer-x86_64-accton_as7712_32x", "onie-installer"} {
		out := mustRun(t, tl, "curl", "-sS", "--interface", tl.Addr(devHost), "tftp://"+tl.SrvIP+"/"+n)
		if out != "onie installer for accton" {
			t.Fatalf("%s: %q", n, out)
		}
	}
}

func TestSinglePortAndSmallMTU(t *testing.T) {
	tl := startLab(t, ", single_port: true", 1400)
	tl.fetchAll(t)
	if p := replyPort(t, tl); p != "69" {
		t.Fatalf("single-port mode answered from port %s", p)
	}
	out, err := tl.Run("atftp", "--trace", "--option", "blksize 8000", "-g", "-r", imgName, "-l", "/dev/null", tl.SrvIP)
	if err != nil || !strings.Contains(out, "blksize: 1368") {
		t.Fatalf("blksize cap at MTU 1400: %v\n%s", err, firstLines(out, 8))
	}
}

func TestZTPJSONOverTFTPByClientAddress(t *testing.T) {
	tl := startLab(t, "", 0)
	// What a switch does with option 66 = server and a relative option 67.
	opt66, opt67 := tl.SrvIP, "ztp/ztp.json"
	url := "tftp://" + opt66 + "/" + opt67
	out := mustRun(t, tl, "curl", "-sS", "-f", "-A", "SONiC-ZTP/0.1", "--interface", tl.Addr(devHost), url)
	var doc map[string]map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	cfg := doc["ztp"]["01-configdb-json"].(map[string]any)["url"].(map[string]any)["source"].(string)
	if cfg != "http://"+tl.SrvIP+":8080/ztp/config/"+devMAC+"/config_db.json" {
		t.Fatalf("config url %s", cfg)
	}
	// The config over TFTP, only to its device.
	out = mustRun(t, tl, "curl", "-sS", "--interface", tl.Addr(devHost), "tftp://"+tl.SrvIP+"/ztp/config/"+devMAC+"/config_db.json")
	if !strings.Contains(out, `"hostname": "tlab-tlab0011"`) || !strings.Contains(out, `"eth0|`+tl.Addr(devHost)+`/24"`) {
		t.Fatalf("config_db over tftp: %s", out)
	}
	if out, err := tl.Run("curl", "-sS", "--interface", tl.Addr(strange), "tftp://"+tl.SrvIP+"/ztp/config/"+devMAC+"/config_db.json"); err == nil {
		t.Fatalf("config served to a stranger: %s", out)
	}
	// An address without a lease gets no ztp.json.
	if out, err := tl.Run("curl", "-sS", "--interface", tl.Addr(strange), "tftp://"+tl.SrvIP+"/ztp.json"); err == nil {
		t.Fatalf("ztp.json served to an unknown address: %s", out)
	}
}

func TestTraversalAndWritesRefused(t *testing.T) {
	tl := startLab(t, "", 0)
	dst := filepath.Join(tl.Dir, "leak")
	for _, name := range []string{"../ztpd.db", "../../../etc/passwd", "/etc/passwd", "escape", "pxe/../../ztpd.db", "images/../ztpd.db"} {
		for _, cmd := range [][]string{
			{"tftp", "-m", "binary", tl.SrvIP, "-c", "get", name, dst},
			{"atftp", "-g", "-r", name, "-l", dst, tl.SrvIP},
		} {
			out, _ := tl.Run(cmd[0], cmd[1:]...)
			b, _ := os.ReadFile(dst)
			os.Remove(dst)
			if len(b) > 0 {
				t.Fatalf("%s %q: got %d bytes (%s)", cmd[0], name, len(b), out)
			}
			if !strings.Contains(strings.ToLower(out), "error") && !strings.Contains(out, "aborting") {
				t.Errorf("%s %q: no error reported: %s", cmd[0], name, out)
			}
		}
	}
	src := filepath.Join(tl.Dir, "upload")
	os.WriteFile(src, []byte("should not land"), 0o644)
	out, _ := tl.Run("tftp", "-m", "binary", tl.SrvIP, "-c", "put", src, "uploaded")
	if !strings.Contains(out, "read-only") {
		t.Errorf("tftp put: %s", out)
	}
	out, _ = tl.Run("atftp", "-p", "-l", src, "-r", "uploaded", tl.SrvIP)
	if !strings.Contains(out, "read-only") {
		t.Errorf("atftp put: %s", out)
	}
	tl.Stop()
	matches, _ := filepath.Glob(filepath.Join(tl.DataDir, "**", "uploaded"))
	if _, err := os.Stat(filepath.Join(tl.DataDir, "files", "uploaded")); err == nil || len(matches) > 0 {
		t.Error("a write request created a file")
	}
}

// TestSinglePortWildcardAnswersFromTheAddressAsked: bound to 0.0.0.0 on a
// server with two addresses, replies leave from the address the client used,
// and URLs in ztp.json name it (no advertise address is configured).
func TestSinglePortWildcardAnswersFromTheAddressAsked(t *testing.T) {
	tl := startLabOpts(t, ", single_port: true", 0, false)
	second := tl.Addr(2)
	if from := replySource(t, tl, second); from != second+" 69" {
		t.Fatalf("reply from %q, want %s 69", from, second)
	}
	dst := filepath.Join(tl.Dir, "got.bin")
	mustRun(t, tl, "curl", "-sS", "--tftp-blksize", "1468", "-o", dst, "tftp://"+second+"/"+imgName)
	if got := tl.sha256File(t, dst); got != tl.sha {
		t.Fatal("sha256 mismatch")
	}
	out := mustRun(t, tl, "curl", "-sS", "--interface", tl.Addr(devHost), "tftp://"+second+"/ztp.json")
	if !strings.Contains(out, "http://"+second+":8080/ztp/config/"+devMAC+"/config_db.json") {
		t.Fatalf("ztp.json does not point at the address asked:\n%s", out)
	}
}

// replyPort sends one RRQ and reports the UDP port the first answer comes
// from: 69 in single-port mode, an ephemeral port otherwise.
func replyPort(t *testing.T, tl *tlab) string {
	f := strings.Fields(replySource(t, tl, tl.SrvIP))
	return f[len(f)-1]
}

// replySource sends one RRQ to server and reports "<address> <port>" of the
// first answer.
func replySource(t *testing.T, tl *tlab, server string) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 for the raw TFTP probe")
	}
	probe := `import socket,sys
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind((sys.argv[2],0)); s.settimeout(5)
s.sendto(b'\x00\x01'+sys.argv[3].encode()+b'\x00octet\x00',(sys.argv[1],69))
d,a=s.recvfrom(2048); print(a[0], a[1]); s.sendto(b'\x00\x05\x00\x00probe done\x00',a)`
	return strings.TrimSpace(mustRun(t, tl, "python3", "-c", probe, server, tl.CliIP, imgName))
}

func mustRun(t *testing.T, tl *tlab, name string, args ...string) string {
	t.Helper()
	out, err := tl.Run(name, args...)
	if err != nil {
		t.Fatalf("%s %v: %v\n%s\nserver log:\n%s", name, args, err, out, tl.Log())
	}
	return out
}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n")
}
