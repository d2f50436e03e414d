package ztphttp

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/ztpd/ztpd/images/binaries"
	"github.com/ztpd/ztpd/internal/core"
)

// binary serves GET /binaries/<version tag>/<name>: kubeadm, kubelet or
// kubectl read from the version's binaries ISO, with Content-Length,
// Range, the sha256 as strong ETag and X-Checksum-Sha256; or SHA256SUMS,
// their sums in sha256sum's format. Only those names are answered (a
// name is one path segment, and anything else is a 404), so nothing else
// on the ISO, nor off it, can be reached. A tag may be pointed at another
// ISO later, so clients revalidate (no-cache) by ETag.
func (s *Server) binary(w http.ResponseWriter, r *http.Request) {
	tag, name := r.PathValue("version"), r.PathValue("name")
	if name == binaries.SumsName {
		set, err := s.svc.BinarySums(r.Context(), tag)
		if err == nil && len(set.Files) == 0 {
			err = core.Errorf(core.KindNotFound, "the ISO of Kubernetes %s (%s) holds none of %s", set.Version.SemVer, set.ISO.Name,
				strings.Join(binaryPaths(), ", "))
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("ETag", `"`+set.ISO.SHA256+`"`) // the sums are the ISO's
		h.Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "", set.ISO.Created, bytes.NewReader(set.SumsFile()))
		return
	}
	f, err := s.svc.Binary(r.Context(), tag, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("ETag", `"`+f.SHA256+`"`)
	h.Set("X-Checksum-Sha256", f.SHA256)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", `attachment; filename="`+f.Name+`"`)
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", f.ISO.Created, f)
}

func binaryPaths() []string {
	p := make([]string, len(binaries.Names))
	for i, n := range binaries.Names {
		p[i] = binaries.ISOPath(n)
	}
	return p
}
