package apitest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/ztpd/ztpd/internal/core"
)

// The REST client the doors' tests sign with: written from the OpenAPI
// document and the signing rules, independently of package signing.

// LoadDoc loads and validates the OpenAPI document doc (rest.OpenAPI()).
func LoadDoc(t testing.TB, doc []byte) (*openapi3.T, routers.Router) {
	t.Helper()
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(doc)
	if err != nil {
		t.Fatalf("openapi.json does not load: %v", err)
	}
	if err := d.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI 3 document: %v", err)
	}
	router, err := legacy.NewRouter(d)
	if err != nil {
		t.Fatal(err)
	}
	return d, router
}

// RESTClient signs REST requests as the OpenAPI document describes, and
// validates every response against the document.
type RESTClient struct {
	T      *testing.T
	Base   string
	APIKey string
	Secret string
	HTTP   *http.Client
	Router routers.Router
	// sent counts requests: each is signed with its own expiry, so the
	// same write twice in one second is two signatures, as a real client
	// signs every write afresh (the replay guard refuses a repeat).
	Sent int
}

// Authorization is the ZTPD-HMAC-SHA1 header of a request expiring at exp.
func (c *RESTClient) Authorization(method, path string, q url.Values, body []byte, exp time.Time) string {
	v := url.Values{}
	for k, vals := range q {
		v[k] = vals
	}
	// Milliseconds: two identical writes a moment apart must not sign
	// alike, or the second is refused as a replay.
	e := exp.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	v.Set("ztpd-method", method)
	v.Set("ztpd-path", path)
	v.Set("ztpd-expires", e)
	v.Set("ztpd-apikey", c.APIKey)
	if len(body) > 0 {
		sum := sha256.Sum256(body)
		v.Set("ztpd-body-sha256", hex.EncodeToString(sum[:]))
	}
	// Like CloudStack's signature, but the string is not lowercased.
	return fmt.Sprintf("ZTPD-HMAC-SHA1 apikey=%s, expires=%s, signature=%s", c.APIKey, e, HMACExact(c.Secret, EncodeValues(v)))
}

// RESTResp is an answer as RESTClient read it.
type RESTResp struct {
	Status int
	Header http.Header
	Raw    []byte
}

// Decode decodes the answer's body into v.
func (r RESTResp) Decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Raw, v); err != nil {
		t.Fatalf("decode %s: %v", r.Raw, err)
	}
}

// Do sends a signed request (unsigned without an APIKey) with body as
// JSON.
func (c *RESTClient) Do(method, pathAndQuery string, body any) RESTResp {
	c.T.Helper()
	u, err := url.Parse(c.Base + pathAndQuery)
	if err != nil {
		c.T.Fatal(err)
	}
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, _ := http.NewRequest(method, u.String(), bytes.NewReader(raw))
	if c.APIKey != "" {
		c.Sent++
		exp := time.Now().Add(5*time.Minute + time.Duration(c.Sent%600)*time.Second)
		req.Header.Set("Authorization", c.Authorization(method, u.EscapedPath(), u.Query(), raw, exp))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.Send(req)
}

// Send sends req as it is and validates the answer.
func (c *RESTClient) Send(req *http.Request) RESTResp {
	c.T.Helper()
	resp, err := c.HTTP.Do(req)
	if err != nil {
		c.T.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := RESTResp{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	c.Validate(req, out)
	return out
}

// Validate checks the response against the OpenAPI document: the status
// must be documented for the operation and the body must match its schema.
func (c *RESTClient) Validate(req *http.Request, r RESTResp) {
	c.T.Helper()
	if c.Router == nil {
		return
	}
	vreq := req.Clone(context.Background())
	vreq.URL.Host, vreq.URL.Scheme, vreq.Host = "", "", ""
	route, params, err := c.Router.FindRoute(vreq)
	if err != nil {
		if r.Status == http.StatusNotFound || r.Status == http.StatusMethodNotAllowed {
			var e map[string]map[string]string
			if json.Unmarshal(r.Raw, &e) != nil || e["error"]["code"] == "" {
				c.T.Errorf("%s %s: %d without a JSON error body: %s", req.Method, req.URL.Path, r.Status, r.Raw)
			}
			return
		}
		c.T.Errorf("%s %s answered %d but is not in openapi.json: %v", req.Method, req.URL.Path, r.Status, err)
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route},
		Status:                 r.Status, Header: r.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(r.Raw)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.T.Errorf("%s %s -> %d does not match openapi.json: %v\nbody: %s", req.Method, req.URL.Path, r.Status, err, r.Raw)
	}
}

// NewRESTClient is a client of ts signing with key and secret, validating
// answers against the OpenAPI document doc.
func NewRESTClient(t *testing.T, ts *httptest.Server, key, secret string, doc []byte) *RESTClient {
	_, router := LoadDoc(t, doc)
	return &RESTClient{T: t, Base: ts.URL, APIKey: key, Secret: secret, HTTP: ts.Client(), Router: router}
}

// Seed stores devices leased devices (a third of them VMs, the rest
// SONiC switches), their leases and DHCP events, and a token.
func Seed(t testing.TB, st core.Store, devices int) {
	t.Helper()
	err := st.Update(func(tx core.Tx) error {
		now := time.Now().UTC()
		for i := 0; i < devices; i++ {
			mac := fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256)
			kind := core.KindSONiC
			if i%3 == 0 {
				kind = core.KindVM
			}
			d := core.Device{ID: mac, Kind: kind, MAC: mac, Serial: fmt.Sprintf("SN%05d", i), IP: fmt.Sprintf("10.99.%d.%d", 1+i/250, 1+i%250),
				Subnet: "lab", State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			if err := tx.Leases().Put(core.Lease{IP: d.IP, MAC: mac, Subnet: "lab", State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour), UpdatedAt: now}); err != nil {
				return err
			}
			if _, err := tx.Events().Append(core.Event{Type: "dhcp.ack", Device: mac, Message: "lease " + d.IP}); err != nil {
				return err
			}
		}
		return tx.Tokens().Put(core.Token{ID: "abcdef", Kind: "kubeadm", SecretHash: "deadbeefsecrethash", Cluster: "c", Created: now})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// EncodeValues mirrors the SDK: sort keys, url.QueryEscape each value, then
// "+" -> "%20" and "%2A" -> "*".
func EncodeValues(v url.Values) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		for _, val := range v[k] {
			e := url.QueryEscape(val)
			e = strings.ReplaceAll(e, "+", "%20")
			e = strings.ReplaceAll(e, "%2A", "*")
			parts = append(parts, k+"="+e)
		}
	}
	return strings.Join(parts, "&")
}

// HMACExact is the REST signature: the same HMAC over the string as is.
func HMACExact(secret, s string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(s))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}
