package secretbox

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

// TestFingerprintNamesTheKeyBlobsCarry: the fingerprint is public, stable
// across reopening, starts with the id sealed blobs carry, and differs
// between keys; LoadKeyring never creates a key.
func TestFingerprintNamesTheKeyBlobsCarry(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret.key")
	if _, err := LoadKeyring(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadKeyring of a missing file: %v, want not-exist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("LoadKeyring created a key file")
	}
	kr, err := OpenKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	fp := kr.Fingerprint()
	if len(fp) != 64 || !strings.HasPrefix(fp, kr.CurrentID()) {
		t.Fatalf("fingerprint %q does not start with the key id %q", fp, kr.CurrentID())
	}
	raw, _ := os.ReadFile(path)
	if fromFile, err := FingerprintOf(raw); err != nil || fromFile != fp {
		t.Fatalf("FingerprintOf the file: %q %v, want %q", fromFile, err, fp)
	}
	if strings.Contains(fp, hexOf(raw)) {
		t.Fatal("fingerprint reveals the key")
	}
	sealed, _ := kr.Seal([]byte("x"), nil)
	id, _ := SealedKeyID(sealed)
	if !kr.Holds(id) || !kr.Holds(fp) || KeyIDOf(fp) != id {
		t.Fatalf("Holds(%s)/Holds(fingerprint) false", id)
	}
	again, err := LoadKeyring(path)
	if err != nil || again.Fingerprint() != fp {
		t.Fatalf("reloaded fingerprint %q %v", again.Fingerprint(), err)
	}
	other, err := OpenKeyring(filepath.Join(dir, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	if other.Fingerprint() == fp || other.Holds(id) {
		t.Fatal("two keys share a fingerprint")
	}
}

// TestExportCarriesCurrentAndRetiredKeys: a backup with the key gets every
// key file the keyring loaded, the current one first, each matching its
// fingerprint; a key file replaced on disk behind the keyring is refused.
func TestExportCarriesCurrentAndRetiredKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret.key")
	kr, err := OpenKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	old := kr.Fingerprint()
	if err := kr.Rotate(); err != nil {
		t.Fatal(err)
	}
	files, err := kr.Export()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].Retired || files[0].Fingerprint != kr.Fingerprint() || !files[1].Retired || files[1].Fingerprint != old {
		t.Fatalf("export: %+v", files)
	}
	for _, f := range files {
		if fp, _ := FingerprintOf(f.Key); fp != f.Fingerprint {
			t.Fatalf("exported key does not match its fingerprint %s", f.Fingerprint)
		}
	}
	if _, err := os.Stat(RetiredPath(path, old)); err != nil {
		t.Fatalf("RetiredPath: %v", err)
	}
	if err := os.WriteFile(path, bytes.Repeat([]byte{7}, KeySize), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kr.Export(); err == nil || !strings.Contains(err.Error(), "changed on disk") {
		t.Fatalf("export after the file changed: %v", err)
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
