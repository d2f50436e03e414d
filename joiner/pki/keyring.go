package pki

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
	aead cipher.AEAD
}

// keyID derives a public id from key material; it reveals nothing usable.
func keyID(key []byte) [keyIDSize]byte {
	h := sha256.New()
	h.Write([]byte("ztpd keyring id v1\x00"))
	h.Write(key)
	var id [keyIDSize]byte
	copy(id[:], h.Sum(nil))
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
	return keyringKey{id: keyID(key), aead: aead}, nil
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
	return newKeyringKey(key)
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
