// Package secretbox seals secrets at rest with AES-256-GCM under a key file
// in the data directory (mode 0600): cluster CA keys, token seeds, and API
// secrets the server must read back in plain form for HMAC verification.
// Anything that can be checked against a hash is stored as a hash instead.
// Every sealed blob names its key, so a rotation never orphans old blobs.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// KeySize is the size of a keyring key: AES-256.
const KeySize = 32

// sealedMagic starts every sealed blob; the byte after it is the format version.
const (
	sealedMagic   = "ZK"
	sealedVersion = 1
	keyIDSize     = 8
	nonceSize     = 12
	sealedHeader  = len(sealedMagic) + 1 + keyIDSize + nonceSize
)

// retiredSuffix marks a key kept only to open blobs sealed before a rotation.
const retiredSuffix = ".retired"

var (
	// ErrKeyFileMode means the key file is readable by group or others.
	ErrKeyFileMode = errors.New("key file permissions too open")
	// ErrUnknownKey means a sealed blob names a key this keyring does not hold.
	ErrUnknownKey = errors.New("sealed with an unknown key")
	// ErrSealed means a sealed blob is malformed or fails authentication.
	ErrSealed = errors.New("sealed data is corrupt or was tampered with")
)

// Keyring encrypts private keys at rest with AES-256-GCM. The current key
// seals; retired keys (kept after a rotation) only open. Every sealed blob
// names its key by an 8-byte id so rotation never orphans old blobs.
type Keyring struct {
	path    string
	mu      sync.RWMutex
	current keyringKey
	all     map[string]keyringKey // by hex id, including current
}

type keyringKey struct {
	id   [keyIDSize]byte
	fp   string // Fingerprint
	file string // where it was loaded from
	aead cipher.AEAD
}

// keyDigest is SHA-256 over a domain-separated copy of the key: public, and
// it reveals nothing usable about the key.
func keyDigest(key []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte("ztpd keyring id v1\x00"))
	h.Write(key)
	var d [sha256.Size]byte
	copy(d[:], h.Sum(nil))
	return d
}

// keyID derives a public id from key material; it reveals nothing usable.
func keyID(key []byte) [keyIDSize]byte {
	d := keyDigest(key)
	var id [keyIDSize]byte
	copy(id[:], d[:])
	return id
}

func newKeyringKey(key []byte) (keyringKey, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return keyringKey{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return keyringKey{}, err
	}
	d := keyDigest(key)
	return keyringKey{id: keyID(key), fp: hex.EncodeToString(d[:]), aead: aead}, nil
}

// OpenKeyring loads the key file at path, creating it (32 random bytes,
// mode 0600, atomically) when it does not exist. Retired keys sit beside it
// as path.<id>.retired. A key file readable by group or others is refused.
func OpenKeyring(path string) (*Keyring, error) {
	if err := ensureKeyFile(path); err != nil {
		return nil, err
	}
	kr := &Keyring{path: path}
	if err := kr.load(); err != nil {
		return nil, err
	}
	return kr, nil
}

func (kr *Keyring) load() error {
	cur, err := readKeyFile(kr.path)
	if err != nil {
		return err
	}
	all := map[string]keyringKey{hex.EncodeToString(cur.id[:]): cur}
	retired, _ := filepath.Glob(kr.path + ".*" + retiredSuffix)
	for _, p := range retired {
		k, err := readKeyFile(p)
		if err != nil {
			return err
		}
		all[hex.EncodeToString(k.id[:])] = k
	}
	kr.mu.Lock()
	kr.current, kr.all = cur, all
	kr.mu.Unlock()
	return nil
}

// LoadKeyring loads an existing key file (and its retired keys) without
// ever creating one: a missing file is an error wrapping fs.ErrNotExist.
// Callers that must not replace a lost key (a store holding sealed data)
// use it instead of OpenKeyring.
func LoadKeyring(path string) (*Keyring, error) {
	kr := &Keyring{path: path}
	if err := kr.load(); err != nil {
		return nil, err
	}
	return kr, nil
}

// Path is the current key's file.
func (kr *Keyring) Path() string { return kr.path }

// Fingerprint names the current key without revealing it: 64 hex digits of
// SHA-256 over a domain-separated copy of the key. Its first 16 digits are
// the key id every blob it sealed carries (SealedKeyID), so the key a blob
// needs can be named from the blob alone.
func (kr *Keyring) Fingerprint() string {
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	return kr.current.fp
}

// Fingerprints are the fingerprints of every key held, current and retired.
func (kr *Keyring) Fingerprints() []string {
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	out := make([]string, 0, len(kr.all))
	for _, k := range kr.all {
		out = append(out, k.fp)
	}
	return out
}

// Holds reports whether the keyring holds the key with hex id (a blob's
// SealedKeyID) or fingerprint.
func (kr *Keyring) Holds(idOrFingerprint string) bool {
	if len(idOrFingerprint) < 2*keyIDSize {
		return false
	}
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	k, ok := kr.all[idOrFingerprint[:2*keyIDSize]]
	return ok && strings.HasPrefix(k.fp, idOrFingerprint)
}

// KeyIDOf is the key id a fingerprint starts with.
func KeyIDOf(fingerprint string) string {
	if len(fingerprint) < 2*keyIDSize {
		return fingerprint
	}
	return fingerprint[:2*keyIDSize]
}

// KeyFile is one key file's content for a backup: the current key
// (Retired false) or a retired one.
type KeyFile struct {
	Fingerprint string
	Retired     bool
	Key         []byte
}

// Export reads the key files this keyring loaded (current first), for a
// backup that is asked to carry them. Each is checked against the key held
// in memory, so a file changed on disk since it was loaded is an error.
func (kr *Keyring) Export() ([]KeyFile, error) {
	kr.mu.RLock()
	cur := kr.current
	all := make(map[string]keyringKey, len(kr.all))
	for id, k := range kr.all {
		all[id] = k
	}
	kr.mu.RUnlock()
	read := func(path string, want keyringKey, retired bool) (KeyFile, error) {
		key, err := os.ReadFile(path)
		if err != nil {
			return KeyFile{}, fmt.Errorf("key file: %w", err)
		}
		if len(key) != KeySize || keyID(key) != want.id {
			clear(key)
			return KeyFile{}, fmt.Errorf("key file %s changed on disk since ztpd loaded it", path)
		}
		return KeyFile{Fingerprint: want.fp, Retired: retired, Key: key}, nil
	}
	first, err := read(cur.file, cur, false)
	if err != nil {
		return nil, err
	}
	out := []KeyFile{first}
	ids := make([]string, 0, len(all))
	for id := range all {
		if id != hex.EncodeToString(cur.id[:]) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		kf, err := read(all[id].file, all[id], true)
		if err != nil {
			return nil, err
		}
		out = append(out, kf)
	}
	return out, nil
}

// FingerprintOf is the fingerprint of raw key material (a key file's
// content); it fails unless key is KeySize bytes.
func FingerprintOf(key []byte) (string, error) {
	if len(key) != KeySize {
		return "", fmt.Errorf("key holds %d bytes, want exactly %d", len(key), KeySize)
	}
	d := keyDigest(key)
	return hex.EncodeToString(d[:]), nil
}

// RetiredPath is where a retired key with fingerprint fp lives beside the
// current key file path.
func RetiredPath(path, fp string) string { return path + "." + KeyIDOf(fp) + retiredSuffix }

// CurrentID is the hex id of the key that seals new data.
func (kr *Keyring) CurrentID() string {
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	return hex.EncodeToString(kr.current.id[:])
}

// Seal encrypts plaintext. aad binds the blob to its context (for example
// "cluster/<id>/ca.key"), so a blob copied into another record fails to open.
func (kr *Keyring) Seal(plaintext, aad []byte) ([]byte, error) {
	kr.mu.RLock()
	k := kr.current
	kr.mu.RUnlock()
	out := make([]byte, sealedHeader, sealedHeader+len(plaintext)+k.aead.Overhead())
	copy(out, sealedMagic)
	out[len(sealedMagic)] = sealedVersion
	copy(out[len(sealedMagic)+1:], k.id[:])
	nonce := out[len(sealedMagic)+1+keyIDSize : sealedHeader]
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return k.aead.Seal(out, nonce, plaintext, aad), nil
}

// Open decrypts a blob produced by Seal with the same aad.
func (kr *Keyring) Open(sealed, aad []byte) ([]byte, error) {
	if len(sealed) < sealedHeader+16 || string(sealed[:len(sealedMagic)]) != sealedMagic {
		return nil, ErrSealed
	}
	if v := sealed[len(sealedMagic)]; v != sealedVersion {
		return nil, fmt.Errorf("%w: format version %d", ErrSealed, v)
	}
	id := hex.EncodeToString(sealed[len(sealedMagic)+1 : len(sealedMagic)+1+keyIDSize])
	kr.mu.RLock()
	k, ok := kr.all[id]
	kr.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %s (key files: %s)", ErrUnknownKey, id, kr.path)
	}
	nonce := sealed[len(sealedMagic)+1+keyIDSize : sealedHeader]
	pt, err := k.aead.Open(nil, nonce, sealed[sealedHeader:], aad)
	if err != nil {
		return nil, ErrSealed
	}
	return pt, nil
}

// SealedKeyID reports which key sealed a blob, so callers can find blobs
// still sealed with a retired key after a rotation.
func SealedKeyID(sealed []byte) (string, error) {
	if len(sealed) < sealedHeader || string(sealed[:len(sealedMagic)]) != sealedMagic {
		return "", ErrSealed
	}
	return hex.EncodeToString(sealed[len(sealedMagic)+1 : len(sealedMagic)+1+keyIDSize]), nil
}

// Rotate makes a fresh key current and keeps the old one as retired, so
// existing blobs still open. Re-sealing old blobs is the caller's job. Each
// step leaves a loadable state if the process dies part way.
func (kr *Keyring) Rotate() error {
	kr.mu.RLock()
	oldID := hex.EncodeToString(kr.current.id[:])
	kr.mu.RUnlock()
	retired := kr.path + "." + oldID + retiredSuffix
	// 1. Keep the old key under its retired name (a hard link: both names
	//    stay valid until the new key replaces the current name).
	if err := os.Link(kr.path, retired); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("keyring rotate: %w", err)
	}
	// 2. Write the new key to a temporary file, then rename it over the current name.
	tmp, err := writeNewKeyTemp(filepath.Dir(kr.path))
	if err != nil {
		return fmt.Errorf("keyring rotate: %w", err)
	}
	if err := os.Rename(tmp, kr.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keyring rotate: %w", err)
	}
	if err := syncDir(filepath.Dir(kr.path)); err != nil {
		return fmt.Errorf("keyring rotate: %w", err)
	}
	return kr.load()
}

// ensureKeyFile creates the key file when absent. Creation goes through a
// temporary file linked into place, so a reader never sees a partial key and
// two processes racing to create it agree on one key.
func ensureKeyFile(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("key file %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("key file directory %s: %w", dir, err)
	}
	tmp, err := writeNewKeyTemp(dir)
	if err != nil {
		return fmt.Errorf("create key file %s: %w", path, err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create key file %s: %w", path, err)
	}
	return syncDir(dir)
}

// writeNewKeyTemp writes 32 random bytes to a new 0600 file in dir and
// fsyncs it. The caller links or renames it into place.
func writeNewKeyTemp(dir string) (string, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	var suffix [8]byte
	rand.Read(suffix[:])
	tmp := filepath.Join(dir, ".key-"+hex.EncodeToString(suffix[:])+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, werr := f.Write(key)
	serr := f.Sync()
	cerr := f.Close()
	clear(key)
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

func readKeyFile(path string) (keyringKey, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return keyringKey{}, fmt.Errorf("key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return keyringKey{}, fmt.Errorf("key file %s is not a regular file (mode %s)", path, fi.Mode())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return keyringKey{}, fmt.Errorf("%w: %s has mode %04o; it must not be readable by group or others (run: chmod 600 %s)",
			ErrKeyFileMode, path, perm, path)
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return keyringKey{}, fmt.Errorf("key file: %w", err)
	}
	defer clear(key)
	if len(key) != KeySize {
		return keyringKey{}, fmt.Errorf("key file %s holds %d bytes, want exactly %d", path, len(key), KeySize)
	}
	k, err := newKeyringKey(key)
	k.file = path
	return k, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !strings.Contains(err.Error(), "invalid argument") {
		return err
	}
	return nil
}
