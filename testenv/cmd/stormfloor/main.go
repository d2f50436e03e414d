// Command stormfloor is the floor of the boot storm (bench/boot-storm.sh,
// bootstorm -floor): the least a Go server can do for each switch of the
// storm, so the benchmark can say how much of ztpd's CPU per switch the
// protocols and their cryptography alone take on this machine. It is a
// measuring stick, not a server: it keeps nothing, stores nothing and looks
// nothing up. For each switch it does what cannot be left out:
//
//   - the DHCP exchange through the fleet's relay (DHCPv4 DORA, or DHCPv6
//     Solicit/Advertise/Request/Reply with -ipv6), parsed and built by hand,
//     the address taken from the client's MAC, the boot file URL given;
//   - ztp.json and config_db.json over HTTP, each a JSON document built for
//     the switch and padded to the size ztpd's was (-ztp-bytes,
//     -config-bytes);
//   - the join over HTTPS (TLS 1.3, an ECDSA P-256 key the switch pins):
//     the enrollment's MAC checked, the CSR's signature checked and a
//     client certificate signed, the bundle padded to ztpd's size
//     (-bundle-bytes);
//   - the report over HTTPS, its bearer token's MAC checked.
//
// With -clear the join and the report go over plain HTTP, to stand beside
// ztpd with its device HTTPS listener off.
//
// It prints "ready" once every socket is bound.
//
//	stormfloor -addr 10.99.0.1
//	stormfloor -ipv6 -addr fd99:0:0:1::1 -prefix6 fd99:0:0:100::
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ztpd/ztpd/testenv/floorwire"
)

type options struct {
	addr                              netip.Addr
	ipv6                              bool
	clear                             bool // the join and the report over HTTP
	prefix6                           netip.Addr
	poolFirst                         int
	ztpBytes, configBytes, bundleSize int
}

func main() {
	var o options
	addr := flag.String("addr", "10.99.0.1", "the server's address (DHCP, HTTP on 8080, HTTPS on 8443)")
	flag.BoolVar(&o.ipv6, "ipv6", false, "answer DHCPv6 relayed by the fleet instead of DHCPv4")
	prefix6 := flag.String("prefix6", "fd99:0:0:100::", "the /64 the DHCPv6 addresses are drawn from")
	flag.IntVar(&o.poolFirst, "pool-first", 1, "the first /24 (10.99.<n>.0) the DHCPv4 addresses are drawn from")
	flag.IntVar(&o.ztpBytes, "ztp-bytes", 2048, "ztp.json's size")
	flag.IntVar(&o.configBytes, "config-bytes", 1024, "config_db.json's size")
	flag.IntVar(&o.bundleSize, "bundle-bytes", 8192, "the join bundle's size")
	flag.BoolVar(&o.clear, "clear", false, "the join and the report over plain HTTP, as ztpd's with its device HTTPS listener off")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile, from ready to SIGTERM, here")
	flag.Parse()
	var err error
	if o.addr, err = netip.ParseAddr(*addr); err != nil {
		fail(fmt.Errorf("-addr: %w", err))
	}
	if o.prefix6, err = netip.ParseAddr(*prefix6); err != nil || !o.prefix6.Is6() {
		fail(fmt.Errorf("-prefix6 %q is no IPv6 address", *prefix6))
	}
	f, err := newFloor(o)
	if err != nil {
		fail(err)
	}
	if err := f.listen(); err != nil {
		fail(err)
	}
	if *cpuProfile != "" {
		pf, err := os.Create(*cpuProfile)
		if err != nil {
			fail(err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "stormfloor:", err)
	os.Exit(1)
}

// floor is the server: a CA for the switches' client certificates, the
// HTTPS key they pin, the MAC key of enrollments and report tokens.
type floor struct {
	o       options
	base    string // http://host:8080
	secure  string // https://host:8443
	ca      *x509.Certificate
	caKey   *ecdsa.PrivateKey
	caPEM   string
	tlsCert tls.Certificate
	pin     string
	macKey  []byte
	scratch []byte // answer6's inner message (one DHCP reader)
}

func newFloor(o options) (*floor, error) {
	f := &floor{o: o, macKey: make([]byte, 32)}
	rand.Read(f.macKey)
	host := o.addr.String()
	if o.addr.Is6() {
		host = "[" + host + "]"
	}
	f.base, f.secure = "http://"+host+":8080", "https://"+host+":8443"
	if o.clear {
		f.secure = f.base
	}
	var err error
	if f.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stormfloor CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &f.caKey.PublicKey, f.caKey)
	if err != nil {
		return nil, err
	}
	if f.ca, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	f.caPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "stormfloor"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), IPAddresses: []net.IP{o.addr.AsSlice()},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if der, err = x509.CreateCertificate(rand.Reader, leaf, f.ca, &key.PublicKey, f.caKey); err != nil {
		return nil, err
	}
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(spki)
	f.pin = "sha256//" + base64.StdEncoding.EncodeToString(sum[:])
	f.tlsCert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return f, nil
}

// listen binds every socket and serves in the background.
func (f *floor) listen() error {
	var dhcp net.PacketConn
	var err error
	if f.o.ipv6 {
		dhcp, err = net.ListenPacket("udp6", netip.AddrPortFrom(f.o.addr, 547).String())
	} else {
		dhcp, err = net.ListenPacket("udp4", netip.AddrPortFrom(f.o.addr, 67).String())
	}
	if err != nil {
		return err
	}
	plain, err := net.Listen("tcp", netip.AddrPortFrom(f.o.addr, 8080).String())
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ztp/{mac}/ztp.json", f.ztpJSON)
	mux.HandleFunc("GET /ztp/{mac}/config_db.json", f.configDB)
	smux := mux
	var secure net.Listener
	if !f.o.clear {
		if secure, err = net.Listen("tcp", netip.AddrPortFrom(f.o.addr, 8443).String()); err != nil {
			return err
		}
		smux = http.NewServeMux()
	}
	smux.HandleFunc("POST /join", f.join)
	smux.HandleFunc("POST /report", f.report)
	if secure != nil {
		go http.Serve(tls.NewListener(secure, &tls.Config{Certificates: []tls.Certificate{f.tlsCert}}), smux)
	}
	go f.serveDHCP(dhcp.(*net.UDPConn))
	go http.Serve(plain, mux)
	return nil
}

func (f *floor) serveDHCP(conn *net.UDPConn) {
	in := make([]byte, 1500)
	out := make([]byte, 0, 1024)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(in)
		if err != nil {
			return
		}
		var reply []byte
		var to netip.AddrPort
		if f.o.ipv6 {
			reply, to = f.answer6(out[:0], in[:n], from)
		} else {
			reply, to = f.answer4(out[:0], in[:n])
		}
		if reply != nil {
			conn.WriteToUDPAddrPort(reply, to)
		}
	}
}

// macIndex is the switch number fleet.MAC encoded in a MAC's last four
// bytes.
func macIndex(mac []byte) uint32 { return binary.BigEndian.Uint32(mac[2:6]) }

func (f *floor) bootURL(mac []byte) string {
	return f.base + "/ztp/" + hex.EncodeToString(mac) + "/ztp.json"
}

// answer4 is the OFFER to a relayed DISCOVER or the ACK to a relayed
// REQUEST, sent to the relay (giaddr:67).
func (f *floor) answer4(out, pkt []byte) ([]byte, netip.AddrPort) {
	if len(pkt) < 244 || pkt[0] != 1 || pkt[2] != 6 || string(pkt[236:240]) != "\x63\x82\x53\x63" {
		return nil, netip.AddrPort{}
	}
	giaddr := netip.AddrFrom4([4]byte(pkt[24:28]))
	if giaddr.IsUnspecified() {
		return nil, netip.AddrPort{}
	}
	var typ byte
	for o := pkt[240:]; len(o) >= 2 && o[0] != 255; {
		if o[0] == 0 {
			o = o[1:]
			continue
		}
		l := int(o[1])
		if len(o) < 2+l {
			return nil, netip.AddrPort{}
		}
		if o[0] == 53 && l == 1 {
			typ = o[2]
		}
		o = o[2+l:]
	}
	switch typ {
	case 1:
		typ = 2
	case 3:
		typ = 5
	default:
		return nil, netip.AddrPort{}
	}
	mac := pkt[28:34]
	i := macIndex(mac)
	out = append(out, pkt[:236]...)
	out[0] = 2
	copy(out[16:20], []byte{10, 99, byte(f.o.poolFirst + int(i/254)), byte(1 + i%254)})
	out = append(out, 0x63, 0x82, 0x53, 0x63, 53, 1, typ, 54, 4)
	out = append(out, f.o.addr.AsSlice()...)
	out = append(out, 51, 4, 0, 0, 0x0e, 0x10, 1, 4, 255, 255, 255, 0)
	url := f.bootURL(mac)
	out = append(out, 67, byte(len(url)))
	out = append(out, url...)
	return append(out, 255), netip.AddrPortFrom(giaddr, 67)
}

// answer6 is the Relay-Repl holding the Advertise to a Solicit or the
// Reply to a Request that came in a Relay-Forw, sent back to its relay.
func (f *floor) answer6(out, pkt []byte, from netip.AddrPort) ([]byte, netip.AddrPort) {
	if len(pkt) < 34 || pkt[0] != 12 {
		return nil, netip.AddrPort{}
	}
	var inner, ifaceID []byte
	if !floorwire.EachOption(pkt[34:], func(code uint16, v []byte) {
		switch code {
		case 9:
			inner = v
		case 18:
			ifaceID = v
		}
	}) {
		return nil, netip.AddrPort{}
	}
	r, ok := floorwire.ParseRequest(inner)
	// DUID-LLT (1) or DUID-LL (3) of an Ethernet MAC: the MAC is its tail.
	if !ok || len(r.ClientID) < 10 || (r.ClientID[1] != 1 && r.ClientID[1] != 3) {
		return nil, netip.AddrPort{}
	}
	mac := r.ClientID[len(r.ClientID)-6:]
	addr := f.o.prefix6.As16()
	binary.BigEndian.PutUint64(addr[8:], 1<<16+uint64(macIndex(mac)))
	msg := floorwire.AppendAnswer(f.scratch[:0], r, addr)
	msg = floorwire.AppendOption(msg, 59, []byte(f.bootURL(mac)))
	f.scratch = msg
	out = append(out, 13, pkt[1])
	out = append(out, pkt[2:34]...)
	if ifaceID != nil {
		out = floorwire.AppendOption(out, 18, ifaceID)
	}
	return floorwire.AppendOption(out, 9, msg), netip.AddrPortFrom(from.Addr(), 547)
}

// tlsPin is the pin the switch is told to hold the join's and report's
// server to: none in clear.
func (f *floor) tlsPin() string {
	if f.o.clear {
		return ""
	}
	return f.pin
}

// seal is mac's token: the MAC and its keyed hash, checked without a
// lookup.
func (f *floor) seal(mac string) string {
	h := hmac.New(sha256.New, f.macKey)
	h.Write([]byte(mac))
	return mac + "." + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

func (f *floor) opens(token string) (string, bool) {
	mac, _, ok := strings.Cut(token, ".")
	return mac, ok && hmac.Equal([]byte(token), []byte(f.seal(mac)))
}

var padding = strings.Repeat("p", 64<<10)

// padded writes doc as JSON with a "padding" member that brings it to
// size bytes, written after the encoded document rather than encoded or
// copied with it.
func padded(w http.ResponseWriter, doc map[string]any, size int) {
	raw, _ := json.Marshal(doc)
	const open, end = `,"padding":"`, `"}`
	n := size - (len(raw) - 1 + len(open) + len(end))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if n <= 0 {
		h.Set("Content-Length", strconv.Itoa(len(raw)))
		w.Write(raw)
		return
	}
	h.Set("Content-Length", strconv.Itoa(size))
	w.Write(raw[:len(raw)-1])
	io.WriteString(w, open)
	for n > 0 {
		k := min(n, len(padding))
		io.WriteString(w, padding[:k])
		n -= k
	}
	io.WriteString(w, end)
}

func (f *floor) ztpJSON(w http.ResponseWriter, r *http.Request) {
	mac := r.PathValue("mac")
	serial := r.Header.Get("Serial-Number")
	padded(w, map[string]any{"ztp": map[string]any{
		"01-configdb-json": map[string]any{"url": map[string]string{"source": f.base + "/ztp/" + mac + "/config_db.json"}},
		"02-join": map[string]string{"enrollment": f.seal(mac), "join-url": f.secure + "/join", "tls-pin": f.tlsPin(),
			"mac": mac, "serial": serial, "hostname": strings.ToLower(serial)},
		"ztp-json-version": "1.0",
	}}, f.o.ztpBytes)
}

func (f *floor) configDB(w http.ResponseWriter, r *http.Request) {
	padded(w, map[string]any{"DEVICE_METADATA": map[string]any{"localhost": map[string]string{
		"hostname": strings.ToLower(r.Header.Get("Serial-Number")), "mac": r.PathValue("mac")}}}, f.o.configBytes)
}

func (f *floor) join(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Enrollment string `json:"enrollment"`
		Hostname   string `json:"hostname"`
		CSR        string `json:"csr"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	mac, ok := f.opens(in.Enrollment)
	if !ok {
		http.Error(w, "enrollment refused", http.StatusForbidden)
		return
	}
	cert, err := f.sign(in.CSR, in.Hostname)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	padded(w, map[string]any{"report_url": f.secure + "/report", "report_token": f.seal(mac), "report_pin": f.tlsPin(),
		"files": []map[string]string{
			{"path": "/etc/kubernetes/pki/ca.crt", "content": f.caPEM},
			{"path": "/var/lib/kubelet/pki/kubelet-client-current.pem", "content": cert},
		}}, f.o.bundleSize)
}

// sign checks the CSR's signature and signs the switch's client
// certificate for its key.
func (f *floor) sign(csrPEM, hostname string) (string, error) {
	b, _ := pem.Decode([]byte(csrPEM))
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return "", errors.New("no certificate request")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return "", err
	}
	if err := csr.CheckSignature(); err != nil {
		return "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial,
		Subject:   pkix.Name{CommonName: "system:node:" + hostname, Organization: []string{"system:nodes"}},
		NotBefore: now.Add(-5 * time.Minute), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca, csr.PublicKey, f.caKey)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), nil
}

func (f *floor) report(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if _, valid := f.opens(token); !ok || !valid {
		http.Error(w, "token refused", http.StatusUnauthorized)
		return
	}
	io.Copy(io.Discard, io.LimitReader(r.Body, 4096))
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"state":"joined"}`))
}
