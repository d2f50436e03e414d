package pki

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestKeyringCreatesPrivateKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "secrets.key")
	kr, err := OpenKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %o, want 0600", fi.Mode().Perm())
	}
	if fi.Size() != KeySize {
		t.Fatalf("key file size %d, want %d", fi.Size(), KeySize)
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Fatalf("created data dir mode %o, want 0700", di.Mode().Perm())
	}
	// No temporary files left behind.
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("data dir holds %d entries, want only the key file", len(ents))
	}
	kr2, err := OpenKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	if kr.CurrentID() != kr2.CurrentID() {
		t.Fatal("reopening the keyring produced a different key")
	}
	sealed, err := kr.Seal([]byte("hello"), []byte("ctx"))
	if err != nil {
		t.Fatal(err)
	}
	pt, err := kr2.Open(sealed, []byte("ctx"))
	if err != nil || string(pt) != "hello" {
		t.Fatalf("open with reopened keyring: %q, %v", pt, err)
	}
}

func TestKeyringRefusesLooseMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.key")
	if _, err := OpenKeyring(path); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := OpenKeyring(path)
		if !errors.Is(err, ErrKeyFileMode) {
			t.Fatalf("mode %o: got %v, want ErrKeyFileMode", mode, err)
		}
		if !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("error does not tell how to fix it: %v", err)
		}
	}
	os.Chmod(path, 0o400) // stricter than 0600 is fine
	if _, err := OpenKeyring(path); err != nil {
		t.Fatalf("mode 0400 refused: %v", err)
	}
}

func TestKeyringRefusesBadKeyFiles(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("too short"), 0o600)
	if _, err := OpenKeyring(short); err == nil || !strings.Contains(err.Error(), "want exactly 32") {
		t.Fatalf("short key file: %v", err)
	}
	target := filepath.Join(dir, "real.key")
	os.WriteFile(target, bytes.Repeat([]byte{1}, 32), 0o600)
	link := filepath.Join(dir, "link.key")
	os.Symlink(target, link)
	if _, err := OpenKeyring(link); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("symlinked key file: %v", err)
	}
}

func TestKeyringSealOpenRejectsTampering(t *testing.T) {
	kr, err := OpenKeyring(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("-----BEGIN EC PRIVATE KEY-----")
	sealed, err := kr.Seal(secret, []byte("cluster/a"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, secret) {
		t.Fatal("sealed blob contains the plaintext")
	}
	if _, err := kr.Open(sealed, []byte("cluster/b")); !errors.Is(err, ErrSealed) {
		t.Fatalf("open with another context: %v", err)
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 0x01
		if _, err := kr.Open(bad, []byte("cluster/a")); err == nil {
			t.Fatalf("flipping byte %d went unnoticed", i)
		}
	}
	if _, err := kr.Open(sealed[:10], nil); !errors.Is(err, ErrSealed) {
		t.Fatalf("truncated blob: %v", err)
	}
	// Two seals of the same plaintext differ (fresh nonce).
	again, _ := kr.Seal(secret, []byte("cluster/a"))
	if bytes.Equal(again, sealed) {
		t.Fatal("nonce reuse: identical ciphertexts")
	}
	other, _ := OpenKeyring(filepath.Join(t.TempDir(), "k"))
	if _, err := other.Open(sealed, []byte("cluster/a")); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("open with a different keyring: %v", err)
	}
}

func TestKeyringRotateKeepsOldBlobsReadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.key")
	kr, err := OpenKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	oldID := kr.CurrentID()
	old, _ := kr.Seal([]byte("old"), nil)
	if err := kr.Rotate(); err != nil {
		t.Fatal(err)
	}
	if kr.CurrentID() == oldID {
		t.Fatal("rotation kept the same key")
	}
	fresh, _ := kr.Seal([]byte("new"), nil)
	if id, _ := SealedKeyID(fresh); id != kr.CurrentID() {
		t.Fatalf("new blob sealed with %s, want %s", id, kr.CurrentID())
	}
	if id, _ := SealedKeyID(old); id != oldID {
		t.Fatalf("old blob id %s, want %s", id, oldID)
	}
	// A fresh process sees both keys.
	kr2, err := OpenKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{old, fresh} {
		if _, err := kr2.Open(b, nil); err != nil {
			t.Fatalf("after rotation: %v", err)
		}
	}
	fi, err := os.Stat(path + "." + oldID + retiredSuffix)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("retired key file: %v %v", fi, err)
	}
}

func TestKeyringConcurrentCreationAgrees(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.key")
	const n = 16
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			kr, err := OpenKeyring(path)
			errs[i] = err
			if err == nil {
				ids[i] = kr.CurrentID()
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("racing creators got different keys: %s vs %s", ids[i], ids[0])
		}
	}
}
