package httpserve

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mathrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
)

func decodeError(t *testing.T, rec *httptest.ResponseRecorder) ErrorDetail {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	var doc ErrorBody
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("error body: %v", err)
	}
	return doc.Error
}

func TestWriteErrorByKind(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{core.Errorf(core.KindInvalid, "size must be at least 1"), 400, "invalid"},
		{fmt.Errorf("cluster c1: %w", core.ErrNotFound), 404, "not_found"},
		{core.Errorf(core.KindPermission, "needs an admin API key"), 403, "forbidden"},
		{core.Errorf(core.KindInUse, "used by 2 clusters"), 409, "in_use"},
		{core.Errorf(core.KindUnavailable, "no CA yet"), 503, "unavailable"},
		{core.Errorf(core.KindAuth, "bad signature"), 401, "unauthorized"},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		WriteError(rec, httptest.NewRequest("GET", "/x", nil), nil, c.err)
		d := decodeError(t, rec)
		if rec.Code != c.status || d.Code != c.code || d.Message != c.err.Error() || d.RequestID != "" {
			t.Errorf("%v: %d %+v, want %d %s", c.err, rec.Code, d, c.status, c.code)
		}
	}
}

// An internal error's text goes to the log under a request id; the client
// gets the id only.
func TestWriteErrorHidesInternalDetail(t *testing.T) {
	var log bytes.Buffer
	rec := httptest.NewRecorder()
	WriteError(rec, httptest.NewRequest("GET", "/x", nil), slog.New(slog.NewTextHandler(&log, nil)),
		errors.New("open /var/lib/ztpd/ztpd.db: input/output error"))
	d := decodeError(t, rec)
	if rec.Code != 500 || d.Code != "internal" || d.RequestID == "" || strings.Contains(d.Message, "/var/") ||
		!strings.Contains(d.Message, d.RequestID) {
		t.Fatalf("%d %+v", rec.Code, d)
	}
	if !strings.Contains(log.String(), d.RequestID) || !strings.Contains(log.String(), "input/output error") {
		t.Fatalf("log lacks the detail under the id: %s", log.String())
	}
}

func TestRefusalsShareTheShape(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteRefusal(rec, http.StatusTooManyRequests, CodeRateLimited, "too many failed authentications")
	if d := decodeError(t, rec); rec.Code != 429 || d.Code != "rate_limited" || d.Message != "too many failed authentications" {
		t.Fatalf("%d %+v", rec.Code, d)
	}
	for code, want := range map[int]string{413: "too_large", 408: "timeout", 404: "not_found", 400: "invalid", 405: "method_not_allowed"} {
		var doc ErrorBody
		if err := json.Unmarshal(ErrorBodyOf(code, "r"), &doc); err != nil || doc.Error.Code != want || doc.Error.Message != "r" {
			t.Errorf("ErrorBodyOf(%d): %+v %v, want %s", code, doc, err, want)
		}
	}
}

func TestWriteJSONAndBody(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteJSON(rec, 201, map[string]int{"a": 1})
	if rec.Code != 201 || rec.Body.String() != "{\"a\":1}\n" || rec.Header().Get("Content-Length") != "8" {
		t.Fatalf("%d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
	rec = httptest.NewRecorder()
	WriteJSONBody(rec, 200, []byte(`{"items":[]}`))
	if rec.Code != 200 || rec.Body.String() != `{"items":[]}` || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
}

// A body gzipped by joining its parts' segments is one gzip member that
// Go's reader and the real gzip tool both read back as the parts joined,
// whichever parts were compressed beforehand, including empty ones.
func TestGzipJoinIsOneValidMember(t *testing.T) {
	rnd := mathrand.New(mathrand.NewPCG(1, 2))
	var parts [][]byte
	for i := range 40 {
		p := make([]byte, rnd.IntN(70000))
		for j := range p {
			p[j] = "{}\",:abcdefghij0123456789"[rnd.IntN(25)]
		}
		if i%9 == 0 {
			p = nil
		}
		parts = append(parts, p)
	}
	want := bytes.Join(parts, nil)
	for _, pre := range []int{0, 1, 2} { // none, every other, all precompressed
		segs := make([][]byte, len(parts))
		for i := range parts {
			if pre == 2 || pre == 1 && i%2 == 0 {
				segs[i] = DeflateSegment(parts[i])
			}
		}
		gz := GzipJoin(parts, segs)
		br := bytes.NewReader(gz)
		zr, err := gzip.NewReader(br)
		if err != nil {
			t.Fatal(err)
		}
		zr.Multistream(false) // one member, not several
		got, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("precompressed %d: %v, %d bytes back, want %d", pre, err, len(got), len(want))
		}
		if br.Len() != 0 {
			t.Fatalf("%d bytes after the member", br.Len())
		}
		if len(gz) > len(want)*3/4 { // 25 symbols: 4.6 bits of 8
			t.Fatalf("%d bytes gzipped from %d", len(gz), len(want))
		}
		tool, err := exec.LookPath("gzip")
		if err != nil {
			t.Skip("gzip is not installed (apt-get install gzip)")
		}
		cmd := exec.Command(tool, "-dc")
		cmd.Stdin = bytes.NewReader(gz)
		out, err := cmd.Output()
		if err != nil || !bytes.Equal(out, want) {
			t.Fatalf("gzip -dc: %v, %d bytes, want %d", err, len(out), len(want))
		}
	}
}
