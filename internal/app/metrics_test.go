package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/ztp/endpoints"
)

// counterSum is the sum of a counter family's series in g (0 when absent).
func counterSum(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestTwoAppsOwnMetrics: two Apps in one process register their metrics
// on registries of their own, so neither panics on a duplicate and each
// /metrics counts only its own traffic; a scrape has the runtime's and
// the process's metrics once.
func TestTwoAppsOwnMetrics(t *testing.T) {
	var apps [2]*App
	for i := range apps {
		a, err := New(keysTestConfig(t), NewLogger(io.Discard, "error", "text"))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		apps[i] = a
	}
	const name = "ztpd_ztp_http_requests_total"
	for range 3 {
		apps[0].HTTPMux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", endpoints.ZTPJSONPath, nil))
	}
	if got := counterSum(t, apps[0].Metrics, name); got != 3 {
		t.Fatalf("the first App's %s is %v after its 3 requests", name, got)
	}
	if got := counterSum(t, apps[1].Metrics, name); got != 0 {
		t.Fatalf("the second App's %s is %v: it counted the first App's requests", name, got)
	}
	// Content serving's metrics are the App's too: the requests came from
	// an address nobody holds, so each was refused.
	const refused = "ztpd_ztp_refused_total"
	if got := counterSum(t, apps[0].Metrics, refused); got != 3 {
		t.Fatalf("the first App's %s is %v after its 3 refused requests", refused, got)
	}
	if got := counterSum(t, apps[1].Metrics, refused); got != 0 {
		t.Fatalf("the second App's %s is %v: it counted the first App's refusals", refused, got)
	}
	for i, a := range apps {
		rec := httptest.NewRecorder()
		a.HTTPMux.ServeHTTP(rec, httptest.NewRequest("GET", MetricsPath, nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK {
			t.Fatalf("App %d: /metrics answered %d: %.300s", i, rec.Code, body)
		}
		for _, s := range []string{"go_goroutines ", "process_start_time_seconds "} {
			if strings.Count(body, "\n"+s) != 1 {
				t.Errorf("App %d: /metrics has %q %d times", i, s, strings.Count(body, "\n"+s))
			}
		}
		if want := `route="ztp.json"} 3`; (i == 0) != strings.Contains(body, want) {
			t.Errorf("App %d: /metrics has %q: %v", i, want, strings.Contains(body, want))
		}
	}
}
