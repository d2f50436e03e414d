// Package binaries serves a Kubernetes version's node binaries (kubeadm,
// kubelet, kubectl) out of the version's binaries ISO in the image store,
// read in place (isobuild.OpenImage), never mounted or unpacked. Devices
// fetch them through the ZTP HTTP listener (endpoints.BinariesPath); the
// rollout engine hands their URL and sha256s to the agents'
// kubeadm-upgrade steps, so a node upgrades with the new version's kubeadm.
//
// The sha256s are computed once per ISO, in one pass that also hashes the
// whole image and checks it against the ISO's digest in the store: the
// sums describe the ISO the version names, not a damaged copy. The ISO is
// content-addressed, so its sha256 is the cache key and an entry never
// goes stale.
package binaries

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/semver"
	"github.com/ztpd/ztpd/isobuild"
)

// Names are the binaries served, in order; nothing else on an ISO is.
var Names = []string{"kubeadm", "kubectl", "kubelet"}

// SumsName is the name of the checksum list (sha256sum's format).
const SumsName = "SHA256SUMS"

// ISOPath is where a binary is on a CloudStack binaries ISO (images/bom).
func ISOPath(name string) string { return "k8s/" + name }

// Known reports whether name is one of Names.
func Known(name string) bool {
	for _, n := range Names {
		if n == name {
			return true
		}
	}
	return false
}

// Images is the image store as this package reads it.
type Images interface {
	Resolve(ref string) (core.Image, error)
	Open(im core.Image) (*os.File, error)
}

// maxCached bounds the ISOs whose sums are kept (a handful of versions
// are in use at a time; an entry is a few hundred bytes).
const maxCached = 64

// Service finds a version's ISO and reads its binaries.
type Service struct {
	st     core.Store
	images Images

	mu    sync.Mutex
	isos  map[string]*isoSums // by the ISO's sha256
	order []string            // insertion order, for the bound
}

// isoSums is what an ISO holds of Names, computed once.
type isoSums struct {
	ready chan struct{} // closed when files and err are set
	files []Binary
	err   error
}

// New returns the service over the versions in st and the ISOs in images.
func New(st core.Store, images Images) *Service {
	return &Service{st: st, images: images, isos: map[string]*isoSums{}}
}

// Binary is one binary of an ISO.
type Binary struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Set is a version's binaries: the version, its ISO and the binaries the
// ISO holds (of Names, in that order).
type Set struct {
	Version core.Version
	ISO     core.Image
	Files   []Binary
}

// SHA256 is the binaries' sums by name.
func (s Set) SHA256() map[string]string {
	m := make(map[string]string, len(s.Files))
	for _, f := range s.Files {
		m[f.Name] = f.SHA256
	}
	return m
}

// SumsFile is the set in sha256sum's format ("<sha256>  <name>" lines).
func (s Set) SumsFile() []byte {
	var b strings.Builder
	for _, f := range s.Files {
		b.WriteString(f.SHA256 + "  " + f.Name + "\n")
	}
	return []byte(b.String())
}

// File is one binary open for reading (an io.ReadSeeker over its bytes
// in the ISO); Close releases the ISO.
type File struct {
	Binary
	ISO     core.Image
	content *io.SectionReader
	iso     *os.File
}

func (f *File) Read(b []byte) (int, error)                { return f.content.Read(b) }
func (f *File) Seek(off int64, whence int) (int64, error) { return f.content.Seek(off, whence) }
func (f *File) ReadAt(b []byte, off int64) (int, error)   { return f.content.ReadAt(b, off) }

// Close closes the ISO the file is read from.
func (f *File) Close() error { return f.iso.Close() }

// Sums returns the binaries of the Kubernetes version tag (v1.37.2; the v
// may be left out), hashing its ISO the first time. A tag that is not a
// release, a version ztpd does not know or whose ISO the image store does
// not hold is core.KindNotFound; versions of that release naming different
// ISOs are core.KindConflict; an ISO whose content no longer matches its
// digest is core.KindUnavailable.
func (s *Service) Sums(ctx context.Context, tag string) (Set, error) {
	v, im, err := s.resolve(tag)
	if err != nil {
		return Set{}, err
	}
	files, err := s.sums(ctx, im)
	if err != nil {
		return Set{}, err
	}
	return Set{Version: v, ISO: im, Files: files}, nil
}

// Open opens the binary name of version tag for reading, with its size
// and sha256. A name not in Names, or one the ISO lacks, is
// core.KindNotFound; other errors as Sums.
func (s *Service) Open(ctx context.Context, tag, name string) (*File, error) {
	if !Known(name) {
		return nil, core.Errorf(core.KindNotFound, "no binary %q: ztpd serves %s", name, strings.Join(Names, ", "))
	}
	set, err := s.Sums(ctx, tag)
	if err != nil {
		return nil, err
	}
	var bin *Binary
	for i := range set.Files {
		if set.Files[i].Name == name {
			bin = &set.Files[i]
		}
	}
	if bin == nil {
		return nil, core.Errorf(core.KindNotFound, "the ISO of Kubernetes %s (%s) holds no %s", set.Version.SemVer, isoLabel(set.ISO), ISOPath(name))
	}
	f, img, err := s.openISO(set.ISO)
	if err != nil {
		return nil, err
	}
	sec, err := img.Open(ISOPath(name))
	if err != nil {
		f.Close()
		return nil, core.WrapError(core.KindInternal, "", fmt.Errorf("ISO %s: %w", set.ISO.SHA256, err))
	}
	if sec.Size() != bin.Size {
		f.Close()
		return nil, core.Errorf(core.KindUnavailable, "the ISO of Kubernetes %s (%s) changed on disk: its %s is %d bytes, %d when hashed",
			set.Version.SemVer, isoLabel(set.ISO), ISOPath(name), sec.Size(), bin.Size)
	}
	return &File{Binary: *bin, ISO: set.ISO, content: sec, iso: f}, nil
}

// resolve finds the version of tag's release that has an ISO in the
// store: among versions of that release naming an ISO, the enabled ones,
// else the disabled ones; they must name the same ISO (versions for two
// architectures would, say, and a node must not get the other's kubelet).
func (s *Service) resolve(tag string) (core.Version, core.Image, error) {
	sv, err := semver.ParseRelease(tag)
	if err != nil || (tag != sv.Tag() && tag != sv.String()) {
		return core.Version{}, core.Image{}, core.Errorf(core.KindNotFound, "no Kubernetes version %q: a version is a release tag such as v1.37.2", tag)
	}
	var enabled, disabled []core.Version
	err = s.st.View(func(tx core.Tx) error {
		return tx.Versions().List("", func(v core.Version) (bool, error) {
			if v.SemVer == sv.String() && v.ImageID != "" {
				if v.State == "Enabled" { // clusters.VersionEnabled
					enabled = append(enabled, v)
				} else {
					disabled = append(disabled, v)
				}
			}
			return true, nil
		})
	})
	if err != nil {
		return core.Version{}, core.Image{}, err
	}
	cands := enabled
	if len(cands) == 0 {
		cands = disabled
	}
	if len(cands) == 0 {
		return core.Version{}, core.Image{}, core.Errorf(core.KindNotFound,
			"no Kubernetes version %s with a binaries ISO in the image store", sv.Tag())
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].Name < cands[j].Name })
	v := cands[0]
	for _, o := range cands[1:] {
		if o.ImageID != v.ImageID {
			return core.Version{}, core.Image{}, core.Errorf(core.KindConflict,
				"Kubernetes versions %s and %s are both release %s with different ISOs (%.12s, %.12s): disable one to serve its binaries",
				v.Name, o.Name, sv.Tag(), v.ImageID, o.ImageID)
		}
	}
	im, err := s.images.Resolve(v.ImageID)
	if err != nil {
		if core.KindOf(err) == core.KindNotFound {
			return core.Version{}, core.Image{}, core.Errorf(core.KindNotFound,
				"Kubernetes version %s names ISO %.12s, which the image store does not hold", v.Name, v.ImageID)
		}
		return core.Version{}, core.Image{}, err
	}
	return v, im, nil
}

// sums is the ISO's binaries, computed by the first caller while the
// others wait; a failure is not kept, so the next caller tries again.
func (s *Service) sums(ctx context.Context, im core.Image) ([]Binary, error) {
	s.mu.Lock()
	e, ok := s.isos[im.SHA256]
	if !ok {
		e = &isoSums{ready: make(chan struct{})}
		s.isos[im.SHA256] = e
		s.order = append(s.order, im.SHA256)
		if len(s.order) > maxCached {
			delete(s.isos, s.order[0])
			s.order = s.order[1:]
		}
	}
	s.mu.Unlock()
	if ok {
		select {
		case <-e.ready:
			return e.files, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// Hashed without the caller's context: other callers wait for it,
	// and it is bounded by the ISO's size.
	e.files, e.err = s.hash(im)
	if e.err != nil {
		s.mu.Lock()
		if s.isos[im.SHA256] == e {
			delete(s.isos, im.SHA256)
			for i, k := range s.order {
				if k == im.SHA256 {
					s.order = append(s.order[:i], s.order[i+1:]...)
					break
				}
			}
		}
		s.mu.Unlock()
	}
	close(e.ready)
	return e.files, e.err
}

func (s *Service) hash(im core.Image) ([]Binary, error) {
	f, img, err := s.openISO(im)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var files []Binary
	var paths []string
	for _, n := range Names {
		sec, err := img.Open(ISOPath(n))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		files = append(files, Binary{Name: n, Size: sec.Size()})
		paths = append(paths, ISOPath(n))
	}
	imageSum, sums, err := img.Sums(context.Background(), paths)
	if err != nil {
		return nil, core.WrapError(core.KindInternal, "", fmt.Errorf("hashing ISO %s: %w", im.SHA256, err))
	}
	if imageSum != im.SHA256 {
		return nil, core.Errorf(core.KindUnavailable, "the ISO %s is damaged: its content hashes to %.12s, not its digest %.12s",
			isoLabel(im), imageSum, im.SHA256)
	}
	for i := range files {
		files[i].SHA256 = sums[paths[i]]
	}
	return files, nil
}

// openISO opens the ISO and reads its directory tree.
func (s *Service) openISO(im core.Image) (*os.File, *isobuild.Image, error) {
	f, err := s.images.Open(im)
	if err != nil {
		return nil, nil, core.WrapError(core.KindUnavailable, fmt.Sprintf("the ISO %s is not available on this server (its content is missing)", isoLabel(im)), err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, core.WrapError(core.KindInternal, "", err)
	}
	img, err := isobuild.OpenImage(f, st.Size())
	if err != nil {
		f.Close()
		return nil, nil, core.WrapError(core.KindUnavailable, fmt.Sprintf("the ISO %s cannot be read: %v", isoLabel(im), err), err)
	}
	return f, img, nil
}

func isoLabel(im core.Image) string {
	if im.Name != "" {
		return im.Name
	}
	return im.SHA256
}
