// Package isobuild writes CloudStack Kubernetes binaries ISOs: ISO 9660 with
// Rock Ridge, label CDROM, reproducible to the byte, verified after writing.
//
// How an image is made (and why):
//
//  1. A private staging directory gets one EMPTY placeholder per file, with the
//     file's mode and the build epoch as times. go-diskfs Finalize deletes its
//     workspace, so it never sees the caller's tree, and since placeholders are
//     our own files their modes can be set without touching the sources.
//  2. go-diskfs writes the whole ISO structure from that staging tree: volume
//     descriptors, directory records, Rock Ridge entries, path tables.
//  3. normalize rewrites the machine- and moment-dependent fields go-diskfs
//     wrote (dates, ctime, uid/gid, collision names) and gives every file record
//     its real extent and size (see normalize.go).
//  4. The directory records are re-read with an independent reader (label,
//     names, sizes, modes, and each extent where the data will go).
//  5. One pass writes the data (pipeline.go): each 256 KiB of a source is read
//     once, written to its extent, read back from the image and compared with
//     what was written. The read-back bytes feed every file's sha256 (checked
//     against the pin) and the image's sha256, on two more goroutines. Every
//     byte is read from its source once, and hashed as read back from the
//     image. go-diskfs copies data 2 KiB at a time (870,000 syscalls for an
//     851 MiB tree, 3.4 s), so it only writes the structure.
//  6. fsync, then rename onto the output name: a crash or kill -9 leaves at most
//     a hidden .<name>.tmp-* file, never a partial image under the final name.
package isobuild

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/ztpd/ztpd/images/bom"
)

// DefaultLabel is the volume label CloudStack nodes look for (LABEL=CDROM).
const DefaultLabel = "CDROM"

// MaxFileSize is the largest file an image can hold: ISO 9660 directory
// records store sizes in 32 bits and we do not write multi-extent files.
const MaxFileSize = math.MaxUint32

// DefaultEpoch is the timestamp of every date in the image when
// SOURCE_DATE_EPOCH is not set.
var DefaultEpoch = time.Unix(0, 0).UTC()

// File is one file to put on the image.
type File struct {
	// Path is the destination on the image: relative, slash-separated.
	Path string
	// Source is the local file whose bytes go on the image; or set Content.
	Source  string
	Content []byte
	// Mode is the permission bits on the image (0 means 0644).
	Mode fs.FileMode
	// SHA256 is the expected content hash (lowercase hex). Empty means "compare
	// the image with Source byte for byte" and report the hash found.
	SHA256 string
	// Name names the artifact in messages (default: Path).
	Name string
}

// Options configure Build.
type Options struct {
	Files  []File
	Output string
	// Label is the volume identifier (default CDROM): A-Z 0-9 _, at most 32.
	Label string
	// Epoch dates every timestamp in the image (default: SOURCE_DATE_EPOCH,
	// else DefaultEpoch; see EpochFromEnv).
	Epoch time.Time
	// TempDir holds the (empty) staging tree; default os.TempDir().
	TempDir string
	// NoFsync skips the final fsync. The image is still renamed into place only
	// when complete, so a crash of ztpd never leaves a partial image; a power
	// loss right after the build might.
	NoFsync bool
	// Progress, when set, is called every ~100 ms from one goroutine.
	Progress func(Progress)
}

// Progress reports bytes written and verified so far.
type Progress struct {
	Written, Verified, Total int64
}

// Result describes a finished, verified image.
type Result struct {
	Path    string       `json:"path"`
	Size    int64        `json:"size"`
	SHA256  string       `json:"sha256"`
	Label   string       `json:"label"`
	Epoch   time.Time    `json:"epoch"`
	Files   []FileResult `json:"files"`
	Timings Timings      `json:"timings"`
}

// FileResult is one verified file of the image.
type FileResult struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Mode   string `json:"mode"`
	SHA256 string `json:"sha256"`
	// Pinned is true when the hash was given (BOM pin, published checksum or
	// inline content) rather than found by comparing with the source.
	Pinned bool `json:"pinned"`
}

// Timings break the build down, in seconds.
type Timings struct {
	Structure float64 `json:"structure_s"` // staging + go-diskfs + normalize
	Data      float64 `json:"data_s"`      // file data written (read back and compared as it goes)
	Verify    float64 `json:"verify_s"`    // until the last hash finished (overlaps data)
	Sync      float64 `json:"sync_s"`      // fsync + rename
	Total     float64 `json:"total_s"`
}

// ChecksumError is a file whose content does not have the expected sha256.
type ChecksumError struct {
	Name, Path string
	Want, Got  string
	Source     string // where the bytes came from
}

func (e *ChecksumError) Error() string {
	src := ""
	if e.Source != "" {
		src = " (from " + e.Source + ")"
	}
	return fmt.Sprintf("artifact %s (%s): sha256 mismatch: expected %s, got %s%s", e.Name, e.Path, e.Want, e.Got, src)
}

var labelRe = regexp.MustCompile(`^[A-Z0-9_]{1,32}$`)

// EpochFromEnv returns SOURCE_DATE_EPOCH as a time, or DefaultEpoch when it is
// unset. A malformed value is an error, not silently ignored.
func EpochFromEnv() (time.Time, error) {
	s, ok := os.LookupEnv("SOURCE_DATE_EPOCH")
	if !ok || s == "" {
		return DefaultEpoch, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 253402300799 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want whole seconds since 1970 (0..253402300799)", s)
	}
	t := time.Unix(n, 0).UTC()
	if t.Year() > 2155 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: ISO 9660 dates end in 2155", s)
	}
	return t, nil
}

// planned is a validated file with its place in the image.
type planned struct {
	File
	size    int64
	block   uint32
	modTime time.Time // the source's, when its copy began
}

// checkSum checks a file's sha256, as found on the image, against its pin.
func (f *planned) checkSum(got string) error {
	if f.SHA256 != "" && got != f.SHA256 {
		return &ChecksumError{Name: f.Name, Path: f.Path, Want: f.SHA256, Got: got, Source: f.Source}
	}
	return nil
}

// emptySHA256 is the sha256 of no bytes.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// Build writes and verifies an image. On any error nothing is left at
// opts.Output (an existing file there is untouched) and the temp file is gone.
func Build(ctx context.Context, opts Options) (*Result, error) {
	t0 := time.Now()
	if opts.Label == "" {
		opts.Label = DefaultLabel
	}
	if !labelRe.MatchString(opts.Label) {
		return nil, fmt.Errorf("volume label %q: use 1-32 of A-Z 0-9 _", opts.Label)
	}
	if opts.Epoch.IsZero() {
		e, err := EpochFromEnv()
		if err != nil {
			return nil, err
		}
		opts.Epoch = e
	}
	if opts.Epoch.Before(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)) || opts.Epoch.Year() > 2155 {
		return nil, fmt.Errorf("epoch %v: ISO 9660 dates span 1900-2155", opts.Epoch)
	}
	opts.Epoch = opts.Epoch.UTC().Truncate(time.Second)
	if opts.Output == "" {
		return nil, errors.New("no output path")
	}
	if st, err := os.Stat(opts.Output); err == nil && st.IsDir() {
		return nil, fmt.Errorf("output %s is a directory", opts.Output)
	}
	files, err := plan(opts.Files)
	if err != nil {
		return nil, err
	}

	dir, base := filepath.Split(opts.Output)
	if dir == "" {
		dir = "."
	}
	removeStaleTemps(dir, base)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("creating temp file next to %s: %w", opts.Output, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := lockTemp(tmp); err != nil {
		return nil, fmt.Errorf("locking %s: %w", tmp.Name(), err)
	}

	dataStart, err := writeStructure(opts, files, tmp)
	if err != nil {
		return nil, err
	}
	tStruct := time.Now()

	// Data layout: sorted by path, right after the structure. An empty file
	// points at the next file's block and takes none, as genisoimage does.
	block := uint64(dataStart)
	for _, f := range files {
		f.block = uint32(block)
		block += uint64(blocksFor(f.size))
		if block > math.MaxUint32 {
			return nil, errors.New("image would exceed 2^32 blocks (8 TiB)")
		}
	}
	total := int64(block) * sectorSize
	if err := finishStructure(tmp, opts.Epoch, files, uint32(block)); err != nil {
		return nil, err
	}
	if err := sizeImage(tmp, total); err != nil {
		return nil, fmt.Errorf("sizing image: %w", err)
	}

	// The directory records are final: check them before any data goes in,
	// and check that each points exactly where the data will be written.
	exp := make([]expectation, len(files))
	for i, f := range files {
		exp[i] = expectation{name: f.Name, path: f.Path, size: f.size, mode: f.Mode}
	}
	vr, entries, err := checkStructure(tmp, total, opts.Label, exp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tmp.Name(), err)
	}
	order := make([]*planned, 0, len(files))
	for i, f := range files {
		if f.size == 0 {
			vr.fileSHA[i] = emptySHA256
			if err := f.checkSum(emptySHA256); err != nil {
				return nil, err
			}
			continue
		}
		x := entries[i].extents
		if len(x) != 1 || x[0].off != int64(f.block)*sectorSize || x[0].size != f.size {
			return nil, fmt.Errorf("internal error: the directory record of %s points at %v, but its data goes at byte %d", f.Path, x, int64(f.block)*sectorSize)
		}
		order = append(order, f)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].block < order[j].block })

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newGate(int64(dataStart) * sectorSize)
	var written, verified atomic.Int64
	stopProgress := reportProgress(opts.Progress, &written, &verified, sumSizes(files))
	defer stopProgress()

	var wg sync.WaitGroup
	if !opts.NoFsync {
		// Start disk writeback of finished ranges as the copy goes, from its own
		// goroutine (sync_file_range may block on the device queue), so the final
		// fsync finds most of the image already on disk.
		wg.Add(1)
		go func() {
			defer wg.Done()
			const batch = 8 << 20 // one sync_file_range per 8 MiB, not per chunk
			for last := int64(0); last < total; {
				avail, err := g.waitBeyond(min(last+batch, total) - 1)
				if err != nil {
					return
				}
				startWriteback(tmp, last, avail-last)
				last = avail
			}
		}()
	}
	pl := &pipeline{img: tmp, files: order, total: total, gate: g, written: &written, verified: &verified}
	imageSHA, perr := pl.run(ctx)
	if perr != nil {
		g.fail(perr)
	}
	wg.Wait()
	tVerify := time.Now()
	if perr != nil {
		return nil, perr
	}
	vr.imageSHA = imageSHA
	for i, f := range files {
		if f.size > 0 {
			vr.fileSHA[i] = pl.fileSHA[f]
		}
	}

	if !opts.NoFsync {
		if err := tmp.Sync(); err != nil {
			return nil, fmt.Errorf("fsync %s: %w", tmp.Name(), err)
		}
	}
	if err := tmp.Chmod(0o644); err != nil {
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("closing image: %w", err)
	}
	if err := os.Rename(tmp.Name(), opts.Output); err != nil {
		return nil, fmt.Errorf("renaming image into place: %w", err)
	}
	ok = true
	if !opts.NoFsync {
		syncDir(dir)
	}
	stopProgress()
	tEnd := time.Now()

	res := &Result{Path: opts.Output, Size: total, SHA256: vr.imageSHA, Label: opts.Label, Epoch: opts.Epoch}
	for i, f := range files {
		res.Files = append(res.Files, FileResult{
			Name: f.Name, Path: f.Path, Size: f.size, Mode: fmt.Sprintf("%04o", uint32(f.Mode)),
			SHA256: vr.fileSHA[i], Pinned: f.SHA256 != "",
		})
	}
	res.Timings = Timings{
		Structure: tStruct.Sub(t0).Seconds(),
		Data:      pl.dataDone.Sub(tStruct).Seconds(),
		Verify:    tVerify.Sub(tStruct).Seconds(),
		Sync:      tEnd.Sub(tVerify).Seconds(),
		Total:     tEnd.Sub(t0).Seconds(),
	}
	return res, nil
}

func blocksFor(size int64) uint32 { return uint32((size + sectorSize - 1) / sectorSize) }

func sumSizes(files []*planned) int64 {
	var n int64
	for _, f := range files {
		n += f.size
	}
	return n
}

// plan validates the file list and stats every source. Every problem is
// reported before anything is written.
func plan(in []File) ([]*planned, error) {
	if len(in) == 0 {
		return nil, errors.New("no files to put on the image")
	}
	var errs []error
	out := make([]*planned, 0, len(in))
	byPath := map[string]bool{}
	for _, f := range in {
		p := &planned{File: f}
		if p.Name == "" {
			p.Name = p.Path
		}
		if p.Mode == 0 {
			p.Mode = 0o644
		}
		if err := bom.CheckPath(p.Path); err != nil {
			errs = append(errs, fmt.Errorf("artifact %s: %w", p.Name, err))
			continue
		}
		if byPath[p.Path] {
			errs = append(errs, fmt.Errorf("artifact %s: %s listed twice", p.Name, p.Path))
			continue
		}
		byPath[p.Path] = true
		if p.Mode&^fs.ModePerm != 0 {
			errs = append(errs, fmt.Errorf("artifact %s: mode %v: only permission bits", p.Name, p.Mode))
			continue
		}
		if p.SHA256 != "" && !isHex64(p.SHA256) {
			errs = append(errs, fmt.Errorf("artifact %s: sha256 %q is not 64 lowercase hex digits", p.Name, p.SHA256))
			continue
		}
		switch {
		case p.Content != nil && p.Source != "":
			errs = append(errs, fmt.Errorf("artifact %s: both content and source", p.Name))
			continue
		case p.Content != nil:
			p.size = int64(len(p.Content))
		case p.Source == "":
			errs = append(errs, fmt.Errorf("artifact %s: no source", p.Name))
			continue
		default:
			st, err := os.Stat(p.Source)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					err = fmt.Errorf("missing: %s does not exist", p.Source)
				}
				errs = append(errs, fmt.Errorf("artifact %s (%s): %w", p.Name, p.Path, err))
				continue
			}
			if !st.Mode().IsRegular() {
				errs = append(errs, fmt.Errorf("artifact %s (%s): %s is not a regular file", p.Name, p.Path, p.Source))
				continue
			}
			p.size = st.Size()
		}
		if p.size > MaxFileSize {
			errs = append(errs, fmt.Errorf("artifact %s (%s): %s is %d bytes (%.1f GiB); ISO 9660 stores file sizes in 32 bits, so files of 4 GiB or more cannot go on the image",
				p.Name, p.Path, p.Source, p.size, float64(p.size)/(1<<30)))
			continue
		}
		out = append(out, p)
	}
	// A file may not sit where another needs a directory.
	for p := range byPath {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			if byPath[d] {
				errs = append(errs, fmt.Errorf("%s is a file but %s needs it as a directory", d, p))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// writeStructure stages placeholders and lets go-diskfs write the image
// structure into tmp. It returns the first block after the structure.
func writeStructure(opts Options, files []*planned, tmp *os.File) (uint32, error) {
	stage, err := os.MkdirTemp(opts.TempDir, "ztpd-iso-stage-*")
	if err != nil {
		return 0, fmt.Errorf("staging directory: %w", err)
	}
	defer os.RemoveAll(stage) // go-diskfs removes it on success; this covers errors
	dirs := map[string]bool{}
	for _, f := range files {
		for d := filepath.Dir(f.Path); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
		local := filepath.Join(stage, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
			return 0, fmt.Errorf("staging: %w", err)
		}
		pf, err := os.OpenFile(local, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return 0, fmt.Errorf("staging: %w", err)
		}
		pf.Close()
		if err := os.Chmod(local, f.Mode); err != nil { // no umask, unlike OpenFile
			return 0, fmt.Errorf("staging: %w", err)
		}
		if err := os.Chtimes(local, opts.Epoch, opts.Epoch); err != nil {
			return 0, fmt.Errorf("staging: %w", err)
		}
	}
	// Directories last, deepest first: adding entries changes a directory's mtime.
	dl := make([]string, 0, len(dirs)+1)
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Slice(dl, func(i, j int) bool { return strings.Count(dl[i], "/") > strings.Count(dl[j], "/") })
	dl = append(dl, ".")
	for _, d := range dl {
		local := filepath.Join(stage, filepath.FromSlash(d))
		if err := os.Chmod(local, 0o755); err != nil {
			return 0, fmt.Errorf("staging: %w", err)
		}
		if err := os.Chtimes(local, opts.Epoch, opts.Epoch); err != nil {
			return 0, fmt.Errorf("staging: %w", err)
		}
	}

	fsys, err := iso9660.Create(file.New(tmp, false), 0, 0, sectorSize, stage)
	if err != nil {
		return 0, fmt.Errorf("go-diskfs: %w", err)
	}
	if err := fsys.Finalize(iso9660.FinalizeOptions{RockRidge: true, VolumeIdentifier: opts.Label}); err != nil {
		return 0, fmt.Errorf("go-diskfs: %w", err)
	}
	v, err := readVolumeFile(tmp)
	if err != nil {
		return 0, fmt.Errorf("go-diskfs output: %w", err)
	}
	return v.blocks, nil
}

// finishStructure normalises go-diskfs's structure (see normalize.go) and
// writes it back.
func finishStructure(tmp *os.File, epoch time.Time, files []*planned, totalBlocks uint32) error {
	v, err := readVolumeFile(tmp)
	if err != nil {
		return err
	}
	meta := make([]byte, int64(v.blocks)*sectorSize)
	if _, err := tmp.ReadAt(meta, 0); err != nil {
		return fmt.Errorf("reading back structure: %w", err)
	}
	place := make(map[string]placement, len(files))
	for _, f := range files {
		place[f.Path] = placement{block: f.block, size: uint32(f.size)}
	}
	if err := normalize(meta, epoch, place, totalBlocks); err != nil {
		return err
	}
	if _, err := tmp.WriteAt(meta, 0); err != nil {
		return fmt.Errorf("writing structure: %w", err)
	}
	return nil
}

// removeStaleTemps deletes temp images of earlier builds of the same output
// that were killed (their lock died with them).
func removeStaleTemps(dir, base string) {
	old, _ := filepath.Glob(filepath.Join(dir, "."+base+".tmp-*"))
	for _, p := range old {
		if unusedTemp(p) {
			os.Remove(p)
		}
	}
}

func readVolumeFile(f *os.File) (*volume, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return readVolume(f, st.Size())
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

func reportProgress(fn func(Progress), written, verified *atomic.Int64, total int64) (stop func()) {
	if fn == nil {
		return func() {}
	}
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fn(Progress{Written: written.Load(), Verified: verified.Load(), Total: total})
				return
			case <-t.C:
				fn(Progress{Written: written.Load(), Verified: verified.Load(), Total: total})
			}
		}
	}()
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// gate lets the disk writeback follow the writer: it waits for byte ranges to
// be written.
type gate struct {
	mu    sync.Mutex
	cond  *sync.Cond
	avail int64
	err   error
}

func newGate(avail int64) *gate {
	g := &gate{avail: avail}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gate) advance(to int64) {
	g.mu.Lock()
	if to > g.avail {
		g.avail = to
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}

func (g *gate) fail(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.cond.Broadcast()
	g.mu.Unlock()
}

// waitBeyond blocks until more than `from` bytes are final and returns how many are.
func (g *gate) waitBeyond(from int64) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.avail <= from && g.err == nil {
		g.cond.Wait()
	}
	if g.avail > from {
		return g.avail, nil
	}
	return 0, g.err
}
