package httpserve

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A streamed route gets its body unread and capped at its own limit; every
// other route keeps MaxBody.
func TestGuardStreamsOnlyWhatItIsTold(t *testing.T) {
	var got int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		got = n
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	g := Guard{MaxBody: 1 << 10, Streamed: func(r *http.Request) int64 {
		if r.URL.Path == "/upload" {
			return 64 << 10
		}
		return 0
	}}
	srv := httptest.NewServer(g.Wrap(h))
	defer srv.Close()
	post := func(path string, n int, chunked bool) int {
		var body io.Reader = bytes.NewReader(make([]byte, n))
		if chunked {
			body = io.MultiReader(body) // no length: sent chunked
		}
		resp, err := http.Post(srv.URL+path, "application/octet-stream", body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post("/upload", 32<<10, false); c != 204 || got != 32<<10 {
		t.Errorf("32 KiB upload: %d, handler read %d", c, got)
	}
	if c := post("/upload", 32<<10, true); c != 204 || got != 32<<10 {
		t.Errorf("32 KiB chunked upload: %d, handler read %d", c, got)
	}
	if c := post("/upload", 65<<10, false); c != 413 {
		t.Errorf("65 KiB upload (declared): %d", c)
	}
	if c := post("/upload", 65<<10, true); c != 413 {
		t.Errorf("65 KiB upload (chunked): %d", c)
	}
	if c := post("/other", 2<<10, false); c != 413 {
		t.Errorf("2 KiB on another route: %d", c)
	}
}
