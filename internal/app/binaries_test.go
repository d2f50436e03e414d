package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/isobuild"
)

// TestBinariesWired: a version whose ISO is in the image store has its
// kubeadm served on the ZTP listener's mux, and the rollout engine's
// Binaries names its URL (on the advertised address) and the sha256s; a
// version without an ISO gets none; an ISO without a kubelet is an error.
func TestBinariesWired(t *testing.T) {
	cfg := keysTestConfig(t)
	cfg.AdvertiseAddr = "10.99.0.1"
	a, err := New(cfg, NewLogger(io.Discard, "error", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	kubeadm, kubelet := bytes.Repeat([]byte("kubeadm v1.37.2\n"), 1000), bytes.Repeat([]byte("kubelet v1.37.2\n"), 2000)
	addVersion := func(semver string, files []isobuild.File) {
		t.Helper()
		dir := t.TempDir()
		out := filepath.Join(dir, "v"+semver+".iso")
		if _, err := isobuild.Build(context.Background(), isobuild.Options{Files: files, Output: out, TempDir: dir, NoFsync: true}); err != nil {
			t.Fatal(err)
		}
		im, _, err := a.Images.AddFile(context.Background(), out, imagestore.Meta{Name: "v" + semver + ".iso", Kind: imagestore.KindBinariesISO}, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Store.Update(func(tx core.Tx) error {
			return tx.Versions().Put(core.Version{ID: "ver-" + semver, Name: "v" + semver, SemVer: semver, ImageID: im.SHA256,
				ISOName: im.Name, State: "Enabled", Created: time.Now()})
		}); err != nil {
			t.Fatal(err)
		}
	}
	addVersion("1.37.2", []isobuild.File{{Path: "k8s/kubeadm", Content: kubeadm, Mode: 0o755}, {Path: "k8s/kubelet", Content: kubelet, Mode: 0o755}})
	addVersion("1.36.3", []isobuild.File{{Path: "k8s/kubeadm", Content: kubeadm, Mode: 0o755}})

	rec := httptest.NewRecorder()
	a.HTTPMux.ServeHTTP(rec, httptest.NewRequest("GET", "/binaries/v1.37.2/kubeadm", nil))
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), kubeadm) || rec.Header().Get("X-Checksum-Sha256") != sum(kubeadm) {
		t.Fatalf("GET kubeadm on the ZTP mux: %d %v", rec.Code, rec.Header())
	}

	url, sums, err := a.rolloutBinaries("v1.37.2")
	if err != nil || url != "http://10.99.0.1:8080/binaries/v1.37.2" || sums["kubeadm"] != sum(kubeadm) || sums["kubelet"] != sum(kubelet) {
		t.Fatalf("rolloutBinaries(v1.37.2): %q %v %v", url, sums, err)
	}
	if url, sums, err := a.rolloutBinaries("v1.99.0"); url != "" || sums != nil || err != nil {
		t.Fatalf("rolloutBinaries of a version without an ISO: %q %v %v", url, sums, err)
	}
	if _, _, err := a.rolloutBinaries("v1.36.3"); err == nil || !strings.Contains(err.Error(), "holds no k8s/kubelet") {
		t.Fatalf("rolloutBinaries of an ISO without a kubelet: %v", err)
	}
}
