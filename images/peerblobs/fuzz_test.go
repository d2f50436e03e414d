package peerblobs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// FuzzBlobPath: the parser accepts exactly PathPrefix and 64 lowercase hex
// digits, and the handler answers any path with 200 only for the blob it
// holds, 400 or 404 otherwise, never touching another file.
func FuzzBlobPath(f *testing.F) {
	fx := storetest.Open(f)
	st, err := imagestore.Open(fx.Store, fx.Dir)
	if err != nil {
		f.Fatal(err)
	}
	im, _, err := st.Add(context.Background(), strings.NewReader("held"), imagestore.Meta{Name: "held.bin", Kind: imagestore.KindFile}, "")
	if err != nil {
		f.Fatal(err)
	}
	h := Handler(st)
	for _, seed := range []string{
		PathPrefix + im.SHA256, PathPrefix + strings.ToUpper(im.SHA256), PathPrefix + im.SHA256[:63],
		PathPrefix + "../../etc/passwd", PathPrefix + "../tmp/" + im.SHA256[:57], PathPrefix + "./" + im.SHA256,
		PathPrefix + im.SHA256 + "\x00", "/peer/v1/blobs", "/", "", PathPrefix + strings.Repeat("0", 64),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		sha, err := blobSHA(path)
		valid := strings.HasPrefix(path, PathPrefix) && len(path) == len(PathPrefix)+64 &&
			strings.Trim(path[len(PathPrefix):], "0123456789abcdef") == ""
		switch {
		case err == nil && (!valid || PathPrefix+sha != path):
			t.Fatalf("accepted %q as %q", path, sha)
		case err != nil && valid:
			t.Fatalf("refused %q: %v", path, err)
		case err != nil && core.KindOf(err) != core.KindInvalid && core.KindOf(err) != core.KindNotFound:
			t.Fatalf("%q: error of kind %v", path, core.KindOf(err))
		}

		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: path}, Header: http.Header{},
			TLS: &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{}}}}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK:
			if path != PathPrefix+im.SHA256 || w.Body.String() != "held" {
				t.Fatalf("%q served %q", path, w.Body.String())
			}
		case http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Fatalf("%q: status %d %s", path, w.Code, w.Body)
		}
	})
}
