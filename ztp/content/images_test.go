package content

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
)

// TestImageWaitsForAPeerFetchOnlyAsLongAsTheRequest: a blob this
// appliance lacks is fetched from a peer first (several appliances), and
// the device's request bounds that wait: a request that ends gets the
// missing-content answer instead of holding its handler until the fetch
// gives up.
func TestImageWaitsForAPeerFetchOnlyAsLongAsTheRequest(t *testing.T) {
	e := newEnv(t, nil, "")
	im := e.addImage(t, "installer bytes", imagestore.Meta{Name: "sonic-x.bin", Kind: imagestore.KindSONiCInstaller})
	if err := os.Remove(e.images.BlobPath(im.SHA256)); err != nil {
		t.Fatal(err)
	}
	fetching := make(chan struct{}, 1)
	e.images.Fetch = func(ctx context.Context, _ core.Image) error {
		fetching <- struct{}{}
		<-ctx.Done() // a peer that never answers
		return ctx.Err()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, f, err := e.svc.Image(ctx, "sonic-x.bin", "")
	if f != nil {
		f.Close()
	}
	var cerr *Error
	if !errors.As(err, &cerr) || cerr.Status != 503 {
		t.Fatalf("Image with a fetch that never ends: %v, want a 503 content error", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("Image waited %s for a request of 200ms", waited)
	}
	select {
	case <-fetching:
	default:
		t.Fatal("the missing blob was not fetched")
	}
}
