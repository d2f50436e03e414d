package binaries

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/isobuild"
)

type env struct {
	t      *testing.T
	st     core.Store
	images *imagestore.Store
	opens  atomic.Int32
	svc    *Service
}

// countingImages counts the ISO opens (one hash per ISO).
type countingImages struct{ e *env }

func (c countingImages) Resolve(ref string) (core.Image, error) { return c.e.images.Resolve(ref) }
func (c countingImages) Open(im core.Image) (*os.File, error) {
	c.e.opens.Add(1)
	return c.e.images.Open(im)
}

func newEnv(t *testing.T) *env {
	f := storetest.Open(t)
	ims, err := imagestore.Open(f.Store, f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: f.Store, images: ims}
	e.svc = New(f.Store, countingImages{e})
	return e
}

// iso builds a binaries ISO holding files (ISO path -> content) and adds it
// to the image store as name.
func (e *env) iso(name string, files map[string][]byte) core.Image {
	e.t.Helper()
	dir := e.t.TempDir()
	var in []isobuild.File
	for p, b := range files {
		in = append(in, isobuild.File{Path: p, Content: b, Mode: 0o755})
	}
	out := filepath.Join(dir, name)
	if _, err := isobuild.Build(context.Background(), isobuild.Options{Files: in, Output: out, TempDir: dir, NoFsync: true}); err != nil {
		e.t.Fatal(err)
	}
	im, _, err := e.images.AddFile(context.Background(), out, imagestore.Meta{Name: name, Kind: imagestore.KindBinariesISO}, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return im
}

func (e *env) version(id, name, semver, image, state string) {
	e.t.Helper()
	storetest.Update(e.t, e.st, func(tx core.Tx) error {
		return tx.Versions().Put(core.Version{ID: id, Name: name, SemVer: semver, ImageID: image, State: state, Created: time.Now()})
	})
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func bins(version string) map[string][]byte {
	return map[string][]byte{
		"k8s/kubeadm":               bytes.Repeat([]byte("kubeadm "+version+"\n"), 3000),
		"k8s/kubelet":               bytes.Repeat([]byte("kubelet "+version+"\n"), 5001),
		"k8s/kubectl":               []byte("kubectl " + version + "\n"),
		"cni/cni-plugins-amd64.tgz": bytes.Repeat([]byte{7}, 10000),
	}
}

func kind(t *testing.T, err error, want core.ErrorKind, msg string) {
	t.Helper()
	if err == nil || core.KindOf(err) != want || !strings.Contains(err.Error(), msg) {
		t.Fatalf("error %v (%v), want %v containing %q", err, core.KindOf(err), want, msg)
	}
}

func TestSumsAndOpen(t *testing.T) {
	e := newEnv(t)
	files := bins("v1.37.2")
	im := e.iso("setup-v1.37.2.iso", files)
	e.version("ver-1", "v1.37.2", "1.37.2", im.SHA256, "Enabled")
	ctx := context.Background()

	// Callers at once: one hash of the ISO, every caller the same sums.
	var wg sync.WaitGroup
	sets := make([]Set, 8)
	errs := make([]error, 8)
	for i := range sets {
		wg.Add(1)
		go func() { defer wg.Done(); sets[i], errs[i] = e.svc.Sums(ctx, "v1.37.2") }()
	}
	wg.Wait()
	if n := e.opens.Load(); n != 1 {
		t.Fatalf("the ISO was opened %d times for 8 callers, want 1", n)
	}
	want := "" +
		sum(files["k8s/kubeadm"]) + "  kubeadm\n" +
		sum(files["k8s/kubectl"]) + "  kubectl\n" +
		sum(files["k8s/kubelet"]) + "  kubelet\n"
	for i, s := range sets {
		if errs[i] != nil || string(s.SumsFile()) != want || s.ISO.SHA256 != im.SHA256 || s.Version.ID != "ver-1" {
			t.Fatalf("caller %d: %v %+v", i, errs[i], s)
		}
	}
	if m := sets[0].SHA256(); len(m) != 3 || m["kubelet"] != sum(files["k8s/kubelet"]) {
		t.Fatalf("SHA256() %v", m)
	}
	// The tag without its v is the same release.
	if s, err := e.svc.Sums(ctx, "1.37.2"); err != nil || string(s.SumsFile()) != want {
		t.Fatalf("1.37.2: %v", err)
	}

	for _, name := range Names {
		f, err := e.svc.Open(ctx, "v1.37.2", name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil || !bytes.Equal(b, files["k8s/"+name]) || f.Size != int64(len(b)) || f.SHA256 != sum(b) {
			t.Fatalf("%s: %v, %d bytes, %+v", name, err, len(b), f.Binary)
		}
	}
	if n := e.opens.Load(); n != 4 {
		t.Fatalf("%d opens after three files, want 4 (hashed once)", n)
	}

	for _, bad := range []string{"cni-plugins-amd64.tgz", "../k8s/kubeadm", "k8s/kubeadm", "SHA256SUMS", "", "KUBEADM"} {
		_, err := e.svc.Open(ctx, "v1.37.2", bad)
		kind(t, err, core.KindNotFound, "no binary")
	}
	for _, bad := range []string{"v1.37.3", "v1.37", "v01.37.2", "latest", "../v1.37.2", "v1.37.2/.."} {
		_, err := e.svc.Sums(ctx, bad)
		kind(t, err, core.KindNotFound, "no Kubernetes version")
	}
}

// TestWhichVersion: versions without an ISO are ignored, enabled ones are
// preferred, two ISOs for one release are refused, an ISO the store lacks
// or whose blob was damaged is said so.
func TestWhichVersion(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.iso("a.iso", bins("a"))
	b := e.iso("b.iso", bins("b"))
	e.version("v-url", "v1.36.3-url", "1.36.3", "", "Enabled")
	_, err := e.svc.Sums(ctx, "v1.36.3")
	kind(t, err, core.KindNotFound, "no Kubernetes version v1.36.3 with a binaries ISO")

	e.version("v-old", "v1.36.3-old", "1.36.3", a.SHA256, "Disabled")
	if s, err := e.svc.Sums(ctx, "v1.36.3"); err != nil || s.ISO.SHA256 != a.SHA256 {
		t.Fatalf("only a disabled version: %v %+v", err, s)
	}
	e.version("v-new", "v1.36.3-new", "1.36.3", b.SHA256, "Enabled")
	if s, err := e.svc.Sums(ctx, "v1.36.3"); err != nil || s.ISO.SHA256 != b.SHA256 || s.Version.ID != "v-new" {
		t.Fatalf("enabled over disabled: %v %+v", err, s)
	}
	e.version("v-arm", "v1.36.3-arm64", "1.36.3", a.SHA256, "Enabled")
	_, err = e.svc.Sums(ctx, "v1.36.3")
	kind(t, err, core.KindConflict, "different ISOs")

	e.version("v-gone", "v1.35.0", "1.35.0", strings.Repeat("ab", 32), "Enabled")
	_, err = e.svc.Sums(ctx, "v1.35.0")
	kind(t, err, core.KindNotFound, "which the image store does not hold")

	// A damaged blob (same size, one byte changed) is refused, and not
	// remembered: once repaired it serves.
	c := e.iso("c.iso", bins("c"))
	e.version("v-c", "v1.34.0", "1.34.0", c.SHA256, "Enabled")
	p := e.images.BlobPath(c.SHA256)
	orig, _ := os.ReadFile(p)
	os.Chmod(p, 0o644)
	bad := bytes.Clone(orig)
	bad[len(bad)-1] ^= 1
	if err := os.WriteFile(p, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Sums(ctx, "v1.34.0")
	kind(t, err, core.KindUnavailable, "is damaged")
	os.WriteFile(p, orig, 0o644)
	if _, err := e.svc.Sums(ctx, "v1.34.0"); err != nil {
		t.Fatalf("repaired: %v", err)
	}
	// A blob that is gone.
	os.Remove(p)
	e.svc = New(e.st, countingImages{e})
	_, err = e.svc.Sums(ctx, "v1.34.0")
	kind(t, err, core.KindUnavailable, "not available on this server")
}

// TestISOWithoutKubectl: the set lists what the ISO holds; the missing one
// is not found.
func TestISOWithoutKubectl(t *testing.T) {
	e := newEnv(t)
	files := bins("v1.31.4")
	delete(files, "k8s/kubectl")
	im := e.iso("k.iso", files)
	e.version("v1", "v1.31.4", "1.31.4", im.SHA256, "Enabled")
	s, err := e.svc.Sums(context.Background(), "v1.31.4")
	if err != nil || len(s.Files) != 2 || s.Files[0].Name != "kubeadm" || s.Files[1].Name != "kubelet" {
		t.Fatalf("%v %+v", err, s.Files)
	}
	_, err = e.svc.Open(context.Background(), "v1.31.4", "kubectl")
	kind(t, err, core.KindNotFound, "holds no k8s/kubectl")
}
