package isobuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/images/bom"
)

// SourceOptions say where artifact bytes come from.
type SourceOptions struct {
	// FromDir is a tree laid out like the ISO (k8s/kubeadm, docker/...). It is
	// the air-gapped, normal case. Files found there are used as they are; a
	// pinned sha256 is checked when the image is verified.
	FromDir string
	// CacheDir enables downloads: artifacts with a URL that are not in FromDir
	// are fetched into it, verified, and reused by later builds.
	CacheDir string
	// AllowUnpinned downloads artifacts that have neither a pinned sha256 nor a
	// published checksum file; their hash is reported, not checked.
	AllowUnpinned bool
	// Parallel bounds concurrent downloads (default 4).
	Parallel int
	// Client is the HTTP client for downloads (default: timeouts, proxy from env).
	Client *http.Client
	// IdleTimeout aborts a download that receives nothing for this long (default 60 s).
	IdleTimeout time.Duration
	// Progress is called with each chunk of downloaded bytes (from several goroutines).
	Progress func(n int64)
	Logger   *slog.Logger
}

// Skipped is an optional artifact left off the image.
type Skipped struct {
	Name, Path, Reason string
}

// ResolveSources finds every item's bytes and returns the files for Build. All
// missing artifacts are reported together; downloads run in parallel.
func ResolveSources(ctx context.Context, items []bom.Item, so SourceOptions) ([]File, []Skipped, error) {
	if so.FromDir == "" && so.CacheDir == "" {
		return nil, nil, errors.New("no source: give --from-dir DIR (air-gapped tree laid out like the ISO) or --cache DIR (download into a cache)")
	}
	if so.FromDir != "" {
		st, err := os.Stat(so.FromDir)
		if err != nil {
			return nil, nil, fmt.Errorf("--from-dir: %w", err)
		}
		if !st.IsDir() {
			return nil, nil, fmt.Errorf("--from-dir %s is not a directory", so.FromDir)
		}
	}
	log := so.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	files := make([]File, len(items))
	keep := make([]bool, len(items))
	var skipped []Skipped
	var problems []error
	var downloads []int
	for i, it := range items {
		f := File{Path: it.Path, Mode: it.Mode, SHA256: it.SHA256, Name: it.Name}
		if it.Kind == bom.KindContent {
			f.Content = it.Content
			files[i], keep[i] = f, true
			continue
		}
		if so.FromDir != "" {
			local := filepath.Join(so.FromDir, filepath.FromSlash(it.Path))
			st, err := os.Stat(local)
			switch {
			case err == nil && st.Mode().IsRegular():
				f.Source = local
				files[i], keep[i] = f, true
				continue
			case err == nil:
				problems = append(problems, fmt.Errorf("artifact %s: %s is not a regular file", it.Name, local))
				continue
			case !errors.Is(err, fs.ErrNotExist):
				problems = append(problems, fmt.Errorf("artifact %s: %w", it.Name, err))
				continue
			}
		}
		if it.Kind == bom.KindURL && so.CacheDir != "" {
			files[i] = f
			downloads = append(downloads, i)
			continue
		}
		if it.Optional {
			skipped = append(skipped, Skipped{Name: it.Name, Path: it.Path, Reason: "optional, not in --from-dir"})
			continue
		}
		problems = append(problems, missingError(it, so))
	}
	if len(problems) > 0 {
		return nil, nil, errors.Join(problems...)
	}
	if len(downloads) > 0 {
		d := newDownloader(so, log)
		// First learn every expected hash (pins, published checksum files), so an
		// unverifiable artifact stops the build before anything big is fetched.
		wants := make([]string, len(items))
		errs := make([]error, len(items))
		d.each(ctx, downloads, func(i int) error {
			var err error
			wants[i], err = d.expected(ctx, items[i])
			return err
		}, errs)
		if err := errors.Join(errs...); err != nil {
			return nil, nil, err
		}
		d.each(ctx, downloads, func(i int) error {
			p, err := d.fetch(ctx, items[i], wants[i])
			if err != nil {
				return err
			}
			files[i].Source = p
			files[i].SHA256 = wants[i] // "" for --allow-unpinned: compared with the download
			keep[i] = true
			return nil
		}, errs)
		if err := errors.Join(errs...); err != nil {
			return nil, nil, err
		}
	}
	out := make([]File, 0, len(items))
	for i := range items {
		if keep[i] {
			out = append(out, files[i])
		}
	}
	return out, skipped, nil
}

func missingError(it bom.Item, so SourceOptions) error {
	where := "no --from-dir given"
	if so.FromDir != "" {
		where = "not found in " + so.FromDir
	}
	switch it.Kind {
	case bom.KindImage:
		return fmt.Errorf("artifact %s: image archive %s is missing (%s); export it on a connected host with `ctr -n k8s.io image pull %s && ctr -n k8s.io image export %s %s`",
			it.Name, it.Path, where, it.Image, it.Path, it.Image)
	case bom.KindURL:
		return fmt.Errorf("artifact %s: %s is missing (%s); pass --cache DIR to download it from %s", it.Name, it.Path, where, it.URL)
	default:
		return fmt.Errorf("artifact %s: %s is missing (%s)", it.Name, it.Path, where)
	}
}

type downloader struct {
	SourceOptions
	client   *http.Client
	parallel int
	log      *slog.Logger
}

func newDownloader(so SourceOptions, log *slog.Logger) *downloader {
	d := &downloader{SourceOptions: so, client: so.Client, parallel: so.Parallel, log: log}
	if d.parallel <= 0 {
		d.parallel = 4
	}
	if d.IdleTimeout <= 0 {
		d.IdleTimeout = 60 * time.Second
	}
	if d.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		tr.TLSHandshakeTimeout = 20 * time.Second
		tr.ResponseHeaderTimeout = 60 * time.Second
		d.client = &http.Client{Transport: tr}
	}
	return d
}

// cachePath is where a URL's download lives: one directory per URL, so two
// versions with the same file name never collide.
func (d *downloader) cachePath(u string) string {
	sum := sha256.Sum256([]byte(u))
	name := "artifact"
	if pu, err := url.Parse(u); err == nil {
		if b := path.Base(pu.Path); b != "." && b != "/" && b != "" && !strings.HasPrefix(b, ".") {
			name = b
		}
	}
	return filepath.Join(d.CacheDir, hex.EncodeToString(sum[:8]), name)
}

// each runs fn for the given item indexes, d.parallel at a time, storing
// errors by index.
func (d *downloader) each(ctx context.Context, idx []int, fn func(i int) error, errs []error) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, d.parallel)
	for _, i := range idx {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			errs[i] = fn(i)
		}(i)
	}
	wg.Wait()
}

// expected is the sha256 a download must have: the pin, else the upstream
// published checksum; "" only with AllowUnpinned.
func (d *downloader) expected(ctx context.Context, it bom.Item) (string, error) {
	if it.SHA256 != "" {
		return it.SHA256, nil
	}
	if it.SHA256URL != "" {
		return d.publishedChecksum(ctx, it)
	}
	if !d.AllowUnpinned {
		return "", fmt.Errorf("artifact %s: no pinned sha256 and no published checksum (sha256URL) to verify a download of %s; pin it in the BOM or pass --allow-unpinned", it.Name, it.URL)
	}
	return "", nil
}

// fetch returns a local copy of the item verified against want (any content
// when want is "").
func (d *downloader) fetch(ctx context.Context, it bom.Item, want string) (string, error) {
	final := d.cachePath(it.URL)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	if _, err := os.Stat(final); err == nil {
		got, err := hashFile(final)
		if err != nil {
			return "", err
		}
		if want == "" || got == want {
			d.log.Info("using cached artifact", "artifact", it.Name, "file", final)
			return final, nil
		}
		d.log.Warn("cached artifact has the wrong sha256; downloading again", "artifact", it.Name, "file", final, "want", want, "got", got)
		if err := os.Remove(final); err != nil {
			return "", err
		}
	}
	part := final + ".part"
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		if attempt > 0 {
			d.log.Warn("download interrupted; resuming", "artifact", it.Name, "attempt", attempt+1, "err", lastErr)
			select {
			case <-time.After(time.Duration(attempt) * time.Second):
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		lastErr = d.download(ctx, it, part)
		if lastErr == nil || ctx.Err() != nil || errors.Is(lastErr, errPermanent) {
			break
		}
	}
	if lastErr != nil {
		return "", lastErr
	}
	got, err := hashFile(part)
	if err != nil {
		return "", err
	}
	if want != "" && got != want {
		os.Remove(part) // never keep bytes that failed verification
		return "", &ChecksumError{Name: it.Name, Path: it.Path, Want: want, Got: got, Source: it.URL}
	}
	if err := syncFile(part); err != nil {
		return "", err
	}
	if err := os.Rename(part, final); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	d.log.Info("downloaded", "artifact", it.Name, "url", it.URL, "sha256", got)
	return final, nil
}

var (
	errPermanent = errors.New("permanent")
	errIdle      = errors.New("download stalled")
)

// download fetches the URL into part, resuming from part's current size with
// an HTTP Range request when the server supports it.
func (d *downloader) download(ctx context.Context, it bom.Item, part string) error {
	f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	defer f.Close()
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, it.URL, nil)
	if err != nil {
		return fmt.Errorf("artifact %s: %w: %w", it.Name, err, errPermanent)
	}
	req.Header.Set("User-Agent", "ztpd-iso-build")
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return fmt.Errorf("artifact %s: GET %s: %w", it.Name, it.URL, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		start, ok := contentRangeStart(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			return d.restart(f, it, fmt.Sprintf("server resumed at %q, not byte %d", resp.Header.Get("Content-Range"), have))
		}
	case resp.StatusCode == http.StatusOK:
		if have > 0 { // the server ignored Range: start over
			if err := f.Truncate(0); err != nil {
				return err
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			have = 0
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && have > 0:
		return nil // part already complete; the hash check decides
	default:
		err := fmt.Errorf("artifact %s: GET %s: %s", it.Name, it.URL, resp.Status)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			err = fmt.Errorf("%w: %w", err, errPermanent)
		}
		return err
	}
	if resp.ContentLength > 0 && have+resp.ContentLength > MaxFileSize {
		return fmt.Errorf("artifact %s: %s is %d bytes, too large for an ISO 9660 file: %w", it.Name, it.URL, have+resp.ContentLength, errPermanent)
	}
	// Abort when nothing arrives for IdleTimeout.
	idle := time.AfterFunc(d.IdleTimeout, func() { cancel(errIdle) })
	defer idle.Stop()
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			idle.Reset(d.IdleTimeout)
			if _, err := f.Write(buf[:n]); err != nil {
				return fmt.Errorf("cache: %w: %w", err, errPermanent)
			}
			have += int64(n)
			if have > MaxFileSize {
				return fmt.Errorf("artifact %s: %s is larger than 4 GiB, too large for an ISO 9660 file: %w", it.Name, it.URL, errPermanent)
			}
			if d.Progress != nil {
				d.Progress(int64(n))
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			if err := parent.Err(); err != nil {
				return err
			}
			if errors.Is(context.Cause(ctx), errIdle) {
				return fmt.Errorf("artifact %s: %s: nothing received for %v", it.Name, it.URL, d.IdleTimeout)
			}
			return fmt.Errorf("artifact %s: reading %s: %w", it.Name, it.URL, rerr)
		}
	}
}

func (d *downloader) restart(f *os.File, it bom.Item, why string) error {
	d.log.Warn("cannot resume download; starting over", "artifact", it.Name, "reason", why)
	if err := f.Truncate(0); err != nil {
		return err
	}
	return fmt.Errorf("artifact %s: %s", it.Name, why)
}

// contentRangeStart parses "bytes START-END/TOTAL".
func contentRangeStart(h string) (int64, bool) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, false
	}
	s, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// publishedChecksum fetches an upstream .sha256 file: "HEX" or "HEX  name".
func (d *downloader) publishedChecksum(ctx context.Context, it bom.Item) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, it.SHA256URL, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("User-Agent", "ztpd-iso-build")
	resp, err := d.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("artifact %s: fetching checksum %s: %w", it.Name, it.SHA256URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("artifact %s: fetching checksum %s: %s", it.Name, it.SHA256URL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", fmt.Errorf("artifact %s: fetching checksum %s: %w", it.Name, it.SHA256URL, err)
	}
	fields := strings.Fields(string(body))
	if len(fields) == 0 || !isHex64(strings.ToLower(fields[0])) {
		return "", fmt.Errorf("artifact %s: %s does not start with a sha256 hex digest", it.Name, it.SHA256URL)
	}
	return strings.ToLower(fields[0]), nil
}

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, make([]byte, readChunk)); err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func syncFile(p string) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
