// Package peerblobs moves image blobs between appliances that share one
// store. Image records are in the shared store, but each
// appliance keeps blobs on its own disk (images/imagestore), so an
// appliance that lacks a blob fetches it from a peer that has it before it
// serves it: Handler is the serving side, Fetcher the fetching side.
//
// Both ends authenticate with mutual TLS under the appliances' CA: the
// serving listener requires and verifies client certificates (the caller's
// job; Handler refuses a request without one as well), and Fetcher checks
// each peer's certificate against the peer's address. Content is trusted
// only after its sha256 and size match the image record, whoever served it.
package peerblobs

import (
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// PathPrefix is where Handler serves blobs: PathPrefix + <sha256 hex>.
const PathPrefix = "/peer/v1/blobs/"

// blobSHA is the sha256 a request path names. Only PathPrefix followed by
// exactly 64 lowercase hex digits is accepted, so nothing a path holds
// (dots, slashes, escapes already decoded) reaches the file system.
func blobSHA(path string) (string, error) {
	rest, ok := strings.CutPrefix(path, PathPrefix)
	if !ok {
		return "", core.Errorf(core.KindNotFound, "no such path %q; blobs are under %s<sha256>", clip(path), PathPrefix)
	}
	if !isSHA256(rest) {
		return "", core.Errorf(core.KindInvalid, "blob %q: want 64 lowercase hex digits (a sha256)", clip(rest))
	}
	return rest, nil
}

// isSHA256 reports whether s is 64 lowercase hex digits.
func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// clip bounds what an error message repeats of a request.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// blobURL is where peer (a base URL such as https://10.99.0.3:8444) serves
// sha.
func blobURL(peer, sha string) (string, error) {
	u, err := url.Parse(peer)
	if err != nil {
		return "", err
	}
	if u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		strings.Trim(u.Path, "/") != "" {
		return "", errors.New("a peer is an https://host:port base URL")
	}
	return "https://" + u.Host + PathPrefix + sha, nil
}

// Handler serves GET and HEAD PathPrefix<sha256>: the blob as held on this
// appliance's disk (Content-Length, ETag the sha256, ranges), 404 when it is
// not held here, 400 for a path that is not a sha256. It must be mounted
// only on a listener that requires and verifies client certificates; it
// refuses (403) a request that did not present a verified one anyway.
func Handler(st *imagestore.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log := slog.Default()
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			httpserve.WriteError(w, r, log, core.Errorf(core.KindPermission,
				"peer blobs are served only to an appliance presenting a verified client certificate"))
			return
		}
		sha, err := blobSHA(r.URL.Path)
		if err != nil {
			httpserve.WriteError(w, r, log, err)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			httpserve.WriteRefusal(w, http.StatusMethodNotAllowed, httpserve.CodeMethodNotAllowed, "peer blobs are read with GET or HEAD")
			return
		}
		f, err := os.Open(st.BlobPath(sha))
		if errors.Is(err, fs.ErrNotExist) {
			httpserve.WriteError(w, r, log, core.Errorf(core.KindNotFound, "blob %s is not on this appliance", sha))
			return
		}
		if err != nil {
			httpserve.WriteError(w, r, log, err)
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			httpserve.WriteError(w, r, log, err)
			return
		}
		if !fi.Mode().IsRegular() {
			httpserve.WriteError(w, r, log, core.Errorf(core.KindNotFound, "blob %s is not on this appliance", sha))
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("ETag", `"`+sha+`"`)
		h.Set("X-Checksum-Sha256", sha)
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
		// ServeContent over the *os.File: Content-Length, HEAD, ranges, and
		// the connection's sendfile path where TLS allows it.
		http.ServeContent(w, r, "", fi.ModTime(), f)
	})
}
