package app

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// bodyRefusals is ztpd_http_body_refused_total{listener, reason}.
func bodyRefusals(t *testing.T, g prometheus.Gatherer, listener, reason string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ztpd_http_body_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["listener"] == listener && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// clientFrom is an HTTP client whose connections leave from ip and that
// sends a body only after the server's 100 Continue, as curl does for
// large bodies.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 10 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}}}
}

// Request bodies in flight are bounded per client address and in total
// (http.max_body_bytes_per_source, _in_flight) before any byte of them is
// read: a request that does not fit is answered 429 (its address) or 503
// (everyone's), unread, and counted; the budget is given back when a
// request ends.
func TestBodyBudgetRefusesUnread(t *testing.T) {
	cfg := config.Default()
	cfg.HTTP.MaxBodyBytesPerSource = 2 << 20
	cfg.HTTP.MaxBodyBytesInFlight = 4 << 20
	reg := prometheus.NewRegistry()
	a := &App{Cfg: cfg, Log: NewLogger(io.Discard, "error", "text"), Metrics: reg, httpMetrics: httpserve.NewMetrics(reg)}
	hold := make(chan struct{})
	var entered, read atomic.Int64
	h := a.apiGuard("t-budget").Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		<-hold
		n, _ := io.Copy(io.Discard, r.Body)
		read.Add(n)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := bytes.Repeat([]byte("x"), 1<<20)
	post := func(ip string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/versions", bytes.NewReader(body))
		req.Header.Set("Expect", "100-continue")
		resp, err := clientFrom(ip).Do(req)
		if err != nil {
			t.Errorf("from %s: %v", ip, err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	held := func(ip string, want int64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := post(ip); code != http.StatusNoContent {
				t.Errorf("held request from %s: %d", ip, code)
			}
		}()
		for deadline := time.Now().Add(5 * time.Second); entered.Load() < want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d requests reached the handler, want %d", entered.Load(), want)
			}
		}
	}
	perSource, total := bodyRefusals(t, reg, "t-budget", "per_source"), bodyRefusals(t, reg, "t-budget", "total")
	held("127.0.0.1", 1)
	held("127.0.0.1", 2)
	if code := post("127.0.0.1"); code != http.StatusTooManyRequests {
		t.Errorf("third 1 MiB body from one address: %d, want 429", code)
	}
	held("127.0.0.2", 3)
	held("127.0.0.2", 4)
	if code := post("127.0.0.3"); code != http.StatusServiceUnavailable {
		t.Errorf("fifth 1 MiB body in flight: %d, want 503", code)
	}
	if entered.Load() != 4 || read.Load() != 0 {
		t.Errorf("%d requests reached the handler, %d body bytes read; want 4 and 0", entered.Load(), read.Load())
	}
	if d := bodyRefusals(t, reg, "t-budget", "per_source") - perSource; d != 1 {
		t.Errorf("per_source refusals +%v, want 1", d)
	}
	if d := bodyRefusals(t, reg, "t-budget", "total") - total; d != 1 {
		t.Errorf("total refusals +%v, want 1", d)
	}
	close(hold)
	wg.Wait()
	if code := post("127.0.0.3"); code != http.StatusNoContent {
		t.Errorf("after the held requests ended: %d, want 204", code)
	}
}

// With the default configuration one address may have 8 MiB of bodies in
// flight: eight 1 MiB API requests whose handler has not finished, not a
// ninth (before, the guard read every one of them into memory).
func TestOneAddressHoldsAtMostEightMiBOfBodies(t *testing.T) {
	a := &App{Cfg: config.Default(), Log: NewLogger(io.Discard, "error", "text")}
	hold := make(chan struct{})
	var entered atomic.Int64
	h := a.apiGuard("t-budget-default").Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		<-hold
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := bytes.Repeat([]byte("x"), 1<<20)
	client := clientFrom("127.0.0.1")
	codes := make(chan int, 9)
	for range 9 {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/versions", bytes.NewReader(body))
			req.Header.Set("Expect", "100-continue")
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	select {
	case code := <-codes:
		if code != http.StatusTooManyRequests {
			t.Errorf("first answer while 8 bodies are held: %d, want 429", code)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("no request refused with 9 MiB of bodies in flight from one address (%d reached the handler)", entered.Load())
	}
	if n := entered.Load(); n > 8 {
		t.Errorf("%d requests from one address reached the handler, want 8", n)
	}
	close(hold)
	for range 8 {
		if code := <-codes; code != http.StatusNoContent {
			t.Errorf("held request: %d", code)
		}
	}
}
