package isobuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/bom"
)

// fakeUpstream serves release files like dl.k8s.io and GitHub releases do,
// with Range support (http.ServeContent) and .sha256 files next to them.
type fakeUpstream struct {
	*httptest.Server
	files    map[string][]byte
	mu       sync.Mutex
	ranges   []string // Range headers seen
	inFlight atomic.Int32
	maxInFl  atomic.Int32
	delay    time.Duration
	cutAfter map[string]int // close the connection after n body bytes, once
}

func newUpstream(t *testing.T) *fakeUpstream {
	u := &fakeUpstream{files: map[string][]byte{}, cutAfter: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.inFlight.Add(1)
		defer u.inFlight.Add(-1)
		for {
			m := u.maxInFl.Load()
			if n <= m || u.maxInFl.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(u.delay)
		u.mu.Lock()
		if rg := r.Header.Get("Range"); rg != "" {
			u.ranges = append(u.ranges, r.URL.Path+" "+rg)
		}
		body, ok := u.files[r.URL.Path]
		cut, doCut := u.cutAfter[r.URL.Path]
		delete(u.cutAfter, r.URL.Path)
		u.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		if doCut { // send part of the body, then drop the connection
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.WriteHeader(200)
			w.Write(body[:cut])
			w.(http.Flusher).Flush()
			hj, _, _ := w.(http.Hijacker).Hijack()
			hj.Close()
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *fakeUpstream) add(p string, body []byte, withSum bool) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.files[p] = body
	s := sha256.Sum256(body)
	sum := hex.EncodeToString(s[:])
	if withSum {
		u.files[p+".sha256"] = []byte(sum + "  " + filepath.Base(p) + "\n")
	}
	return sum
}

func randBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func TestDownloadVerifyBuild(t *testing.T) {
	up := newUpstream(t)
	up.delay = 50 * time.Millisecond
	kubeadm := randBytes(300_000, 1)
	kubelet := randBytes(500_000, 2)
	cni := randBytes(120_000, 3)
	up.add("/release/v1.31.4/bin/linux/amd64/kubeadm", kubeadm, true)
	up.add("/release/v1.31.4/bin/linux/amd64/kubelet", kubelet, true)
	cniSum := up.add("/cni/v1.5.1/cni-plugins-linux-amd64-v1.5.1.tgz", cni, false)
	up.add("/calico.yaml", []byte("kind: DaemonSet\n"), false)

	doc := fmt.Sprintf(`kubernetesVersion: 1.31.4
arches: [amd64]
artifacts:
  - {name: kubeadm, path: k8s/kubeadm, mode: "0755", url: "%[1]s/release/{{.Version}}/bin/linux/{{.Arch}}/kubeadm", sha256URL: "%[1]s/release/{{.Version}}/bin/linux/{{.Arch}}/kubeadm.sha256"}
  - {name: kubelet, path: k8s/kubelet, mode: "0755", url: "%[1]s/release/{{.Version}}/bin/linux/{{.Arch}}/kubelet", sha256URL: "%[1]s/release/{{.Version}}/bin/linux/{{.Arch}}/kubelet.sha256"}
  - {name: cni-plugins, version: v1.5.1, path: "cni/cni-plugins-{{.Arch}}.tgz", url: "%[1]s/cni/{{.Version}}/cni-plugins-linux-{{.Arch}}-{{.Version}}.tgz", sha256: %[2]s}
  - {name: network, path: network.yaml, url: "%[1]s/calico.yaml"}
  - {name: kubelet.service, path: kubelet.service, content: "[Service]\nExecStart=/opt/bin/kubelet\n"}
  - {name: pause-image, image: "registry.k8s.io/pause:3.10"}
`, up.URL, cniSum)
	b, err := bom.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	items, err := b.Resolve("amd64")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	fromDir := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(fromDir, "docker"), 0o755)
	pause := randBytes(4096, 4)
	os.WriteFile(filepath.Join(fromDir, "docker", "pause:3.10.tar"), pause, 0o644)

	// The unpinned manifest is refused without --allow-unpinned, by name.
	so := SourceOptions{FromDir: fromDir, CacheDir: cache}
	_, _, err = ResolveSources(context.Background(), items, so)
	if err == nil || !strings.Contains(err.Error(), "artifact network") || !strings.Contains(err.Error(), "--allow-unpinned") {
		t.Fatalf("unpinned download: %v", err)
	}

	// Resume: a partial download of kubelet is already in the cache.
	d := newDownloader(so, nil)
	var kubeletItem bom.Item
	for _, it := range items {
		if it.Name == "kubelet" {
			kubeletItem = it
		}
	}
	part := d.cachePath(kubeletItem.URL) + ".part"
	os.MkdirAll(filepath.Dir(part), 0o755)
	os.WriteFile(part, kubelet[:200_000], 0o644)
	// And kubeadm's connection drops halfway through on the first try.
	up.cutAfter["/release/v1.31.4/bin/linux/amd64/kubeadm"] = 100_000

	var got atomic.Int64
	so.AllowUnpinned = true
	so.Progress = func(n int64) { got.Add(n) }
	files, _, err := ResolveSources(context.Background(), items, so)
	if err != nil {
		t.Fatal(err)
	}
	up.mu.Lock()
	ranges := strings.Join(up.ranges, "; ")
	up.mu.Unlock()
	if !strings.Contains(ranges, "kubelet bytes=200000-") {
		t.Errorf("kubelet download did not resume from byte 200000: ranges %q", ranges)
	}
	if !strings.Contains(ranges, "kubeadm bytes=100000-") {
		t.Errorf("kubeadm download did not resume after the dropped connection: ranges %q", ranges)
	}
	if up.maxInFl.Load() < 2 {
		t.Errorf("downloads did not run in parallel (max %d in flight)", up.maxInFl.Load())
	}
	if want := int64(len(kubeadm) + len(kubelet) - 200_000 + len(cni) + 16); got.Load() != want {
		t.Errorf("progress reported %d bytes, want %d", got.Load(), want)
	}
	if entries, _ := filepath.Glob(filepath.Join(cache, "*", "*.part")); len(entries) != 0 {
		t.Errorf("partial files left in the cache: %v", entries)
	}

	iso := filepath.Join(dir, "k8s.iso")
	res, err := Build(context.Background(), Options{Files: files, Output: iso})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"k8s/kubeadm": kubeadm, "k8s/kubelet": kubelet, "cni/cni-plugins-amd64.tgz": cni,
		"network.yaml": []byte("kind: DaemonSet\n"), "docker/pause:3.10.tar": pause, "kubelet.service": []byte("[Service]\nExecStart=/opt/bin/kubelet\n")}
	if len(res.Files) != len(want) {
		t.Fatalf("files = %+v", res.Files)
	}
	for _, f := range res.Files {
		s := sha256.Sum256(want[f.Path])
		if f.SHA256 != hex.EncodeToString(s[:]) {
			t.Errorf("%s: sha256 %s", f.Path, f.SHA256)
		}
		pinned := f.Path != "docker/pause:3.10.tar" && f.Path != "network.yaml"
		if f.Pinned != pinned {
			t.Errorf("%s: pinned = %v, want %v", f.Path, f.Pinned, pinned)
		}
	}

	// A second build uses the cache: no new requests for the binaries.
	up.mu.Lock()
	up.files["/release/v1.31.4/bin/linux/amd64/kubelet"] = []byte("must not be fetched")
	up.mu.Unlock()
	if _, _, err := ResolveSources(context.Background(), items, so); err != nil {
		t.Fatalf("cached build: %v", err)
	}
}

func TestDownloadBadChecksum(t *testing.T) {
	up := newUpstream(t)
	real := randBytes(50_000, 5)
	up.add("/kubectl", real, false)
	// The upstream checksum file says something else: a tampered mirror.
	wrong := strings.Repeat("ab", 32)
	up.files["/kubectl.sha256"] = []byte(wrong + "\n")
	doc := fmt.Sprintf("kubernetesVersion: 1.31.4\narches: [amd64]\nartifacts:\n  - {name: kubectl, path: k8s/kubectl, mode: \"0755\", url: \"%[1]s/kubectl\", sha256URL: \"%[1]s/kubectl.sha256\"}\n", up.URL)
	b, err := bom.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	items, _ := b.Resolve("amd64")
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	_, _, err = ResolveSources(context.Background(), items, SourceOptions{CacheDir: cache})
	var ce *ChecksumError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a ChecksumError", err)
	}
	s := sha256.Sum256(real)
	if !strings.Contains(err.Error(), "kubectl") || !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), hex.EncodeToString(s[:])) {
		t.Errorf("error should name the artifact and both hashes: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(cache, "*", "*"))
	if len(left) != 0 {
		t.Errorf("bytes that failed verification stayed in the cache: %v", left)
	}

	// A missing file upstream is a clear error too.
	up.mu.Lock()
	delete(up.files, "/kubectl")
	up.files["/kubectl.sha256"] = []byte(hex.EncodeToString(s[:]))
	up.mu.Unlock()
	_, _, err = ResolveSources(context.Background(), items, SourceOptions{CacheDir: cache})
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("404: %v", err)
	}
}

func TestResolveMissing(t *testing.T) {
	b, err := bom.Builtin("1.31.4")
	if err != nil {
		t.Fatal(err)
	}
	items, _ := b.Resolve("amd64")
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "k8s"), 0o755)
	os.WriteFile(filepath.Join(dir, "k8s", "kubeadm"), []byte("x"), 0o755)
	_, _, err = ResolveSources(context.Background(), items, SourceOptions{FromDir: dir})
	if err == nil {
		t.Fatal("missing artifacts accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		"artifact kubelet: k8s/kubelet is missing", "--cache",
		"artifact kube-apiserver-image: image archive docker/kube-apiserver:v1.31.4.tar is missing",
		"ctr -n k8s.io image export docker/kube-apiserver:v1.31.4.tar registry.k8s.io/kube-apiserver:v1.31.4",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "kubeadm") || strings.Contains(msg, "kubelet.service") {
		t.Errorf("error lists present or inline artifacts:\n%s", msg)
	}
	if _, _, err := ResolveSources(context.Background(), items, SourceOptions{}); err == nil || !strings.Contains(err.Error(), "--from-dir") {
		t.Errorf("no source: %v", err)
	}
}
