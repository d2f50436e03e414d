package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// AdminDeps are what the local admin routes need.
type AdminDeps struct {
	Keys     *apikeys.Service
	Clusters *clusters.Service
	ISOs     rest.ISOStore
	// ISOBaseURL is where devices and CloudStack fetch ISOs, e.g.
	// http://10.99.0.1:8080/isos/ (endpoints.Endpoints.ISOs).
	ISOBaseURL string
}

// MountAdmin registers local admin operations on the admin socket's mux.
// The socket's file mode is their access control, so they act as admin.
// Answers are api/client's views, never domain values (a field added to
// a domain type does not reach the CLI unless a view gets it), and they
// and errors go through httpserve's one writer (status from the core
// error kind). log records internal errors (answered with a request id
// only).
func MountAdmin(mux *http.ServeMux, d AdminDeps, log *slog.Logger) {
	answer := func(w http.ResponseWriter, r *http.Request, code int, v any, err error) {
		if err != nil {
			httpserve.WriteError(w, r, log, err)
			return
		}
		httpserve.WriteJSON(w, code, v)
	}
	mux.HandleFunc("POST /admin/apikeys", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		res, err := rest.CreateKey(d.Keys, q.Get("name"), q.Get("account"), q.Get("role"))
		answer(w, r, http.StatusCreated, res, err)
	})
	mux.HandleFunc("GET /admin/apikeys", func(w http.ResponseWriter, r *http.Request) {
		list, err := d.Keys.List()
		answer(w, r, http.StatusOK, rest.APIKeysOf(list), err)
	})
	mux.HandleFunc("DELETE /admin/apikeys/{key}", func(w http.ResponseWriter, r *http.Request) {
		info, err := d.Keys.Revoke(r.PathValue("key"))
		answer(w, r, http.StatusOK, rest.APIKeyOf(info), err)
	})
	mux.HandleFunc("POST /admin/versions", func(w http.ResponseWriter, r *http.Request) {
		res, err := addVersionFromISO(r.Context(), d, r)
		answer(w, r, http.StatusCreated, res, err)
	})
	mux.HandleFunc("POST /admin/images", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		meta := imagestore.Meta{Name: q.Get("name"), Kind: q.Get("kind"), Platform: q.Get("platform"), Version: q.Get("version")}
		im, existed, err := d.ISOs.Add(r.Context(), r.Body, meta, q.Get("sha256"))
		code := http.StatusCreated
		if existed {
			code = http.StatusOK
		}
		answer(w, r, code, client.ImageAdded{Image: rest.ImageOf(im), Existed: existed}, err)
	})
	mux.HandleFunc("GET /admin/images", func(w http.ResponseWriter, r *http.Request) {
		list, err := d.ISOs.List(r.URL.Query().Get("kind"))
		var out []client.Image // null for none, as it always answered
		for _, im := range list {
			out = append(out, rest.ImageOf(im))
		}
		answer(w, r, http.StatusOK, out, err)
	})
	mux.HandleFunc("DELETE /admin/images/{ref}", func(w http.ResponseWriter, r *http.Request) {
		im, err := d.ISOs.Remove(r.PathValue("ref"))
		answer(w, r, http.StatusOK, rest.ImageOf(im), err)
	})
	// An image by reference, resolved as serving resolves a profile's
	// sonic.image (the image list names each image once; an image added
	// again under another name answers to both). `ztpd profile check`
	// uses it to say which image a switch gets.
	mux.HandleFunc("GET /admin/images/{ref}", func(w http.ResponseWriter, r *http.Request) {
		im, err := d.ISOs.Resolve(r.PathValue("ref"))
		answer(w, r, http.StatusOK, rest.ImageOf(im), err)
	})
}

// addVersionFromISO stores the uploaded ISO as <name>.iso (kind
// binaries-iso) and registers the Kubernetes version that points at it.
func addVersionFromISO(ctx context.Context, d AdminDeps, r *http.Request) (client.VersionAdded, error) {
	q := r.URL.Query()
	sv, err := clusters.ParseSemVer(q.Get("semver"))
	if err != nil {
		return client.VersionAdded{}, core.Errorf(core.KindInvalid, "%s", err)
	}
	min, _ := clusters.ParseSemVer(clusters.MinVersion)
	if sv.Compare(min) < 0 {
		return client.VersionAdded{}, core.Errorf(core.KindInvalid, "Kubernetes %s is older than the minimum %s", sv, clusters.MinVersion)
	}
	name := q.Get("name")
	if name == "" {
		name = "v" + sv.String()
	}
	var minCPU, minMem int
	if v := q.Get("min_cpu"); v != "" {
		if minCPU, err = strconv.Atoi(v); err != nil {
			return client.VersionAdded{}, core.Errorf(core.KindInvalid, "min_cpu is not a number")
		}
	}
	if v := q.Get("min_memory_mb"); v != "" {
		if minMem, err = strconv.Atoi(v); err != nil {
			return client.VersionAdded{}, core.Errorf(core.KindInvalid, "min_memory_mb is not a number")
		}
	}
	isoName := name + ".iso"
	im, existed, err := d.ISOs.Add(ctx, r.Body, imagestore.Meta{Name: isoName, Kind: imagestore.KindBinariesISO, Version: sv.String()}, q.Get("sha256"))
	if err != nil {
		return client.VersionAdded{}, core.WrapError(core.KindInvalid, err.Error(), err)
	}
	spec := rest.ISOVersionSpec(clusters.VersionSpec{Name: name, SemVer: sv.String(), MinCPU: minCPU, MinMemoryMB: minMem},
		d.ISOBaseURL, isoName, im)
	res := client.VersionAdded{Image: rest.ImageOf(im), URL: spec.URL, Checksum: spec.Checksum}
	v, err := d.Clusters.AddVersion(ctx, clusters.LocalAdmin, spec)
	if err != nil {
		if !existed {
			_, _ = d.ISOs.Remove(im.SHA256) // do not keep an ISO no version uses
		}
		return client.VersionAdded{}, err
	}
	res.Version = rest.VersionOf(v)
	return res, nil
}

// Bootstrap creates the first admin API key when the store has none. The
// key and its secret go once to out (standard output: unlike the log, it is
// not kept) or, with keyFile set, into that file instead: created
// exclusively with mode 0600 (an existing file is never overwritten), in
// the format of the CLI's cli.yaml, while out only says where it went. The
// file is created before the key, so a refused file loses no key. Only
// the API key, never the secret, is logged.
func Bootstrap(keys *apikeys.Service, out io.Writer, keyFile string, log *slog.Logger) error {
	n, err := keys.Count()
	if err != nil || n > 0 {
		if err == nil && keyFile != "" {
			log.Info("admin key file not written: API keys exist already", "file", keyFile)
		}
		return err
	}
	var f *os.File
	if keyFile != "" {
		f, err = os.OpenFile(keyFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("admin key file %s exists already; ztpd never overwrites it: move it away (or delete it if it holds a key of an older data directory) and start again", keyFile)
		}
		if err != nil {
			return fmt.Errorf("admin key file: %w", err)
		}
	}
	info, secret, created, err := keys.Bootstrap()
	if err != nil || !created {
		if f != nil {
			f.Close()
			os.Remove(keyFile)
		}
		return err
	}
	if f != nil {
		_, werr := fmt.Fprintf(f, `# ztpd: the first admin API key, created %s.
# The secret is shown nowhere else. Use this file as ~/.config/ztpd/cli.yaml
# (with api_url added if needed), or: export ZTPD_API_KEY=... ZTPD_SECRET_KEY=...
api_key: %s
secret_key: %s
`, info.Created.Format(time.RFC3339), info.APIKey, secret)
		serr := f.Sync()
		cerr := f.Close()
		if err := errors.Join(werr, serr, cerr); err != nil {
			// The key exists but its secret could not be saved: revoke
			// nothing (it is the only admin key); say how to get another.
			return fmt.Errorf("admin key file %s: %w (the key %s was created; create another with: ztpd apikey create --role admin)", keyFile, err, info.APIKey)
		}
		fmt.Fprintf(out, "\nztpd: created the first admin API key %s; its secret is in %s (mode 0600).\n\n", info.APIKey, keyFile)
		log.Info("bootstrap admin API key created", "api_key", info.APIKey, "file", keyFile)
		return nil
	}
	fmt.Fprintf(out, `
ztpd: created the first admin API key. The secret is shown only this once; store it now.
  api key:    %s
  secret key: %s
  for the CLI: export ZTPD_API_KEY=%s ZTPD_SECRET_KEY=<secret key>
  lost it? run "ztpd apikey create --role admin" on this host.

`, info.APIKey, secret, info.APIKey)
	log.Info("bootstrap admin API key created", "api_key", info.APIKey)
	return nil
}
