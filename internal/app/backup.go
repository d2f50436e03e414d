package app

import (
	"io"
	"net/http"

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

// WriteBackup writes this appliance's backup payload to w (backup.Write).
func (a *App) WriteBackup(w io.Writer, withImages, withKey bool, start func()) error {
	return backup.Write(w, backup.Source{Store: a.Store, Keys: a.Keys, Images: a.Images, DataDir: a.Cfg.DataDir,
		Census: sealedCensus, Flush: a.Devices.Flush, Log: a.Log}, withImages, withKey, start)
}

// sealedCensus is CensusOf as the backup's manifest records it.
func sealedCensus(tx core.Tx) (int, string, error) {
	c, err := CensusOf(tx)
	return c.Total(), c.String(), err
}
