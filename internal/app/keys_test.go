package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters/clusterstest"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/secretbox"
)

func keysTestConfig(t *testing.T) config.Config {
	cfg := config.Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.HTTP.Addr = "127.0.0.1:8080"
	// The device HTTPS listener's key pair is sealed in the store as soon
	// as it is made: these tests count what the clusters and API keys seal.
	cfg.HTTP.TLS.Enabled = false
	return cfg
}

func keysOpen(t *testing.T, cfg config.Config, log io.Writer) (*App, error) {
	t.Helper()
	if log == nil {
		log = io.Discard
	}
	return New(cfg, NewLogger(log, "info", "text"))
}

func keysRecorded(t *testing.T, a *App) string {
	t.Helper()
	var fp string
	a.Store.View(func(tx core.Tx) error {
		fp, _, _ = tx.Settings().Get(KeyFingerprintSetting)
		return nil
	})
	return fp
}

// TestKeyNeverReplacedUnderSealedData: a store holding sealed secrets
// refuses to open without its key (missing or another one) and no key is
// created; the message names the fingerprint needed and the file. With the
// key back, the same secret opens.
func TestKeyNeverReplacedUnderSealedData(t *testing.T) {
	cfg := keysTestConfig(t)
	a, err := keysOpen(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	fp := a.Keys.Fingerprint()
	if got := keysRecorded(t, a); got != fp {
		t.Fatalf("recorded fingerprint %q, want %q", got, fp)
	}
	info, secret, err := a.APIKeys.Create("ops", apikeys.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	keyPath := filepath.Join(cfg.DataDir, SecretKeyFile)
	orig, _ := os.ReadFile(keyPath)

	os.Remove(keyPath)
	_, err = keysOpen(t, cfg, nil)
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Have != "" || ke.Need != fp {
		t.Fatalf("open without the key: %v", err)
	}
	for _, want := range []string{"at-rest key missing", fp, keyPath, "1 API key", "--with-key"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("message lacks %q: %s", want, err)
		}
	}
	if _, err := os.Stat(keyPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a new key was created under sealed data")
	}

	other, err := secretbox.OpenKeyring(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	_, err = keysOpen(t, cfg, nil)
	if !errors.As(err, &ke) || ke.Have != other.Fingerprint() || !strings.Contains(err.Error(), "at-rest key mismatch") || !strings.Contains(err.Error(), fp) {
		t.Fatalf("open with another key: %v", err)
	}
	if now, _ := os.ReadFile(keyPath); bytes.Equal(now, orig) {
		t.Fatal("test broken: the other key is the original")
	}

	os.WriteFile(keyPath, orig, 0o600)
	a, err = keysOpen(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.APIKeys.VerifySecret(info.APIKey, secret); err != nil {
		t.Fatalf("API key with its key back: %v", err)
	}
}

// TestKeyCheckOfAStoreWithoutRecord: a store from before the fingerprint
// was recorded is checked by the key ids its sealed blobs carry (an API
// key's secret and a cluster's CA, certificate key and token seed), and the
// fingerprint is recorded once the key opens them.
func TestKeyCheckOfAStoreWithoutRecord(t *testing.T) {
	cfg := keysTestConfig(t)
	a, err := keysOpen(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	fp := a.Keys.Fingerprint()
	clusterstest.Cluster(t, a.Clusters, "http://10.99.42.1:8080", "1.30.4", "prod", 1)
	var census SealedCensus
	a.Store.View(func(tx core.Tx) error { census, err = CensusOf(tx); return err })
	if err != nil || census.Owners["cluster"] != 1 || census.KeyIDs[secretbox.KeyIDOf(fp)] != 3 || census.APIKeys != 0 {
		t.Fatalf("census of one cluster: %+v %v", census, err)
	}
	if census.String() != "key material of 1 cluster" {
		t.Fatalf("census says %q", census.String())
	}
	// Forget the record, as a store written before it existed.
	a.Store.Update(func(tx core.Tx) error { return tx.Settings().Put(KeyFingerprintSetting, "") })
	a.Close()

	keyPath := filepath.Join(cfg.DataDir, SecretKeyFile)
	orig, _ := os.ReadFile(keyPath)
	os.Remove(keyPath)
	_, err = keysOpen(t, cfg, nil)
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Need != secretbox.KeyIDOf(fp) || !strings.Contains(err.Error(), "key material of 1 cluster") {
		t.Fatalf("open a record-less store without its key: %v", err)
	}
	os.WriteFile(keyPath, orig, 0o600)
	a, err = keysOpen(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := keysRecorded(t, a); got != fp {
		t.Fatalf("fingerprint recorded at the first good open: %q, want %q", got, fp)
	}
}

// TestKeyCreatedOnlyWithoutSealedData: a store with nothing sealed gets a
// new key when its key is gone (and says so), and records the new one.
func TestKeyCreatedOnlyWithoutSealedData(t *testing.T) {
	cfg := keysTestConfig(t)
	a, err := keysOpen(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := a.Keys.Fingerprint()
	a.Close()
	os.Remove(filepath.Join(cfg.DataDir, SecretKeyFile))
	var log bytes.Buffer
	a, err = keysOpen(t, cfg, &log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Keys.Fingerprint() == first || keysRecorded(t, a) != a.Keys.Fingerprint() {
		t.Fatalf("new key %s, recorded %s (old %s)", a.Keys.Fingerprint(), keysRecorded(t, a), first)
	}
	if !strings.Contains(log.String(), "holds nothing sealed") {
		t.Fatalf("no warning about the replaced key:\n%s", log.String())
	}
}

// TestMissingImageBlobsWarnedAtStart: images whose content is gone are
// listed (count and first names) when the app starts.
func TestMissingImageBlobsWarnedAtStart(t *testing.T) {
	cfg := keysTestConfig(t)
	var log bytes.Buffer
	a, err := keysOpen(t, cfg, &log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, name := range []string{"a.bin", "b.bin", "c.bin"} {
		im, _, err := a.Images.Add(context.Background(), strings.NewReader("content of "+name), imagestoreMeta(name), "")
		if err != nil {
			t.Fatal(err)
		}
		if name != "b.bin" {
			os.Remove(a.Images.BlobPath(im.SHA256))
		}
	}
	if err := a.warnMissingImageBlobs(); err != nil {
		t.Fatal(err)
	}
	out := log.String()
	if !strings.Contains(out, "images without their content") || !strings.Contains(out, "count=2") || !strings.Contains(out, "a.bin, c.bin") {
		t.Fatalf("start warning:\n%s", out)
	}
}

func imagestoreMeta(name string) imagestore.Meta { return imagestore.Meta{Name: name, Kind: "file"} }
