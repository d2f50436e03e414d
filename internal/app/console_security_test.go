package app

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/config"
)

// The console's Settings page shows the effective configuration: a DHCP
// option whose value is a URL with a user and password (an ONIE or
// firmware server behind basic authentication) must not show them.
func TestRedactedConfigHidesURLCredentials(t *testing.T) {
	cfg := config.Default()
	cfg.DHCP.Options = config.Options{"114": "http://onie:dhcp-url-secret-1@10.99.0.1/onie-installer", "domain-name": "lab.example"}
	cfg.DHCP.ClassOptions = map[string]config.Options{"sonic": {"67": "https://ztp-user:class-url-secret-2@10.99.0.1/ztp.json"}}
	a := &App{Cfg: cfg, Log: NewLogger(io.Discard, "error", "text")}
	out, err := json.Marshal(a.redactedConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"dhcp-url-secret-1", "class-url-secret-2", "ztp-user"} {
		if strings.Contains(string(out), s) {
			t.Errorf("the effective configuration shows %q: %s", s, out)
		}
	}
	for _, s := range []string{"10.99.0.1/onie-installer", "lab.example"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("the effective configuration lost %q: %s", s, out)
		}
	}
}
