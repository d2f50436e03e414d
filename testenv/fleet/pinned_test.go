package fleet

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestPinnedClient: the fleet checks the device HTTPS listener's key as
// the join plugin's curl -k --pinnedpubkey does: one of the pins must
// match, whatever signed the certificate; none matching is refused.
func TestPinnedClient(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	sum := sha256.Sum256(srv.Certificate().RawSubjectPublicKeyInfo)
	right := "sha256//" + base64.StdEncoding.EncodeToString(sum[:])
	wrong := "sha256//" + base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, c := range []struct {
		pins string
		ok   bool
	}{{right, true}, {wrong + ";" + right, true}, {wrong, false}} {
		hc, err := pinnedClient(&http.Client{Transport: &http.Transport{}}, c.pins)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		if (err == nil) != c.ok {
			t.Errorf("pins %s: %v, want ok=%v", c.pins, err, c.ok)
		}
	}
	if hc, _ := pinnedClient(http.DefaultClient, ""); hc != http.DefaultClient {
		t.Error("no pins: not the client given")
	}
}
