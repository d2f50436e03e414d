package imagestore

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
)

// TestOpenFetchesAMissingBlob: with Fetch set, Open of an image whose blob
// is not on disk calls Fetch once with the image, then serves what Fetch
// installed; a blob on disk never calls Fetch.
func TestOpenFetchesAMissingBlob(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	im, _, err := s.Add(ctx, strings.NewReader("from a peer"), Meta{Name: "peer.bin", Kind: KindFile}, "")
	if err != nil {
		t.Fatal(err)
	}
	var calls []core.Image
	s.Fetch = func(ctx context.Context, got core.Image) error {
		calls = append(calls, got)
		// What a peer fetch does: install the verified content.
		_, err := s.InstallBlob(ctx, strings.NewReader("from a peer"), got.SHA256, got.Size)
		return err
	}
	read := func() string {
		t.Helper()
		f, err := s.Open(im)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		return string(b)
	}
	if got := read(); got != "from a peer" || len(calls) != 0 {
		t.Fatalf("blob on disk: %q, %d fetches", got, len(calls))
	}
	if err := os.Remove(s.BlobPath(im.SHA256)); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "from a peer" || len(calls) != 1 || calls[0].SHA256 != im.SHA256 || calls[0].Size != im.Size {
		t.Fatalf("missing blob: %q, fetches %+v", got, calls)
	}
	if got := read(); got != "from a peer" || len(calls) != 1 {
		t.Fatalf("fetched blob: %q, %d fetches", got, len(calls))
	}
}

// TestFailedFetchIsTheMissingBlobError: a Fetch that fails leaves Open's
// error what it is on one box (fs.ErrNotExist, which the content server
// answers 503 and binaries KindUnavailable) with Fetch's error (and its
// kind) in it; Verify goes through the same path.
func TestFailedFetchIsTheMissingBlobError(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	im, _, err := s.Add(ctx, strings.NewReader("nowhere"), Meta{Name: "gone.bin", Kind: KindFile}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.BlobPath(im.SHA256)); err != nil {
		t.Fatal(err)
	}
	_, oneBox := s.Open(im)
	if !errors.Is(oneBox, fs.ErrNotExist) {
		t.Fatalf("one box: %v", oneBox)
	}
	noPeer := core.Errorf(core.KindUnavailable, "no peer gave it")
	calls := 0
	s.Fetch = func(context.Context, core.Image) error { calls++; return noPeer }
	f, err := s.Open(im)
	if f != nil || calls != 1 || !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, noPeer) ||
		core.KindOf(err) != core.KindUnavailable || !strings.HasPrefix(err.Error(), oneBox.Error()) ||
		!strings.Contains(err.Error(), "no peer gave it") {
		t.Fatalf("open after a failed fetch: %v (%d fetches)", err, calls)
	}
	if err := s.Verify(im); !errors.Is(err, noPeer) || calls != 2 {
		t.Fatalf("verify after a failed fetch: %v (%d fetches)", err, calls)
	}
	// A caller's deadline reaches Fetch.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	s.Fetch = func(ctx context.Context, _ core.Image) error { return ctx.Err() }
	if _, err := s.OpenContext(cctx, im); !errors.Is(err, context.Canceled) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open with a cancelled context: %v", err)
	}
}

// TestFetchNotCalledForABadDigest: Open refuses a digest that is not a
// sha256 before anything, Fetch included.
func TestFetchNotCalledForABadDigest(t *testing.T) {
	s, _, _ := newStore(t)
	s.Fetch = func(context.Context, core.Image) error { t.Fatal("fetch called"); return nil }
	if _, err := s.Open(core.Image{SHA256: "../../etc/passwd"}); err == nil {
		t.Fatal("a bad digest opened")
	}
}
