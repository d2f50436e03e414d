package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestLocalHandlerActsAsLocalAdmin: the admin socket's handler answers
// REST and CloudStack requests without a signature, as the local
// administrator (admin-only routes included), while the network handler
// still refuses the same unsigned requests.
func TestLocalHandlerActsAsLocalAdmin(t *testing.T) {
	e := newEnv(t, envOpts{})
	local := httptest.NewServer(e.srv.LocalHandler())
	defer local.Close()
	get := func(base, path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/api/v1/devices", "/api/v1/tokens", "/api/v1/events", "/api/v1/leases"} {
		if code, body := get(local.URL, path); code != 200 || !strings.Contains(body, `"items"`) {
			t.Errorf("local GET %s: %d %s", path, code, body)
		}
		if code, _ := get(e.ts.URL, path); code != 401 {
			t.Errorf("network GET %s without a signature: %d, want 401", path, code)
		}
	}
	// CloudStack: an admin-only command, unsigned, answered locally.
	q := url.Values{"command": {"listKubernetesSupportedVersions"}, "response": {"json"}}
	code, body := get(local.URL, "/client/api?"+q.Encode())
	if code != 200 {
		t.Fatalf("local CloudStack: %d %s", code, body)
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &env); err != nil || env["listkubernetessupportedversionsresponse"] == nil {
		t.Fatalf("local CloudStack answer: %s", body)
	}
	if code, _ := get(e.ts.URL, "/client/api?"+q.Encode()); code != 401 {
		t.Errorf("network CloudStack without a signature: %d, want 401", code)
	}
	// A write as the local administrator is attributed to local-admin.
	resp, err := http.Post(local.URL+"/api/v1/versions", "application/json",
		strings.NewReader(`{"semver":"1.31.4","url":"http://example.invalid/k.iso"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("local POST /api/v1/versions: %d %s", resp.StatusCode, b)
	}
	_, body = get(local.URL, "/api/v1/events?stream=audit")
	if !strings.Contains(body, "local-admin") && !strings.Contains(body, `"local"`) {
		t.Errorf("the local write's audit event does not name the local administrator: %s", body)
	}
}
