package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ztpd/ztpd/internal/config"
)

// TestMainHandlerConsole: when the API shares the main listener, the web
// console's paths go to the API's handler; "/" does too, except the
// CloudStack password server's requests (DomU_Request); device paths stay
// the devices'. With the API elsewhere, the console's paths are the
// devices' listener's as before.
func TestMainHandlerConsole(t *testing.T) {
	tag := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) })
	}
	a := &App{Cfg: config.Default(), Log: NewLogger(io.Discard, "error", "text"), HTTPMux: http.NewServeMux()}
	a.HTTPMux.Handle("/", tag("devices"))
	a.apiOnMain = tag("api")
	h := a.mainHandler()
	get := func(path string, hdr ...string) string {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if len(hdr) == 2 {
			r.Header.Set(hdr[0], hdr[1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Body.String()
	}
	for path, want := range map[string]string{
		"/": "api", "/devices": "api", "/devices/aa:bb:cc:dd:ee:ff": "api", "/clusters": "api", "/clusters/x": "api",
		"/rollouts": "api", "/rollouts/ro-x": "api",
		"/versions": "api", "/images": "api", "/leases": "api", "/positions": "api", "/settings": "api", "/ui/static/x/app.js": "api",
		"/ui/stream": "api", "/api/v1/devices": "api",
		"/images/abc": "devices", "/ztp/ztp.json": "devices", "/latest/meta-data/": "devices",
		"/onie-installer-x86_64": "devices", "/healthz": "devices",
	} {
		if got := get(path); got != want {
			t.Errorf("%s went to %s, want %s", path, got, want)
		}
	}
	if got := get("/", "DomU_Request", "send_my_password"); got != "devices" {
		t.Errorf("the password server's / went to %s", got)
	}

	a.apiOnMain = nil
	h = a.mainHandler()
	for _, path := range []string{"/", "/devices", "/ui/static/x/app.js"} {
		if got := get(path); got != "devices" {
			t.Errorf("API elsewhere: %s went to %s, want devices", path, got)
		}
	}
}
