package api

import (
	"strings"
	"testing"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/content"
)

// raPreviewer answers a fixed preview full of secrets, and names images
// for deletion checks.
type raPreviewer struct {
	pv    content.Preview
	names map[string][]string // image sha256 -> profiles naming it
	asked []string
}

func (p *raPreviewer) PreviewDevice(d core.Device) (*content.Preview, error) {
	p.asked = append(p.asked, d.ID)
	pv := p.pv
	return &pv, nil
}

func (p *raPreviewer) ProfilesNaming(im core.Image) []string { return p.names[im.SHA256] }

// The secrets a rendered preview may carry, each of which must never
// reach the console.
var raSecrets = []string{"hunter2-ztp", "tacacs-passkey-9", "snmp-rw-community", "abcdef.0123456789abcdef",
	"cert-key-5f3a", "ud-password-77", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "psk-wifi-1", "apitoken-44"}

func TestRESTDevicePreviewMasksSecrets(t *testing.T) {
	e := newEnv(t, envOpts{})
	seed(t, e.st, 2)
	pemKey := "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nAAAA\n-----END PRIVATE KEY-----\n"
	p := &raPreviewer{pv: content.Preview{Kind: core.KindSONiC, Profile: "leaves",
		Fetches: []content.Fetch{{What: "ztp.json", URL: "http://10.99.0.1:8080/ztp/ztp.json"},
			{What: "join", URL: "http://10.99.0.1:8080/join?token=apitoken-44"}},
		ZTPJSON: []byte(`{"ztp":{"01-users":{"plugin":{"url":"http://x/u.sh"},"admin_password":"hunter2-ztp","hostname":"leaf-1"},
			"02-join":{"command":"kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef --certificate-key cert-key-5f3a"},
			"03-tls":{"tls":{"key":"` + strings.ReplaceAll(pemKey, "\n", `\n`) + `","cert":"PUBLIC-CERT-TEXT"}},"vlan":4094}}`),
		ConfigDB: []byte(`{"TACPLUS_SERVER":{"10.0.0.9":{"passkey":"tacacs-passkey-9","priority":"1"}},
			"SNMP_COMMUNITY":{"snmp-rw-community":{"TYPE":"RW"}},"DEVICE_METADATA":{"localhost":{"hostname":"leaf-1","hwsku":"Accton-AS7326"}}}`),
		UserData: []byte("#cloud-config\nusers:\n  - name: ops\n    passwd: ud-password-77\nwifi:\n  psk: psk-wifi-1\nwrite_files:\n  - content: |\n" +
			"      " + strings.ReplaceAll(pemKey, "\n", "\n      ") + "\nruncmd:\n  - echo hello\n"),
		Metadata: map[string]string{"local-hostname": "vm-1", "api-key": "apitoken-44"},
		Notes:    []string{"cluster c (role worker): at serve time the joiner adds its join section"}}}
	e.srv.console.preview = p
	a := e.rest(e.admin.APIKey, e.adminSec)
	r := a.do("GET", "/api/v1/devices/SN00001/preview", nil)
	if r.status != 200 {
		t.Fatalf("preview: %d %s", r.status, r.raw)
	}
	body := string(r.raw)
	for _, s := range raSecrets {
		if strings.Contains(body, s) {
			t.Errorf("the preview shows the secret %q:\n%s", s, body)
		}
	}
	// What is not secret stays readable.
	for _, s := range []string{"leaf-1", "Accton-AS7326", "PUBLIC-CERT-TEXT", "kubeadm join 10.0.0.1:6443", "4094", "echo hello", "vm-1", "priority"} {
		if !strings.Contains(body, s) {
			t.Errorf("the preview lost %q:\n%s", s, body)
		}
	}
	var pv client.Preview
	r.decode(t, &pv)
	var names []string
	for _, d := range pv.Documents {
		names = append(names, d.Name)
		if strings.Contains(d.ContentType, "json") && !strings.Contains(d.Body, masked) {
			t.Errorf("%s: nothing masked: %s", d.Name, d.Body)
		}
	}
	if strings.Join(names, ",") != "ztp.json,config_db.json,meta-data,user-data" || pv.Profile != "leaves" || len(pv.Notes) != 1 {
		t.Errorf("preview: documents %v, %+v", names, pv)
	}
	// The ztp.json sections keep their order.
	ztp := pv.Documents[0].Body
	if i, j := strings.Index(ztp, "01-users"), strings.Index(ztp, "02-join"); i < 0 || j < i {
		t.Errorf("section order lost:\n%s", ztp)
	}
	if len(p.asked) != 1 || p.asked[0] != "02:00:00:00:00:01" {
		t.Errorf("previewed %v, want the device with serial SN00001", p.asked)
	}

	if r := a.do("GET", "/api/v1/devices/02:00:00:00:ff:ff/preview", nil); r.status != 404 {
		t.Errorf("unknown device: %d %s", r.status, r.raw)
	}
	if r := e.rest(e.user.APIKey, e.userSec).do("GET", "/api/v1/devices/SN00001/preview", nil); r.status != 403 {
		t.Errorf("user previews: %d", r.status)
	}
	e.srv.console.preview = nil
	if r := a.do("GET", "/api/v1/devices/SN00001/preview", nil); r.status != 503 {
		t.Errorf("without profiles: %d %s", r.status, r.raw)
	}
}
