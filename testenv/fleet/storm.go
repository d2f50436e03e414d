package fleet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/testenv/testpki"
)

// Switch is one simulated SONiC switch of a storm.
type Switch struct {
	N       int
	MAC     string
	Serial  string
	Product string
}

// Storm onboards many SONiC switches at once: DORA through the relay, then
// ztp.json, config_db.json, the join bundle (as the ztpd join plugin asks
// for it) and the joined report, each over HTTP with SONiC's headers.
type Storm struct {
	Relay *Relay
	// Relay6, when set instead of Relay, leases over DHCPv6 (Solicit,
	// Advertise, Request, Reply) and the switches fetch over IPv6.
	Relay6 *Relay6
	// HTTP is shared by every switch, or nil: then each switch talks from
	// its own leased address, as a real switch does (the process must run
	// where those addresses are local, e.g. behind a "local" route).
	HTTP        *http.Client
	Concurrency int
	Switches    []Switch
	// Progress, if set, is called with the number of devices done so far.
	Progress func(done, failed int)
	// Bundle, if set, receives each switch's join bundle document (the
	// joiner's Delivery JSON, secrets included) and the key the switch
	// made for its certificate, before the switch reports.
	Bundle func(sw Switch, doc, keyPEM []byte)

	serverDUID atomic.Pointer[[]byte] // the first DHCPv6 lease's server identifier
}

// StormResult sums a storm up.
type StormResult struct {
	Devices  int
	Failed   int
	Elapsed  time.Duration
	P50, P99 time.Duration // time to the accepted joined report per device
	PerStep  map[string]time.Duration
	// BytesPerStep is the mean response body a switch received per HTTP
	// step: what a floor server (testenv/cmd/stormfloor) must send to
	// cost what ztpd's answers cost the sockets and TLS.
	BytesPerStep map[string]int64 `json:"bytes_per_step,omitempty"`
	Errors       []string         // first few
	// Leases holds each switch's leased address, in Switches' order
	// ("" when its DORA failed): what the fleet renews later.
	Leases []string `json:"leases,omitempty"`
	// Bundled says, in Switches' order, which switches received their join
	// bundle: what ztpd answered, so what its store must keep.
	Bundled []bool `json:"bundled,omitempty"`
	// ServerDUID is the DHCPv6 server's identifier (hex) the fleet's
	// leases came from: what its renewals name.
	ServerDUID string `json:"server_duid,omitempty"`
}

// Identity is what sw says about itself on DHCP, as SONiC's dhclient does.
func (sw Switch) Identity() (Identity, error) {
	hw, err := parseMAC(sw.MAC)
	if err != nil {
		return Identity{}, err
	}
	return Identity{MAC: hw, Hostname: "sonic", UserClass: "SONiC-ZTP",
		ClientID: "SONiC##" + sw.Product + "##" + sw.Serial}, nil
}

// Run onboards every switch and returns the timings.
func (s *Storm) Run(ctx context.Context) StormResult {
	start := time.Now()
	lat := make([]time.Duration, len(s.Switches))
	leases := make([]string, len(s.Switches))
	bundled := make([]bool, len(s.Switches))
	var next, done, failed atomic.Int64
	var mu sync.Mutex
	var errs []string
	steps := map[string]time.Duration{}
	sizes := map[string]int64{}
	var wg sync.WaitGroup
	for w := 0; w < max(s.Concurrency, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(s.Switches) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				st, err := s.onboard(ctx, s.Switches[i], &leases[i], &bundled[i])
				lat[i] = time.Since(t0)
				mu.Lock()
				for k, v := range st.took {
					steps[k] += v
				}
				for k, v := range st.bytes {
					sizes[k] += v
				}
				if err != nil {
					failed.Add(1)
					lat[i] = -1
					if len(errs) < 10 {
						errs = append(errs, err.Error())
					}
				}
				mu.Unlock()
				n := done.Add(1)
				if s.Progress != nil && n%100 == 0 {
					s.Progress(int(n), int(failed.Load()))
				}
			}
		}()
	}
	wg.Wait()
	res := StormResult{Devices: len(s.Switches), Failed: int(failed.Load()), Elapsed: time.Since(start), Errors: errs,
		PerStep: steps, BytesPerStep: sizes, Leases: leases, Bundled: bundled}
	if sid := s.serverDUID.Load(); sid != nil {
		res.ServerDUID = hex.EncodeToString(*sid)
	}
	var ok []time.Duration
	for _, l := range lat {
		if l >= 0 {
			ok = append(ok, l)
		}
	}
	res.P50, res.P99, _ = quantiles(ok)
	for k, v := range res.PerStep {
		res.PerStep[k] = v / time.Duration(max(len(s.Switches), 1))
	}
	for k, v := range res.BytesPerStep {
		res.BytesPerStep[k] = v / int64(max(len(s.Switches), 1))
	}
	return res
}

// stepStats are one switch's time and response bytes per step.
type stepStats struct {
	took  map[string]time.Duration
	bytes map[string]int64
}

// onboard runs one switch through every step; it returns time and bytes per step
// and sets *leased to the address its DORA got and *bundled once its join
// bundle came.
func (s *Storm) onboard(ctx context.Context, sw Switch, leased *string, bundled *bool) (stepStats, error) {
	steps := stepStats{took: map[string]time.Duration{}, bytes: map[string]int64{}}
	mark := func(step string, t0 time.Time) { steps.took[step] += time.Since(t0) }
	t0 := time.Now()
	ip, ztpURL, err := s.lease(ctx, sw)
	mark("dhcp", t0)
	if err != nil {
		return steps, err
	}
	*leased = ip.String()
	if ztpURL == "" {
		return steps, fmt.Errorf("%s: lease without a boot file URL (option 67 or 59)", sw.MAC)
	}
	hc := s.HTTP
	if hc == nil {
		tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: ip.AsSlice()}}).DialContext,
			MaxIdleConnsPerHost: 1, DisableCompression: true}
		defer tr.CloseIdleConnections()
		hc = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	}
	hdr := http.Header{"User-Agent": {"SONiC-ZTP/0.1"}, "Product-Name": {sw.Product}, "Serial-Number": {sw.Serial},
		"Base-Mac-Address": {sw.MAC}, "Sonic-Version": {"N.A"}}

	t0 = time.Now()
	// One typed decode per document: a switch's own CPU is not the
	// appliance's, so the simulator spends as little of the shared cores as
	// the checks allow.
	var doc struct {
		ZTP map[string]json.RawMessage `json:"ztp"`
	}
	n, err := getJSON(ctx, hc, ztpURL, hdr, &doc)
	if err != nil {
		return steps, fmt.Errorf("%s: ztp.json: %w", sw.MAC, err)
	}
	steps.bytes["ztp.json"] += n
	mark("ztp.json", t0)
	var cfgURL string
	var join ztpSection
	for name, raw := range doc.ZTP {
		var sec ztpSection
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &sec) != nil {
			continue // "ztp-json-version" and the like
		}
		if sec.Enrollment != "" {
			join = sec
		}
		if len(sec.URL) > 0 && len(name) > 3 && name[3:] == "configdb-json" {
			var obj struct {
				Source string `json:"source"`
			}
			if json.Unmarshal(sec.URL, &obj) != nil || obj.Source == "" {
				json.Unmarshal(sec.URL, &obj.Source)
			}
			cfgURL = obj.Source
		}
	}
	if cfgURL == "" || join.Enrollment == "" {
		return steps, fmt.Errorf("%s: ztp.json lacks a configdb-json url or a join section", sw.MAC)
	}
	t0 = time.Now()
	var cfg map[string]json.RawMessage
	n, err = getJSON(ctx, hc, cfgURL, hdr, &cfg)
	if err != nil {
		return steps, fmt.Errorf("%s: config_db.json: %w", sw.MAC, err)
	}
	steps.bytes["config"] += n
	if len(cfg) == 0 {
		return steps, fmt.Errorf("%s: config_db.json has no table", sw.MAC)
	}
	mark("config", t0)

	// The switch makes its key, as the join plugin does, and asks for a
	// certificate for it.
	keyPEM, csrPEM, err := testpki.DeviceCSR()
	if err != nil {
		return steps, err
	}
	t0 = time.Now()
	body, _ := json.Marshal(map[string]any{"enrollment": join.Enrollment, "kind": "sonic",
		"mac": join.MAC, "serial": join.Serial, "hostname": join.Hostname, "file_encodings": []string{"gzip+base64"},
		"csr": string(csrPEM)})
	var bundle struct {
		ReportURL   string `json:"report_url"`
		ReportToken string `json:"report_token"`
		ReportPin   string `json:"report_pin"`
		Files       []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	// Over the device HTTPS listener the plugin pins its key (curl -k
	// --pinnedpubkey): so does the fleet.
	joinClient, err := pinnedClient(hc, join.TLSPin)
	if err != nil {
		return steps, fmt.Errorf("%s: %w", sw.MAC, err)
	}
	var delivery []byte
	for try := 0; ; try++ {
		code, retry, raw, err := post(ctx, joinClient, join.JoinURL, "", body)
		if err != nil {
			return steps, fmt.Errorf("%s: join: %w", sw.MAC, err)
		}
		if code == http.StatusOK {
			delivery = raw
			steps.bytes["join"] += int64(len(raw))
			break
		}
		if code != http.StatusAccepted || try > 20 {
			return steps, fmt.Errorf("%s: join answered %d", sw.MAC, code)
		}
		time.Sleep(min(retry, 2*time.Second))
	}
	mark("join", t0)
	*bundled = true
	if err := json.Unmarshal(delivery, &bundle); err != nil {
		return steps, fmt.Errorf("%s: join bundle: %w", sw.MAC, err)
	}
	if s.Bundle != nil {
		s.Bundle(sw, delivery, keyPEM)
	}
	for _, f := range bundle.Files {
		if f.Path == "" {
			return steps, fmt.Errorf("%s: join bundle has a file without a path", sw.MAC)
		}
	}
	if bundle.ReportToken == "" || len(bundle.Files) == 0 {
		return steps, fmt.Errorf("%s: join bundle without files or report token", sw.MAC)
	}
	reportClient, err := pinnedClient(hc, bundle.ReportPin)
	if err != nil {
		return steps, fmt.Errorf("%s: %w", sw.MAC, err)
	}
	t0 = time.Now()
	code, _, raw, err := post(ctx, reportClient, bundle.ReportURL, bundle.ReportToken, []byte(`{"state":"joined"}`))
	if err != nil || code != 200 {
		return steps, fmt.Errorf("%s: report: %d %v", sw.MAC, code, err)
	}
	steps.bytes["report"] += int64(len(raw))
	mark("report", t0)
	return steps, nil
}

// lease runs sw's DHCP exchange, over DHCPv6 when the storm has a Relay6:
// the address it got and the URL of its ztp.json (option 67, or 59).
func (s *Storm) lease(ctx context.Context, sw Switch) (netip.Addr, string, error) {
	if s.Relay6 != nil {
		id, err := sw.Identity6()
		if err != nil {
			return netip.Addr{}, "", err
		}
		l, err := s.Relay6.SARR(ctx, id)
		if err != nil {
			return netip.Addr{}, "", err
		}
		if s.serverDUID.Load() == nil {
			sid := l.ServerID.ToBytes()
			s.serverDUID.CompareAndSwap(nil, &sid)
		}
		return l.IP, l.BootFileURL, nil
	}
	id, err := sw.Identity()
	if err != nil {
		return netip.Addr{}, "", err
	}
	l, err := s.Relay.DORA(ctx, id)
	if err != nil {
		return netip.Addr{}, "", err
	}
	return l.IP, string(l.Options.Get(dhcpv4.OptionBootfileName)), nil
}

// getJSON decodes the answer to a GET of url into out and returns the
// answer's size.
func getJSON(ctx context.Context, hc *http.Client, url string, hdr http.Header, out any) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, err
	}
	req.Header = hdr.Clone()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, raw)
	}
	return int64(len(raw)), json.Unmarshal(raw, out)
}

// pinnedClient is hc for https URLs whose server key must match one of
// pins (curl's "sha256//<base64>", several joined by ";"), as curl -k
// --pinnedpubkey checks it: no CA, no names, the key. No pins: hc.
func pinnedClient(hc *http.Client, pins string) (*http.Client, error) {
	if pins == "" {
		return hc, nil
	}
	want := map[string]bool{}
	for _, p := range strings.Split(pins, ";") {
		want[strings.TrimSpace(p)] = true
	}
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	tr, ok := rt.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("pinned TLS needs an *http.Transport, not %T", hc.Transport)
	}
	tr = tr.Clone()
	// One connection per request, closed after its answer, as the
	// plugin's curl (a process per request) does; a switch's clone kept
	// idle would hold one of the listener's connections until its idle
	// timeout, and a storm of them its whole connection limit.
	tr.DisableKeepAlives = true
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, // the pin below is the trust
		// The groups a switch's curl offers: SONiC's OpenSSL (1.1.1 on
		// bullseye, 3.0 on bookworm) has no ML-KEM and sends one X25519
		// key share. Go's default hybrid X25519MLKEM768 share made the
		// appliance encapsulate ML-KEM per handshake (6 % of its storm
		// CPU), work no real switch asks of it.
		CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521},
		// curl's OpenSSL offers resumption (psk_dhe_ke) in every
		// ClientHello but, a new process per request, never holds a
		// session: a server that issues tickets does so for every
		// switch's connection. Go's client offers it only with a cache.
		ClientSessionCache: forgetfulSessionCache{},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
				if want["sha256//"+base64.StdEncoding.EncodeToString(sum[:])] {
					return nil
				}
			}
			return errors.New("the server's key matches no pin")
		}}
	c := *hc
	c.Transport = tr
	return &c, nil
}

// forgetfulSessionCache is a TLS client session cache that keeps
// nothing: the client offers resumption as curl does and never resumes,
// as curl in a new process cannot.
type forgetfulSessionCache struct{}

func (forgetfulSessionCache) Get(string) (*tls.ClientSessionState, bool) { return nil, false }
func (forgetfulSessionCache) Put(string, *tls.ClientSessionState)        {}

// post returns the answer's status, its Retry-After and, on 200, its body.
func post(ctx context.Context, hc *http.Client, url, bearer string, body []byte) (int, time.Duration, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "SONiC-ZTP/0.1")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, nil, err
	}
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode >= 400 {
		return resp.StatusCode, 0, nil, errors.New(string(bytes.TrimSpace(raw)))
	}
	if resp.StatusCode != 200 {
		raw = nil
	}
	return resp.StatusCode, time.Duration(retry) * time.Second, raw, nil
}

// ztpSection is any section of ztp.json with the fields the fleet reads:
// the join plugin's and configdb-json's url.
type ztpSection struct {
	Enrollment string          `json:"enrollment"`
	JoinURL    string          `json:"join-url"`
	TLSPin     string          `json:"tls-pin"`
	MAC        string          `json:"mac"`
	Serial     string          `json:"serial"`
	Hostname   string          `json:"hostname"`
	URL        json.RawMessage `json:"url"`
}
