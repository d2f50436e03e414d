package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/secretbox"
)

// SnapshotPrefix names the store snapshot a backup copies before it
// writes the archive; one left by a killed backup is removed at start
// (RemoveStaleSnapshots).
const SnapshotPrefix = ".backup-store-"

// RemoveStaleSnapshots removes the store snapshots a killed backup left in
// dataDir and returns them. Call it only while holding the store's lock:
// it says no other backup of dataDir runs.
func RemoveStaleSnapshots(dataDir string) []string {
	stale, _ := filepath.Glob(filepath.Join(dataDir, SnapshotPrefix+"*"))
	for _, f := range stale {
		os.Remove(f)
	}
	return stale
}

// Snapshotter is the store a backup copies.
type Snapshotter interface {
	// Schema is the schema version the store records.
	Schema() (int, error)
	// Snapshot runs fn over one consistent state: tx reads it and writeTo
	// writes it as a complete store file of size bytes.
	Snapshot(fn func(tx core.Tx, size int64, writeTo func(io.Writer) (int64, error)) error) error
}

// KeyExporter is the at-rest key ring: its fingerprint, and its key files
// (the current key first, then the retired ones) when the key goes in.
type KeyExporter interface {
	Fingerprint() string
	Export() ([]secretbox.KeyFile, error)
}

// BlobOpener opens an image's content.
type BlobOpener interface {
	Open(im core.Image) (*os.File, error)
}

// Source is what a backup is written from.
type Source struct {
	Store  Snapshotter
	Keys   KeyExporter
	Images BlobOpener
	// DataDir is where the store's snapshot is copied first.
	DataDir string
	// Census counts the records sealed with the at-rest key in tx, and
	// says what they are, for the manifest.
	Census func(tx core.Tx) (records int, what string, err error)
	// Flush, when set, writes what was reported but is still queued (the
	// devices' write-behind queue), so it goes in too.
	Flush func()
	Log   *slog.Logger
}

// Write writes a backup payload (unencrypted: TarWriter) of src to w, with
// the image blobs and the at-rest key files when asked; start runs just
// before the first byte. Everything reported before it was called is in.
// What the manifest says and the store file agree exactly (one read
// transaction); blobs are opened inside it, so an image removed meanwhile
// still goes out whole.
func Write(w io.Writer, src Source, withImages, withKey bool, start func()) error {
	log := src.Log
	if log == nil {
		log = slog.Default()
	}
	if src.Flush != nil {
		src.Flush()
	}
	host, _ := os.Hostname()
	dataDir, _ := filepath.Abs(src.DataDir)
	m := &Manifest{Format: Format, FormatVersion: FormatVersion, ZtpdVersion: ZtpdVersion,
		Created: time.Now().UTC(), Host: host, DataDir: dataDir, Includes: []string{IncludesStore},
		Key: KeyInfo{Fingerprint: src.Keys.Fingerprint(), Included: withKey}, Images: []Image{}}
	if schema, err := src.Store.Schema(); err == nil {
		m.Store.Schema = schema
	} else {
		return err
	}
	var keys [][]byte
	defer func() {
		for _, k := range keys {
			clear(k)
		}
	}()
	if withKey {
		files, err := src.Keys.Export()
		if err != nil {
			return err
		}
		m.Includes = append(m.Includes, IncludesKey)
		for _, f := range files {
			keys = append(keys, f.Key)
			if f.Retired {
				m.Key.Retired = append(m.Key.Retired, f.Fingerprint)
			}
		}
	}
	type blob struct {
		path string
		f    *os.File
	}
	var blobs []blob
	defer func() {
		for _, b := range blobs {
			b.f.Close()
		}
	}()
	var tw *TarWriter
	// The store's snapshot is copied once, hashed as it is copied, into a
	// file beside the store, and the archive is written from that copy.
	// Reading the live file twice (once to hash, once to send) gave
	// different bytes whenever a concurrent write reused a free page inside
	// the file: the snapshot's records were the same, its free pages not,
	// and the backup failed with "changed while it was read".
	snap, err := os.CreateTemp(src.DataDir, SnapshotPrefix+"*")
	if err != nil {
		return fmt.Errorf("backup: a file for the store's snapshot: %w", err)
	}
	defer func() {
		snap.Close()
		os.Remove(snap.Name())
	}()
	err = src.Store.Snapshot(func(tx core.Tx, size int64, writeTo func(io.Writer) (int64, error)) error {
		records, what, err := src.Census(tx)
		if err != nil {
			return err
		}
		m.Store.SealedRecords, m.Store.Sealed = records, what
		h := sha256.New()
		if _, err := writeTo(io.MultiWriter(snap, h)); err != nil {
			return fmt.Errorf("backup: copying the store's snapshot to %s: %w", snap.Name(), err)
		}
		m.Members = append(m.Members, Member{Path: StorePath, Size: size, SHA256: hex.EncodeToString(h.Sum(nil))})
		err = tx.Images().List("", func(im core.Image) (bool, error) {
			e := Image{Name: im.Name, Kind: im.Kind, Platform: im.Platform, Version: im.Version, SHA256: im.SHA256, Size: im.Size}
			if withImages {
				if f, err := src.Images.Open(im); err == nil {
					e.Blob = true
					blobs = append(blobs, blob{ImagePath(im.SHA256), f})
					m.Members = append(m.Members, Member{Path: ImagePath(im.SHA256), Size: im.Size, SHA256: im.SHA256})
				} else {
					log.Warn("backup: image content missing; the image is listed without it", "image", im.Name, "sha256", im.SHA256, "err", err)
				}
			}
			m.Images = append(m.Images, e)
			return true, nil
		})
		if err != nil && !isCorrupt(err) {
			return err
		}
		if withImages {
			m.Includes = append(m.Includes, IncludesImages)
		}
		if withKey {
			m.Members = append(m.Members, keyMember(KeyPath, keys[0]))
			for i, fp := range m.Key.Retired {
				m.Members = append(m.Members, keyMember(RetiredKeyPath(fp), keys[i+1]))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if start != nil {
		start()
	}
	if tw, err = NewTarWriter(w, m); err != nil {
		return err
	}
	if _, err := snap.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := tw.Add(StorePath, snap); err != nil {
		return err
	}
	// Blobs and keys after the transaction: a long read transaction would
	// hold the store's free pages (and its growth) for as long as they take.
	for _, b := range blobs {
		if err := tw.Add(b.path, b.f); err != nil {
			return fmt.Errorf("%w (is its content corrupt on disk? remove the image and add it again)", err)
		}
	}
	if withKey {
		if err := tw.Add(KeyPath, bytes.NewReader(keys[0])); err != nil {
			return err
		}
		for i, fp := range m.Key.Retired {
			if err := tw.Add(RetiredKeyPath(fp), bytes.NewReader(keys[i+1])); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

func keyMember(path string, key []byte) Member {
	sum := sha256.Sum256(key)
	return Member{Path: path, Size: int64(len(key)), SHA256: hex.EncodeToString(sum[:])}
}

// isCorrupt: a record that cannot be decoded; the listing goes on without it.
func isCorrupt(err error) bool {
	var ce *core.CorruptError
	return errors.As(err, &ce)
}
