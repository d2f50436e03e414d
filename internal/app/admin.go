package app

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/ztpd/ztpd/internal/core"
)

// writeJSON answers with v as JSON and status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError maps domain errors to HTTP codes with a JSON body {"error": ...}.
func writeError(w http.ResponseWriter, code int, err error) {
	if code == 0 {
		code = http.StatusBadRequest
		if errors.Is(err, core.ErrNotFound) {
			code = http.StatusNotFound
		}
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
