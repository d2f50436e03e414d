package promtext

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestUnlabelledKeepsOnlySamplesWithoutLabels(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("# HELP ztpd_store_commits_total Commits.\n# TYPE ztpd_store_commits_total counter\n" +
			"ztpd_store_commits_total 42\nztpd_store_batch_size_sum 1.5e+02\n" +
			"ztpd_dhcp_dropped_total{reason=\"malformed\"} 3\n\nbroken line\n"))
	}))
	defer srv.Close()
	m, err := Unlabelled(srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["ztpd_store_commits_total"] != 42 || m["ztpd_store_batch_size_sum"] != 150 {
		t.Fatalf("samples %v", m)
	}
	srv.Config.Handler = http.NotFoundHandler()
	if _, err := Unlabelled(srv.Client(), srv.URL); err == nil {
		t.Fatal("a 404 read as metrics")
	}
}
