package tftp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
)

// payload is what a read request resolved to: a rendered document in
// memory or an open file. Files are read block by block with pread, not
// mapped: a file truncated while it is served would otherwise kill the
// process with SIGBUS.
type payload struct {
	data []byte
	file *os.File
	size int64
}

func (p *payload) close() {
	if p != nil && p.file != nil {
		p.file.Close()
	}
}

func (p *payload) readerAt() io.ReaderAt {
	if p.file != nil {
		return p.file
	}
	return bytesReaderAt(p.data)
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// blockSource yields DATA blocks by number (from 1). A block shorter than
// the block size is the last.
type blockSource interface {
	block(k int64, p []byte) (int, error)
}

// octetSource reads block k at its offset, so any block can be read again.
type octetSource struct {
	r    io.ReaderAt
	size int64
}

func (s octetSource) block(k int64, p []byte) (int, error) {
	off := (k - 1) * int64(len(p))
	if off >= s.size {
		return 0, nil
	}
	want := min(int64(len(p)), s.size-off)
	n, err := s.r.ReadAt(p[:want], off)
	if int64(n) == want {
		return n, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // the file shrank while served
	}
	return n, err
}

// streamSource converts to netascii on the fly: block offsets are unknown
// in advance, so the blocks still in flight (at most a window) are kept to
// be sent again.
type streamSource struct {
	r     io.Reader
	ring  [][]byte // block k in ring[k % len(ring)]
	lens  []int
	top   int64 // highest block produced
	ended bool
}

func newStreamSource(r io.Reader, blksize, window int) *streamSource {
	n := window + 1
	s := &streamSource{r: r, ring: make([][]byte, n), lens: make([]int, n)}
	for i := range s.ring {
		s.ring[i] = make([]byte, blksize)
	}
	return s
}

func (s *streamSource) block(k int64, p []byte) (int, error) {
	n := int64(len(s.ring))
	switch {
	case k <= s.top && k > s.top-n && k >= 1:
	case k == s.top+1 && !s.ended:
		buf := s.ring[k%n][:len(p)]
		m, err := io.ReadFull(s.r, buf)
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return 0, err
		}
		s.lens[k%n], s.top = m, k
		s.ended = m < len(p)
	default:
		return 0, fmt.Errorf("block %d is no longer buffered (have up to %d)", k, s.top)
	}
	return copy(p, s.ring[k%n][:s.lens[k%n]]), nil
}

// netasciiReader encodes text as netascii (RFC 764, as tftpd-hpa does):
// LF becomes CR LF and a bare CR becomes CR NUL.
type netasciiReader struct {
	r       *bufio.Reader
	pending int // byte to emit next, or -1
}

func newNetasciiReader(r io.Reader) *netasciiReader {
	return &netasciiReader{r: bufio.NewReaderSize(r, 64<<10), pending: -1}
}

func (n *netasciiReader) Read(p []byte) (int, error) {
	i := 0
	for i < len(p) {
		if n.pending >= 0 {
			p[i], n.pending = byte(n.pending), -1
			i++
			continue
		}
		c, err := n.r.ReadByte()
		if err != nil {
			if i > 0 {
				return i, nil
			}
			return 0, err
		}
		switch c {
		case '\n':
			p[i], n.pending = '\r', '\n'
		case '\r':
			p[i], n.pending = '\r', 0
		default:
			p[i] = c
		}
		i++
	}
	return i, nil
}
