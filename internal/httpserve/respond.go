package httpserve

import (
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/ztpd/ztpd/internal/core"
)

// Every ztpd HTTP handler answers JSON through WriteJSON and errors through
// WriteError, in one shape (the CloudStack API alone keeps CloudStack's
// own, which its clients parse):
//
//	{"error": {"code": "<kind>", "message": "<text>", "request_id": "<id>"}}
//
// code is the core.ErrorKind name; request_id is set on internal errors,
// whose detail goes to the log only.

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
	case core.KindUnavailable:
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
		code, body = http.StatusInternalServerError, errorJSON(core.KindInternal, "could not encode the answer", NewRequestID())
	}
	writeBody(w, code, append(body, '\n'))
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
		writeBody(w, http.StatusInternalServerError, errorJSON(k, PublicReason("", id), id))
		return
	}
	WriteErrorCode(w, StatusOf(k), k, err.Error())
}

// WriteErrorCode answers an error of kind k with an explicit status (e.g.
// 405, 429) and message.
func WriteErrorCode(w http.ResponseWriter, code int, k core.ErrorKind, msg string) {
	writeBody(w, code, errorJSON(k, msg, ""))
}

func errorJSON(k core.ErrorKind, msg, id string) []byte {
	b, _ := json.Marshal(ErrorBody{Error: ErrorDetail{Code: k.String(), Message: msg, RequestID: id}})
	return append(b, '\n')
}
