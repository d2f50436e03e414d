package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/core"
)

// The REST client of package rest's tests, for the tests here that go
// through REST (this package's tests cannot import package rest's).

// loadDoc loads and validates the OpenAPI document.
func loadDoc(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(rest.OpenAPI())
	if err != nil {
		t.Fatalf("openapi.json does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI 3 document: %v", err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, router
}

// restClient signs REST requests as the OpenAPI document describes, and
// validates every response against the document.
type restClient struct {
	t      *testing.T
	base   string
	apiKey string
	secret string
	http   *http.Client
	router routers.Router
	// sent counts requests: each is signed with its own expiry, so the
	// same write twice in one second is two signatures, as a real client
	// signs every write afresh (the replay guard refuses a repeat).
	sent int
}

func (c *restClient) authorization(method, path string, q url.Values, body []byte, exp time.Time) string {
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
	v.Set("ztpd-apikey", c.apiKey)
	if len(body) > 0 {
		sum := sha256.Sum256(body)
		v.Set("ztpd-body-sha256", hex.EncodeToString(sum[:]))
	}
	// Like CloudStack's signature, but the string is not lowercased.
	return fmt.Sprintf("ZTPD-HMAC-SHA1 apikey=%s, expires=%s, signature=%s", c.apiKey, e, hmacExact(c.secret, encodeValues(v)))
}

type restResp struct {
	status int
	header http.Header
	raw    []byte
}

func (r restResp) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.raw, v); err != nil {
		t.Fatalf("decode %s: %v", r.raw, err)
	}
}

func (c *restClient) do(method, pathAndQuery string, body any) restResp {
	c.t.Helper()
	u, err := url.Parse(c.base + pathAndQuery)
	if err != nil {
		c.t.Fatal(err)
	}
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, _ := http.NewRequest(method, u.String(), bytes.NewReader(raw))
	if c.apiKey != "" {
		c.sent++
		exp := time.Now().Add(5*time.Minute + time.Duration(c.sent%600)*time.Second)
		req.Header.Set("Authorization", c.authorization(method, u.EscapedPath(), u.Query(), raw, exp))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.send(req)
}

func (c *restClient) send(req *http.Request) restResp {
	c.t.Helper()
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := restResp{status: resp.StatusCode, header: resp.Header, raw: raw}
	c.validate(req, out)
	return out
}

// validate checks the response against the OpenAPI document: the status
// must be documented for the operation and the body must match its schema.
func (c *restClient) validate(req *http.Request, r restResp) {
	c.t.Helper()
	if c.router == nil {
		return
	}
	vreq := req.Clone(context.Background())
	vreq.URL.Host, vreq.URL.Scheme, vreq.Host = "", "", ""
	route, params, err := c.router.FindRoute(vreq)
	if err != nil {
		if r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed {
			var e map[string]map[string]string
			if json.Unmarshal(r.raw, &e) != nil || e["error"]["code"] == "" {
				c.t.Errorf("%s %s: %d without a JSON error body: %s", req.Method, req.URL.Path, r.status, r.raw)
			}
			return
		}
		c.t.Errorf("%s %s answered %d but is not in openapi.json: %v", req.Method, req.URL.Path, r.status, err)
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route},
		Status:                 r.status, Header: r.header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(r.raw)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.t.Errorf("%s %s -> %d does not match openapi.json: %v\nbody: %s", req.Method, req.URL.Path, r.status, err, r.raw)
	}
}

func (e *env) rest(key, secret string) *restClient {
	_, router := loadDoc(e.t)
	return &restClient{t: e.t, base: e.ts.URL, apiKey: key, secret: secret, http: e.ts.Client(), router: router}
}

func seed(t *testing.T, st core.Store, devices int) {
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
