package endpoints

import (
	"net"
	"net/netip"
	"testing"
)

// TestOneBaseURL: the base URL every part hands out, for the cases the five
// former copies disagreed on (port 80 was http://ip for DHCP and
// http://ip:80 for content).
func TestOneBaseURL(t *testing.T) {
	local := netip.MustParseAddr("10.99.0.7")
	for _, c := range []struct {
		advertise, httpAddr string
		local               netip.Addr
		want                string
	}{
		{"10.99.0.1", "10.99.0.1:80", local, "http://10.99.0.1"},
		{"10.99.0.1", ":8080", local, "http://10.99.0.1:8080"},
		{"fd00::1", ":80", local, "http://[fd00::1]"},
		{"fd00::1", ":8080", local, "http://[fd00::1]:8080"},
		{"", ":8080", local, "http://10.99.0.7:8080"},
		{"", ":80", local, "http://10.99.0.7"},
		{"", "10.99.0.2:8080", netip.Addr{}, "http://10.99.0.2:8080"},
		{"", "0.0.0.0:8080", netip.Addr{}, "http://127.0.0.1:8080"},
		{"", "[::]:8080", netip.MustParseAddr("::"), "http://127.0.0.1:8080"},
	} {
		e, err := New(c.advertise, c.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Base(c.local); got != c.want {
			t.Errorf("advertise %q http %q local %v: %s, want %s", c.advertise, c.httpAddr, c.local, got, c.want)
		}
	}
	e, _ := New("10.99.0.1", ":8080")
	if e.ZTPJSON(netip.Addr{}) != "http://10.99.0.1:8080/ztp/ztp.json" || e.ONIEInstaller(local) != "http://10.99.0.1:8080/onie/installer" ||
		e.ISOs() != "http://10.99.0.1:8080/isos/" || e.Config(local, "52:54:00:00:00:01") != "http://10.99.0.1:8080/ztp/config/52:54:00:00:00:01/config_db.json" {
		t.Fatalf("urls: %s %s %s", e.ZTPJSON(netip.Addr{}), e.ONIEInstaller(local), e.ISOs())
	}
	if got := e.Binaries("v1.37.2"); got != "http://10.99.0.1:8080/binaries/v1.37.2" {
		t.Fatalf("binaries: %s", got)
	}
	for _, bad := range [][2]string{{"", "nohostport"}, {"not-an-ip", ":80"}} {
		if _, err := New(bad[0], bad[1]); err == nil {
			t.Errorf("New(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func TestSecureBase(t *testing.T) {
	for _, c := range []struct{ adv, http, tls, local, want string }{
		{"10.99.0.1", "0.0.0.0:8080", ":443", "", "https://10.99.0.1"},
		{"10.99.0.1", "0.0.0.0:8080", "0.0.0.0:8443", "", "https://10.99.0.1:8443"},
		{"", "0.0.0.0:80", ":8443", "10.99.0.7", "https://10.99.0.7:8443"},
		{"fd00::1", "[::]:8080", "[::]:443", "", "https://[fd00::1]"},
		{"fd00::1", "[::]:8080", "[::]:8443", "", "https://[fd00::1]:8443"},
		{"10.99.0.1", "0.0.0.0:8080", "", "", ""},
	} {
		e, err := New(c.adv, c.http)
		if err != nil {
			t.Fatal(err)
		}
		if c.tls != "" {
			if e, err = e.WithTLS(c.tls); err != nil {
				t.Fatal(err)
			}
		}
		var local netip.Addr
		if c.local != "" {
			local = netip.MustParseAddr(c.local)
		}
		if got := e.SecureBase(local); got != c.want {
			t.Errorf("%+v: %q, want %q", c, got, c.want)
		}
	}
}

// TestTLSBoundReachesEveryCopy: with http.tls.addr on port 0 the port is
// known once the listener is bound, after the endpoints were handed to
// the services; every copy names the bound one from then on.
func TestTLSBoundReachesEveryCopy(t *testing.T) {
	e, err := New("10.99.0.1", "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	if e, err = e.WithTLS("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	handedOut := e
	secureJoin := e.SecureJoin
	e.TLSBound(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40443})
	for _, got := range []string{handedOut.SecureBase(netip.Addr{}), secureJoin()} {
		if got != "https://10.99.0.1:40443" {
			t.Errorf("after the bind: %q, want https://10.99.0.1:40443", got)
		}
	}
	var plain Endpoints
	plain.TLSBound(&net.TCPAddr{Port: 1}) // no listener: nothing to record
	if got := plain.SecureBase(netip.Addr{}); got != "" {
		t.Errorf("without the listener: %q", got)
	}
}

// TestFamilyOfTheRequest: a device gets URLs in the family it asked over,
// with both families advertised or one.
func TestFamilyOfTheRequest(t *testing.T) {
	v4, v6, ll := netip.MustParseAddr("10.99.0.7"), netip.MustParseAddr("fd99::7"), netip.MustParseAddr("fe80::1%eth0")
	mapped := netip.MustParseAddr("::ffff:10.99.0.7")
	for _, c := range []struct {
		adv, adv6 string
		local     netip.Addr
		want      string
	}{
		{"10.99.0.1", "fd99::1", v4, "http://10.99.0.1:8080"},
		{"10.99.0.1", "fd99::1", v6, "http://[fd99::1]:8080"},
		{"10.99.0.1", "fd99::1", mapped, "http://10.99.0.1:8080"},
		{"10.99.0.1", "fd99::1", netip.Addr{}, "http://10.99.0.1:8080"},
		{"10.99.0.1", "", v6, "http://[fd99::7]:8080"},
		{"10.99.0.1", "", ll, "http://[fe80::1]:8080"},
		{"[fd99::1]", "", v6, "http://[fd99::1]:8080"},
		{"", "fd99::1", v6, "http://[fd99::1]:8080"},
		{"", "fd99::1", netip.Addr{}, "http://[fd99::1]:8080"},
		{"", "", ll, "http://[fe80::1]:8080"},
	} {
		e, err := New(c.adv, ":8080")
		if err == nil {
			e, err = e.WithAdvertise6(c.adv6)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Base(c.local); got != c.want {
			t.Errorf("advertise %q/%q local %v: %s, want %s", c.adv, c.adv6, c.local, got, c.want)
		}
	}
	e, _ := New("10.99.0.1", ":80")
	if _, err := e.WithAdvertise6("10.99.0.2"); err == nil {
		t.Error("an IPv4 advertise_addr6 accepted")
	}
	e, _ = New("fd99::1", ":80")
	if _, err := e.WithAdvertise6("fd99::2"); err == nil {
		t.Error("two IPv6 advertised addresses accepted")
	}
	e, _ = New("10.99.0.1", ":8080")
	e, _ = e.WithAdvertise6("fd99::1")
	e, _ = e.WithTLS("[::]:8443")
	if got := e.SecureBase(v6); got != "https://[fd99::1]:8443" {
		t.Errorf("secure base over IPv6: %s", got)
	}
	ctx := WithLocal(t.Context(), v6)
	if Local(ctx) != v6 || Local(t.Context()).IsValid() {
		t.Error("Local")
	}
}
