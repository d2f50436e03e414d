// Package imagestore is the content-addressed artifact store: installer images,
// binaries ISOs and plain files, kept once per sha256 under the data directory
// with their metadata in the domain store.
//
// Layout: <data>/images/sha256/<hex> holds content; <data>/images/tmp holds
// adds in progress. A blob appears under its final name only by rename after
// fsync, so an interrupted add leaves nothing half-written there, and the tmp
// directory is emptied at open (the data-dir lock guarantees no other writer).
package imagestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Kinds of stored artifacts.
const (
	KindSONiCInstaller = "sonic-installer"
	KindONIEInstaller  = "onie-installer"
	KindBinariesISO    = "binaries-iso"
	KindFile           = "file"
)

// ValidKind reports whether k is a known artifact kind.
func ValidKind(k string) bool {
	switch k {
	case KindSONiCInstaller, KindONIEInstaller, KindBinariesISO, KindFile:
		return true
	}
	return false
}

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:+-]{0,199}$`)
	shaRE    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	prefixRE = regexp.MustCompile(`^[0-9a-f]{12,63}$`)
)

// ErrInUse is returned when removing an image a Kubernetes version uses.
var ErrInUse = errors.New("image is in use")

// Store is the artifact store.
type Store struct {
	// Fetch, when set, brings an image's blob that is not on this
	// appliance's disk before Open opens it: an appliance of a group
	// sharing the store fetches it from a peer that holds it
	// (images/peerblobs). A failure is returned with the missing blob's
	// error. Nil on one box: a missing blob is an error at once. Set it
	// before the store is shared between goroutines.
	Fetch func(ctx context.Context, im core.Image) error

	db   core.Store
	root string
	// link serialises "blob in place + record written" against "record
	// removed + blob deleted", so a concurrent add and remove of the same
	// content never leave a record without its blob.
	link sync.Mutex
}

// Meta describes an artifact being added.
type Meta struct {
	Name     string
	Kind     string
	Platform string
	Version  string
}

// Open prepares <dataDir>/images and discards adds left unfinished by a crash.
func Open(db core.Store, dataDir string) (*Store, error) {
	s := &Store{db: db, root: filepath.Join(dataDir, "images")}
	for _, d := range []string{s.blobDir(), s.tmpDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	leftovers, _ := os.ReadDir(s.tmpDir())
	for _, e := range leftovers {
		_ = os.Remove(filepath.Join(s.tmpDir(), e.Name()))
	}
	return s, nil
}

func (s *Store) blobDir() string { return filepath.Join(s.root, "sha256") }
func (s *Store) tmpDir() string  { return filepath.Join(s.root, "tmp") }

// BlobPath is where the content of sha lives. sha must be validated first.
func (s *Store) BlobPath(sha string) string { return filepath.Join(s.blobDir(), sha) }

// ValidateMeta checks an artifact's name, kind and labels.
func ValidateMeta(m Meta) error {
	if !ValidKind(m.Kind) {
		return core.Errorf(core.KindInvalid, "kind %q: use sonic-installer, onie-installer, binaries-iso or file", m.Kind)
	}
	if !nameRE.MatchString(m.Name) {
		return core.Errorf(core.KindInvalid, "name %q: use 1-200 letters, digits and . _ : + - (no slashes), starting with a letter or digit", m.Name)
	}
	if shaRE.MatchString(m.Name) {
		return core.Errorf(core.KindInvalid, "name %q looks like a sha256; choose a name that does not", m.Name)
	}
	for field, v := range map[string]string{"platform": m.Platform, "version": m.Version} {
		if v != "" && !nameRE.MatchString(v) {
			return core.Errorf(core.KindInvalid, "%s %q: use letters, digits and . _ : + -", field, v)
		}
	}
	return nil
}

// Add streams r into the store, verifying wantSHA when it is not empty. The
// same content added twice is stored once; a new name for it becomes an alias.
// It returns the record and whether the content was already present.
func (s *Store) Add(ctx context.Context, r io.Reader, m Meta, wantSHA string) (core.Image, bool, error) {
	if err := ValidateMeta(m); err != nil {
		return core.Image{}, false, err
	}
	wantSHA = strings.ToLower(strings.TrimPrefix(wantSHA, "sha256:"))
	if wantSHA != "" && !shaRE.MatchString(wantSHA) {
		return core.Image{}, false, core.Errorf(core.KindInvalid, "checksum %q is not a sha256 hex digest", wantSHA)
	}
	tmp, err := os.CreateTemp(s.tmpDir(), "add-*")
	if err != nil {
		return core.Image{}, false, fmt.Errorf("image store: %w", err)
	}
	defer os.Remove(tmp.Name())
	sha, n, err := fill(ctx, tmp, r)
	if err != nil {
		return core.Image{}, false, fmt.Errorf("storing %s: %w", m.Name, err)
	}
	if wantSHA != "" && sha != wantSHA {
		return core.Image{}, false, core.Errorf(core.KindInvalid, "checksum mismatch for %s: expected sha256 %s, got %s", m.Name, wantSHA, sha)
	}
	s.link.Lock()
	defer s.link.Unlock()
	// Refuse a taken name before the content lands, so a refused add leaves
	// no orphan blob behind.
	err = s.db.View(func(tx core.Tx) error { return nameFree(tx, m.Name, sha) })
	if err != nil {
		return core.Image{}, false, err
	}
	existed := true
	if _, err := os.Stat(s.BlobPath(sha)); errors.Is(err, os.ErrNotExist) {
		existed = false
		if err := os.Chmod(tmp.Name(), 0o644); err != nil {
			return core.Image{}, false, err
		}
		if err := os.Rename(tmp.Name(), s.BlobPath(sha)); err != nil {
			return core.Image{}, false, fmt.Errorf("storing %s: %w", m.Name, err)
		}
		syncDir(s.blobDir())
	}
	var im core.Image
	err = s.db.Update(func(tx core.Tx) error {
		if err := nameFree(tx, m.Name, sha); err != nil {
			return err
		}
		var err error
		im, err = tx.Images().Get(sha)
		if errors.Is(err, core.ErrNotFound) {
			im = core.Image{SHA256: sha, Name: m.Name, Kind: m.Kind, Platform: m.Platform,
				Version: m.Version, Size: n, Created: time.Now().UTC()}
			err = tx.Images().Put(im)
		}
		if err != nil {
			return err
		}
		return tx.Images().SetName(m.Name, sha)
	})
	if err != nil {
		if !existed { // the blob this add brought has no record: take it back
			_ = os.Remove(s.BlobPath(sha))
		}
		return core.Image{}, false, err
	}
	return im, existed, nil
}

// fill copies r into tmp while hashing it, fsyncs and closes tmp, and
// returns the content's sha256 and length.
func fill(ctx context.Context, tmp *os.File, r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), ctxReader{ctx, r})
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// Errors of InstallBlob when the content is not what the record says.
var (
	ErrSizeMismatch   = errors.New("blob size differs from its image record")
	ErrDigestMismatch = errors.New("blob sha256 differs from its image record")
)

// InstallBlob streams r into the tmp directory and moves it to sha's blob
// path only when it is exactly size bytes whose sha256 is sha; it reads at
// most size+1 bytes of r. It writes no record: it brings the content of an
// image whose record is already in the store (added on another appliance
// sharing the store), and refuses (core.ErrNotFound) when there is no such
// record, so it leaves no orphan blob behind. Content that is already in
// place is kept.
func (s *Store) InstallBlob(ctx context.Context, r io.Reader, sha string, size int64) (int64, error) {
	if !shaRE.MatchString(sha) {
		return 0, core.Errorf(core.KindInvalid, "checksum %q is not a sha256 hex digest", sha)
	}
	if size < 0 {
		return 0, core.Errorf(core.KindInvalid, "blob %s: size %d is negative", sha, size)
	}
	tmp, err := os.CreateTemp(s.tmpDir(), "blob-*")
	if err != nil {
		return 0, fmt.Errorf("image store: %w", err)
	}
	defer os.Remove(tmp.Name())
	got, n, err := fill(ctx, tmp, io.LimitReader(r, size+1))
	if err != nil {
		return n, fmt.Errorf("storing blob %s: %w", sha, err)
	}
	if n != size {
		more := ""
		if n > size {
			more = "more than "
		}
		return n, fmt.Errorf("blob %s: got %s%d bytes, want %d: %w", sha, more, n, size, ErrSizeMismatch)
	}
	if got != sha {
		return n, fmt.Errorf("blob %s: content hashes to sha256 %s: %w", sha, got, ErrDigestMismatch)
	}
	s.link.Lock()
	defer s.link.Unlock()
	// Under link, so a Remove of the record cannot run between this check and
	// the rename.
	err = s.db.View(func(tx core.Tx) error {
		_, err := tx.Images().Get(sha)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("installing blob %s: %w", sha, err)
	}
	if st, err := os.Stat(s.BlobPath(sha)); err == nil && st.Mode().IsRegular() && st.Size() == size {
		return n, nil
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return n, err
	}
	if err := os.Rename(tmp.Name(), s.BlobPath(sha)); err != nil {
		return n, fmt.Errorf("installing blob %s: %w", sha, err)
	}
	syncDir(s.blobDir())
	return n, nil
}

// nameFree checks that name is unused or already names sha.
func nameFree(tx core.Tx, name, sha string) error {
	owner, err := tx.Images().ByName(name)
	switch {
	case errors.Is(err, core.ErrNotFound):
		return nil
	case err != nil:
		return err
	case owner != sha:
		return core.Errorf(core.KindConflict, "name %q already names image %s; remove it first or choose another name", name, owner[:min(12, len(owner))])
	}
	return nil
}

// AddFile adds the file at path.
func (s *Store) AddFile(ctx context.Context, path string, m Meta, wantSHA string) (core.Image, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return core.Image{}, false, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return core.Image{}, false, core.Errorf(core.KindInvalid, "%s is not a regular file", path)
	}
	return s.Add(ctx, f, m, wantSHA)
}

// Resolve finds an image by sha256, by a unique sha256 prefix of at least 12
// hex digits, or by name.
func (s *Store) Resolve(ref string) (core.Image, error) {
	var im core.Image
	err := s.db.View(func(tx core.Tx) error {
		var err error
		im, err = ResolveTx(tx, ref)
		return err
	})
	return im, err
}

// ResolveTx is Resolve inside a caller's transaction.
func ResolveTx(tx core.Tx, ref string) (core.Image, error) {
	if shaRE.MatchString(ref) {
		return tx.Images().Get(ref)
	}
	sha, err := tx.Images().ByName(ref)
	if err == nil {
		return tx.Images().Get(sha)
	}
	if !errors.Is(err, core.ErrNotFound) {
		return core.Image{}, err
	}
	if prefixRE.MatchString(ref) {
		var found []core.Image
		err := tx.Images().WithPrefix(ref, func(im core.Image) (bool, error) {
			found = append(found, im)
			return len(found) < 2, nil
		})
		if err != nil {
			return core.Image{}, err
		}
		if len(found) == 1 {
			return found[0], nil
		}
		if len(found) > 1 {
			return core.Image{}, core.Errorf(core.KindInvalid, "image prefix %q is ambiguous", ref)
		}
	}
	return core.Image{}, fmt.Errorf("image %q: %w", ref, core.ErrNotFound)
}

// Names returns every name that refers to sha.
func (s *Store) Names(sha string) ([]string, error) {
	var names []string
	err := s.db.View(func(tx core.Tx) error {
		return tx.Images().Names(func(name, owner string) (bool, error) {
			if owner == sha {
				names = append(names, name)
			}
			return true, nil
		})
	})
	return names, err
}

// List returns every image, filtered by kind when kind is not empty, sorted by
// name.
func (s *Store) List(kind string) ([]core.Image, error) {
	var out []core.Image
	err := s.db.View(func(tx core.Tx) error {
		return tx.Images().List("", func(im core.Image) (bool, error) {
			if kind == "" || im.Kind == kind {
				out = append(out, im)
			}
			return true, nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// Installer returns the newest installer of kind for platform: an exact
// platform match first, then an installer without a platform.
func (s *Store) Installer(kind, platform string) (core.Image, error) {
	all, err := s.List(kind)
	if err != nil {
		return core.Image{}, err
	}
	var best *core.Image
	for i := range all {
		im := &all[i]
		if im.Platform != platform && im.Platform != "" {
			continue
		}
		if best == nil || (im.Platform != "" && best.Platform == "") ||
			(im.Platform == best.Platform && im.Created.After(best.Created)) {
			best = im
		}
	}
	if best == nil {
		return core.Image{}, fmt.Errorf("no %s for platform %q: %w", kind, platform, core.ErrNotFound)
	}
	return *best, nil
}

// Open opens an image's content for reading (OpenContext without a
// deadline).
func (s *Store) Open(im core.Image) (*os.File, error) {
	return s.OpenContext(context.Background(), im)
}

// OpenContext opens an image's content for reading. When the blob is not on
// this disk and Fetch is set, Fetch brings it first (ctx bounds the wait);
// if Fetch fails the error is the missing blob's (errors.Is fs.ErrNotExist)
// joined with Fetch's.
func (s *Store) OpenContext(ctx context.Context, im core.Image) (*os.File, error) {
	if !shaRE.MatchString(im.SHA256) {
		return nil, fmt.Errorf("invalid image digest %q", im.SHA256)
	}
	f, err := os.Open(s.BlobPath(im.SHA256))
	if err == nil || s.Fetch == nil || !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	if ferr := s.Fetch(ctx, im); ferr != nil {
		return nil, fmt.Errorf("%w; fetching it from the peer appliances: %w", err, ferr)
	}
	return os.Open(s.BlobPath(im.SHA256))
}

// Remove deletes an image (all its names) unless a Kubernetes version uses it.
func (s *Store) Remove(ref string) (core.Image, error) {
	s.link.Lock()
	defer s.link.Unlock()
	var im core.Image
	err := s.db.Update(func(tx core.Tx) error {
		var err error
		if im, err = ResolveTx(tx, ref); err != nil {
			return err
		}
		var users []string
		err = tx.Versions().List("", func(ver core.Version) (bool, error) {
			if ver.ImageID == im.SHA256 {
				users = append(users, ver.Name)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return core.WrapError(core.KindInUse, fmt.Sprintf("%s by Kubernetes version %s; delete the version first", ErrInUse, strings.Join(users, ", ")), ErrInUse)
		}
		var names []string
		err = tx.Images().Names(func(name, owner string) (bool, error) {
			if owner == im.SHA256 {
				names = append(names, name)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := tx.Images().DeleteName(name); err != nil {
				return err
			}
		}
		return tx.Images().Delete(im.SHA256)
	})
	if err != nil {
		return im, err
	}
	// Content goes after the record commits: a crash in between leaves an
	// orphan blob, never a record without content.
	if err := os.Remove(s.BlobPath(im.SHA256)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return im, err
	}
	return im, nil
}

// Verify re-hashes an image's content and compares it with its digest.
func (s *Store) Verify(im core.Image) error {
	f, err := s.Open(im)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != im.SHA256 {
		return fmt.Errorf("image %s is corrupt on disk: sha256 %s", im.Name, got)
	}
	return nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
