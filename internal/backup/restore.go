package backup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/secretbox"
	"github.com/ztpd/ztpd/internal/store/boltstore"
)

// KeyFingerprintSetting is the store setting recording the fingerprint of
// the at-rest key its sealed data needs (written by the app at open).
const KeyFingerprintSetting = "at_rest_key_fingerprint"

var (
	// ErrServerRunning means a ztpd server uses the target data directory.
	ErrServerRunning = errors.New("a ztpd server is running on this data directory")
	// ErrStoreExists means the target already has a store and --force was
	// not given.
	ErrStoreExists = errors.New("the data directory already holds a store")
	// ErrKeyNeeded means the archive has no key and the target lacks the
	// one its store needs (or has another).
	ErrKeyNeeded = errors.New("the at-rest key the store needs is not there")
	// ErrKeyDiffers means the target has another key and --force was not
	// given.
	ErrKeyDiffers = errors.New("the data directory holds a different at-rest key")
)

// RestoreOptions say where and how to restore.
type RestoreOptions struct {
	DataDir string
	// KeyFile is where the at-rest key lives (key_file); "" is
	// <DataDir>/secret.key.
	KeyFile string
	// AdminSocket is a server's admin socket for DataDir: restore refuses
	// while it answers.
	AdminSocket string
	// Force replaces an existing store (and a different key), keeping the
	// old ones beside them as <name>.before-restore-<time>.
	Force bool
	// VerifyOnly reads and checks the whole archive and writes nothing.
	VerifyOnly bool
	// Now stamps the names of replaced files; time.Now when nil.
	Now func() time.Time
	// Progress, when set, hears the member bytes read so far of total.
	Progress func(done, total int64)
}

func (o RestoreOptions) keyFile() string {
	if o.KeyFile != "" {
		return o.KeyFile
	}
	return filepath.Join(o.DataDir, "secret.key")
}

// RestoreResult says what a restore did.
type RestoreResult struct {
	Manifest Manifest `json:"manifest"`
	Store    string   `json:"store"`
	// PreviousStore is where the replaced store was kept.
	PreviousStore string `json:"previous_store,omitempty"`
	KeyFile       string `json:"key_file"`
	// Key is "restored" (written from the archive), "present" (the key
	// file already held it) or "not needed" (nothing sealed).
	Key         string `json:"key"`
	PreviousKey string `json:"previous_key,omitempty"`
	// BlobsRestored image blobs came from the archive; BlobsPresent were
	// in the data directory already.
	BlobsRestored int `json:"blobs_restored"`
	BlobsPresent  int `json:"blobs_present"`
	// MissingBlobs name the images whose content is in neither: devices
	// get 503 for them until they are added again.
	MissingBlobs []string `json:"missing_blobs,omitempty"`
}

// Preflight refuses a restore that cannot go ahead, before any passphrase
// is asked for: a server running on the data directory, or a store there
// already without force.
func Preflight(o RestoreOptions) error {
	if o.VerifyOnly {
		return nil
	}
	if o.AdminSocket != "" {
		if c, err := net.DialTimeout("unix", o.AdminSocket, time.Second); err == nil {
			c.Close()
			return fmt.Errorf("%w: %s (its admin socket %s answers); stop it first (e.g. systemctl stop ztpd), then restore", ErrServerRunning, o.DataDir, o.AdminSocket)
		}
	}
	path := filepath.Join(o.DataDir, boltstore.FileName)
	st, err := os.Stat(path)
	if err == nil && st.Size() > 0 && !o.Force {
		return fmt.Errorf("%w: %s (%d bytes, last changed %s); restore over it with --force (the current store is kept as %s.before-restore-<time>)",
			ErrStoreExists, path, st.Size(), st.ModTime().UTC().Format(time.RFC3339), boltstore.FileName)
	}
	return nil
}

// Restore reads an archive from r with passphrase and restores it into
// o.DataDir. Nothing in the data directory (or at the key file) changes
// until the whole archive has been read and authenticated and every check
// passed; then the new files are renamed into place, and a failure part way
// puts the old ones back.
func Restore(r io.Reader, passphrase []byte, o RestoreOptions) (RestoreResult, error) {
	res := RestoreResult{Store: filepath.Join(o.DataDir, boltstore.FileName), KeyFile: o.keyFile()}
	if err := Preflight(o); err != nil {
		return res, err
	}
	rs := &restore{o: o, res: &res}
	defer rs.cleanup()
	if !o.VerifyOnly {
		if err := rs.lock(); err != nil {
			return res, err
		}
	}
	plain, err := Decrypt(r, passphrase)
	if err != nil {
		return res, err
	}
	ar, err := NewReader(plain)
	if err != nil {
		return res, err
	}
	m := ar.Manifest
	res.Manifest = m
	if m.Store.Schema > boltstore.SchemaVersion {
		return res, fmt.Errorf("the archive's store has schema %d, newer than this ztpd supports (%d; it was made by ztpd %s): restore with that ztpd or newer",
			m.Store.Schema, boltstore.SchemaVersion, m.ZtpdVersion)
	}
	if !o.VerifyOnly {
		if err := rs.planKey(m); err != nil {
			return res, err
		}
		if rs.staging, err = os.MkdirTemp(o.DataDir, ".restore-"); err != nil {
			return res, fmt.Errorf("restore: %w", err)
		}
	}
	if err := rs.readMembers(ar, plain); err != nil {
		return res, err
	}
	for _, im := range m.Images {
		if !im.Blob && !fileExists(rs.blobPath(im.SHA256)) {
			res.MissingBlobs = append(res.MissingBlobs, im.Name)
		}
	}
	if o.VerifyOnly {
		return res, nil
	}
	if err := rs.checkStagedStore(m); err != nil {
		return res, err
	}
	if err := rs.commit(); err != nil {
		return res, err
	}
	return res, nil
}

// restore is one restore in progress: what it staged and how to undo what
// it committed.
type restore struct {
	o        RestoreOptions
	res      *RestoreResult
	lockFile *os.File
	// placeholder: the store file did not exist; restore created it empty
	// to hold the lock.
	placeholder bool
	createdDir  bool
	staging     string
	// staged blobs by sha256, key files by their final path.
	blobs      []string
	keys       map[string]string // final path -> staged temp file
	replaceKey bool
	committed  bool
	// owner: run as root on a data directory of another user (the
	// service's), restored files are given to that user.
	chown    bool
	uid, gid int
}

// own gives path to the data directory's owner when restore runs as root.
func (rs *restore) own(path string) error {
	if !rs.chown {
		return nil
	}
	return os.Lchown(path, rs.uid, rs.gid)
}

func (rs *restore) blobPath(sha string) string {
	return filepath.Join(rs.o.DataDir, "images", "sha256", sha)
}

// lock takes the store's file lock (the one a server takes), so no server
// starts on the data directory while it is restored.
func (rs *restore) lock() error {
	if _, err := os.Stat(rs.o.DataDir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(rs.o.DataDir, 0o700); err != nil {
			return fmt.Errorf("restore: create data directory: %w", err)
		}
		rs.createdDir = true
	}
	if st, err := os.Stat(rs.o.DataDir); err == nil && os.Geteuid() == 0 {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 {
			rs.chown, rs.uid, rs.gid = true, int(sys.Uid), int(sys.Gid)
		}
	}
	path := filepath.Join(rs.o.DataDir, boltstore.FileName)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		rs.placeholder = err == nil
	}
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if rs.placeholder {
			os.Remove(path)
			rs.placeholder = false
		}
		pid, _ := os.ReadFile(filepath.Join(rs.o.DataDir, "ztpd.pid"))
		return fmt.Errorf("%w: %s is locked (pid %s); stop it first, then restore", ErrServerRunning, path, strings.TrimSpace(string(pid)))
	}
	rs.lockFile = f
	rs.removeLeftovers()
	return nil
}

// removeLeftovers deletes what a restore killed part way left behind (its
// staging directory, half-written files): with the store's lock held, no
// other restore or server is using them.
func (rs *restore) removeLeftovers() {
	key := rs.o.keyFile()
	for _, pattern := range []string{
		filepath.Join(rs.o.DataDir, ".restore-*"),
		filepath.Join(rs.o.DataDir, ".*.restore-*"),
		filepath.Join(filepath.Dir(key), "."+filepath.Base(key)+".restore-*"),
	} {
		stale, _ := filepath.Glob(pattern)
		for _, p := range stale {
			os.RemoveAll(p)
		}
	}
}

// planKey decides what happens to the at-rest key, before anything is
// read or written: install the archive's key, keep the one there, or
// refuse.
func (rs *restore) planKey(m Manifest) error {
	path := rs.o.keyFile()
	have, err := secretbox.LoadKeyring(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("restore: the at-rest key at %s: %w", path, err)
	}
	sealed := m.Store.Sealed
	if sealed == "" {
		sealed = fmt.Sprintf("%d records", m.Store.SealedRecords)
	}
	switch {
	case m.Key.Included && have == nil:
		rs.res.Key = "restored"
	case m.Key.Included && have.Holds(m.Key.Fingerprint):
		rs.res.Key = "present"
	case m.Key.Included:
		if !rs.o.Force {
			return fmt.Errorf("%w: %s holds the key with fingerprint %s, but the archive's store was sealed with the key with fingerprint %s (the archive holds that key). "+
				"Restore with --force to replace it (the current key is kept as %s.before-restore-<time>)",
				ErrKeyDiffers, path, have.Fingerprint(), m.Key.Fingerprint, filepath.Base(path))
		}
		rs.replaceKey = true
		rs.res.Key = "restored"
	case m.Store.SealedRecords == 0:
		rs.res.Key = "not needed"
	case have == nil:
		return fmt.Errorf("%w: the archive holds no at-rest key (it was made without --with-key), and its store's sealed secrets (%s) need the key with fingerprint %s, "+
			"expected at %s, which does not exist. Copy that key file (secret.key of the server the backup came from) to %s, or set key_file to where it is, and restore again; "+
			"or restore a backup made with --with-key",
			ErrKeyNeeded, sealed, m.Key.Fingerprint, path, path)
	case !have.Holds(m.Key.Fingerprint):
		return fmt.Errorf("%w: the archive holds no at-rest key (it was made without --with-key), and its store's sealed secrets (%s) need the key with fingerprint %s, "+
			"expected at %s, which holds the key with fingerprint %s. Put the right key file there (secret.key of the server the backup came from), or set key_file to where it is, "+
			"and restore again; or restore a backup made with --with-key",
			ErrKeyNeeded, sealed, m.Key.Fingerprint, path, have.Fingerprint())
	default:
		rs.res.Key = "present"
	}
	return nil
}

// readMembers reads every member, checked against the manifest, into the
// staging area (or nowhere, verifying only), then the rest of the payload,
// so the last chunk has authenticated before anything is committed.
func (rs *restore) readMembers(ar *Reader, plain io.Reader) error {
	m := ar.Manifest
	total, done := m.Size(), int64(0)
	rs.keys = map[string]string{}
	for {
		mb, r, err := ar.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if rs.o.Progress != nil {
			r = &progressReader{r: r, done: &done, total: total, fn: rs.o.Progress}
		}
		switch {
		case rs.o.VerifyOnly:
			if mb.Path == KeyPath || strings.HasPrefix(mb.Path, retiredPrefix) {
				_, key, err := rs.readKey(mb, r)
				clear(key)
				if err != nil {
					return err
				}
				continue
			}
			if _, err := io.Copy(io.Discard, r); err != nil {
				return err
			}
		case mb.Path == StorePath:
			staged := filepath.Join(rs.staging, boltstore.FileName)
			if err := writeFile(staged, r); err != nil {
				return err
			}
			if err := rs.own(staged); err != nil {
				return err
			}
		case strings.HasPrefix(mb.Path, imagePrefix):
			sha := strings.TrimPrefix(mb.Path, imagePrefix)
			if fileExists(rs.blobPath(sha)) {
				if _, err := io.Copy(io.Discard, r); err != nil {
					return err
				}
				rs.res.BlobsPresent++
				continue
			}
			if err := os.MkdirAll(filepath.Join(rs.staging, "images"), 0o700); err != nil {
				return err
			}
			staged := filepath.Join(rs.staging, "images", sha)
			if err := writeFile(staged, r); err != nil {
				return err
			}
			if err := rs.own(staged); err != nil {
				return err
			}
			rs.blobs = append(rs.blobs, sha)
		case mb.Path == KeyPath || strings.HasPrefix(mb.Path, retiredPrefix):
			fp, key, err := rs.readKey(mb, r)
			if err == nil {
				err = rs.stageKey(mb, fp, key)
			}
			clear(key)
			if err != nil {
				return err
			}
		}
	}
	// The tar stream ended; the payload must end with its last chunk.
	if _, err := io.Copy(io.Discard, plain); err != nil {
		return err
	}
	return nil
}

// readKey reads a key member and checks it is the key the manifest names.
func (rs *restore) readKey(mb Member, r io.Reader) (string, []byte, error) {
	key, err := io.ReadAll(io.LimitReader(r, secretbox.KeySize+1))
	if err != nil {
		return "", key, err
	}
	fp, err := secretbox.FingerprintOf(key)
	if err != nil {
		return "", key, fmt.Errorf("%w: %s: %v", ErrDamaged, mb.Path, err)
	}
	want := rs.res.Manifest.Key.Fingerprint
	if mb.Path != KeyPath {
		want = strings.TrimPrefix(mb.Path, retiredPrefix)
	}
	if fp != want {
		return "", key, fmt.Errorf("%w: %s has fingerprint %s, the manifest says %s", ErrDamaged, mb.Path, fp, want)
	}
	return fp, key, nil
}

// stageKey writes the key just read to a temporary file beside where it
// goes, unless that key is there already.
func (rs *restore) stageKey(mb Member, fp string, key []byte) error {
	final := rs.o.keyFile()
	if mb.Path != KeyPath {
		final = secretbox.RetiredPath(rs.o.keyFile(), fp)
		if fileExists(final) {
			return nil
		}
	} else if rs.res.Key != "restored" {
		return nil
	}
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(final)+".restore-*")
	if err != nil {
		return fmt.Errorf("restore: stage key: %w", err)
	}
	rs.keys[final] = f.Name()
	_, werr := f.Write(key)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr, os.Chmod(f.Name(), 0o600), rs.own(f.Name())); err != nil {
		return fmt.Errorf("restore: stage key: %w", err)
	}
	return nil
}

// checkStagedStore opens the staged store read-only: it must be a ztpd
// store, recording (if anything) a key the archive names.
func (rs *restore) checkStagedStore(m Manifest) error {
	st, err := boltstore.Open(rs.staging, boltstore.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("%w: the store in the archive does not open: %v", ErrDamaged, err)
	}
	defer st.Close()
	var recorded string
	err = st.View(func(tx core.Tx) error {
		var err error
		recorded, _, err = tx.Settings().Get(KeyFingerprintSetting)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w: the store in the archive: %v", ErrDamaged, err)
	}
	if recorded != "" && recorded != m.Key.Fingerprint && !slices.Contains(m.Key.Retired, recorded) {
		return fmt.Errorf("%w: the store records key %s, the manifest names %s", ErrDamaged, recorded, m.Key.Fingerprint)
	}
	return nil
}

// commit renames everything staged into place; a failure puts back what
// it had changed.
func (rs *restore) commit() (err error) {
	var undo []func() error
	defer func() {
		if err == nil {
			return
		}
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](); uerr != nil {
				err = fmt.Errorf("%w; putting the old files back also failed: %v", err, uerr)
			}
		}
		err = fmt.Errorf("restore failed, the data directory was left as it was: %w", err)
	}()
	stamp := rs.o.Now
	if stamp == nil {
		stamp = time.Now
	}
	suffix := ".before-restore-" + stamp().UTC().Format("20060102T150405Z")

	// 1. Blobs: new content-addressed files, harmless on their own.
	if len(rs.blobs) > 0 {
		blobDir := filepath.Dir(rs.blobPath("x"))
		if err := os.MkdirAll(blobDir, 0o700); err != nil {
			return err
		}
		if err := errors.Join(rs.own(filepath.Dir(blobDir)), rs.own(blobDir)); err != nil {
			return err
		}
	}
	for _, sha := range rs.blobs {
		dst := rs.blobPath(sha)
		if err := os.Rename(filepath.Join(rs.staging, "images", sha), dst); err != nil {
			return err
		}
		undo = append(undo, func() error { return os.Remove(dst) })
		rs.res.BlobsRestored++
	}
	// 2. The store: the old one aside, the new one in.
	db := rs.res.Store
	if !rs.placeholder {
		prev := freeName(db + suffix)
		if err := os.Rename(db, prev); err != nil {
			return err
		}
		undo = append(undo, func() error { return os.Rename(prev, db) })
		rs.res.PreviousStore = prev
	}
	if err := os.Rename(filepath.Join(rs.staging, boltstore.FileName), db); err != nil {
		return err
	}
	if rs.placeholder {
		undo = append(undo, func() error { return os.Remove(db) })
	}
	// 3. The key: the old one aside, the archive's in.
	keyFile := rs.o.keyFile()
	if tmp, ok := rs.keys[keyFile]; ok {
		if rs.replaceKey {
			prev := freeName(keyFile + suffix)
			if err := os.Rename(keyFile, prev); err != nil {
				return err
			}
			undo = append(undo, func() error { return os.Rename(prev, keyFile) })
			rs.res.PreviousKey = prev
		}
		if err := os.Rename(tmp, keyFile); err != nil {
			return err
		}
		delete(rs.keys, keyFile)
		undo = append(undo, func() error { return os.Remove(keyFile) })
	}
	for final, tmp := range rs.keys {
		if err := os.Rename(tmp, final); err != nil {
			return err
		}
		delete(rs.keys, final)
		undo = append(undo, func() error { return os.Remove(final) })
	}
	for _, dir := range []string{filepath.Dir(rs.blobPath("x")), rs.o.DataDir, filepath.Dir(keyFile)} {
		if err := syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	rs.committed = true
	return nil
}

// cleanup removes what a restore staged and, when it did not commit, what
// it created; then it releases the lock.
func (rs *restore) cleanup() {
	if rs.staging != "" {
		os.RemoveAll(rs.staging)
	}
	for _, tmp := range rs.keys {
		os.Remove(tmp)
	}
	if !rs.committed && rs.placeholder {
		os.Remove(filepath.Join(rs.o.DataDir, boltstore.FileName))
	}
	if rs.lockFile != nil {
		rs.lockFile.Close()
	}
	if !rs.committed && rs.createdDir {
		os.Remove(rs.o.DataDir) // only when empty
	}
}

// freeName is path, or path-2, path-3... whichever does not exist yet.
func freeName(path string) string {
	p := path
	for i := 2; fileExists(p); i++ {
		p = fmt.Sprintf("%s-%d", path, i)
	}
	return p
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// writeFile writes r to a new file at path (mode 0600) and fsyncs it.
func writeFile(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

type progressReader struct {
	r     io.Reader
	done  *int64
	total int64
	fn    func(done, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	*p.done += int64(n)
	p.fn(*p.done, p.total)
	return n, err
}
