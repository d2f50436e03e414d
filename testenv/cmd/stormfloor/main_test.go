package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/ztpd/ztpd/testenv/fleet"
	"github.com/ztpd/ztpd/testenv/testpki"
)

func testFloor(t testing.TB, ipv6 bool) *floor {
	t.Helper()
	o := options{addr: netip.MustParseAddr("10.99.0.1"), prefix6: netip.MustParseAddr("fd99:0:0:100::"), poolFirst: 1,
		ztpBytes: 700, configBytes: 300, bundleSize: 34000}
	if ipv6 {
		o.ipv6, o.addr = true, netip.MustParseAddr("fd99:0:0:1::1")
	}
	f, err := newFloor(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The DHCPv4 answers are what a relay and the fleet's client accept: an
// OFFER, then an ACK, for the switch's own pool address, with the boot
// file URL, to the relay.
func TestAnswer4Parses(t *testing.T) {
	f := testFloor(t, false)
	mac := fleet.MAC(300)
	disc, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithGatewayIP(net.IPv4(10, 99, 0, 2)))
	if err != nil {
		t.Fatal(err)
	}
	out, to := f.answer4(nil, disc.ToBytes())
	if to != netip.MustParseAddrPort("10.99.0.2:67") {
		t.Fatalf("sent to %v, not the relay", to)
	}
	offer, err := dhcpv4.FromBytes(out)
	if err != nil {
		t.Fatal(err)
	}
	if offer.MessageType() != dhcpv4.MessageTypeOffer || !offer.YourIPAddr.Equal(net.IPv4(10, 99, 2, 47)) ||
		!offer.ServerIdentifier().Equal(net.IPv4(10, 99, 0, 1)) || offer.TransactionID != disc.TransactionID {
		t.Fatalf("offer: %s", offer.Summary())
	}
	if got := string(offer.Options.Get(dhcpv4.OptionBootfileName)); got != "http://10.99.0.1:8080/ztp/025a0000012c/ztp.json" {
		t.Fatalf("boot file %q", got)
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithGatewayIP(net.IPv4(10, 99, 0, 2)))
	if err != nil {
		t.Fatal(err)
	}
	out, _ = f.answer4(nil, req.ToBytes())
	ack, err := dhcpv4.FromBytes(out)
	if err != nil || ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(offer.YourIPAddr) {
		t.Fatalf("ack: %v %v", ack, err)
	}
	disc.GatewayIPAddr = net.IPv4zero
	if out, _ := f.answer4(nil, disc.ToBytes()); out != nil {
		t.Fatal("answered a DISCOVER no relay forwarded")
	}
	for _, bad := range [][]byte{nil, disc.ToBytes()[:243], bytes.Repeat([]byte{1}, 300)} {
		if out, _ := f.answer4(nil, bad); out != nil {
			t.Fatalf("answered %x", bad)
		}
	}
}

// The DHCPv6 answers come back as a Relay-Repl to the relay, holding the
// Advertise or Reply the fleet's client accepts: its address in the
// fleet's /64, the server id and the boot file URL.
func TestAnswer6Parses(t *testing.T) {
	f := testFloor(t, true)
	mac := fleet.MAC(300)
	sol, err := dhcpv6.NewMessage()
	if err != nil {
		t.Fatal(err)
	}
	sol.MessageType = dhcpv6.MessageTypeSolicit
	sol.AddOption(dhcpv6.OptClientID(&dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: 1, LinkLayerAddr: mac}))
	sol.AddOption(&dhcpv6.OptIANA{IaId: [4]byte{0, 0, 1, 44}})
	fw, err := dhcpv6.EncapsulateRelay(sol, dhcpv6.MessageTypeRelayForward, net.ParseIP("fd99:0:0:100::1"), net.ParseIP("fe80::5a"))
	if err != nil {
		t.Fatal(err)
	}
	fw.AddOption(dhcpv6.OptInterfaceID([]byte("eth7")))
	relay := netip.MustParseAddrPort("[fd99:0:0:1::2]:547")
	out, to := f.answer6(nil, fw.ToBytes(), relay)
	if to != relay {
		t.Fatalf("sent to %v, not the relay", to)
	}
	p, err := dhcpv6.FromBytes(out)
	if err != nil {
		t.Fatal(err)
	}
	rr, ok := p.(*dhcpv6.RelayMessage)
	if !ok || rr.Type() != dhcpv6.MessageTypeRelayReply || !rr.PeerAddr.Equal(net.ParseIP("fe80::5a")) ||
		string(rr.Options.InterfaceID()) != "eth7" {
		t.Fatalf("relay reply: %s", p.Summary())
	}
	adv, ok := rr.Options.RelayMessage().(*dhcpv6.Message)
	if !ok || adv.MessageType != dhcpv6.MessageTypeAdvertise || adv.TransactionID != sol.TransactionID {
		t.Fatalf("inner: %v", rr.Options.RelayMessage())
	}
	ia := adv.Options.OneIANA()
	if ia == nil || ia.IaId != [4]byte{0, 0, 1, 44} || !ia.Options.OneAddress().IPv6Addr.Equal(net.ParseIP("fd99:0:0:100::1:12c")) {
		t.Fatalf("IA_NA: %v", ia)
	}
	if adv.Options.ServerID() == nil || adv.Options.BootFileURL() != "http://[fd99:0:0:1::1]:8080/ztp/025a0000012c/ztp.json" {
		t.Fatalf("advertise: %s", adv.Summary())
	}
	if out, _ := f.answer6(nil, sol.ToBytes(), relay); out != nil {
		t.Fatal("answered a Solicit no relay forwarded")
	}
	raw := fw.ToBytes()
	for _, bad := range [][]byte{nil, raw[:33], raw[:len(raw)-1]} {
		if out, _ := f.answer6(nil, bad, relay); out != nil {
			t.Fatalf("answered %x", bad)
		}
	}
}

// The documents are as large as asked, and still JSON.
func TestPaddedSize(t *testing.T) {
	for _, size := range []int{0, 10, 700, 34216, 200000} {
		rec := httptest.NewRecorder()
		padded(rec, map[string]any{"a": "b", "files": []string{"x"}}, size)
		var doc map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		want := max(size, len(`{"a":"b","files":["x"]}`))
		if rec.Body.Len() != want || rec.Header().Get("Content-Length") != strconv.Itoa(want) {
			t.Fatalf("size %d: wrote %d, Content-Length %s", size, rec.Body.Len(), rec.Header().Get("Content-Length"))
		}
	}
}

// A whole switch against the floor's handlers: ztp.json, the join with a
// real CSR over TLS pinned as the fleet pins it, the report with its
// token; a forged enrollment, a bad CSR and a forged token are refused.
func TestJoinAndReport(t *testing.T) {
	f := testFloor(t, false)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ztp/{mac}/ztp.json", f.ztpJSON)
	mux.HandleFunc("POST /join", f.join)
	mux.HandleFunc("POST /report", f.report)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{f.tlsCert}}
	srv.StartTLS()
	defer srv.Close()
	// As the fleet (and the join plugin's curl -k --pinnedpubkey) trusts
	// it: the key's pin, no CA.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
			if "sha256//"+base64.StdEncoding.EncodeToString(sum[:]) != f.pin {
				return errors.New("pin mismatch")
			}
			return nil
		}}}}

	req, _ := http.NewRequest("GET", srv.URL+"/ztp/025a0000012c/ztp.json", nil)
	req.Header.Set("Serial-Number", "STORM-00-000300")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ZTP map[string]json.RawMessage `json:"ztp"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var join struct {
		Enrollment string `json:"enrollment"`
		Pin        string `json:"tls-pin"`
		Serial     string `json:"serial"`
	}
	if err := json.Unmarshal(doc.ZTP["02-join"], &join); err != nil || join.Enrollment == "" || join.Pin != f.pin || join.Serial != "STORM-00-000300" {
		t.Fatalf("join section %s: %v", doc.ZTP["02-join"], err)
	}
	_, csr, err := testpki.DeviceCSR()
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, bearer string, body any) (int, []byte) {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", srv.URL+path, bytes.NewReader(raw))
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.Bytes()
	}
	code, raw := post("/join", "", map[string]string{"enrollment": join.Enrollment, "hostname": "s300", "csr": string(csr)})
	var bundle struct {
		ReportToken string `json:"report_token"`
		Files       []struct {
			Path, Content string
		} `json:"files"`
	}
	if code != 200 || json.Unmarshal(raw, &bundle) != nil || len(raw) != 34000 || len(bundle.Files) != 2 ||
		!strings.Contains(bundle.Files[1].Content, "BEGIN CERTIFICATE") {
		t.Fatalf("join: %d, %d bytes: %.300s", code, len(raw), raw)
	}
	if code, _ := post("/report", bundle.ReportToken, map[string]string{"state": "joined"}); code != 200 {
		t.Fatalf("report: %d", code)
	}
	forged := strings.Replace(join.Enrollment, "025a0000012c", "025a0000012d", 1)
	if code, _ := post("/join", "", map[string]string{"enrollment": forged, "csr": string(csr)}); code != http.StatusForbidden {
		t.Fatalf("forged enrollment: %d", code)
	}
	if code, _ := post("/join", "", map[string]string{"enrollment": join.Enrollment, "csr": strings.Replace(string(csr), "M", "N", 3)}); code != http.StatusBadRequest {
		t.Fatalf("bad CSR: %d", code)
	}
	if code, _ := post("/report", forged, nil); code != http.StatusUnauthorized {
		t.Fatalf("forged token: %d", code)
	}
}

// Any input must not crash the DHCP answers; a relayed request the
// reference parser takes gets an answer it takes.
func FuzzAnswer4(f *testing.F) {
	fl := testFloor(f, false)
	disc, _ := dhcpv4.NewDiscovery(fleet.MAC(7), dhcpv4.WithGatewayIP(net.IPv4(10, 99, 0, 2)))
	f.Add(disc.ToBytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		out, _ := fl.answer4(nil, b)
		if _, err := dhcpv4.FromBytes(b); err == nil && out != nil {
			if _, err := dhcpv4.FromBytes(out); err != nil {
				t.Fatalf("answer does not parse: %v", err)
			}
		}
	})
}

func FuzzAnswer6(f *testing.F) {
	fl := testFloor(f, true)
	sol, _ := dhcpv6.NewSolicit(fleet.MAC(7))
	fw, _ := dhcpv6.EncapsulateRelay(sol, dhcpv6.MessageTypeRelayForward, net.ParseIP("fd99:0:0:100::1"), net.ParseIP("fe80::7"))
	f.Add(fw.ToBytes())
	relay := netip.MustParseAddrPort("[fd99:0:0:1::2]:547")
	f.Fuzz(func(t *testing.T, b []byte) {
		out, _ := fl.answer6(nil, b, relay)
		if _, err := dhcpv6.FromBytes(b); err == nil && out != nil {
			if _, err := dhcpv6.FromBytes(out); err != nil {
				t.Fatalf("answer does not parse: %v", err)
			}
		}
	})
}

// In clear (-clear) the join and the report are plain HTTP URLs on the
// documents' port, with no pin to hold.
func TestClearHasNoPin(t *testing.T) {
	o := testFloor(t, false).o
	o.clear = true
	f, err := newFloor(o)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/ztp/025a0000012c/ztp.json", nil)
	req.SetPathValue("mac", "025a0000012c")
	f.ztpJSON(rec, req)
	var doc struct {
		ZTP struct {
			Join map[string]string `json:"02-join"`
		} `json:"ztp"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.ZTP.Join["join-url"] != "http://10.99.0.1:8080/join" || doc.ZTP.Join["tls-pin"] != "" {
		t.Fatalf("join section in clear: %v", doc.ZTP.Join)
	}
}
