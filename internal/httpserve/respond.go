package httpserve

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Every ztpd HTTP handler answers JSON through WriteJSON and errors through
// WriteError, in one shape (the CloudStack API alone keeps CloudStack's
// own, which its clients parse):
//
//	{"error": {"code": "<kind>", "message": "<text>", "request_id": "<id>"}}
//
// code is the core.ErrorKind name; request_id is set on internal errors,
// whose detail goes to the log only. A wait (core.KindWaiting) is 503 with
// Retry-After and says what it waits for.

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong.
type ErrorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
}

// StatusOf is the HTTP status of a domain error kind.
func StatusOf(k core.ErrorKind) int {
	switch k {
	case core.KindInvalid:
		return http.StatusBadRequest
	case core.KindNotFound:
		return http.StatusNotFound
	case core.KindState, core.KindConflict, core.KindInUse:
		return http.StatusConflict
	case core.KindPermission, core.KindRefused:
		return http.StatusForbidden
	case core.KindUnavailable, core.KindWaiting:
		return http.StatusServiceUnavailable
	case core.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case core.KindAuth:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// WriteJSON answers v as JSON with status code; nothing is cached.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code, body = http.StatusInternalServerError, errorJSON(core.KindInternal.String(), "could not encode the answer", NewRequestID())
	}
	writeBody(w, code, append(body, '\n'))
}

// WriteJSONBody answers body, which is already JSON (a rendered answer
// kept by a response cache), with status code.
func WriteJSONBody(w http.ResponseWriter, code int, body []byte) {
	writeBody(w, code, body)
}

// WriteError answers err by its kind (core.KindOf). An internal error is
// logged with a request id and answered with that id only, never its text.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	k := core.KindOf(err)
	if k == core.KindInternal {
		id := NewRequestID()
		if log != nil {
			log.Error("request failed", "method", r.Method, "path", r.URL.Path, "request_id", id, "err", err)
		}
		writeBody(w, http.StatusInternalServerError, errorJSON(k.String(), PublicReason("", id), id))
		return
	}
	if k == core.KindWaiting {
		writeWait(w, err)
		return
	}
	WriteErrorCode(w, StatusOf(k), k, err.Error())
}

// DefaultRetryAfter is the Retry-After of a wait that names none.
const DefaultRetryAfter = 30 * time.Second

// writeWait answers a wait: 503 with Retry-After and the wait's own
// reason. A wait is no server error, so a guard that hides 5xx detail
// lets it through as written (answerHidden): the waiting client learns
// what it waits for.
func writeWait(w http.ResponseWriter, err error) {
	msg, after := err.Error(), DefaultRetryAfter
	var ce *core.Error
	if errors.As(err, &ce) && ce.Kind == core.KindWaiting {
		msg = ce.Error()
		if ce.RetryAfter > 0 {
			after = ce.RetryAfter
		}
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(max(after.Round(time.Second), time.Second)/time.Second)))
	writeBody(w, http.StatusServiceUnavailable, errorJSON(core.KindWaiting.String(), msg, ""))
}

// WriteErrorCode answers an error of kind k with an explicit status and
// message.
func WriteErrorCode(w http.ResponseWriter, code int, k core.ErrorKind, msg string) {
	writeBody(w, code, errorJSON(k.String(), msg, ""))
}

// Codes of refusals that come from HTTP itself rather than the domain, so
// they have no core.ErrorKind.
const (
	CodeRateLimited      = "rate_limited"       // 429
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeTimeout          = "timeout"            // 408: the request body came too slowly
)

// WriteRefusal answers an HTTP-level refusal (one of the Code constants)
// with status code, in the same body shape as WriteError.
func WriteRefusal(w http.ResponseWriter, code int, errCode, msg string) {
	writeBody(w, code, errorJSON(errCode, msg, ""))
}

// ErrorBodyOf is the error body of a Guard refusal (status code and reason)
// in the shape WriteError answers: for listeners whose clients read that
// shape (the API), as Guard.ErrorBody.
func ErrorBodyOf(code int, reason string) []byte {
	return errorJSON(codeOfStatus(code), reason, "")
}

// codeOfStatus is the error code of a refusal by its status alone.
func codeOfStatus(code int) string {
	switch code {
	case http.StatusRequestEntityTooLarge:
		return core.KindTooLarge.String()
	case http.StatusRequestTimeout:
		return CodeTimeout
	case http.StatusNotFound:
		return core.KindNotFound.String()
	case http.StatusTooManyRequests:
		return CodeRateLimited
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case http.StatusServiceUnavailable:
		return core.KindUnavailable.String()
	}
	if code >= 500 {
		return core.KindInternal.String()
	}
	return core.KindInvalid.String()
}

func errorJSON(code, msg, id string) []byte {
	b, _ := json.Marshal(ErrorBody{Error: ErrorDetail{Code: code, Message: msg, RequestID: id}})
	return append(b, '\n')
}

// CompressMin is the size from which an answer kept by a response cache is
// sent gzip-compressed to a client that accepts it. Smaller answers are not
// worth a client's inflate; the big ones (listKubernetesClusters of a
// 1,000-member cluster is ~400 KB) compress about 20 times, and at 30,000
// members their cost was the TLS encryption of the whole body per request.
const CompressMin = 32 << 10

// WriteCachedJSON answers body, which is already JSON, with status code; when
// body is at least CompressMin and the request accepts gzip, it answers
// gzipped() instead (the cache compresses once per body; nil or a nil
// result: body as is).
func WriteCachedJSON(w http.ResponseWriter, r *http.Request, code int, body []byte, gzipped func() []byte) {
	if len(body) >= CompressMin && gzipped != nil {
		w.Header().Add("Vary", "Accept-Encoding")
		if AcceptsGzip(r.Header.Values("Accept-Encoding")) {
			if gz := gzipped(); gz != nil {
				w.Header().Set("Content-Encoding", "gzip")
				writeBody(w, code, gz)
				return
			}
		}
	}
	writeBody(w, code, body)
}

// AcceptsGzip reports whether Accept-Encoding values list gzip (or *) with
// a non-zero quality (RFC 9110 12.5.3).
func AcceptsGzip(values []string) bool {
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(item), ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding != "gzip" && coding != "x-gzip" && coding != "*" {
				continue
			}
			if q, ok := qualityOf(params); !ok || q > 0 {
				return true
			}
		}
	}
	return false
}

// qualityOf reads q= from an Accept-Encoding item's parameters; ok is
// false when there is none (quality 1).
func qualityOf(params string) (float64, bool) {
	for _, p := range strings.Split(params, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(strings.TrimSpace(k), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, true // unreadable quality: not accepted
			}
			return q, true
		}
	}
	return 1, false
}

// DeflateSegment compresses p (fastest level) into raw DEFLATE blocks that
// end on a byte boundary (a sync flush) with no final block: segments
// compressed apart join into one valid stream, so a big answer made of
// cached parts is gzipped by joining the parts' cached segments
// (GzipJoin) instead of compressing it all again when one part changes.
func DeflateSegment(p []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(p)/8 + 16)
	zw, _ := flate.NewWriter(&b, flate.BestSpeed)
	if _, err := zw.Write(p); err != nil {
		return nil
	}
	if err := zw.Flush(); err != nil { // not Close: no final block
		return nil
	}
	return b.Bytes()
}

// GzipJoin is the gzip form of the concatenation of parts: one member
// (RFC 1952) whose DEFLATE stream is the parts' segments in order, then
// an empty final block. segs[i] is DeflateSegment(parts[i]), or nil to
// have it compressed here. The trailer's CRC-32 is computed over the parts.
func GzipJoin(parts, segs [][]byte) []byte {
	n, size := 20, 0
	for i, p := range parts {
		size += len(p)
		if segs[i] != nil {
			n += len(segs[i])
		} else {
			n += len(p)/8 + 16
		}
	}
	out := make([]byte, 0, n)
	// ID1 ID2, CM deflate, no flags, no mtime, XFL 0, OS unknown (as Go's gzip).
	out = append(out, 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255)
	crc := uint32(0)
	for i, p := range parts {
		seg := segs[i]
		if seg == nil {
			if seg = DeflateSegment(p); seg == nil {
				return nil
			}
		}
		out = append(out, seg...)
		crc = crc32.Update(crc, crc32.IEEETable, p)
	}
	out = append(out, 0x03, 0x00) // empty final block, fixed Huffman codes
	out = binary.LittleEndian.AppendUint32(out, crc)
	return binary.LittleEndian.AppendUint32(out, uint32(size))
}

// Gzip compresses body (fastest level: it runs once per cached body, on a
// request's path), as the one part of a GzipJoin.
func Gzip(body []byte) []byte {
	return GzipJoin([][]byte{body}, [][]byte{nil})
}
