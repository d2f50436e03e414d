package rest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// MaxImageUpload caps an image upload (POST /api/v1/images): a SONiC
// installer is about 1 GiB, a binaries ISO a few hundred MiB.
const MaxImageUpload int64 = 16 << 30

// StreamedBody is the body cap of a request whose body the API streams
// (an image upload), 0 for every other request: the listeners' body guard
// lets those through unread (httpserve.Guard.Streamed) and keeps its
// 1 MiB cap for the rest.
func StreamedBody(r *http.Request) int64 {
	if r.Method == http.MethodPost && r.URL.Path == Path+"images" {
		return MaxImageUpload
	}
	return 0
}

// holdUploadBody keeps an upload's body from restAuth, which reads every
// body whole (at most 1 MiB) to check its digest: the upload streams it
// into the image store instead, checked against the signed sha256.
func (s *Door) holdUploadBody(c *gin.Context) {
	c.Set("upload", c.Request.Body)
	c.Request.Body = http.NoBody
	c.Next()
}

// ImageOf is the view of an image the REST API and the admin socket answer.
func ImageOf(im core.Image) client.Image {
	return client.Image{SHA256: im.SHA256, Name: im.Name, Kind: im.Kind, Platform: im.Platform, Version: im.Version,
		Size: im.Size, Created: im.Created}
}

// uploadImage stores the request body as an image (?name=&kind= and
// optional platform, version, sha256), streamed to disk, never held in
// memory. A signed request's signature cannot cover a body that is not
// read before it is stored, so it must carry sha256 (which the signature
// covers) and the store refuses content that does not match it. 201 with
// the image; 200 when that content was stored already.
func (s *Door) uploadImage(c *gin.Context) {
	if s.console.imageStore == nil {
		Refuse(c, core.KindUnavailable, "image uploads are not available in this process")
		return
	}
	q := c.Request.URL.Query()
	want := q.Get("sha256")
	if want == "" && strings.HasPrefix(c.GetHeader("Authorization"), signing.RESTScheme) {
		Refuse(c, core.KindInvalid, "sha256 is required: a signed upload's signature cannot cover its streamed body, so the content is checked against the sha256 query parameter the signature covers")
		return
	}
	v, _ := c.Get("upload")
	body, _ := v.(io.ReadCloser)
	if body == nil {
		body = http.NoBody
	}
	m := imagestore.Meta{Name: q.Get("name"), Kind: q.Get("kind"), Platform: q.Get("platform"), Version: q.Get("version")}
	im, existed, err := s.console.imageStore.Add(c.Request.Context(), body, m, want)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		Refuse(c, core.KindTooLarge, fmt.Sprintf("image over the %d GiB upload limit", MaxImageUpload>>30))
		return
	case err != nil:
		s.restFail(c, err)
		return
	}
	code := http.StatusCreated
	if existed {
		code = http.StatusOK
	}
	httpserve.WriteJSON(c.Writer, code, ImageOf(im))
}

// deleteImage removes an image and all its names, unless a Kubernetes
// version uses it or a loaded profile names it (409 in_use, saying which).
func (s *Door) deleteImage(c *gin.Context) {
	if s.console.imageStore == nil {
		Refuse(c, core.KindUnavailable, "image deletion is not available in this process")
		return
	}
	im, err := s.console.imageStore.Resolve(c.Param("ref"))
	if err != nil {
		s.restFail(c, err)
		return
	}
	if s.console.preview != nil {
		if names := s.console.preview.ProfilesNaming(im); len(names) > 0 {
			Refuse(c, core.KindInUse, fmt.Sprintf("image %s is in use by profile %s; change the profile first", im.Name, strings.Join(names, ", ")))
			return
		}
	}
	// The store refuses an image a version uses, in the same transaction
	// as the removal.
	if im, err = s.console.imageStore.Remove(im.SHA256); err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, ImageOf(im))
}

// ISOVersionSpec completes spec for a Kubernetes version whose binaries
// ISO ztpd stores (im) and serves as isoName under isoBaseURL: the URL and
// checksum (CloudStack's {SHA-256} form) CloudStack and devices use.
func ISOVersionSpec(spec clusters.VersionSpec, isoBaseURL, isoName string, im core.Image) clusters.VersionSpec {
	spec.URL, spec.Checksum, spec.ImageID, spec.ISOName = isoBaseURL+isoName, "{SHA-256}"+im.SHA256, im.SHA256, isoName
	return spec
}

// addVersionFromImage registers a Kubernetes version served from a stored
// binaries ISO (POST /api/v1/versions with "image"); semver defaults to
// the ISO's version.
func (s *Door) addVersionFromImage(c *gin.Context, ref string, spec clusters.VersionSpec) {
	if spec.URL != "" || spec.Checksum != "" {
		Refuse(c, core.KindInvalid, "give either image (a stored binaries ISO) or url and checksum, not both")
		return
	}
	if s.console.imageStore == nil {
		Refuse(c, core.KindUnavailable, "the image store is not available in this process")
		return
	}
	im, err := s.console.imageStore.Resolve(ref)
	if err != nil {
		s.restFail(c, err)
		return
	}
	if im.Kind != imagestore.KindBinariesISO {
		Refuse(c, core.KindInvalid, fmt.Sprintf("image %s is a %s, not a binaries-iso", im.Name, im.Kind))
		return
	}
	if spec.SemVer == "" {
		spec.SemVer = im.Version
	}
	v, err := s.clusters.AddVersion(c.Request.Context(), callerOf(c), ISOVersionSpec(spec, s.console.isoBaseURL, im.Name, im))
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusCreated, VersionOf(v))
}

// ISOStore stores binaries ISOs (images/imagestore satisfies it).
type ISOStore interface {
	Add(ctx context.Context, r io.Reader, m imagestore.Meta, wantSHA string) (core.Image, bool, error)
	Remove(ref string) (core.Image, error)
	// Resolve finds an image by sha256, any of its names, or a unique
	// sha256 prefix.
	Resolve(ref string) (core.Image, error)
	// List is the images of a kind ("" for all).
	List(kind string) ([]core.Image, error)
}
