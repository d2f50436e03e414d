package rest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
)

// raStore gives the env an image store.
func raStore(t *testing.T, e *env) *imagestore.Store {
	t.Helper()
	st, err := imagestore.Open(e.st, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e.srv.images, e.srv.console.imageStore, e.srv.console.isoBaseURL = st, st, "http://10.99.0.1:8080/isos/"
	return st
}

// raUpload posts body as an image upload, signed as a client signs it:
// over the query (sha256 included), without a body digest.
func raUpload(c *apitest.RESTClient, q url.Values, body []byte) apitest.RESTResp {
	c.T.Helper()
	u, _ := url.Parse(c.Base + "/api/v1/images?" + q.Encode())
	req, _ := http.NewRequest("POST", u.String(), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", c.Authorization("POST", u.EscapedPath(), u.Query(), nil, time.Now().Add(5*time.Minute)))
	return c.Send(req)
}

func raSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestRESTImageUploadAndDelete(t *testing.T) {
	e := newEnv(t, envOpts{})
	st := raStore(t, e)
	a, u := e.rest(e.admin.APIKey, e.adminSec), e.rest(e.user.APIKey, e.userSec)
	// 3 MiB: over the 1 MiB every other API body is held to.
	iso := bytes.Repeat([]byte("kubernetes binaries "), 3<<20/20)
	q := url.Values{"name": {"k8s-1.30.2.iso"}, "kind": {"binaries-iso"}, "version": {"1.30.2"}}

	if r := raUpload(a, q, iso); r.Status != 400 || !strings.Contains(string(r.Raw), "sha256 is required") {
		t.Fatalf("signed upload without sha256: %d %s", r.Status, r.Raw)
	}
	q.Set("sha256", raSHA([]byte("other content")))
	if r := raUpload(a, q, iso); r.Status != 400 || !strings.Contains(string(r.Raw), "checksum mismatch") {
		t.Fatalf("wrong sha256: %d %s", r.Status, r.Raw)
	}
	if l, _ := st.List(""); len(l) != 0 {
		t.Fatalf("a refused upload was stored: %+v", l)
	}
	q.Set("sha256", raSHA(iso))
	if r := raUpload(u, q, iso); r.Status != 403 {
		t.Fatalf("user uploads: %d %s", r.Status, r.Raw)
	}
	r := raUpload(a, q, iso)
	if r.Status != 201 {
		t.Fatalf("upload: %d %s", r.Status, r.Raw)
	}
	var im client.Image
	r.Decode(t, &im)
	if im.SHA256 != raSHA(iso) || im.Size != int64(len(iso)) || im.Kind != "binaries-iso" || im.Name != "k8s-1.30.2.iso" {
		t.Fatalf("stored: %s", r.Raw)
	}
	time.Sleep(2 * time.Millisecond)
	if r := raUpload(a, q, iso); r.Status != 200 {
		t.Fatalf("the same upload again: %d %s", r.Status, r.Raw)
	}

	// A version served from the stored ISO.
	r = a.Do("POST", "/api/v1/versions", map[string]any{"name": "v1.30.2", "image": "k8s-1.30.2.iso"})
	if r.Status != 201 {
		t.Fatalf("version from image: %d %s", r.Status, r.Raw)
	}
	var v client.Version
	r.Decode(t, &v)
	if v.SemVer != "1.30.2" || v.ISOURL != "http://10.99.0.1:8080/isos/k8s-1.30.2.iso" || v.Checksum != "{SHA-256}"+im.SHA256 || v.ImageID != im.SHA256 {
		t.Fatalf("version: %s", r.Raw)
	}
	if r := a.Do("POST", "/api/v1/versions", map[string]any{"semver": "1.31.0", "image": "k8s-1.30.2.iso", "url": "http://x/y.iso"}); r.Status != 400 {
		t.Fatalf("image and url: %d %s", r.Status, r.Raw)
	}
	if r := a.Do("POST", "/api/v1/versions", map[string]any{"semver": "1.31.0", "image": "no-such.iso"}); r.Status != 404 {
		t.Fatalf("missing image: %d %s", r.Status, r.Raw)
	}

	// Deletion: refused while a version uses it or a profile names it.
	if r := a.Do("DELETE", "/api/v1/images/k8s-1.30.2.iso", nil); r.Status != 409 || !strings.Contains(string(r.Raw), "v1.30.2") {
		t.Fatalf("delete an image a version uses: %d %s", r.Status, r.Raw)
	}
	installer := []byte("#!/bin/sh\necho sonic installer\n")
	iq := url.Values{"name": {"sonic-202405.1.bin"}, "kind": {"sonic-installer"}, "version": {"202405.1"}, "sha256": {raSHA(installer)}}
	if r := raUpload(a, iq, installer); r.Status != 201 {
		t.Fatalf("upload installer: %d %s", r.Status, r.Raw)
	}
	e.srv.console.preview = &raPreviewer{names: map[string][]string{raSHA(installer): {"leaves"}}}
	if r := a.Do("DELETE", "/api/v1/images/sonic-202405.1.bin", nil); r.Status != 409 || !strings.Contains(string(r.Raw), `profile leaves`) {
		t.Fatalf("delete an image a profile names: %d %s", r.Status, r.Raw)
	}
	if r := u.Do("DELETE", "/api/v1/images/sonic-202405.1.bin", nil); r.Status != 403 {
		t.Fatalf("user deletes: %d", r.Status)
	}
	e.srv.console.preview = &raPreviewer{}
	time.Sleep(2 * time.Millisecond) // the same write again signs anew
	if r := a.Do("DELETE", "/api/v1/images/sonic-202405.1.bin", nil); r.Status != 200 {
		t.Fatalf("delete an unused image: %d %s", r.Status, r.Raw)
	}
	if _, err := st.Resolve("sonic-202405.1.bin"); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("deleted image still resolves: %v", err)
	}
	time.Sleep(2 * time.Millisecond)
	if r := a.Do("DELETE", "/api/v1/images/sonic-202405.1.bin", nil); r.Status != 404 {
		t.Fatalf("delete again: %d %s", r.Status, r.Raw)
	}
}

// Without a signature (the admin socket here; a console session alike)
// sha256 is optional: the answer carries the digest the store computed.
func TestRESTImageUploadUnsigned(t *testing.T) {
	e := newEnv(t, envOpts{})
	raStore(t, e)
	body := []byte("a file for switches")
	req := httptest.NewRequest("POST", "/api/v1/images?name=motd.txt&kind=file", bytes.NewReader(body))
	w := httptest.NewRecorder()
	e.srv.LocalHandler().ServeHTTP(w, req)
	if w.Code != 201 || !strings.Contains(w.Body.String(), raSHA(body)) {
		t.Fatalf("unsigned upload: %d %s", w.Code, w.Body)
	}
}

// The listeners' body guard streams only the upload's body.
func TestStreamedBodyNamesOnlyTheUpload(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         int64
	}{{"POST", "/api/v1/images", MaxImageUpload}, {"GET", "/api/v1/images", 0}, {"POST", "/api/v1/versions", 0},
		{"DELETE", "/api/v1/images/x", 0}, {"POST", "/api/v1/images/x", 0}} {
		r, _ := http.NewRequest(c.method, "http://ztpd"+c.path, nil)
		if got := StreamedBody(r); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, got, c.want)
		}
	}
}
