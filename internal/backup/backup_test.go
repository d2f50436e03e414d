package backup

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/secretbox"
	"github.com/ztpd/ztpd/internal/store/boltstore"
)

// testKDF keeps the tests fast; archives use DefaultKDF.
var testKDF = KDF{LogN: 10, R: 8, P: 1}

var testPass = []byte("correct horse battery staple")

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// backupSource is a data directory with a real store (an API key sealed
// with its key, the fingerprint recorded) and one image, as the server
// would back it up.
type backupSource struct {
	store []byte
	key   []byte
	fp    string
	blob  []byte
}

func backupNewSource(t testing.TB) backupSource {
	t.Helper()
	dir := t.TempDir()
	st, err := boltstore.Open(dir, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	kr, err := secretbox.OpenKeyring(filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := apikeys.New(st, kr).Create("ops", apikeys.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	blob := []byte("an installer image\n")
	err = st.Update(func(tx core.Tx) error {
		if err := tx.Settings().Put(KeyFingerprintSetting, kr.Fingerprint()); err != nil {
			return err
		}
		return tx.Images().Put(core.Image{SHA256: sum(blob), Name: "onie.bin", Kind: "onie-installer", Size: int64(len(blob))})
	})
	if err != nil {
		t.Fatal(err)
	}
	var db bytes.Buffer
	if _, err := st.Backup(&db); err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(filepath.Join(dir, "secret.key"))
	return backupSource{store: db.Bytes(), key: key, fp: kr.Fingerprint(), blob: blob}
}

// archive writes an archive of src: the image blob and key when asked.
func (src backupSource) archive(t testing.TB, withBlob, withKey bool) []byte {
	t.Helper()
	m := &Manifest{Format: Format, FormatVersion: FormatVersion, ZtpdVersion: "test", Created: time.Now().UTC(),
		Includes: []string{IncludesStore}, Store: StoreInfo{Schema: boltstore.SchemaVersion, SealedRecords: 1, Sealed: "1 API key"},
		Key:     KeyInfo{Fingerprint: src.fp, Included: withKey},
		Images:  []Image{{Name: "onie.bin", Kind: "onie-installer", SHA256: sum(src.blob), Size: int64(len(src.blob)), Blob: withBlob}},
		Members: []Member{{Path: StorePath, Size: int64(len(src.store)), SHA256: sum(src.store)}}}
	if withBlob {
		m.Includes = append(m.Includes, IncludesImages)
		m.Members = append(m.Members, Member{Path: ImagePath(sum(src.blob)), Size: int64(len(src.blob)), SHA256: sum(src.blob)})
	}
	if withKey {
		m.Includes = append(m.Includes, IncludesKey)
		m.Members = append(m.Members, Member{Path: KeyPath, Size: int64(len(src.key)), SHA256: sum(src.key)})
	}
	return backupSeal(t, m, map[string][]byte{StorePath: src.store, ImagePath(sum(src.blob)): src.blob, KeyPath: src.key})
}

// backupSeal writes m and its members' content as an encrypted archive.
func backupSeal(t testing.TB, m *Manifest, content map[string][]byte) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := Encrypt(&out, testPass, testKDF)
	if err != nil {
		t.Fatal(err)
	}
	tw, err := NewTarWriter(enc, m)
	if err != nil {
		t.Fatal(err)
	}
	for _, mb := range m.Members {
		if err := tw.Add(mb.Path, bytes.NewReader(content[mb.Path])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestEncryptionRoundTripAtChunkEdges: payloads of every size around the
// chunk size come back exactly; the ciphertext carries none of the
// plaintext.
func TestEncryptionRoundTripAtChunkEdges(t *testing.T) {
	const c = 1 << defaultChunk
	for _, n := range []int{0, 1, c - 1, c, c + 1, 3 * c, 3*c + 7} {
		plain := bytes.Repeat([]byte("ztpd secret store page "), n/23+1)[:n]
		var out bytes.Buffer
		enc, err := Encrypt(&out, testPass, testKDF)
		if err != nil {
			t.Fatal(err)
		}
		// Odd write sizes, so chunking does not follow the writes.
		for rest := plain; len(rest) > 0; {
			k := min(len(rest), 1000+len(rest)%777)
			enc.Write(rest[:k])
			rest = rest[k:]
		}
		enc.Close()
		if n > 40 && bytes.Contains(out.Bytes(), plain[:40]) {
			t.Fatalf("%d bytes: plaintext visible in the archive", n)
		}
		dec, err := Decrypt(bytes.NewReader(out.Bytes()), testPass)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(dec)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("%d bytes: got %d back, err %v", n, len(got), err)
		}
		if want := headerSize + (max(n-1, 0)/c+1)*tagSize + n; out.Len() != want {
			t.Fatalf("%d bytes: archive of %d bytes, want %d", n, out.Len(), want)
		}
	}
}

// TestWrongPassphraseRefusedBeforeThePayload: a wrong passphrase is told
// apart from damage, and before a byte of the payload is read.
func TestWrongPassphraseRefusedBeforeThePayload(t *testing.T) {
	src := backupNewSource(t)
	arch := src.archive(t, true, true)
	r := &countingReader{r: bytes.NewReader(arch)}
	if _, err := Decrypt(r, []byte("correct horse battery stapler")); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("wrong passphrase: %v", err)
	}
	if r.n > headerSize {
		t.Fatalf("read %d bytes before refusing, the header has %d", r.n, headerSize)
	}
	if _, err := Decrypt(bytes.NewReader([]byte("not a backup at all, just text\n")), testPass); !errors.Is(err, ErrNotBackup) {
		t.Fatalf("not an archive: %v", err)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// backupReadAll decrypts and reads every member, as a restore does.
func backupReadAll(arch []byte) (Manifest, map[string][]byte, error) {
	plain, err := Decrypt(bytes.NewReader(arch), testPass)
	if err != nil {
		return Manifest{}, nil, err
	}
	ar, err := NewReader(plain)
	if err != nil {
		return Manifest{}, nil, err
	}
	got := map[string][]byte{}
	for {
		mb, r, err := ar.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ar.Manifest, got, err
		}
		if got[mb.Path], err = io.ReadAll(r); err != nil {
			return ar.Manifest, got, err
		}
	}
	_, err = io.Copy(io.Discard, plain)
	return ar.Manifest, got, err
}

// TestArchiveRoundTrip: the manifest and every member come back, checked.
func TestArchiveRoundTrip(t *testing.T) {
	src := backupNewSource(t)
	m, got, err := backupReadAll(src.archive(t, true, true))
	if err != nil {
		t.Fatal(err)
	}
	if m.Key.Fingerprint != src.fp || !m.Key.Included || !m.Has(IncludesImages) || len(m.Images) != 1 || !m.Images[0].Blob {
		t.Fatalf("manifest: %+v", m)
	}
	if !bytes.Equal(got[StorePath], src.store) || !bytes.Equal(got[KeyPath], src.key) || !bytes.Equal(got[ImagePath(sum(src.blob))], src.blob) {
		t.Fatal("members differ from what was written")
	}
}

// TestTamperedArchiveRefused: any changed, dropped, reordered or added
// byte after the header is an error, never silently different content.
func TestTamperedArchiveRefused(t *testing.T) {
	src := backupNewSource(t)
	// Big enough for several chunks.
	src.blob = bytes.Repeat([]byte("0123456789abcdef"), 3<<14)
	arch := src.archive(t, true, true)
	c := (1 << defaultChunk) + tagSize
	cases := map[string]func([]byte) []byte{
		"flipped byte in the first chunk": func(b []byte) []byte { b[headerSize+100] ^= 1; return b },
		"flipped byte in the last chunk":  func(b []byte) []byte { b[len(b)-20] ^= 0x80; return b },
		"cut at a chunk boundary":         func(b []byte) []byte { return b[:headerSize+2*c] },
		"cut inside a chunk":              func(b []byte) []byte { return b[:headerSize+c+500] },
		"last chunk dropped":              func(b []byte) []byte { return b[:headerSize+((len(b)-headerSize)/c)*c] },
		"bytes appended":                  func(b []byte) []byte { return append(b, 0) },
		"chunks swapped": func(b []byte) []byte {
			one := bytes.Clone(b[headerSize : headerSize+c])
			copy(b[headerSize:], b[headerSize+c:headerSize+2*c])
			copy(b[headerSize+c:], one)
			return b
		},
		"salt changed": func(b []byte) []byte { b[len(magic)+8] ^= 1; return b },
	}
	for name, tamper := range cases {
		_, _, err := backupReadAll(tamper(bytes.Clone(arch)))
		want := ErrDamaged
		if name == "salt changed" {
			want = ErrWrongPassphrase
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
}

// TestManifestMismatchRefused: a member whose content, size or place
// differs from the manifest, or a manifest of a newer format, is refused
// with what is wrong.
func TestManifestMismatchRefused(t *testing.T) {
	src := backupNewSource(t)
	base := func() *Manifest {
		return &Manifest{Format: Format, FormatVersion: FormatVersion, ZtpdVersion: "test", Includes: []string{IncludesStore},
			Store: StoreInfo{Schema: 1}, Key: KeyInfo{Fingerprint: src.fp}, Images: []Image{},
			Members: []Member{{Path: StorePath, Size: int64(len(src.store)), SHA256: sum(src.store)}}}
	}
	for name, c := range map[string]struct {
		edit func(m *Manifest)
		want string
	}{
		"newer format":        {func(m *Manifest) { m.FormatVersion = FormatVersion + 1 }, "newer than this ztpd reads"},
		"not ours":            {func(m *Manifest) { m.Format = "tarball" }, "not a ztpd backup"},
		"member listed twice": {func(m *Manifest) { m.Members = append(m.Members, m.Members[0]) }, "listed twice"},
		"unknown member":      {func(m *Manifest) { m.Members = append(m.Members, Member{Path: "../etc/passwd", SHA256: sum(nil)}) }, "unknown member"},
		"blob of no image":    {func(m *Manifest) { m.Members = append(m.Members, Member{Path: ImagePath(sum(nil)), SHA256: sum(nil)}) }, "belongs to no image"},
		"key claimed":         {func(m *Manifest) { m.Key.Included = true }, "whether the key is included"},
		"no store":            {func(m *Manifest) { m.Members = nil }, "no store"},
	} {
		m := base()
		c.edit(m)
		err := m.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}

	// Content that does not match its manifest entry.
	m := base()
	var out2 bytes.Buffer
	enc, _ := Encrypt(&out2, testPass, testKDF)
	tw, _ := NewTarWriter(enc, m)
	other := bytes.Clone(src.store)
	other[len(other)-1] ^= 1
	tw.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: StorePath, Size: int64(len(other)), Mode: 0o600})
	tw.tw.Write(other)
	tw.tw.Close()
	enc.Close()
	if _, _, err := backupReadAll(out2.Bytes()); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("member content differs from the manifest: %v", err)
	}
	// And the writer refuses to write such a member in the first place.
	var out3 bytes.Buffer
	tw, _ = NewTarWriter(&out3, base())
	if err := tw.Add(StorePath, bytes.NewReader(other)); err == nil || !strings.Contains(err.Error(), "changed while it was read") {
		t.Fatalf("writer took content other than the manifest's: %v", err)
	}
}

// dirState is every file under dir with its content hash, to prove a
// refused or failed restore changed nothing.
func dirState(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			lines = append(lines, rel+"/")
			return nil
		}
		b, _ := os.ReadFile(path)
		lines = append(lines, rel+" "+sum(b))
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func backupRestoreOpts(dir string) RestoreOptions {
	return RestoreOptions{DataDir: dir, Now: func() time.Time { return time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) }}
}

// TestRestoreWithKeyIntoAFreshDirectory: store, blob and key land where a
// server opens them, and the API key's secret opens with the key.
func TestRestoreWithKeyIntoAFreshDirectory(t *testing.T) {
	src := backupNewSource(t)
	dir := filepath.Join(t.TempDir(), "data")
	res, err := Restore(bytes.NewReader(src.archive(t, true, true)), testPass, backupRestoreOpts(dir))
	if err != nil {
		t.Fatal(err)
	}
	if res.Key != "restored" || res.BlobsRestored != 1 || len(res.MissingBlobs) != 0 || res.PreviousStore != "" {
		t.Fatalf("result %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, boltstore.FileName)); !bytes.Equal(b, src.store) {
		t.Fatal("restored store differs")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "images", "sha256", sum(src.blob))); !bytes.Equal(b, src.blob) {
		t.Fatal("restored blob differs")
	}
	kr, err := secretbox.LoadKeyring(filepath.Join(dir, "secret.key"))
	if err != nil || kr.Fingerprint() != src.fp {
		t.Fatalf("restored key: %v", err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "secret.key")); st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v", st.Mode())
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Fatalf("left behind %s", e.Name())
		}
	}
	st, err := boltstore.Open(dir, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var keys []core.APIKey
	st.View(func(tx core.Tx) error {
		return tx.APIKeys().List(func(k core.APIKey) (bool, error) { keys = append(keys, k); return true, nil })
	})
	if len(keys) != 1 {
		t.Fatalf("restored API keys: %d", len(keys))
	}
	if _, err := apikeys.New(st, kr).Lookup(keys[0].APIKey); err != nil {
		t.Fatalf("restored API key does not open with the restored key: %v", err)
	}
}

// TestRestoreRefusals: every refusal changes nothing and says why.
func TestRestoreRefusals(t *testing.T) {
	src := backupNewSource(t)
	noKey := src.archive(t, false, false)
	withKey := src.archive(t, true, true)

	t.Run("no key in the archive and none in place", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		_, err := Restore(bytes.NewReader(noKey), testPass, backupRestoreOpts(dir))
		if !errors.Is(err, ErrKeyNeeded) || !strings.Contains(err.Error(), src.fp) || !strings.Contains(err.Error(), filepath.Join(dir, "secret.key")) ||
			!strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("%v", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Fatal("the refused restore left the data directory behind")
		}
	})
	t.Run("no key in the archive, another key in place", func(t *testing.T) {
		dir := t.TempDir()
		other, _ := secretbox.OpenKeyring(filepath.Join(dir, "secret.key"))
		before := dirState(t, dir)
		_, err := Restore(bytes.NewReader(noKey), testPass, backupRestoreOpts(dir))
		if !errors.Is(err, ErrKeyNeeded) || !strings.Contains(err.Error(), src.fp) || !strings.Contains(err.Error(), other.Fingerprint()) {
			t.Fatalf("%v", err)
		}
		if dirState(t, dir) != before {
			t.Fatal("the refused restore changed the data directory")
		}
	})
	t.Run("no key in the archive, the right key at key_file", func(t *testing.T) {
		dir := t.TempDir()
		keyFile := filepath.Join(t.TempDir(), "ztpd.key")
		os.WriteFile(keyFile, src.key, 0o600)
		o := backupRestoreOpts(dir)
		o.KeyFile = keyFile
		res, err := Restore(bytes.NewReader(noKey), testPass, o)
		if err != nil || res.Key != "present" || len(res.MissingBlobs) != 1 || res.MissingBlobs[0] != "onie.bin" {
			t.Fatalf("%+v %v", res, err)
		}
	})
	t.Run("a store there already", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, boltstore.FileName), []byte("the old store"), 0o600)
		before := dirState(t, dir)
		_, err := Restore(bytes.NewReader(withKey), testPass, backupRestoreOpts(dir))
		if !errors.Is(err, ErrStoreExists) || !strings.Contains(err.Error(), "--force") {
			t.Fatalf("%v", err)
		}
		if dirState(t, dir) != before {
			t.Fatal("the refused restore changed the data directory")
		}
		o := backupRestoreOpts(dir)
		o.Force = true
		res, err := Restore(bytes.NewReader(withKey), testPass, o)
		if err != nil {
			t.Fatal(err)
		}
		if old, _ := os.ReadFile(res.PreviousStore); string(old) != "the old store" || filepath.Base(res.PreviousStore) != "ztpd.db.before-restore-20261201T100000Z" {
			t.Fatalf("old store kept as %s: %q", res.PreviousStore, old)
		}
		// Once more in the same second: the first kept store stays.
		o.Force = true
		res2, err := Restore(bytes.NewReader(withKey), testPass, o)
		if err != nil || res2.PreviousStore == res.PreviousStore {
			t.Fatalf("second forced restore: %+v %v", res2, err)
		}
	})
	t.Run("a different key there, archive with key", func(t *testing.T) {
		dir := t.TempDir()
		other, _ := secretbox.OpenKeyring(filepath.Join(dir, "secret.key"))
		before := dirState(t, dir)
		_, err := Restore(bytes.NewReader(withKey), testPass, backupRestoreOpts(dir))
		if !errors.Is(err, ErrKeyDiffers) || !strings.Contains(err.Error(), other.Fingerprint()) || !strings.Contains(err.Error(), src.fp) {
			t.Fatalf("%v", err)
		}
		if dirState(t, dir) != before {
			t.Fatal("the refused restore changed the data directory")
		}
		o := backupRestoreOpts(dir)
		o.Force = true
		res, err := Restore(bytes.NewReader(withKey), testPass, o)
		if err != nil || res.PreviousKey == "" {
			t.Fatalf("%+v %v", res, err)
		}
		if kept, _ := secretbox.LoadKeyring(res.PreviousKey); kept == nil || kept.Fingerprint() != other.Fingerprint() {
			t.Fatal("the replaced key was not kept")
		}
	})
	t.Run("server holding the store", func(t *testing.T) {
		dir := t.TempDir()
		st, err := boltstore.Open(dir, boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		o := backupRestoreOpts(dir)
		o.Force = true
		if _, err := Restore(bytes.NewReader(withKey), testPass, o); !errors.Is(err, ErrServerRunning) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("wrong passphrase or damage: nothing written", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, boltstore.FileName), []byte("the old store"), 0o600)
		before := dirState(t, dir)
		o := backupRestoreOpts(dir)
		o.Force = true
		if _, err := Restore(bytes.NewReader(withKey), []byte("not the passphrase"), o); !errors.Is(err, ErrWrongPassphrase) {
			t.Fatalf("%v", err)
		}
		damaged := bytes.Clone(withKey)
		damaged[len(damaged)-5] ^= 1 // the last chunk: everything before it reads fine
		if _, err := Restore(bytes.NewReader(damaged), testPass, o); !errors.Is(err, ErrDamaged) {
			t.Fatalf("%v", err)
		}
		if dirState(t, dir) != before {
			t.Fatal("a failed restore changed the data directory")
		}
	})
	t.Run("verify only", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "none")
		o := backupRestoreOpts(dir)
		o.VerifyOnly = true
		res, err := Restore(bytes.NewReader(withKey), testPass, o)
		if err != nil || res.Manifest.Key.Fingerprint != src.fp {
			t.Fatalf("%+v %v", res, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Fatal("verify-only wrote something")
		}
	})
}

// TestRestoreAsRootGivesFilesToTheDataDirOwner: "sudo ztpd restore" into
// the service's directory (owned by its user) leaves files that user can
// open, not root's.
func TestRestoreAsRootGivesFilesToTheDataDirOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own files as another user")
	}
	src := backupNewSource(t)
	dir := filepath.Join(t.TempDir(), "data")
	os.MkdirAll(dir, 0o700)
	const uid, gid = 4242, 4343
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(bytes.NewReader(src.archive(t, true, true)), testPass, backupRestoreOpts(dir)); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{boltstore.FileName, "secret.key", "images", "images/sha256", "images/sha256/" + sum(src.blob)} {
		st, err := os.Lstat(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != uid || sys.Gid != gid {
			t.Errorf("%s owned by %d:%d, want %d:%d", rel, sys.Uid, sys.Gid, uid, gid)
		}
	}
}

// TestRestoreRetiredKeys: keys retired by a rotation travel with the
// current one and land beside it under their retired names.
func TestRestoreRetiredKeys(t *testing.T) {
	src := backupNewSource(t)
	old := bytes.Repeat([]byte{0x42}, secretbox.KeySize)
	oldFP, _ := secretbox.FingerprintOf(old)
	m := &Manifest{Format: Format, FormatVersion: FormatVersion, ZtpdVersion: "test", Created: time.Now().UTC(),
		Includes: []string{IncludesStore, IncludesKey}, Store: StoreInfo{Schema: boltstore.SchemaVersion, SealedRecords: 1},
		Key:    KeyInfo{Fingerprint: src.fp, Included: true, Retired: []string{oldFP}},
		Images: []Image{{Name: "onie.bin", Kind: "onie-installer", SHA256: sum(src.blob), Size: int64(len(src.blob))}},
		Members: []Member{{Path: StorePath, Size: int64(len(src.store)), SHA256: sum(src.store)},
			{Path: KeyPath, Size: int64(len(src.key)), SHA256: sum(src.key)},
			{Path: RetiredKeyPath(oldFP), Size: int64(len(old)), SHA256: sum(old)}}}
	arch := backupSeal(t, m, map[string][]byte{StorePath: src.store, KeyPath: src.key, RetiredKeyPath(oldFP): old})
	dir := t.TempDir()
	if _, err := Restore(bytes.NewReader(arch), testPass, backupRestoreOpts(dir)); err != nil {
		t.Fatal(err)
	}
	kr, err := secretbox.LoadKeyring(filepath.Join(dir, "secret.key"))
	if err != nil || kr.Fingerprint() != src.fp || !kr.Holds(oldFP) {
		t.Fatalf("restored keyring: %v", err)
	}
	if _, err := os.Stat(secretbox.RetiredPath(filepath.Join(dir, "secret.key"), oldFP)); err != nil {
		t.Fatal(err)
	}
	// A retired key whose bytes are not its fingerprint's is refused.
	m.Members[2].SHA256 = sum(src.key)
	bad := backupSeal(t, m, map[string][]byte{StorePath: src.store, KeyPath: src.key, RetiredKeyPath(oldFP): src.key})
	if _, err := Restore(bytes.NewReader(bad), testPass, RestoreOptions{DataDir: t.TempDir()}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("mislabelled retired key: %v", err)
	}
}

// A restore killed part way leaves its staging directory and half-written
// files; the next restore (holding the store's lock) removes them.
func TestRestoreRemovesWhatAKilledRestoreLeft(t *testing.T) {
	src := backupNewSource(t)
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(dir, ".restore-123", "images"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(dir, ".restore-123", "ztpd.db"), filepath.Join(dir, ".secret.key.restore-456")} {
		if err := os.WriteFile(f, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Restore(bytes.NewReader(src.archive(t, true, true)), testPass, backupRestoreOpts(dir)); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left behind %s", e.Name())
		}
	}
}
