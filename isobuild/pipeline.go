package isobuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// pipeChunk is a range of the image as read back after writing it. file is
// the index of the planned file it belongs to, or -1 for structure and padding.
type pipeChunk struct {
	b    []byte
	file int
	last bool // the file's final chunk
	refs atomic.Int32
}

// pipeline writes the file data into the image and verifies it as it goes.
// One goroutine reads each source chunk, writes it to the image, reads the
// range back from the image and compares it with what it wrote. The read-back
// bytes then feed two hashers on their own goroutines: the per-file sha256
// (checked against the pin) and the whole-image sha256. Every byte of the
// image, structure included, is hashed as read back from the image file, and
// every source byte is read once. Memory: pipeDepth+1 chunks.
type pipeline struct {
	img      *os.File
	files    []*planned // in block order, size > 0
	total    int64
	gate     *gate // advanced as data is written (disk writeback follows it)
	written  *atomic.Int64
	verified *atomic.Int64

	pool     chan []byte
	fileSHA  map[*planned]string
	dataDone time.Time // when the last byte was written
}

// A chunk is small enough to stay in the CPU cache between its read-back, the
// comparison and both hashes: 1 MiB chunks cost 15-20 % more wall time.
const (
	pipeChunkSize = 256 << 10
	pipeDepth     = 12
)

// testHookChunkWritten, when set, runs after each source chunk is written.
var testHookChunkWritten func(source string, done int64)

func (p *pipeline) run(ctx context.Context) (imageSHA string, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once     sync.Once
		firstErr error
	)
	setErr := func(e error) {
		once.Do(func() { firstErr = e; cancel(); p.gate.fail(e) })
	}
	p.pool = make(chan []byte, pipeDepth)
	for range pipeDepth {
		p.pool <- make([]byte, pipeChunkSize)
	}
	p.fileSHA = make(map[*planned]string, len(p.files))
	imgCh := make(chan *pipeChunk, pipeDepth)
	fileCh := make(chan *pipeChunk, pipeDepth)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		h := sha256.New()
		for c := range imgCh {
			h.Write(c.b)
			p.release(c)
		}
		imageSHA = hex.EncodeToString(h.Sum(nil))
	}()
	go func() {
		defer wg.Done()
		var h hash.Hash
		failed := false
		for c := range fileCh {
			if !failed {
				if h == nil {
					h = sha256.New()
				}
				h.Write(c.b)
				p.verified.Add(int64(len(c.b)))
				if c.last {
					f := p.files[c.file]
					sum := hex.EncodeToString(h.Sum(nil))
					h = nil
					p.fileSHA[f] = sum
					if err := f.checkSum(sum); err != nil {
						setErr(err)
						failed = true
					}
				}
			}
			p.release(c)
		}
	}()
	werr := p.write(ctx, imgCh, fileCh)
	close(imgCh)
	close(fileCh)
	if werr != nil {
		setErr(werr)
	}
	wg.Wait()
	if firstErr != nil {
		return "", firstErr
	}
	return imageSHA, ctx.Err()
}

func (p *pipeline) release(c *pipeChunk) {
	if c.refs.Add(-1) == 0 {
		p.pool <- c.b[:cap(c.b)]
	}
}

// write walks the image front to back. It hands every read-back range to the
// image hasher, and file ranges to the file hasher too.
func (p *pipeline) write(ctx context.Context, imgCh, fileCh chan<- *pipeChunk) error {
	scratch := make([]byte, pipeChunkSize)
	pos := int64(0)
	// readBack reads [off, off+n) of the image into a pool buffer.
	readBack := func(off int64, n int) (*pipeChunk, error) {
		var b []byte
		select {
		case b = <-p.pool:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if _, err := p.img.ReadAt(b[:n], off); err != nil {
			p.pool <- b
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("reading the image back at byte %d: %w", off, err)
		}
		return &pipeChunk{b: b[:n], file: -1}, nil
	}
	// gap hashes image bytes up to `to` that are no file's data.
	gap := func(to int64) error {
		for pos < to {
			c, err := readBack(pos, int(min(to-pos, pipeChunkSize)))
			if err != nil {
				return err
			}
			c.refs.Store(1)
			imgCh <- c
			pos += int64(len(c.b))
		}
		return nil
	}
	for i, f := range p.files {
		off := int64(f.block) * sectorSize
		if err := gap(off); err != nil {
			return err
		}
		src, err := p.open(f)
		if err != nil {
			return err
		}
		for done := int64(0); done < f.size; {
			if err = ctx.Err(); err != nil {
				break
			}
			n := int(min(f.size-done, pipeChunkSize))
			data := scratch[:n]
			if f.Content != nil {
				data = f.Content[done : done+int64(n)]
			} else if err = readSource(f, src, data, done); err != nil {
				break
			}
			if _, err = p.img.WriteAt(data, off+done); err != nil {
				err = fmt.Errorf("writing %s into the image: %w", f.Path, err)
				break
			}
			p.written.Add(int64(n))
			p.gate.advance(off + done + int64(n))
			var c *pipeChunk
			if c, err = readBack(off+done, n); err != nil {
				break
			}
			if !bytes.Equal(c.b, data) {
				p.pool <- c.b[:cap(c.b)]
				err = fmt.Errorf("artifact %s (%s): the image differs from what was written near byte %d", f.Name, f.Path, done+int64(mismatchAt(c.b, data)))
				break
			}
			done += int64(n)
			if testHookChunkWritten != nil {
				testHookChunkWritten(f.Source, done)
			}
			c.file, c.last = i, done == f.size
			c.refs.Store(2)
			imgCh <- c
			fileCh <- c
		}
		if src != nil {
			if err == nil {
				err = unchanged(f, src)
			}
			src.Close()
		}
		if err != nil {
			return err
		}
		pos = off + f.size
	}
	p.dataDone = time.Now()
	if err := gap(p.total); err != nil {
		return err
	}
	p.gate.advance(p.total)
	return nil
}

// open opens a file's source and checks it still has its planned size.
func (p *pipeline) open(f *planned) (*os.File, error) {
	if f.Content != nil {
		return nil, nil
	}
	src, err := os.Open(f.Source)
	if err != nil {
		return nil, fmt.Errorf("artifact %s (%s): %w", f.Name, f.Path, err)
	}
	st, err := src.Stat()
	if err == nil && st.Size() != f.size {
		err = fmt.Errorf("artifact %s (%s): %s changed size during the build (%d -> %d bytes)", f.Name, f.Path, f.Source, f.size, st.Size())
	}
	if err != nil {
		src.Close()
		return nil, err
	}
	f.modTime = st.ModTime()
	return src, nil
}

func readSource(f *planned, src *os.File, b []byte, off int64) error {
	n, err := src.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("artifact %s (%s): %s shrank during the build", f.Name, f.Path, f.Source)
	}
	return fmt.Errorf("artifact %s (%s): reading %s: %w", f.Name, f.Path, f.Source, err)
}

// unchanged refuses a source that was modified while it was being copied, as
// tar does: the copy may mix old and new bytes.
func unchanged(f *planned, src *os.File) error {
	st, err := src.Stat()
	if err != nil {
		return fmt.Errorf("artifact %s (%s): %w", f.Name, f.Path, err)
	}
	if st.Size() != f.size || !st.ModTime().Equal(f.modTime) {
		return fmt.Errorf("artifact %s (%s): %s changed during the build; build again", f.Name, f.Path, f.Source)
	}
	return nil
}
