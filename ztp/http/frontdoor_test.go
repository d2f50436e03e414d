package ztphttp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/endpoints"
	ztphttp "github.com/ztpd/ztpd/ztp/http"
)

// TestFrontDoor: "/" on the device port tells a person where the web
// console and the API are: HTML (every value escaped) to a browser, JSON to
// curl and API clients; CloudStack's password server requests keep their
// answer, and without a front door "/" stays a 404.
func TestFrontDoor(t *testing.T) {
	f := storetest.Open(t)
	devs := devices.New(devices.Options{Store: f.Store})
	t.Cleanup(func() { devs.Close() })
	ep, _ := endpoints.New("10.99.40.1", "10.99.40.1:8080")
	svc, err := content.New(content.Options{Store: f.Store, Devices: devs, Endpoints: ep})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	door := ztphttp.FrontDoor{ConsoleURL: "https://<this host>:8443/", APIURL: "https://<this host>:8443/api/v1/"}
	mux := http.NewServeMux()
	ztphttp.New(svc, nil, door, nil).Register(mux)
	get := func(h http.Handler, hdr ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, accept := range []string{"", "*/*", "application/json", "application/json, text/html;q=0.5", "text/html;q=0"} {
		rec := get(mux, "Accept", accept)
		var ans struct{ Service, Message, Console, API string }
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") ||
			json.Unmarshal(rec.Body.Bytes(), &ans) != nil || ans.Console != door.ConsoleURL || ans.API != door.APIURL {
			t.Errorf("curl / (Accept %q): %d %s %s", accept, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
	}
	browser := "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	rec := get(mux, "Accept", browser)
	page := rec.Body.String()
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") ||
		!strings.Contains(page, `href="https://%3cthis%20host%3e:8443/api/v1/"`) && !strings.Contains(page, "&lt;this host&gt;:8443/api/v1/") ||
		strings.Contains(page, "<this host>") {
		t.Errorf("browser /: %d %s\n%s", rec.Code, rec.Header().Get("Content-Type"), page)
	}
	if rec := get(mux, "DomU_Request", "send_my_password"); rec.Code != 200 || rec.Body.String() != "saved_password" {
		t.Errorf("password server /: %d %q", rec.Code, rec.Body)
	}
	bare := http.NewServeMux()
	ztphttp.New(svc, nil, ztphttp.FrontDoor{}, nil).Register(bare)
	if rec := get(bare, "Accept", browser); rec.Code != 404 {
		t.Errorf("/ without a front door: %d %s", rec.Code, rec.Body)
	}
}
