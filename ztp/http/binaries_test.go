package ztphttp_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/binaries"
	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/isobuild"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/endpoints"
	ztphttp "github.com/ztpd/ztpd/ztp/http"
)

// binariesServer serves a ZTP listener whose image store holds a binaries
// ISO built by isobuild for Kubernetes 1.37.2 (CloudStack's layout:
// k8s/kubeadm, k8s/kubelet, k8s/kubectl beside other files), registered
// as that version. It returns the server and the binaries' content.
func binariesServer(t *testing.T) (*httptest.Server, map[string][]byte) {
	t.Helper()
	f := storetest.Open(t)
	devs := devices.New(devices.Options{Store: f.Store})
	t.Cleanup(func() { devs.Close() })
	ims, err := imagestore.Open(f.Store, f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewSource(17))
	bins := map[string][]byte{}
	for name, size := range map[string]int{"kubeadm": 300_001, "kubelet": 520_003, "kubectl": 2048} {
		b := make([]byte, size)
		rnd.Read(b)
		bins[name] = b
	}
	files := []isobuild.File{
		{Path: "cni/cni-plugins-amd64.tgz", Content: bytes.Repeat([]byte("cni"), 5000)},
		{Path: "kubelet.service", Content: []byte("[Unit]\n")},
	}
	for name, b := range bins {
		files = append(files, isobuild.File{Path: "k8s/" + name, Content: b, Mode: 0o755})
	}
	dir := t.TempDir()
	iso := filepath.Join(dir, "setup-v1.37.2.iso")
	if _, err := isobuild.Build(context.Background(), isobuild.Options{Files: files, Output: iso, TempDir: dir, NoFsync: true}); err != nil {
		t.Fatal(err)
	}
	im, _, err := ims.AddFile(context.Background(), iso, imagestore.Meta{Name: "setup-v1.37.2.iso", Kind: imagestore.KindBinariesISO}, "")
	if err != nil {
		t.Fatal(err)
	}
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		return tx.Versions().Put(core.Version{ID: "ver-1", Name: "v1.37.2", SemVer: "1.37.2", ImageID: im.SHA256, ISOName: im.Name,
			State: "Enabled", Created: time.Now()})
	})
	ep, _ := endpoints.New("", "127.0.0.1:0")
	svc, err := content.New(content.Options{Store: f.Store, Devices: devs, Images: ims, Binaries: binaries.New(f.Store, ims), Endpoints: ep})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	mux := http.NewServeMux()
	ztphttp.New(svc, nil, ztphttp.FrontDoor{}, nil).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, bins
}

func hexSum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func get(t *testing.T, method, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestBinariesFromTheVersionISO: each binary byte for byte from the ISO
// with its length and sha256, SHA256SUMS, HEAD, Range, revalidation;
// unknown versions and names and traversal attempts answer 404 through
// the one error writer and never a file.
func TestBinariesFromTheVersionISO(t *testing.T) {
	srv, bins := binariesServer(t)
	base := srv.URL + endpoints.BinariesPath + "v1.37.2/"

	var sums strings.Builder
	for _, name := range binaries.Names {
		want := bins[name]
		resp, body := get(t, "GET", base+name)
		if resp.StatusCode != 200 || !bytes.Equal(body, want) {
			t.Fatalf("GET %s: %d, %d bytes (want %d), equal %v", name, resp.StatusCode, len(body), len(want), bytes.Equal(body, want))
		}
		h := resp.Header
		if h.Get("Content-Length") != strconv.Itoa(len(want)) || h.Get("X-Checksum-Sha256") != hexSum(want) ||
			h.Get("ETag") != `"`+hexSum(want)+`"` || h.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("GET %s headers: %v", name, h)
		}
		fmt.Fprintf(&sums, "%s  %s\n", hexSum(want), name)

		resp, body = get(t, "HEAD", base+name)
		if resp.StatusCode != 200 || len(body) != 0 || resp.ContentLength != int64(len(want)) || resp.Header.Get("X-Checksum-Sha256") != hexSum(want) {
			t.Fatalf("HEAD %s: %d %d %v", name, resp.StatusCode, resp.ContentLength, resp.Header)
		}
		resp, _ = get(t, "GET", base+name, "If-None-Match", `"`+hexSum(want)+`"`)
		if resp.StatusCode != http.StatusNotModified {
			t.Fatalf("revalidation of %s: %d", name, resp.StatusCode)
		}
	}
	resp, body := get(t, "GET", base+"kubelet", "Range", "bytes=4000-8191")
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, bins["kubelet"][4000:8192]) {
		t.Fatalf("range: %d %d bytes", resp.StatusCode, len(body))
	}
	resp, body = get(t, "GET", base+binaries.SumsName)
	if resp.StatusCode != 200 || string(body) != sums.String() || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("SHA256SUMS: %d %v\n%s\nwant\n%s", resp.StatusCode, resp.Header, body, sums.String())
	}
	// The tag without its v names the same release.
	if resp, body = get(t, "GET", srv.URL+"/binaries/1.37.2/kubeadm"); resp.StatusCode != 200 || !bytes.Equal(body, bins["kubeadm"]) {
		t.Fatalf("1.37.2/kubeadm: %d", resp.StatusCode)
	}

	for _, c := range []struct{ path, msg string }{
		{"/binaries/v1.99.0/kubeadm", "no Kubernetes version v1.99.0"},
		{"/binaries/v1.99.0/SHA256SUMS", "no Kubernetes version v1.99.0"},
		{"/binaries/latest/kubeadm", "no Kubernetes version \"latest\""},
		{"/binaries/v1.37.2/cni-plugins-amd64.tgz", "no binary"},
		{"/binaries/v1.37.2/kubelet.service", "no binary"},
		{"/binaries/v1.37.2/..%2Fkubelet.service", "no binary"},
		{"/binaries/v1.37.2/..%2F..%2Fetc%2Fpasswd", "no binary"},
		{"/binaries/v1.37.2/k8s%2Fkubeadm", "no binary"},
		{"/binaries/..%2Fv1.37.2/kubeadm", "no Kubernetes version"},
		{"/binaries/v1.37.2%2F..%2Fv1.37.2/kubeadm", "no Kubernetes version"},
		{"/binaries/v1.37.2/KUBEADM", "no binary"},
	} {
		resp, body := get(t, "GET", srv.URL+c.path)
		var eb httpserve.ErrorBody
		if resp.StatusCode != 404 || json.Unmarshal(body, &eb) != nil || eb.Error.Code != "not_found" || !strings.Contains(eb.Error.Message, c.msg) {
			t.Errorf("GET %s: %d %s, want 404 %q", c.path, resp.StatusCode, body, c.msg)
		}
	}
}

// TestBinariesWithCurl: curl, a real client, fetches SHA256SUMS and the
// binaries and sha256sum -c checks them; literal ../ paths (--path-as-is)
// are redirected to their clean form, which following (-L) ends in a 404,
// never a file.
func TestBinariesWithCurl(t *testing.T) {
	for _, tool := range []string{"curl", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	srv, bins := binariesServer(t)
	dir := t.TempDir()
	base := srv.URL + "/binaries/v1.37.2/"
	for _, name := range append([]string{binaries.SumsName}, binaries.Names...) {
		if out, err := exec.Command("curl", "-fsS", "-o", filepath.Join(dir, name), base+name).CombinedOutput(); err != nil {
			t.Fatalf("curl %s: %v\n%s", name, err, out)
		}
	}
	cmd := exec.Command("sha256sum", "--strict", "-c", binaries.SumsName)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || strings.Count(string(out), ": OK") != 3 {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	for name, want := range bins {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(got, want) {
			t.Fatalf("%s differs", name)
		}
	}
	for _, p := range []string{"/binaries/v1.37.2/../../../etc/passwd", "/binaries/v1.37.2/../kubelet.service",
		"/binaries/v1.37.2/./../v1.37.2/k8s/kubeadm", "/binaries/v1.37.2/../../binaries/v1.37.2/k8s/kubeadm"} {
		out, err := exec.Command("curl", "-sS", "-L", "--path-as-is", "-o", filepath.Join(dir, "out"), "-w", "%{http_code}", srv.URL+p).Output()
		if err != nil {
			t.Fatalf("curl %s: %v", p, err)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "out"))
		if string(out) != "404" || bytes.Contains(got, bins["kubeadm"][:64]) || bytes.Contains(got, []byte("[Unit]")) {
			t.Errorf("curl --path-as-is %s: %s, %d bytes", p, out, len(got))
		}
	}
}
