// Package secretbox seals small secrets at rest with AES-256-GCM under a key
// file in the data directory. It exists for secrets the server must read back
// in plain form (HMAC keys of API credentials); anything that can be checked
// against a hash is stored as a hash instead.
//
// The key file holds 32 random bytes, mode 0600, created atomically on first
// use. Whoever holds the key file and the store can read the secrets, so back
// them up separately, or not at all and re-issue credentials after a restore.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// KeySize is the AES-256 key size.
const KeySize = 32

const (
	magic     = "ZS1" // format tag and version
	nonceSize = 12
)

// ErrSealed means a blob is malformed, sealed under another key, or tampered with.
var ErrSealed = errors.New("sealed secret is corrupt, was tampered with, or was sealed with another key file")

// Box seals and opens secrets. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// Open loads the key at path, creating it when absent. A key file that group
// or others can read is refused: the secrets it protects would be exposed.
func Open(path string) (*Box, error) {
	if err := ensureKey(path); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secret key %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secret key %s has mode %04o; run: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	defer clear(key)
	if len(key) != KeySize {
		return nil, fmt.Errorf("secret key %s holds %d bytes, want %d", path, len(key), KeySize)
	}
	return New(key)
}

// New builds a Box from a 32-byte key (tests, or keys from elsewhere).
func New(key []byte) (*Box, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plaintext. aad binds the blob to its record (for example the
// API key it belongs to), so a blob copied into another record fails to open.
func (b *Box) Seal(plaintext, aad []byte) ([]byte, error) {
	out := make([]byte, len(magic)+nonceSize, len(magic)+nonceSize+len(plaintext)+b.aead.Overhead())
	copy(out, magic)
	nonce := out[len(magic):]
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return b.aead.Seal(out, nonce, plaintext, aad), nil
}

// Open decrypts a blob made by Seal with the same aad.
func (b *Box) Open(sealed, aad []byte) ([]byte, error) {
	if len(sealed) < len(magic)+nonceSize+b.aead.Overhead() || string(sealed[:len(magic)]) != magic {
		return nil, ErrSealed
	}
	nonce := sealed[len(magic) : len(magic)+nonceSize]
	pt, err := b.aead.Open(nil, nonce, sealed[len(magic)+nonceSize:], aad)
	if err != nil {
		return nil, ErrSealed
	}
	return pt, nil
}

// ensureKey creates the key file through a temporary file linked into place,
// so no reader ever sees a partial key and concurrent creators agree on one.
func ensureKey(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("secret key %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".secret-key-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	key := make([]byte, KeySize)
	defer clear(key)
	if _, err := rand.Read(key); err != nil {
		f.Close()
		return err
	}
	_, werr := f.Write(key)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr, os.Chmod(tmp, 0o600)); err != nil {
		return fmt.Errorf("create secret key %s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create secret key %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
