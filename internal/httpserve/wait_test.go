package httpserve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// A wait is answered 503 with Retry-After and its own message, through a
// guard that hides server errors too: no request id, nothing logged at
// error, even when the message holds ": " or a quote. An internal error
// behind the same guard stays hidden.
func TestWaitIsAnsweredAsWrittenBehindTheGuard(t *testing.T) {
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	msg := `waiting for Kubernetes cluster "fabric", which does not exist yet (ztpd cluster create fabric): retry`
	errs := map[string]error{
		"/wait":     fmt.Errorf("join section: %w", core.Waiting(msg, 5*time.Second)),
		"/default":  core.Waiting("awaiting approval", 0),
		"/internal": errors.New("open /var/lib/ztpd/x: no such file"),
	}
	h := Guard{Listener: "t", HideErrors: true, Log: log}.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, log, errs[r.URL.Path])
	}))
	get := func(path string) (*http.Response, ErrorBody) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		resp := rec.Result()
		raw, _ := io.ReadAll(resp.Body)
		var b ErrorBody
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Fatalf("%s: %v %s", path, err, raw)
		}
		return resp, b
	}
	resp, b := get("/wait")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "5" || b.Error.Code != "waiting" || b.Error.Message != msg ||
		b.Error.RequestID != "" || resp.Header.Get("X-Request-Id") != "" {
		t.Errorf("wait: %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), b.Error)
	}
	if resp, b := get("/default"); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "30" || b.Error.Message != "awaiting approval" {
		t.Errorf("wait without its own retry: %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), b.Error)
	}
	if strings.Contains(logged.String(), "level=ERROR") {
		t.Errorf("a wait was logged as an error:\n%s", logged.String())
	}
	if resp, b := get("/internal"); resp.StatusCode != 500 || b.Error.RequestID == "" || strings.Contains(b.Error.Message, "/var/lib") {
		t.Errorf("internal error: %d %+v", resp.StatusCode, b.Error)
	}
}
