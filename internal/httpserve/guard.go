package httpserve

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Request body caps: device-facing routes (join, report, metadata) take small
// JSON documents; the API takes at most what its handlers accept.
const (
	DeviceMaxBody = 64 << 10
	APIMaxBody    = 1 << 20
)

// Guard is the middleware every TCP listener puts in front of its handler:
// it caps and times the request body, and (HideErrors) keeps server-side
// error text from clients.
type Guard struct {
	// Listener names the listener in logs.
	Listener string
	// MaxBody is the largest request body accepted; a larger one gets 413.
	MaxBody int64
	// BodyTimeout bounds receiving the body; a slower one gets 408.
	BodyTimeout time.Duration
	// HideErrors replaces the body of every 5xx answer with an ErrorBody
	// (code "unavailable" for 503, else "internal") carrying a request id,
	// and a generic reason when the original wraps an internal error or
	// names a path; the detail goes to the log under that id. For
	// device-facing handlers: devices never see server paths or internal
	// error text.
	HideErrors bool
	// Streamed names the requests whose handler reads the body as a
	// stream (an image upload), answering their size cap (0: not
	// streamed). Their body is not read into memory: it is capped at that
	// size, and BodyTimeout bounds each read rather than the whole
	// transfer (a multi-GiB upload takes minutes).
	Streamed func(*http.Request) int64
	// ReadByHandler names the requests whose handler reads the body
	// itself, after checking what the headers prove (the API: the failure
	// limiter, a signature's key and expiry), so that a body nobody
	// authenticated is never read. Their body is still capped at MaxBody
	// and must arrive within BodyTimeout; a read past either fails with a
	// *BodyError.
	ReadByHandler func(*http.Request) bool
	// Budget bounds the bodies of requests being served (nil: unbounded):
	// a request reserves its body's size before any of it is read, and is
	// refused unread (429, 503) when that does not fit. Streamed bodies go
	// to disk, not memory, and reserve nothing.
	Budget *BodyBudget
	Log    *slog.Logger
}

// Wrap returns h behind the guard.
func (g Guard) Wrap(h http.Handler) http.Handler {
	if g.MaxBody <= 0 {
		g.MaxBody = DeviceMaxBody
	}
	if g.BodyTimeout <= 0 {
		g.BodyTimeout = DefaultReadBodyTimeout
	}
	if g.Log == nil {
		g.Log = slog.Default()
	}
	return &guard{Guard: g, next: h}
}

type guard struct {
	Guard
	next http.Handler
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		if n := g.streamed(r); n > 0 {
			if r.ContentLength > n {
				g.refuse(w, r, http.StatusRequestEntityTooLarge, "request body of "+strconv.FormatInt(r.ContentLength, 10)+" bytes is over the "+sizeText(n)+" limit of "+r.URL.Path)
				return
			}
			r.Body = &idleReader{body: http.MaxBytesReader(w, r.Body, n), rc: http.NewResponseController(w), timeout: g.BodyTimeout}
		} else {
			if r.ContentLength > g.MaxBody {
				g.refuse(w, r, http.StatusRequestEntityTooLarge, "request body of "+strconv.FormatInt(r.ContentLength, 10)+" bytes is over the "+sizeText(g.MaxBody)+" limit of "+r.URL.Path)
				return
			}
			release, ok := g.reserve(w, r)
			if !ok {
				return
			}
			defer release()
			if g.ReadByHandler != nil && g.ReadByHandler(r) {
				r.Body = &handlerBody{body: http.MaxBytesReader(w, r.Body, g.MaxBody), rc: http.NewResponseController(w),
					timeout: g.BodyTimeout, max: g.MaxBody, path: r.URL.Path}
			} else if !g.readBody(w, r) {
				return
			}
		}
	}
	if !g.HideErrors {
		g.next.ServeHTTP(w, r)
		return
	}
	gw := &guardWriter{ResponseWriter: w}
	g.next.ServeHTTP(gw, r)
	if gw.held {
		g.answerHidden(w, r, gw)
	}
}

func (g *guard) streamed(r *http.Request) int64 {
	if g.Streamed == nil {
		return 0
	}
	return g.Streamed(r)
}

// idleReader bounds the wait for each read of a streamed body by timeout.
type idleReader struct {
	body    io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	_ = r.rc.SetReadDeadline(time.Now().Add(r.timeout))
	n, err := r.body.Read(p)
	if err != nil {
		// Back to no deadline, as readBody does, once the body is done.
		_ = r.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (r *idleReader) Close() error { return r.body.Close() }

// BodyError is why a body a handler reads (Guard.ReadByHandler) could not
// be read whole: Status is what the guard would have answered (413, 408,
// 400) and Reason says why, for the client.
type BodyError struct {
	Status int
	Reason string
	Err    error
}

func (e *BodyError) Error() string { return e.Reason }
func (e *BodyError) Unwrap() error { return e.Err }

// bodyError classifies a failed read of a body capped at max.
func bodyError(err error, max int64, timeout time.Duration, path string) *BodyError {
	var tooLarge *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooLarge):
		return &BodyError{http.StatusRequestEntityTooLarge, "request body is over the " + sizeText(max) + " limit of " + path, err}
	case errors.As(err, &ne) && ne.Timeout():
		return &BodyError{http.StatusRequestTimeout, "request body not received within " + timeout.String(), err}
	}
	return &BodyError{http.StatusBadRequest, "request body could not be read", err}
}

// handlerBody is a body the handler reads: timeout bounds reading it
// whole, from the first read; errors are *BodyError.
type handlerBody struct {
	body    io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	max     int64
	path    string
	started bool
	ended   bool
}

func (b *handlerBody) Read(p []byte) (int, error) {
	if !b.started {
		b.started = true
		_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	}
	n, err := b.body.Read(p)
	if err != nil {
		if !b.ended {
			// Back to no deadline, as readBody does.
			b.ended = true
			_ = b.rc.SetReadDeadline(time.Time{})
		}
		if err != io.EOF {
			err = bodyError(err, b.max, b.timeout, b.path)
		}
	}
	return n, err
}

func (b *handlerBody) Close() error { return b.body.Close() }

// readBody reads the whole body (at most MaxBody bytes, within
// BodyTimeout) into memory and puts it back on r, or answers 413/408/400
// and reports false.
func (g *guard) readBody(w http.ResponseWriter, r *http.Request) bool {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(g.BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.MaxBody))
	// Back to no deadline: the server's own background read must not time
	// out while the handler answers (it would cancel the request context).
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		be := bodyError(err, g.MaxBody, g.BodyTimeout, r.URL.Path)
		g.refuse(w, r, be.Status, be.Reason)
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return true
}

func (g *guard) refuse(w http.ResponseWriter, r *http.Request, code int, reason string) {
	g.Log.Info("request refused", "listener", g.Listener, "path", r.URL.Path, "client", r.RemoteAddr, "status", code, "reason", reason)
	h := w.Header()
	h.Set("Connection", "close") // the rest of the body is never read
	writeBody(w, code, ErrorBodyOf(code, reason))
}

// answerHidden logs a held 5xx answer under a new request id and sends the
// client a reason without internal detail.
func (g *guard) answerHidden(w http.ResponseWriter, r *http.Request, gw *guardWriter) {
	id := NewRequestID()
	detail := string(gw.body)
	reason := detail
	var doc struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(gw.body, &doc) == nil && len(doc.Error) > 0 {
		// The ErrorBody shape, or {"error": "<reason>"} from a handler outside ztpd.
		var text string
		var body ErrorDetail
		if json.Unmarshal(doc.Error, &text) == nil {
			reason = text
		} else if json.Unmarshal(doc.Error, &body) == nil && body.Message != "" {
			reason = body.Message
			if body.Code == core.KindWaiting.String() && gw.code == http.StatusServiceUnavailable {
				// A wait (WriteError's): no server error, and its reason is
				// written for the client. Retry-After is already set.
				writeBody(w, gw.code, gw.body)
				return
			}
		}
	}
	g.Log.Error("server error answered", "listener", g.Listener, "request_id", id, "status", gw.code,
		"path", r.URL.Path, "client", r.RemoteAddr, "detail", strings.TrimSpace(detail))
	h := w.Header()
	h.Del("Content-Length")
	h.Set("X-Request-Id", id)
	writeBody(w, gw.code, errorJSON(codeOfStatus(gw.code), PublicReason(reason, id), id))
}

// PublicReason is what a client may read of a server error: the reason
// itself when it is a short sentence of ztpd's own (no path, no wrapped
// error, which Go writes after ": "), else a generic one pointing at the log.
func PublicReason(reason, id string) string {
	reason = strings.TrimSpace(reason)
	if reason != "" && len(reason) <= 200 && !strings.ContainsAny(reason, "/\\\n") && !strings.Contains(reason, ": ") {
		return reason
	}
	return "internal server error; the operator finds the detail in ztpd's log under request id " + id
}

// NewRequestID is a random 16-hex-digit id tying an answer to a log line.
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func writeBody(w http.ResponseWriter, code int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func sizeText(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d-byte", n)
}

// guardWriter holds back a 5xx answer (status and up to 4 KiB of body) for
// the guard to replace; any other answer passes straight through, with
// ReadFrom forwarded so file downloads keep sendfile.
type guardWriter struct {
	http.ResponseWriter
	code int
	held bool
	body []byte
}

const heldBodyMax = 4 << 10

// publicBodyHeader marks (in this process only: the guard removes it) a
// 5xx answer whose body was written for the client, such as /healthz's
// status when the store cannot be read.
const publicBodyHeader = "X-Ztpd-Public-Body"

// MarkPublic lets the next 5xx answer on w through the guard as written:
// the handler vouches that its body holds nothing internal.
func MarkPublic(w http.ResponseWriter) { w.Header().Set(publicBodyHeader, "1") }

func (w *guardWriter) WriteHeader(code int) {
	if w.Header().Get(publicBodyHeader) != "" {
		w.Header().Del(publicBodyHeader)
		if w.code == 0 {
			w.code = code
		}
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if w.code == 0 && code >= 500 {
		w.code, w.held = code, true
		return
	}
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *guardWriter) Write(b []byte) (int, error) {
	if w.held {
		if room := heldBodyMax - len(w.body); room > 0 {
			w.body = append(w.body, b[:min(len(b), room)]...)
		}
		return len(b), nil
	}
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *guardWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.held {
		return io.Copy(writerOnly{w}, r)
	}
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, r)
}

func (w *guardWriter) Flush() {
	if w.held {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *guardWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
