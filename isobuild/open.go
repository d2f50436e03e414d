package isobuild

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// Image is an ISO 9660 image opened for reading its files in place, without
// mounting it: the directory tree is read once (by the same bounds-checked
// reader as ReadManifest, so any image is accepted as input), then a file's
// content is a section of the image.
type Image struct {
	r         io.ReaderAt
	size      int64
	label     string
	rockRidge bool
	files     map[string]*entry
}

// OpenImage reads the directory tree of the image r, size bytes long.
func OpenImage(r io.ReaderAt, size int64) (*Image, error) {
	v, files, _, err := listFiles(r, size)
	if err != nil {
		return nil, err
	}
	im := &Image{r: r, size: size, label: v.label, rockRidge: v.rockRidge, files: make(map[string]*entry, len(files))}
	for _, e := range files {
		im.files[e.path] = e
	}
	return im, nil
}

// Label is the volume identifier.
func (im *Image) Label() string { return im.label }

// lookup finds the regular file at path (slash-separated, relative). An
// image without Rock Ridge stores upper-case ISO names (K8S/KUBEADM), so
// there a name is matched without regard to case.
func (im *Image) lookup(path string) (*entry, error) {
	if e, ok := im.files[path]; ok {
		return e, nil
	}
	if !im.rockRidge {
		for p, e := range im.files {
			if strings.EqualFold(p, path) {
				return e, nil
			}
		}
	}
	return nil, fmt.Errorf("%s: %w", path, fs.ErrNotExist)
}

// Open returns the content of the regular file at path as a section of the
// image (its Size is the file's); fs.ErrNotExist when the image has none.
func (im *Image) Open(path string) (*io.SectionReader, error) {
	e, err := im.lookup(path)
	if err != nil {
		return nil, err
	}
	if len(e.extents) == 1 {
		return io.NewSectionReader(im.r, e.extents[0].off, e.size), nil
	}
	return io.NewSectionReader(extentReader{r: im.r, extents: e.extents}, 0, e.size), nil
}

// Sums hashes the files at paths and, in the same pass over the image, the
// whole image: the image's sha256 says the files' sums were computed from
// the image the caller meant. A path the image lacks is fs.ErrNotExist.
func (im *Image) Sums(ctx context.Context, paths []string) (image string, files map[string]string, err error) {
	files = make(map[string]string, len(paths))
	sums := make([]string, len(paths))
	jobs := make([]hashJob, len(paths))
	for i, p := range paths {
		e, err := im.lookup(p)
		if err != nil {
			return "", nil, err
		}
		jobs[i] = hashJob{extents: e.extents, label: p, done: func(sum string) error { sums[i] = sum; return nil }}
	}
	if image, err = hashImage(ctx, im.r, im.size, jobs, true); err != nil {
		return "", nil, err
	}
	for i, p := range paths {
		files[p] = sums[i]
	}
	return image, files, nil
}

// extentReader reads a multi-extent file as one run of bytes.
type extentReader struct {
	r       io.ReaderAt
	extents []extent
}

func (x extentReader) ReadAt(b []byte, off int64) (int, error) {
	n := 0
	for _, e := range x.extents {
		if len(b) == 0 {
			break
		}
		if off >= e.size {
			off -= e.size
			continue
		}
		m := int(min(int64(len(b)), e.size-off))
		k, err := x.r.ReadAt(b[:m], e.off+off)
		n += k
		if err != nil && !(err == io.EOF && k == m) {
			return n, err
		}
		b, off = b[m:], 0
	}
	if len(b) > 0 {
		return n, io.EOF
	}
	return n, nil
}
