// Package backup is ztpd's backup archive: one file holding the store, the
// image manifest, optionally the image blobs and the at-rest key, encrypted
// under a passphrase. It writes and reads the format and restores an
// archive into a data directory; the server side (what goes in, from one
// read transaction) is internal/app's.
//
// File layout: a plaintext header, then the payload (a tar stream)
// encrypted in chunks.
//
//	magic     "ZTPD-BACKUP\n"  12 bytes
//	version   1                one byte: the encryption format
//	kdf       1                one byte: scrypt
//	log2 N, r, p               one byte each: scrypt's parameters
//	chunk     16               one byte: log2 of the plaintext chunk size
//	salt                       32 random bytes
//	mac                        32 bytes: HMAC-SHA256 of the bytes above
//	chunks                     AES-256-GCM, each at most 2^chunk bytes of
//	                           plaintext plus its 16-byte tag
//
// scrypt(passphrase, salt) gives 64 bytes: the payload key and the header's
// MAC key. The MAC tells a wrong passphrase (or a damaged header) before any
// payload is read. Chunk i is sealed with the nonce i (11 bytes, big
// endian) followed by 1 for the last chunk and 0 for the others (the STREAM
// construction), so chunks cannot be reordered, dropped or cut off at the
// end without failing authentication. A reader hands out plaintext as it
// authenticates it: a restore stages everything and commits only after the
// last chunk opened.
package backup

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/scrypt"
)

const (
	magic         = "ZTPD-BACKUP\n"
	cryptVersion  = 1
	kdfScrypt     = 1
	saltSize      = 32
	macSize       = 32
	headerSize    = len(magic) + 6 + saltSize + macSize
	tagSize       = 16
	nonceSize     = 12
	defaultChunk  = 16 // 64 KiB
	minChunkLog   = 10
	maxChunkLog   = 20
	maxScryptMem  = 1 << 30 // 128 * r * N bytes a reader agrees to spend
	maxScryptLogN = 20
)

var (
	// ErrNotBackup means the file does not start like a ztpd backup.
	ErrNotBackup = errors.New("not a ztpd backup archive")
	// ErrWrongPassphrase means the passphrase does not open the archive
	// (or its header was damaged, which cannot be told apart).
	ErrWrongPassphrase = errors.New("wrong passphrase (or the archive's header is damaged)")
	// ErrDamaged means the archive was changed, truncated or corrupted after
	// it was written.
	ErrDamaged = errors.New("backup archive is damaged or was tampered with")
)

// KDF is scrypt's cost: N = 2^LogN, r and p.
type KDF struct{ LogN, R, P uint8 }

// DefaultKDF costs about 128 MiB and a fraction of a second per archive.
var DefaultKDF = KDF{LogN: 17, R: 8, P: 1}

func (k KDF) check() error {
	if k.LogN < 10 || k.LogN > maxScryptLogN || k.R < 1 || k.R > 32 || k.P < 1 || k.P > 4 {
		return fmt.Errorf("%w: scrypt parameters log2 N=%d r=%d p=%d are out of range", ErrNotBackup, k.LogN, k.R, k.P)
	}
	if 128*uint64(k.R)*(uint64(1)<<k.LogN) > maxScryptMem {
		return fmt.Errorf("%w: scrypt parameters need more than 1 GiB", ErrNotBackup)
	}
	return nil
}

// Header is an archive's plaintext header.
type Header struct {
	KDF      KDF
	ChunkLog uint8
	Salt     [saltSize]byte
	MAC      [macSize]byte
}

func (h Header) signed() []byte {
	b := make([]byte, 0, headerSize-macSize)
	b = append(b, magic...)
	b = append(b, cryptVersion, kdfScrypt, h.KDF.LogN, h.KDF.R, h.KDF.P, h.ChunkLog)
	return append(b, h.Salt[:]...)
}

// ParseHeader reads and checks an archive's header (not its MAC, which
// needs the passphrase).
func ParseHeader(r io.Reader) (Header, error) {
	var b [headerSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Header{}, fmt.Errorf("%w: shorter than its header", ErrNotBackup)
		}
		return Header{}, err
	}
	if string(b[:len(magic)]) != magic {
		return Header{}, ErrNotBackup
	}
	p := b[len(magic):]
	if p[0] != cryptVersion {
		return Header{}, fmt.Errorf("%w: encryption format %d is newer than this ztpd reads (%d); restore with a newer ztpd", ErrNotBackup, p[0], cryptVersion)
	}
	if p[1] != kdfScrypt {
		return Header{}, fmt.Errorf("%w: unknown key derivation %d", ErrNotBackup, p[1])
	}
	h := Header{KDF: KDF{LogN: p[2], R: p[3], P: p[4]}, ChunkLog: p[5]}
	if err := h.KDF.check(); err != nil {
		return Header{}, err
	}
	if h.ChunkLog < minChunkLog || h.ChunkLog > maxChunkLog {
		return Header{}, fmt.Errorf("%w: chunk size 2^%d is out of range", ErrNotBackup, h.ChunkLog)
	}
	copy(h.Salt[:], p[6:6+saltSize])
	copy(h.MAC[:], p[6+saltSize:])
	return h, nil
}

// keys derives the payload key and the header's MAC key.
func (h Header) keys(passphrase []byte) (payload, mac []byte, err error) {
	k, err := scrypt.Key(passphrase, h.Salt[:], 1<<h.KDF.LogN, int(h.KDF.R), int(h.KDF.P), 64)
	if err != nil {
		return nil, nil, err
	}
	return k[:32], k[32:], nil
}

func headerMAC(key, signed []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(signed)
	return m.Sum(nil)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func chunkNonce(n *[nonceSize]byte, i uint64, last bool) {
	clear(n[:])
	binary.BigEndian.PutUint64(n[3:11], i)
	if last {
		n[11] = 1
	}
}

// Encrypt writes the header for passphrase to w and returns the writer of
// the payload; Close seals the last chunk (it does not close w).
func Encrypt(w io.Writer, passphrase []byte, kdf KDF) (io.WriteCloser, error) {
	if len(passphrase) == 0 {
		return nil, errors.New("empty passphrase")
	}
	if err := kdf.check(); err != nil {
		return nil, err
	}
	h := Header{KDF: kdf, ChunkLog: defaultChunk}
	if _, err := rand.Read(h.Salt[:]); err != nil {
		return nil, err
	}
	pk, mk, err := h.keys(passphrase)
	if err != nil {
		return nil, err
	}
	aead, err := newGCM(pk)
	if err != nil {
		return nil, err
	}
	signed := h.signed()
	if _, err := w.Write(append(signed, headerMAC(mk, signed)...)); err != nil {
		return nil, err
	}
	size := 1 << h.ChunkLog
	return &encWriter{w: w, aead: aead, size: size, buf: make([]byte, 0, size), out: make([]byte, 0, size+tagSize)}, nil
}

type encWriter struct {
	w      io.Writer
	aead   cipher.AEAD
	size   int
	buf    []byte
	out    []byte
	n      uint64
	nonce  [nonceSize]byte
	closed bool
	err    error
}

func (e *encWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.closed {
		return 0, errors.New("write after close")
	}
	written := 0
	for len(p) > 0 {
		// A full chunk is sealed only once more data follows: the last
		// chunk must carry the last flag.
		if len(e.buf) == e.size {
			if e.err = e.seal(false); e.err != nil {
				return written, e.err
			}
		}
		k := copy(e.buf[len(e.buf):e.size], p)
		e.buf = e.buf[:len(e.buf)+k]
		p = p[k:]
		written += k
	}
	return written, nil
}

func (e *encWriter) seal(last bool) error {
	chunkNonce(&e.nonce, e.n, last)
	e.out = e.aead.Seal(e.out[:0], e.nonce[:], e.buf, nil)
	e.n++
	e.buf = e.buf[:0]
	_, err := e.w.Write(e.out)
	return err
}

func (e *encWriter) Close() error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return nil
	}
	e.closed = true
	return e.seal(true)
}

// Decrypt checks passphrase against the header read from r and returns the
// reader of the payload. A wrong passphrase is ErrWrongPassphrase, before
// any payload is read. The payload reader returns ErrDamaged (wrapped) as
// soon as a chunk fails authentication, is missing, or the last one is
// followed by anything; it returns io.EOF only after the last chunk.
func Decrypt(r io.Reader, passphrase []byte) (io.Reader, error) {
	h, err := ParseHeader(r)
	if err != nil {
		return nil, err
	}
	pk, mk, err := h.keys(passphrase)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(headerMAC(mk, h.signed()), h.MAC[:]) {
		return nil, ErrWrongPassphrase
	}
	aead, err := newGCM(pk)
	if err != nil {
		return nil, err
	}
	return newDecReader(r, aead, h.ChunkLog), nil
}

func newDecReader(r io.Reader, aead cipher.AEAD, chunkLog uint8) *decReader {
	size := 1 << chunkLog
	return &decReader{r: bufio.NewReaderSize(r, size+tagSize+1), aead: aead, in: make([]byte, size+tagSize)}
}

type decReader struct {
	r     *bufio.Reader
	aead  cipher.AEAD
	in    []byte
	plain []byte // not yet handed out
	n     uint64
	nonce [nonceSize]byte
	done  bool
	err   error
}

func (d *decReader) Read(p []byte) (int, error) {
	for len(d.plain) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		if d.done {
			return 0, io.EOF
		}
		d.err = d.next()
	}
	n := copy(p, d.plain)
	d.plain = d.plain[n:]
	return n, nil
}

// next opens the next chunk into d.plain.
func (d *decReader) next() error {
	k, err := io.ReadFull(d.r, d.in)
	var last bool
	switch {
	case err == nil:
		// A full chunk is the last one when nothing follows it.
		if _, perr := d.r.Peek(1); perr == io.EOF {
			last = true
		} else if perr != nil {
			return perr
		}
	case errors.Is(err, io.ErrUnexpectedEOF):
		last = true
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: it ends before its last chunk (truncated)", ErrDamaged)
	default:
		return err
	}
	if k < tagSize {
		return fmt.Errorf("%w: chunk %d is cut short (truncated)", ErrDamaged, d.n)
	}
	chunkNonce(&d.nonce, d.n, last)
	plain, err := d.aead.Open(d.in[:0], d.nonce[:], d.in[:k], nil)
	if err != nil {
		if last {
			return fmt.Errorf("%w: chunk %d (the last one read) does not authenticate: the archive was truncated or changed", ErrDamaged, d.n)
		}
		return fmt.Errorf("%w: chunk %d (at byte %d) does not authenticate", ErrDamaged, d.n, int64(headerSize)+int64(d.n)*int64(len(d.in)))
	}
	d.n++
	d.plain = plain
	d.done = last
	if last && len(plain) == 0 && d.n > 1 {
		// Only an empty payload ends with an empty chunk.
		return fmt.Errorf("%w: empty last chunk", ErrDamaged)
	}
	return nil
}
