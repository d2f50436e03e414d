package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/backup"
)

func init() {
	backup.ZtpdVersion = version
	register(newBackupCmd)
}

// backupPassphraseEnv names the environment variable a passphrase may come
// from (never a flag's value: it would show in ps and shell history).
const backupPassphraseEnv = "ZTPD_BACKUP_PASSPHRASE"

// minBackupPassphrase is the shortest passphrase a new backup accepts.
const minBackupPassphrase = 8

type backupResult struct {
	File        string   `json:"file"`
	Bytes       int64    `json:"bytes"`
	StoreBytes  int64    `json:"store_bytes"`
	Images      int      `json:"images"`
	ImageBlobs  int      `json:"image_blobs"`
	BlobsBytes  int64    `json:"image_blob_bytes"`
	KeyIncluded bool     `json:"key_included"`
	Fingerprint string   `json:"key_fingerprint"`
	Missing     []string `json:"images_without_content,omitempty"`
}

func newBackupCmd(opts *rootOptions) *cobra.Command {
	var withImages, withKey bool
	var passFile string
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Write an encrypted backup archive of the store (and optionally image blobs and the at-rest key) to FILE",
		Long: `Write one backup archive to FILE: a manifest, a consistent copy of the store
(one read transaction, so it is consistent even under load), the list of
images with their sizes and sha256, and with --with-images the image blobs
themselves; with --with-key also the at-rest key (secret.key) that sealed the
store's secrets. The archive is encrypted with a passphrase (scrypt and
AES-256-GCM), read from --passphrase-file, or the environment variable
ZTPD_BACKUP_PASSPHRASE, or asked twice on the terminal; never from a flag.

Without --with-key the archive names the key by its fingerprint only, and a
restore needs that key already in place (keep secret.key somewhere else,
safe). With --with-key, the passphrase alone opens everything: choose it
accordingly.

Works while "ztpd serve" is running (through the admin socket in the data
directory) and when it is not. FILE is written atomically: it is either the
complete, checked archive or untouched. Restore with "ztpd restore FILE".`,
		Example: `  ztpd backup /var/backups/ztpd-$(date +%F).ztpdbak --passphrase-file /root/backup.pass
  ZTPD_BACKUP_PASSPHRASE=... ztpd backup --with-key --with-images /mnt/usb/ztpd.ztpdbak
  ztpd --data-dir /srv/ztpd backup -o json /tmp/ztpd.ztpdbak`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			cfg, err := loadConfig(opts)
			if err != nil {
				return err
			}
			out, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			if st, err := os.Stat(filepath.Dir(out)); err != nil || !st.IsDir() {
				return fmt.Errorf("backup: directory %s does not exist", filepath.Dir(out))
			}
			pass, err := backupPassphrase(passFile, true)
			if err != nil {
				return err
			}
			defer clear(pass)
			client, closeFn, err := app.AdminClient(cfg, newLogger(cfg))
			if err != nil {
				return err
			}
			defer closeFn()
			q := url.Values{}
			if withImages {
				q.Set("images", "1")
			}
			if withKey {
				q.Set("key", "1")
			}
			resp, err := client.Get("http://ztpd/admin/backup?" + q.Encode())
			if err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				body, _ := io.ReadAll(resp.Body)
				return fmt.Errorf("backup: %w", app.AdminError(resp, body))
			}
			tty := term.IsTerminal(int(os.Stderr.Fd())) && opts.output != "json"
			res, err := backupWrite(out, resp, pass, tty)
			if err != nil {
				return err
			}
			for _, name := range res.Missing {
				fmt.Fprintf(os.Stderr, "warning: image %s has no content on the server; it is listed in the archive without it\n", name)
			}
			return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) {
				row(tw, "backup written", res.File)
				row(tw, "size", humanBytes(res.Bytes))
				row(tw, "store", humanBytes(res.StoreBytes))
				blobs := "not included (--with-images)"
				if withImages {
					blobs = fmt.Sprintf("%d of %d included (%s)", res.ImageBlobs, res.Images, humanBytes(res.BlobsBytes))
				}
				row(tw, "images", fmt.Sprintf("%d listed; blobs %s", res.Images, blobs))
				key := "not included: a restore needs this key in place (--with-key to include it)"
				if res.KeyIncluded {
					key = "included"
				}
				row(tw, "at-rest key", key)
				row(tw, "key fingerprint", res.Fingerprint)
			})
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&withImages, "with-images", false, "include the image blobs (installers, ISOs, files), not only their list")
	fl.BoolVar(&withKey, "with-key", false, "include the at-rest key (secret.key); the passphrase then opens the store's secrets")
	fl.StringVar(&passFile, "passphrase-file", "", "read the passphrase from this file (first line); default $"+backupPassphraseEnv+", else asked on the terminal")
	return cmd
}

// backupWrite encrypts the server's payload into FILE atomically, reading
// it as it goes: every member is checked against the manifest before the
// file is put in place.
func backupWrite(out string, resp *http.Response, pass []byte, tty bool) (backupResult, error) {
	res := backupResult{File: out}
	pr, pw := io.Pipe()
	type verdict struct {
		res backupResult
		err error
	}
	done := make(chan verdict, 1)
	go func() {
		r, err := backupEncrypt(pw, resp, pass, tty)
		pw.CloseWithError(err)
		done <- verdict{r, err}
	}()
	n, err := app.CopyAtomic(out, pr, 0o600)
	pr.CloseWithError(errors.New("backup: write abandoned"))
	v := <-done
	if v.err != nil {
		return res, v.err
	}
	if err != nil {
		return res, fmt.Errorf("backup to %s: %w", out, err)
	}
	v.res.File, v.res.Bytes = out, n
	return v.res, nil
}

func backupEncrypt(w io.Writer, resp *http.Response, pass []byte, tty bool) (backupResult, error) {
	var res backupResult
	enc, err := backup.Encrypt(w, pass, backup.DefaultKDF)
	if err != nil {
		return res, err
	}
	// The payload goes to the archive byte for byte while it is read.
	ar, err := backup.NewReader(io.TeeReader(resp.Body, enc))
	if err != nil {
		return res, backupServerError(resp, err)
	}
	m := ar.Manifest
	res.Images, res.KeyIncluded, res.Fingerprint = len(m.Images), m.Key.Included, m.Key.Fingerprint
	for _, im := range m.Images {
		if im.Blob {
			res.ImageBlobs++
			res.BlobsBytes += im.Size
		} else if m.Has(backup.IncludesImages) {
			res.Missing = append(res.Missing, im.Name)
		}
	}
	var bar *progressbar.ProgressBar
	if tty && m.Size() > 64<<20 {
		bar = progressbar.NewOptions64(m.Size(), progressbar.OptionSetDescription("backup"), progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionShowBytes(true), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish())
	}
	for {
		mb, r, err := ar.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, backupServerError(resp, err)
		}
		if mb.Path == backup.StorePath {
			res.StoreBytes = mb.Size
		}
		if bar != nil {
			bar.Describe("backup " + backupMemberName(m, mb.Path))
			r = io.TeeReader(r, bar)
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			return res, backupServerError(resp, err)
		}
	}
	// The tar's end blocks, then the server's trailer.
	if _, err := io.Copy(io.Discard, io.TeeReader(resp.Body, enc)); err != nil {
		return res, backupServerError(resp, err)
	}
	if msg := resp.Trailer.Get(app.BackupErrorTrailer); msg != "" {
		return res, fmt.Errorf("backup: the server failed: %s", msg)
	}
	if bar != nil {
		bar.Finish()
	}
	return res, enc.Close()
}

// backupServerError prefers the server's own error (sent in a trailer once
// the stream had started) over what reading the cut stream said.
func backupServerError(resp *http.Response, err error) error {
	io.Copy(io.Discard, resp.Body)
	if msg := resp.Trailer.Get(app.BackupErrorTrailer); msg != "" {
		return fmt.Errorf("backup: the server failed: %s", msg)
	}
	return fmt.Errorf("backup: %w", err)
}

func backupMemberName(m backup.Manifest, path string) string {
	for _, im := range m.Images {
		if backup.ImagePath(im.SHA256) == path {
			return "image " + im.Name
		}
	}
	return path
}

// backupPassphrase reads the passphrase: from file, else the environment,
// else the terminal (twice when confirm, for a new archive).
func backupPassphrase(file string, confirm bool) ([]byte, error) {
	var pass []byte
	switch {
	case file != "":
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("passphrase file: %w", err)
		}
		line, _, _ := bytes.Cut(raw, []byte("\n"))
		pass = bytes.TrimSuffix(line, []byte("\r"))
		if len(pass) == 0 {
			return nil, fmt.Errorf("passphrase file %s: the first line is empty", file)
		}
	case os.Getenv(backupPassphraseEnv) != "":
		pass = []byte(os.Getenv(backupPassphraseEnv))
	case term.IsTerminal(int(os.Stdin.Fd())):
		ask := func(prompt string) ([]byte, error) {
			fmt.Fprint(os.Stderr, prompt)
			p, err := term.ReadPassword(int(os.Stdin.Fd()))
			fmt.Fprintln(os.Stderr)
			return p, err
		}
		p, err := ask("Backup passphrase: ")
		if err != nil {
			return nil, err
		}
		if confirm {
			again, err := ask("Same passphrase again: ")
			if err != nil {
				return nil, err
			}
			if !bytes.Equal(p, again) {
				return nil, errors.New("the two passphrases differ; nothing written")
			}
		}
		pass = p
	default:
		return nil, fmt.Errorf("no passphrase: give --passphrase-file FILE, or set %s, or run on a terminal to be asked", backupPassphraseEnv)
	}
	if confirm && len(pass) < minBackupPassphrase {
		return nil, fmt.Errorf("the passphrase has %d characters; a backup needs at least %d", len([]rune(string(pass))), minBackupPassphrase)
	}
	if len(strings.TrimSpace(string(pass))) == 0 {
		return nil, errors.New("the passphrase is blank")
	}
	return pass, nil
}
