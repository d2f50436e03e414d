package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/console"
)

// countingBody counts the request body bytes the handler behind it reads.
func countingBody(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			r.Body = &countedBody{ReadCloser: r.Body, n: n}
		}
		h.ServeHTTP(w, r)
	})
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// postBig sends body to url with the headers in hdr (name, value pairs)
// and returns the status.
func postBig(t *testing.T, client *http.Client, url, contentType string, body []byte, hdr ...string) int {
	t.Helper()
	code, err := tryPost(client, url, contentType, body, hdr...)
	if err != nil {
		t.Errorf("POST %s: %v", url, err)
	}
	return code
}

// refusedUnread reports whether a POST of a body the server answers
// without reading got the refusal want: its status, or, for a client that
// keeps writing the body after the answer (no Expect: 100-continue), the
// connection reset that follows it (the server closes rather than read).
func refusedUnread(client *http.Client, url, contentType string, body []byte, want int, hdr ...string) error {
	code, err := tryPost(client, url, contentType, body, hdr...)
	switch {
	case err == nil && code == want:
		return nil
	case err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("status %d, want %d", code, want)
}

func tryPost(client *http.Client, url, contentType string, body []byte, hdr ...string) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// The review's attack at small scale: concurrent writes with a body just
// under the 1 MiB cap and no valid credentials (none, an unknown key, an
// expired signature). Each is refused on its headers: the API reads none of
// the bytes. A signed request with a body as large is read and served.
func TestRESTUnauthenticatedBodiesAreNotRead(t *testing.T) {
	e := newEnv(t, envOpts{})
	var read atomic.Int64
	ts := httptest.NewServer(countingBody(e.srv.Handler(), &read))
	defer ts.Close()
	big := bytes.Repeat([]byte(" "), 1<<20-1) // JSON whitespace
	path := "/api/v1/versions"
	valid := e.rest(e.admin.APIKey, e.adminSec)
	unknown := e.rest("nosuchkey0000000000000000000000000000000000", e.adminSec)
	auths := map[string]func() string{
		"none":    func() string { return "" },
		"unknown": func() string { return unknown.Authorization("POST", path, nil, big, time.Now().Add(time.Minute)) },
		"expired": func() string { return valid.Authorization("POST", path, nil, big, time.Now().Add(-time.Second)) },
	}
	const perKind = 8
	var wg sync.WaitGroup
	for kind, auth := range auths {
		for range perKind {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var hdr []string
				if a := auth(); a != "" {
					hdr = []string{"Authorization", a}
				}
				if err := refusedUnread(ts.Client(), ts.URL+path, "application/json", big, http.StatusUnauthorized, hdr...); err != nil {
					t.Errorf("%s credentials: %v", kind, err)
				}
			}()
		}
	}
	wg.Wait()
	// A client that waits for 100 Continue before sending its body (curl
	// does for large ones) gets the refusal without sending it at all.
	expectClient := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 10 * time.Second}}
	if code := postBig(t, expectClient, ts.URL+path, "application/json", big, "Expect", "100-continue"); code != http.StatusUnauthorized {
		t.Errorf("Expect: 100-continue without credentials: %d, want 401", code)
	}
	if n := read.Load(); n != 0 {
		t.Fatalf("%d body bytes read for %d unauthenticated requests (%d MiB sent), want 0", n, perKind*len(auths), perKind*len(auths))
	}
	doc := []byte(`{"semver":"1.30.2","url":"http://10.99.0.1:8080/isos/v1.30.2.iso"}`)
	signed := append(doc, big[len(doc):]...)
	code := postBig(t, ts.Client(), ts.URL+path, "application/json", signed,
		"Authorization", valid.Authorization("POST", path, nil, signed, time.Now().Add(time.Minute)))
	if code/100 != 2 || read.Load() != int64(len(signed)) {
		t.Fatalf("signed 1 MiB write: status %d, %d body bytes read, want 2xx and %d", code, read.Load(), len(signed))
	}
}

// An address over auth_failures_per_minute is refused before its body is
// read, on the CloudStack API (which signs the form, so must read it to
// verify) and on the console's sign-in form.
func TestRateLimitedBodiesAreNotRead(t *testing.T) {
	e := newEnv(t, envOpts{failuresPerMinute: 2})
	var read atomic.Int64
	ts := httptest.NewServer(countingBody(e.srv.Handler(), &read))
	defer ts.Close()
	form := "command=listZones&apiKey=" + e.admin.APIKey + "&signature=wrong&pad=" + strings.Repeat("x", 1<<19)
	for range 2 {
		postBig(t, ts.Client(), ts.URL+CloudStackPath, "application/x-www-form-urlencoded", []byte(form))
	}
	before := read.Load()
	for range 4 {
		if err := refusedUnread(ts.Client(), ts.URL+CloudStackPath, "application/x-www-form-urlencoded", []byte(form), http.StatusTooManyRequests); err != nil {
			t.Errorf("CloudStack from a rate-limited address: %v", err)
		}
	}
	signin := url.Values{"api_key": {e.admin.APIKey}, "secret_key": {"wrong"}, "next": {"/" + strings.Repeat("a", 8<<10)}}.Encode()
	noRedirect := *ts.Client()
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for range 4 {
		if err := refusedUnread(&noRedirect, ts.URL+console.SignInPath, "application/x-www-form-urlencoded", []byte(signin), http.StatusSeeOther, "Origin", ts.URL); err != nil {
			t.Errorf("sign-in from a rate-limited address: %v", err)
		}
	}
	if n := read.Load() - before; n != 0 {
		t.Fatalf("%s body bytes read from a rate-limited address, want 0", fmt.Sprint(n))
	}
}
