package imagestore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

func newStore(t *testing.T) (*Store, core.Store, string) {
	t.Helper()
	f := storetest.Open(t)
	s, err := Open(f.Store, f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, f.Store, f.Dir
}

func blobs(t *testing.T, s *Store) int {
	ents, err := os.ReadDir(s.blobDir())
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestSameContentStoredOnceUnderTwoNames(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	a, existed, err := s.Add(ctx, strings.NewReader("payload"), Meta{Name: "a.bin", Kind: KindFile}, "")
	if err != nil || existed {
		t.Fatalf("first add: %v existed=%v", err, existed)
	}
	b, existed, err := s.Add(ctx, strings.NewReader("payload"), Meta{Name: "b.bin", Kind: KindFile}, "")
	if err != nil || !existed || b.SHA256 != a.SHA256 {
		t.Fatalf("second add: %v existed=%v", err, existed)
	}
	if n := blobs(t, s); n != 1 {
		t.Fatalf("%d blobs, want 1", n)
	}
	for _, ref := range []string{"a.bin", "b.bin", a.SHA256, a.SHA256[:12]} {
		if im, err := s.Resolve(ref); err != nil || im.SHA256 != a.SHA256 {
			t.Fatalf("resolve %s: %v", ref, err)
		}
	}
	f, err := s.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != "payload" {
		t.Fatalf("content %q", got)
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("disk vanished")
	}
	k := min(len(p), r.n)
	r.n -= k
	return k, nil
}

func TestInterruptedAddLeavesNothingBehind(t *testing.T) {
	s, db, _ := newStore(t)
	_, _, err := s.Add(context.Background(), &failingReader{n: 1 << 20}, Meta{Name: "x", Kind: KindFile}, "")
	if err == nil || !strings.Contains(err.Error(), "disk vanished") {
		t.Fatalf("want the read error, got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Add(ctx, bytes.NewReader(make([]byte, 10)), Meta{Name: "y", Kind: KindFile}, ""); err == nil {
		t.Fatal("cancelled add succeeded")
	}
	tmp, _ := os.ReadDir(s.tmpDir())
	if blobs(t, s) != 0 || len(tmp) != 0 {
		t.Fatalf("leftovers: %d blobs, %d tmp files", blobs(t, s), len(tmp))
	}
	storetest.View(t, db, func(tx core.Tx) error {
		if n, err := tx.Images().Count(); err != nil || n != 0 {
			t.Errorf("%d image records after failed adds (%v)", n, err)
		}
		return nil
	})
}

func TestChecksumMismatchStoresNothing(t *testing.T) {
	s, _, _ := newStore(t)
	_, _, err := s.Add(context.Background(), strings.NewReader("abc"), Meta{Name: "x", Kind: KindFile}, strings.Repeat("0", 64))
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch for x") || !strings.Contains(err.Error(), "ba7816bf") {
		t.Fatalf("want mismatch naming both hashes, got %v", err)
	}
	if blobs(t, s) != 0 {
		t.Fatal("mismatched content was stored")
	}
}

func TestBadNamesAndKindsAreRefused(t *testing.T) {
	s, _, _ := newStore(t)
	for _, m := range []Meta{
		{Name: "../etc/passwd", Kind: KindFile}, {Name: "a/b", Kind: KindFile}, {Name: ".hidden", Kind: KindFile},
		{Name: "", Kind: KindFile}, {Name: "ok", Kind: "rootkit"}, {Name: strings.Repeat("a", 64), Kind: KindFile},
	} {
		if _, _, err := s.Add(context.Background(), strings.NewReader("x"), m, ""); core.KindOf(err) != core.KindInvalid {
			t.Errorf("%+v: %v, want invalid", m, err)
		}
	}
}

func TestRemoveRefusedWhileAVersionUsesIt(t *testing.T) {
	s, db, _ := newStore(t)
	im, _, err := s.Add(context.Background(), strings.NewReader("iso"), Meta{Name: "k8s.iso", Kind: KindBinariesISO}, "")
	if err != nil {
		t.Fatal(err)
	}
	storetest.Update(t, db, func(tx core.Tx) error {
		return tx.Versions().Put(core.Version{ID: "v1", Name: "v1.31.4", ImageID: im.SHA256})
	})
	if _, err := s.Remove("k8s.iso"); !errors.Is(err, ErrInUse) || core.KindOf(err) != core.KindInUse {
		t.Fatalf("want ErrInUse (kind in_use), got %v", err)
	}
	storetest.Update(t, db, func(tx core.Tx) error { return tx.Versions().Delete("v1") })
	if _, err := s.Remove("k8s.iso"); err != nil {
		t.Fatal(err)
	}
	if blobs(t, s) != 0 {
		t.Fatal("blob left after remove")
	}
	if _, err := s.Resolve("k8s.iso"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("name still resolves: %v", err)
	}
}

func TestInstallerPrefersExactPlatform(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	s.Add(ctx, strings.NewReader("generic"), Meta{Name: "generic.bin", Kind: KindONIEInstaller}, "")
	s.Add(ctx, strings.NewReader("accton"), Meta{Name: "accton.bin", Kind: KindONIEInstaller, Platform: "x86_64-accton_as7712_32x-r0"}, "")
	im, err := s.Installer(KindONIEInstaller, "x86_64-accton_as7712_32x-r0")
	if err != nil || im.Name != "accton.bin" {
		t.Fatalf("got %v %v", im.Name, err)
	}
	im, err = s.Installer(KindONIEInstaller, "x86_64-mlnx_msn2700-r0")
	if err != nil || im.Name != "generic.bin" {
		t.Fatalf("fallback: got %v %v", im.Name, err)
	}
}

func TestRefusedNameLeavesNoOrphanBlob(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	if _, _, err := s.Add(ctx, strings.NewReader("one"), Meta{Name: "x.bin", Kind: KindFile}, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Add(ctx, strings.NewReader("two"), Meta{Name: "x.bin", Kind: KindFile}, ""); core.KindOf(err) != core.KindConflict {
		t.Fatalf("a taken name for other content: %v, want a conflict", err)
	}
	if n := blobs(t, s); n != 1 {
		t.Fatalf("%d blobs after a refused add, want 1", n)
	}
}
