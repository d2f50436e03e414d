package isobuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
)

// Manifest is what an image holds, read back from the image itself.
type Manifest struct {
	Label     string         `json:"label"`
	Size      int64          `json:"size"`
	SHA256    string         `json:"sha256,omitempty"` // whole image, when hashed
	RockRidge bool           `json:"rock_ridge"`
	Files     []ManifestFile `json:"files"`
}

// ManifestFile is one regular file of an image.
type ManifestFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Mode   string `json:"mode,omitempty"` // octal permission bits; empty without Rock Ridge
	SHA256 string `json:"sha256,omitempty"`
}

// Expected is what Verify checks one file against.
type Expected struct {
	Path   string
	Size   int64       // -1: do not check
	Mode   fs.FileMode // 0: do not check
	SHA256 string      // "": do not check, just report
}

// ReadManifest lists an image's regular files (Rock Ridge names when present),
// sorted by path. With hash it also computes every file's sha256 and the
// image's. It works on any ISO 9660 image, not only ours.
func ReadManifest(ctx context.Context, isoPath string, withHash bool) (*Manifest, error) {
	f, size, err := openImage(isoPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, files, _, err := listFiles(f, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", isoPath, err)
	}
	m := &Manifest{Label: v.label, Size: size, RockRidge: v.rockRidge}
	sums := make([]string, len(files))
	if withHash {
		jobs := make([]hashJob, len(files))
		for i, e := range files {
			i := i
			jobs[i] = hashJob{extents: e.extents, done: func(sum string) error { sums[i] = sum; return nil }}
		}
		if m.SHA256, err = hashImage(ctx, f, size, jobs, true); err != nil {
			return nil, err
		}
	}
	for i, e := range files {
		mf := ManifestFile{Path: e.path, Size: e.size, SHA256: sums[i]}
		if e.hasMode {
			mf.Mode = fmt.Sprintf("%04o", uint32(e.mode))
		}
		m.Files = append(m.Files, mf)
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	return m, nil
}

// Verify re-reads an image and checks that it holds exactly the expected
// files, with their sizes, modes and hashes, and the label when label is not
// empty. It returns the manifest with every hash filled in.
func Verify(ctx context.Context, isoPath, label string, expected []Expected) (*Manifest, error) {
	f, size, err := openImage(isoPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	exp := make([]expectation, len(expected))
	for i, e := range expected {
		exp[i] = expectation{name: e.Path, path: e.Path, size: e.Size, mode: e.Mode, sha256: e.SHA256}
	}
	vr, err := verifyImage(ctx, f, size, label, exp, true)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", isoPath, err)
	}
	m := &Manifest{Label: vr.label, Size: size, SHA256: vr.imageSHA, RockRidge: true}
	for i, e := range exp {
		m.Files = append(m.Files, ManifestFile{Path: e.path, Size: vr.sizes[i], Mode: fmt.Sprintf("%04o", uint32(vr.modes[i])), SHA256: vr.fileSHA[i]})
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	return m, nil
}

func openImage(p string) (*os.File, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s is not a regular file", p)
	}
	return f, st.Size(), nil
}

// expectation is one file a freshly built image must hold.
type expectation struct {
	name, path string
	size       int64
	mode       fs.FileMode
	sha256     string // expected hash, or ""
}

type verifyResult struct {
	label    string
	imageSHA string
	fileSHA  []string
	sizes    []int64
	modes    []fs.FileMode
}

// verifyImage checks the image's structure (checkStructure), then hashes
// every file's bytes from the image (and the whole image when imageHash).
func verifyImage(ctx context.Context, f io.ReaderAt, total int64, label string, exp []expectation, imageHash bool) (*verifyResult, error) {
	vr, entries, err := checkStructure(f, total, label, exp)
	if err != nil {
		return nil, err
	}
	jobs := make([]hashJob, 0, len(exp))
	for i := range exp {
		x, e := &exp[i], entries[i]
		jobs = append(jobs, hashJob{
			extents: e.extents,
			label:   x.name + " (" + x.path + ")",
			done: func(sum string) error {
				vr.fileSHA[i] = sum
				if x.sha256 != "" && sum != x.sha256 {
					return &ChecksumError{Name: x.name, Path: x.path, Want: x.sha256, Got: sum}
				}
				return nil
			},
		})
	}
	if vr.imageSHA, err = hashImage(ctx, f, total, jobs, imageHash); err != nil {
		return nil, err
	}
	return vr, nil
}

// checkStructure re-reads the image's volume descriptor and directories and
// checks the label, Rock Ridge, and that the image holds exactly the expected
// files with their sizes and modes. entries[i] is exp[i]'s directory entry.
func checkStructure(f io.ReaderAt, total int64, label string, exp []expectation) (*verifyResult, []*entry, error) {
	v, files, _, err := listFiles(f, total)
	if err != nil {
		return nil, nil, fmt.Errorf("re-reading the image: %w", err)
	}
	if label != "" && v.label != label {
		return nil, nil, fmt.Errorf("image label is %q, want %q", v.label, label)
	}
	if int64(v.blocks)*sectorSize > total {
		return nil, nil, fmt.Errorf("image is %d bytes but its volume descriptor says %d blocks", total, v.blocks)
	}
	if !v.rockRidge {
		return nil, nil, errors.New("image has no Rock Ridge entries: names and modes are lost")
	}
	byPath := make(map[string]*entry, len(files))
	for _, e := range files {
		byPath[e.path] = e
	}
	vr := &verifyResult{label: v.label, fileSHA: make([]string, len(exp)), sizes: make([]int64, len(exp)), modes: make([]fs.FileMode, len(exp))}
	entries := make([]*entry, len(exp))
	var problems []error
	for i := range exp {
		x := &exp[i]
		e, ok := byPath[x.path]
		if !ok {
			problems = append(problems, fmt.Errorf("artifact %s: %s is missing from the image", x.name, x.path))
			continue
		}
		delete(byPath, x.path)
		entries[i] = e
		vr.sizes[i], vr.modes[i] = e.size, e.mode
		if x.size >= 0 && e.size != x.size {
			problems = append(problems, fmt.Errorf("artifact %s: %s is %d bytes on the image, want %d", x.name, x.path, e.size, x.size))
			continue
		}
		if x.mode != 0 && (!e.hasMode || e.mode != x.mode.Perm()) {
			problems = append(problems, fmt.Errorf("artifact %s: %s has mode %04o on the image, want %04o", x.name, x.path, uint32(e.mode), uint32(x.mode)))
			continue
		}
	}
	extra := make([]string, 0, len(byPath))
	for p := range byPath {
		extra = append(extra, p)
	}
	sort.Strings(extra)
	for _, p := range extra {
		problems = append(problems, fmt.Errorf("unexpected file %s on the image", p))
	}
	if len(problems) > 0 {
		return nil, nil, errors.Join(problems...)
	}
	return vr, entries, nil
}

// hashJob is one file to hash from the image.
type hashJob struct {
	extents []extent
	label   string
	done    func(sum string) error
}

const readChunk = 1 << 20

// hashImage hashes each job's extents (several workers) and, with imageHash,
// the whole image sequentially (one more worker). Memory: one 1 MiB buffer
// per worker.
func hashImage(ctx context.Context, f io.ReaderAt, total int64, jobs []hashJob, imageHash bool) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once     sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	setErr := func(err error) {
		once.Do(func() {
			firstErr = err
			cancel()
		})
	}
	sort.SliceStable(jobs, func(i, j int) bool { return firstOff(jobs[i]) < firstOff(jobs[j]) })
	if imageHash && inImageOrder(jobs) {
		return hashShared(ctx, f, total, jobs, setErr, &firstErr)
	}
	workers := runtime.GOMAXPROCS(0)
	if imageHash && workers > 1 {
		workers--
	}
	workers = max(1, min(workers, len(jobs)))
	var next atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, readChunk)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) || ctx.Err() != nil {
					return
				}
				j := &jobs[i]
				sum, err := hashJobData(ctx, f, j, buf)
				if err == nil {
					err = j.done(sum)
				}
				if err != nil {
					setErr(err)
					return
				}
			}
		}()
	}
	var imageSum string
	if imageHash {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := sha256.New()
			buf := make([]byte, readChunk)
			for off := int64(0); off < total; {
				n := min(int64(len(buf)), total-off)
				if err := readRange(ctx, f, buf[:n], off); err != nil {
					setErr(fmt.Errorf("hashing the image: %w", err))
					return
				}
				h.Write(buf[:n])
				off += n
			}
			imageSum = hex.EncodeToString(h.Sum(nil))
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return "", firstErr
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return imageSum, nil
}

// inImageOrder reports whether all extents, job after job, run forward
// without overlapping, so one sequential pass can feed every hash.
func inImageOrder(jobs []hashJob) bool {
	end := int64(0)
	for _, j := range jobs {
		for _, x := range j.extents {
			if x.size == 0 {
				continue // empty files may all point at one block
			}
			if x.off < end {
				return false
			}
			end = x.off + x.size
		}
	}
	return true
}

// chunk is one read of the image, shared by the image hasher and the file hasher.
type chunk struct {
	off  int64
	b    []byte
	refs atomic.Int32
}

// hashShared reads the image once, sequentially, and hands every chunk both to
// the whole-image hash and to the per-file hashes (one read instead of two).
func hashShared(ctx context.Context, f io.ReaderAt, total int64, jobs []hashJob, setErr func(error), firstErr *error) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const depth = 8
	pool := make(chan []byte, depth)
	for i := 0; i < depth; i++ {
		pool <- make([]byte, readChunk)
	}
	release := func(c *chunk) {
		if c.refs.Add(-1) == 0 {
			pool <- c.b[:cap(c.b)]
		}
	}
	imgCh := make(chan *chunk, depth)
	fileCh := make(chan *chunk, depth)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // reader
		defer wg.Done()
		defer close(imgCh)
		defer close(fileCh)
		for off := int64(0); off < total; {
			var buf []byte
			select {
			case buf = <-pool:
			case <-ctx.Done():
				return
			}
			n := min(int64(len(buf)), total-off)
			if err := readRange(ctx, f, buf[:n], off); err != nil {
				setErr(fmt.Errorf("reading the image: %w", err))
				return
			}
			c := &chunk{off: off, b: buf[:n]}
			c.refs.Store(2)
			imgCh <- c
			fileCh <- c
			off += n
		}
	}()
	var imageSum string
	go func() { // whole-image hash
		defer wg.Done()
		h := sha256.New()
		for c := range imgCh {
			h.Write(c.b)
			release(c)
		}
		imageSum = hex.EncodeToString(h.Sum(nil))
	}()
	go func() { // per-file hashes, in image order
		defer wg.Done()
		fh := &fileHasher{jobs: jobs}
		failed := false
		for c := range fileCh {
			if !failed {
				if err := fh.feed(c.off, c.b); err != nil {
					setErr(err)
					failed = true
				}
			}
			release(c)
		}
		if !failed && ctx.Err() == nil {
			if err := fh.finish(); err != nil {
				setErr(err)
			}
		}
	}()
	wg.Wait()
	if *firstErr != nil {
		return "", *firstErr
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return imageSum, nil
}

// fileHasher walks the jobs' extents in image order as chunks arrive.
type fileHasher struct {
	jobs []hashJob
	j, x int   // current job, extent
	pos  int64 // bytes of the current job seen so far
	h    hash.Hash
}

// next finishes jobs whose extents are all seen and opens the next one.
func (fh *fileHasher) settle() error {
	for fh.j < len(fh.jobs) {
		j := &fh.jobs[fh.j]
		if fh.h == nil {
			fh.h = sha256.New()
			fh.x, fh.pos = 0, 0
		}
		for fh.x < len(j.extents) && j.extents[fh.x].size == 0 {
			fh.x++
		}
		if fh.x < len(j.extents) {
			return nil
		}
		sum := hex.EncodeToString(fh.h.Sum(nil))
		fh.h = nil
		fh.j++
		if err := j.done(sum); err != nil {
			return err
		}
	}
	return nil
}

func (fh *fileHasher) feed(off int64, b []byte) error {
	end := off + int64(len(b))
	for {
		if err := fh.settle(); err != nil {
			return err
		}
		if fh.j >= len(fh.jobs) {
			return nil
		}
		j := &fh.jobs[fh.j]
		x := &j.extents[fh.x]
		done := fh.pos - fh.extentStart()
		start := x.off + done
		if start >= end {
			return nil // this chunk ends before the file's next byte
		}
		if start < off {
			return fmt.Errorf("artifact %s: internal error: chunk at %d skipped byte %d", j.label, off, start)
		}
		n := min(end-start, x.size-done)
		seg := b[start-off : start-off+n]
		fh.h.Write(seg)
		fh.pos += n
		if done+n == x.size {
			fh.x++
		}
	}
}

// extentStart is the file position where the current extent begins.
func (fh *fileHasher) extentStart() int64 {
	var p int64
	for _, x := range fh.jobs[fh.j].extents[:fh.x] {
		p += x.size
	}
	return p
}

func (fh *fileHasher) finish() error {
	if err := fh.settle(); err != nil {
		return err
	}
	if fh.j < len(fh.jobs) {
		return fmt.Errorf("artifact %s: image ended before the file", fh.jobs[fh.j].label)
	}
	return nil
}

func firstOff(j hashJob) int64 {
	if len(j.extents) == 0 {
		return 0
	}
	return j.extents[0].off
}

func readRange(ctx context.Context, f io.ReaderAt, b []byte, off int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n, err := f.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func hashJobData(ctx context.Context, f io.ReaderAt, j *hashJob, buf []byte) (string, error) {
	h := sha256.New()
	for _, x := range j.extents {
		for done := int64(0); done < x.size; {
			n := min(int64(len(buf)), x.size-done)
			b := buf[:n]
			if err := readRange(ctx, f, b, x.off+done); err != nil {
				return "", fmt.Errorf("artifact %s: reading from the image: %w", j.label, err)
			}
			h.Write(b)
			done += n
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func mismatchAt(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}
