package app

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/ztpd/ztpd/internal/backup"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// BackupErrorTrailer carries an error that happened after a backup stream
// had started (the status was sent already); the CLI reports it.
const BackupErrorTrailer = "X-Ztpd-Backup-Error"

// adminBackup streams a backup payload (backup.TarWriter, unencrypted: the
// admin socket is the server's own user's; the CLI encrypts it): the
// manifest and the store from one read transaction, then the image blobs
// (?images=1) and the at-rest key files (?key=1).
func (a *App) adminBackup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	withImages, withKey := q.Get("images") == "1", q.Get("key") == "1"
	cw := &countWriter{w: w}
	err := a.WriteBackup(cw, withImages, withKey, func() {
		w.Header().Set("Content-Type", "application/x-tar")
		w.Header().Set("Trailer", BackupErrorTrailer)
	})
	if err == nil {
		return
	}
	a.Log.Error("backup failed", "err", err)
	if cw.n == 0 {
		httpserve.WriteError(w, r, a.Log, err)
		return
	}
	w.Header().Set(BackupErrorTrailer, err.Error())
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// backupSnapshotPrefix names the store snapshot a backup copies before it
// writes the archive; one left by a killed backup is removed at start.
const backupSnapshotPrefix = ".backup-store-"

// WriteBackup writes a backup payload to w; start runs just before the
// first byte. Everything reported before it was called is in. What the manifest says and the store file agree exactly
// (one read transaction); blobs are opened inside it, so an image removed
// meanwhile still goes out whole.
func (a *App) WriteBackup(w io.Writer, withImages, withKey bool, start func()) error {
	// Device changes reported so far (the write-behind queue) go in too.
	a.Devices.Flush()
	host, _ := os.Hostname()
	dataDir, _ := filepath.Abs(a.Cfg.DataDir)
	m := &backup.Manifest{Format: backup.Format, FormatVersion: backup.FormatVersion, ZtpdVersion: backup.ZtpdVersion,
		Created: time.Now().UTC(), Host: host, DataDir: dataDir, Includes: []string{backup.IncludesStore},
		Key: backup.KeyInfo{Fingerprint: a.Keys.Fingerprint(), Included: withKey}, Images: []backup.Image{}}
	if schema, err := a.Store.Schema(); err == nil {
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
		files, err := a.Keys.Export()
		if err != nil {
			return err
		}
		m.Includes = append(m.Includes, backup.IncludesKey)
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
	var tw *backup.TarWriter
	// The store's snapshot is copied once, hashed as it is copied, into a
	// file beside the store, and the archive is written from that copy.
	// Reading the live file twice (once to hash, once to send) gave
	// different bytes whenever a concurrent write reused a free page inside
	// the file: the snapshot's records were the same, its free pages not,
	// and the backup failed with "changed while it was read".
	snap, err := os.CreateTemp(a.Cfg.DataDir, backupSnapshotPrefix+"*")
	if err != nil {
		return fmt.Errorf("backup: a file for the store's snapshot: %w", err)
	}
	defer func() {
		snap.Close()
		os.Remove(snap.Name())
	}()
	err = a.Store.Snapshot(func(tx core.Tx, size int64, writeTo func(io.Writer) (int64, error)) error {
		census, err := CensusOf(tx)
		if err != nil {
			return err
		}
		m.Store.SealedRecords, m.Store.Sealed = census.Total(), census.String()
		h := sha256.New()
		if _, err := writeTo(io.MultiWriter(snap, h)); err != nil {
			return fmt.Errorf("backup: copying the store's snapshot to %s: %w", snap.Name(), err)
		}
		m.Members = append(m.Members, backup.Member{Path: backup.StorePath, Size: size, SHA256: hex.EncodeToString(h.Sum(nil))})
		err = tx.Images().List("", func(im core.Image) (bool, error) {
			e := backup.Image{Name: im.Name, Kind: im.Kind, Platform: im.Platform, Version: im.Version, SHA256: im.SHA256, Size: im.Size}
			if withImages {
				if f, err := a.Images.Open(im); err == nil {
					e.Blob = true
					blobs = append(blobs, blob{backup.ImagePath(im.SHA256), f})
					m.Members = append(m.Members, backup.Member{Path: backup.ImagePath(im.SHA256), Size: im.Size, SHA256: im.SHA256})
				} else {
					a.Log.Warn("backup: image content missing; the image is listed without it", "image", im.Name, "sha256", im.SHA256, "err", err)
				}
			}
			m.Images = append(m.Images, e)
			return true, nil
		})
		if err != nil && !isCorrupt(err) {
			return err
		}
		if withImages {
			m.Includes = append(m.Includes, backup.IncludesImages)
		}
		if withKey {
			m.Members = append(m.Members, keyMember(backup.KeyPath, keys[0]))
			for i, fp := range m.Key.Retired {
				m.Members = append(m.Members, keyMember(backup.RetiredKeyPath(fp), keys[i+1]))
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
	if tw, err = backup.NewTarWriter(w, m); err != nil {
		return err
	}
	if _, err := snap.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := tw.Add(backup.StorePath, snap); err != nil {
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
		if err := tw.Add(backup.KeyPath, bytes.NewReader(keys[0])); err != nil {
			return err
		}
		for i, fp := range m.Key.Retired {
			if err := tw.Add(backup.RetiredKeyPath(fp), bytes.NewReader(keys[i+1])); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

func keyMember(path string, key []byte) backup.Member {
	sum := sha256.Sum256(key)
	return backup.Member{Path: path, Size: int64(len(key)), SHA256: hex.EncodeToString(sum[:])}
}
