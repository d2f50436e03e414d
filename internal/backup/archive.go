package backup

// The payload: a tar stream whose first member is manifest.json, which
// lists every other member with its size and SHA-256. Readers check each
// member against it as they read, and that every listed member came.

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Format names the payload in its manifest; FormatVersion is the newest
// manifest format this ztpd reads and the one it writes.
const (
	Format        = "ztpd-backup"
	FormatVersion = 1
)

// Member paths in the archive.
const (
	ManifestPath   = "manifest.json"
	StorePath      = "store/ztpd.db"
	imagePrefix    = "images/sha256/"
	KeyPath        = "key/secret.key"
	retiredPrefix  = "key/retired/"
	maxManifest    = 16 << 20
	IncludesStore  = "store"
	IncludesImages = "image-blobs"
	IncludesKey    = "key"
)

// ZtpdVersion is the version of the ztpd writing archives (set by the
// binary); it goes into the manifest.
var ZtpdVersion = "dev"

// ImagePath is the member holding the blob of sha.
func ImagePath(sha string) string { return imagePrefix + sha }

// RetiredKeyPath is the member holding the retired key with fingerprint fp.
func RetiredKeyPath(fp string) string { return retiredPrefix + fp }

// Manifest describes an archive: what it holds and how to check it.
type Manifest struct {
	Format        string    `json:"format"`
	FormatVersion int       `json:"format_version"`
	ZtpdVersion   string    `json:"ztpd_version"`
	Created       time.Time `json:"created"`
	Host          string    `json:"host,omitempty"`
	DataDir       string    `json:"data_dir,omitempty"`
	// Includes says what is in: "store" always, "image-blobs" and "key"
	// when asked for.
	Includes []string  `json:"includes"`
	Store    StoreInfo `json:"store"`
	Key      KeyInfo   `json:"key"`
	// Images are the store's image records (all of them, whether or not
	// their blobs are in).
	Images []Image `json:"images"`
	// Members are every member after the manifest, in order.
	Members []Member `json:"members"`
}

// StoreInfo describes the store snapshot.
type StoreInfo struct {
	Schema int `json:"schema"`
	// SealedRecords counts records sealed with the at-rest key (API keys,
	// cluster key material); Sealed says what they are.
	SealedRecords int    `json:"sealed_records"`
	Sealed        string `json:"sealed,omitempty"`
}

// KeyInfo names the at-rest key the store's sealed data needs, whether or
// not the key itself is in the archive.
type KeyInfo struct {
	Fingerprint string `json:"fingerprint"`
	Included    bool   `json:"included"`
	// Retired are the fingerprints of retired keys included with it.
	Retired []string `json:"retired,omitempty"`
}

// Image is one image record; Blob says whether its content is in.
type Image struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Platform string `json:"platform,omitempty"`
	Version  string `json:"version,omitempty"`
	SHA256   string `json:"sha256"`
	Size     int64  `json:"size"`
	Blob     bool   `json:"blob"`
}

// Member is one member of the archive after the manifest.
type Member struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Has reports whether what ("store", "image-blobs", "key") is included.
func (m *Manifest) Has(what string) bool {
	for _, s := range m.Includes {
		if s == what {
			return true
		}
	}
	return false
}

// Size is the payload's size: every member's bytes.
func (m *Manifest) Size() int64 {
	var n int64
	for _, mb := range m.Members {
		n += mb.Size
	}
	return n
}

var (
	hexSHA = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Validate checks a manifest read from an archive: format, version and
// that its members are well named, unique and consistent with what it
// says is included.
func (m *Manifest) Validate() error {
	if m.Format != Format {
		return fmt.Errorf("%w: manifest format %q", ErrNotBackup, m.Format)
	}
	if m.FormatVersion < 1 {
		return fmt.Errorf("%w: manifest format version %d", ErrNotBackup, m.FormatVersion)
	}
	if m.FormatVersion > FormatVersion {
		return fmt.Errorf("the archive's format version %d is newer than this ztpd reads (%d; it was made by ztpd %s): restore with that ztpd or newer",
			m.FormatVersion, FormatVersion, m.ZtpdVersion)
	}
	if !hexSHA.MatchString(m.Key.Fingerprint) {
		return fmt.Errorf("%w: key fingerprint %q", ErrDamaged, m.Key.Fingerprint)
	}
	if m.Store.SealedRecords < 0 || m.Store.Schema < 1 {
		return fmt.Errorf("%w: store schema %d, %d sealed records", ErrDamaged, m.Store.Schema, m.Store.SealedRecords)
	}
	seen := map[string]bool{}
	var store, key bool
	blobs := map[string]bool{}
	retired := map[string]bool{}
	for _, mb := range m.Members {
		if seen[mb.Path] {
			return fmt.Errorf("%w: member %q listed twice", ErrDamaged, mb.Path)
		}
		seen[mb.Path] = true
		if mb.Size < 0 || !hexSHA.MatchString(mb.SHA256) {
			return fmt.Errorf("%w: member %q has size %d, sha256 %q", ErrDamaged, mb.Path, mb.Size, mb.SHA256)
		}
		switch {
		case mb.Path == StorePath:
			store = true
		case mb.Path == KeyPath:
			key = true
		case strings.HasPrefix(mb.Path, imagePrefix):
			sha := strings.TrimPrefix(mb.Path, imagePrefix)
			if sha != mb.SHA256 {
				return fmt.Errorf("%w: image member %q has sha256 %s", ErrDamaged, mb.Path, mb.SHA256)
			}
			blobs[sha] = true
		case strings.HasPrefix(mb.Path, retiredPrefix):
			fp := strings.TrimPrefix(mb.Path, retiredPrefix)
			if !hexSHA.MatchString(fp) {
				return fmt.Errorf("%w: retired key member %q", ErrDamaged, mb.Path)
			}
			retired[fp] = true
		default:
			return fmt.Errorf("%w: unknown member %q", ErrDamaged, mb.Path)
		}
	}
	if !store || !m.Has(IncludesStore) {
		return fmt.Errorf("%w: no store in the archive", ErrDamaged)
	}
	if key != m.Key.Included || key != m.Has(IncludesKey) {
		return fmt.Errorf("%w: the manifest disagrees with itself on whether the key is included", ErrDamaged)
	}
	if len(retired) != len(m.Key.Retired) {
		return fmt.Errorf("%w: retired keys listed %d, members %d", ErrDamaged, len(m.Key.Retired), len(retired))
	}
	for _, fp := range m.Key.Retired {
		if !retired[fp] {
			return fmt.Errorf("%w: retired key %s has no member", ErrDamaged, fp)
		}
	}
	inImages := map[string]bool{}
	for _, im := range m.Images {
		if !hexSHA.MatchString(im.SHA256) || im.Size < 0 {
			return fmt.Errorf("%w: image %q sha256 %q size %d", ErrDamaged, im.Name, im.SHA256, im.Size)
		}
		if im.Blob != blobs[im.SHA256] {
			return fmt.Errorf("%w: image %q blob listed %v, member present %v", ErrDamaged, im.Name, im.Blob, blobs[im.SHA256])
		}
		inImages[im.SHA256] = true
	}
	for sha := range blobs {
		if !inImages[sha] {
			return fmt.Errorf("%w: blob %s belongs to no image", ErrDamaged, sha)
		}
	}
	if len(blobs) > 0 && !m.Has(IncludesImages) {
		return fmt.Errorf("%w: image blobs present but not listed as included", ErrDamaged)
	}
	return nil
}

// TarWriter writes a payload: the manifest first, then each member it
// lists, in order, with exactly its size.
type TarWriter struct {
	tw   *tar.Writer
	m    *Manifest
	next int
	mod  time.Time
}

// NewTarWriter writes m (complete: every member with size and sha256) as
// the first member of a payload on w.
func NewTarWriter(w io.Writer, m *Manifest) (*TarWriter, error) {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	raw = append(raw, '\n')
	t := &TarWriter{tw: tar.NewWriter(w), m: m, mod: m.Created.UTC().Truncate(time.Second)}
	if err := t.header(ManifestPath, int64(len(raw))); err != nil {
		return nil, err
	}
	if _, err := t.tw.Write(raw); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *TarWriter) header(name string, size int64) error {
	return t.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o600, ModTime: t.mod, Format: tar.FormatPAX})
}

// Add writes the next member the manifest lists from r, which must yield
// exactly its size and sha256.
func (t *TarWriter) Add(path string, r io.Reader) error {
	return t.AddFrom(path, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	})
}

// AddFrom writes the next member the manifest lists with write, which must
// write exactly its size and sha256.
func (t *TarWriter) AddFrom(path string, write func(io.Writer) error) error {
	if t.next >= len(t.m.Members) || t.m.Members[t.next].Path != path {
		return fmt.Errorf("backup: member %s is not the next one the manifest lists", path)
	}
	mb := t.m.Members[t.next]
	t.next++
	if err := t.header(path, mb.Size); err != nil {
		return err
	}
	cw := &checkWriter{w: t.tw, h: sha256.New(), left: mb.Size}
	if err := write(cw); err != nil {
		return fmt.Errorf("backup: %s: %w", path, err)
	}
	if cw.left != 0 {
		return fmt.Errorf("backup: %s: %d bytes, the manifest says %d", path, mb.Size-cw.left, mb.Size)
	}
	if got := hex.EncodeToString(cw.h.Sum(nil)); got != mb.SHA256 {
		return fmt.Errorf("backup: %s changed while it was read (sha256 %s, the manifest says %s)", path, got, mb.SHA256)
	}
	return nil
}

// checkWriter passes at most left bytes on, hashing them.
type checkWriter struct {
	w    io.Writer
	h    hash.Hash
	left int64
}

func (c *checkWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, fmt.Errorf("more bytes than the manifest says")
	}
	n, err := c.w.Write(p)
	c.h.Write(p[:n])
	c.left -= int64(n)
	return n, err
}

// Close ends the payload; every member must have been added.
func (t *TarWriter) Close() error {
	if t.next != len(t.m.Members) {
		return fmt.Errorf("backup: %d of %d members written", t.next, len(t.m.Members))
	}
	return t.tw.Close()
}

// Reader reads a payload: the manifest, then each member, checked.
type Reader struct {
	tr       *tar.Reader
	Manifest Manifest
	next     int
	cur      *memberReader
}

// NewReader reads and validates the manifest at the start of a payload.
func NewReader(r io.Reader) (*Reader, error) {
	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil {
		return nil, damaged(err, "no manifest")
	}
	if hdr.Name != ManifestPath || !plainFile(hdr) {
		return nil, fmt.Errorf("%w: first member is %q, not the manifest", ErrDamaged, hdr.Name)
	}
	if hdr.Size > maxManifest {
		return nil, fmt.Errorf("%w: manifest of %d bytes", ErrDamaged, hdr.Size)
	}
	raw, err := io.ReadAll(io.LimitReader(tr, maxManifest))
	if err != nil {
		return nil, damaged(err, "manifest")
	}
	rd := &Reader{tr: tr}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rd.Manifest); err != nil {
		// A newer format may add fields: say so rather than "damaged".
		var probe struct {
			Format        string `json:"format"`
			FormatVersion int    `json:"format_version"`
			ZtpdVersion   string `json:"ztpd_version"`
		}
		if json.Unmarshal(raw, &probe) == nil && probe.Format == Format && probe.FormatVersion > FormatVersion {
			return nil, fmt.Errorf("the archive's format version %d is newer than this ztpd reads (%d; it was made by ztpd %s): restore with that ztpd or newer",
				probe.FormatVersion, FormatVersion, probe.ZtpdVersion)
		}
		return nil, fmt.Errorf("%w: manifest: %v", ErrDamaged, err)
	}
	if err := rd.Manifest.Validate(); err != nil {
		return nil, err
	}
	return rd, nil
}

// Next returns the next member and a reader of its content, which checks
// size and sha256 as it reaches the end (an error instead of io.EOF on a
// mismatch). A member not read to its end is read (and checked) by the
// next call. After the last member Next returns io.EOF, having checked
// that every listed member came and nothing else did.
func (r *Reader) Next() (Member, io.Reader, error) {
	if r.cur != nil {
		if _, err := io.Copy(io.Discard, r.cur); err != nil {
			return Member{}, nil, err
		}
		r.cur = nil
	}
	hdr, err := r.tr.Next()
	if errors.Is(err, io.EOF) {
		if r.next != len(r.Manifest.Members) {
			return Member{}, nil, fmt.Errorf("%w: it ends after %d of its %d members", ErrDamaged, r.next, len(r.Manifest.Members))
		}
		return Member{}, nil, io.EOF
	}
	if err != nil {
		return Member{}, nil, damaged(err, "after member "+strconv.Itoa(r.next))
	}
	if r.next >= len(r.Manifest.Members) {
		return Member{}, nil, fmt.Errorf("%w: member %q is not in the manifest", ErrDamaged, hdr.Name)
	}
	mb := r.Manifest.Members[r.next]
	r.next++
	if hdr.Name != mb.Path || !plainFile(hdr) || hdr.Size != mb.Size {
		return Member{}, nil, fmt.Errorf("%w: member %q (%d bytes) where the manifest lists %q (%d bytes)", ErrDamaged, hdr.Name, hdr.Size, mb.Path, mb.Size)
	}
	r.cur = &memberReader{r: r.tr, m: mb, h: sha256.New()}
	return mb, r.cur, nil
}

// plainFile reports whether hdr is a regular file stored whole: sparse
// files (whose holes read as zeros without end) are not what ztpd writes.
func plainFile(hdr *tar.Header) bool {
	if hdr.Typeflag != tar.TypeReg {
		return false
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse") {
			return false
		}
	}
	return true
}

// damaged is err as ErrDamaged (unless it says so already, or is an I/O
// error of the file itself), with what was being read.
func damaged(err error, what string) error {
	if errors.Is(err, ErrDamaged) || errors.Is(err, ErrWrongPassphrase) {
		return err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%w: %s: %v", ErrDamaged, what, err)
}

type memberReader struct {
	r    io.Reader
	m    Member
	h    hash.Hash
	n    int64
	done bool
}

func (m *memberReader) Read(p []byte) (int, error) {
	if m.done {
		return 0, io.EOF
	}
	n, err := m.r.Read(p)
	m.h.Write(p[:n])
	m.n += int64(n)
	if errors.Is(err, io.EOF) {
		m.done = true
		if m.n != m.m.Size {
			return n, fmt.Errorf("%w: member %s has %d bytes, the manifest says %d", ErrDamaged, m.m.Path, m.n, m.m.Size)
		}
		if got := hex.EncodeToString(m.h.Sum(nil)); got != m.m.SHA256 {
			return n, fmt.Errorf("%w: member %s has sha256 %s, the manifest says %s", ErrDamaged, m.m.Path, got, m.m.SHA256)
		}
	} else if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w: member %s is cut short", ErrDamaged, m.m.Path)
	}
	return n, err
}
