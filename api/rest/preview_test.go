package rest

import (
	"strings"
	"testing"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
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
	apitest.Seed(t, e.st, 2)
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
	r := a.Do("GET", "/api/v1/devices/SN00001/preview", nil)
	if r.Status != 200 {
		t.Fatalf("preview: %d %s", r.Status, r.Raw)
	}
	body := string(r.Raw)
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
	r.Decode(t, &pv)
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

	if r := a.Do("GET", "/api/v1/devices/02:00:00:00:ff:ff/preview", nil); r.Status != 404 {
		t.Errorf("unknown device: %d %s", r.Status, r.Raw)
	}
	if r := e.rest(e.user.APIKey, e.userSec).Do("GET", "/api/v1/devices/SN00001/preview", nil); r.Status != 403 {
		t.Errorf("user previews: %d", r.Status)
	}
	e.srv.console.preview = nil
	if r := a.Do("GET", "/api/v1/devices/SN00001/preview", nil); r.Status != 503 {
		t.Errorf("without profiles: %d %s", r.Status, r.Raw)
	}
}

// The preview's notes and warnings are free text built from the profile
// (a refusal naming the firmware URL, say): masked like the documents.
func TestPreviewMasksNotesAndWarnings(t *testing.T) {
	e := newEnv(t, envOpts{})
	apitest.Seed(t, e.st, 2)
	e.srv.console.preview = &raPreviewer{pv: content.Preview{Kind: core.KindSONiC, Profile: "leaves",
		Notes:    []string{"firmware: https://fw:note-secret-1@10.99.0.5/sonic.bin"},
		Warnings: []string{"ztp.json would be refused: HTTP 502: fetching https://fw:warn-secret-2@10.99.0.5/sonic.bin"}}}
	r := e.rest(e.admin.APIKey, e.adminSec).Do("GET", "/api/v1/devices/SN00001/preview", nil)
	if r.Status != 200 {
		t.Fatalf("preview: %d %s", r.Status, r.Raw)
	}
	for _, s := range []string{"note-secret-1", "warn-secret-2"} {
		if strings.Contains(string(r.Raw), s) {
			t.Errorf("the preview shows %q: %s", s, r.Raw)
		}
	}
	if !strings.Contains(string(r.Raw), "10.99.0.5/sonic.bin") {
		t.Errorf("the preview lost the URL: %s", r.Raw)
	}
}

// A profile's user-data, ztp.json or a firmware URL may carry a secret in
// a form the first masking missed: a YAML block scalar, a prefixed name
// (hashed_passwd, K3S_TOKEN, join_token), a quoted value with spaces, a
// URL's user information, a command line's argument array.
func TestPreviewMaskingAttacks(t *testing.T) {
	texts := []struct{ doc, secret string }{
		{"#cloud-config\npassword: |\n  block-secret-1\n  block-secret-1b\nruncmd:\n  - echo ok\n", "block-secret-1"},
		{"#cloud-config\nchpasswd:\n  expire: false\n  list: |\n    root:chpasswd-secret-2\n", "chpasswd-secret-2"},
		{"users:\n  - name: ops\n    hashed_passwd: $6$rounds=4096$hashed-secret-3\n", "hashed-secret-3"},
		{"runcmd:\n  - curl -sfL https://get.k3s.io | K3S_TOKEN=k3s-secret-4 sh -\n", "k3s-secret-4"},
		{"join_token: join-secret-5\n", "join-secret-5"},
		{"password: \"correct horse secret-6\"\n", "secret-6"},
		{"image: https://ops:url-secret-7@repo.example/sonic.bin\n", "url-secret-7"},
		{"ssh_keys:\n  rsa_private: >-\n    folded-secret-8\n", "folded-secret-8"},
		{"http://10.99.0.1/join?access_token=query-secret-9&x=1", "query-secret-9"},
		{"runcmd:\n  - export AWS_SECRET_ACCESS_KEY=aws-secret-15\n", "aws-secret-15"},
		{"runcmd:\n  - ENCRYPTION_KEY=enc-secret-16 /usr/bin/start\n", "enc-secret-16"},
		{"vault login -method=userpass password_hash=hash-secret-17", "hash-secret-17"},
	}
	for _, tc := range texts {
		if got := maskText(tc.doc); strings.Contains(got, tc.secret) {
			t.Errorf("maskText shows %q:\n%s", tc.secret, got)
		}
	}
	jsons := []struct{ doc, secret string }{
		{`{"MACSEC_PROFILE":{"p1":{"primary_cak":"cak-secret-10","cipher_suite":"GCM-AES-128"}}}`, "cak-secret-10"},
		{`{"ztp":{"01-join":{"args":["join","--password","argv-secret-11","--discovery-token","argv-secret-12"]}}}`, "argv-secret-1"},
		{`{"ztp":{"01-fw":{"url":{"source":"https://admin:json-url-secret-13@10.0.0.5/fw.bin"}}}}`, "json-url-secret-13"},
		{`{"x":{"cmd":"mysql --password='quoted secret-14' db"}}`, "secret-14"},
	}
	for _, tc := range jsons {
		if got := maskJSON([]byte(tc.doc)); strings.Contains(got, tc.secret) {
			t.Errorf("maskJSON shows %q:\n%s", tc.secret, got)
		}
	}
	// What is not secret stays readable.
	keep := maskText("#cloud-config\nhostname: leaf-1\npassword: |\n  x\nruncmd:\n  - echo ok\nimage: https://repo.example/sonic.bin\n")
	for _, s := range []string{"hostname: leaf-1", "runcmd:", "echo ok", "https://repo.example/sonic.bin"} {
		if !strings.Contains(keep, s) {
			t.Errorf("maskText lost %q:\n%s", s, keep)
		}
	}
	if got := maskJSON([]byte(`{"MACSEC_PROFILE":{"p1":{"cipher_suite":"GCM-AES-128"}}}`)); !strings.Contains(got, "GCM-AES-128") {
		t.Errorf("maskJSON lost the cipher suite: %s", got)
	}
}
