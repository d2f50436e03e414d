// Package client talks to a ztpd server's APIs: the REST API (/api/v1) and
// the CloudStack-compatible API (/client/api), signed with an API key, or
// through the admin socket as the local administrator. It declares the
// JSON both APIs answer (types.go) once, for the server's views, the CLI
// and the test environment alike.
//
// It imports no server package: only the standard library, the signing
// rules and the domain's value types.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ztpd/ztpd/api/signing"
)

// SignatureLifetime is how long a request's signature stays valid.
const SignatureLifetime = 5 * time.Minute

// maxAnswer bounds what is read of one answer.
const maxAnswer = 64 << 20

// LocalBaseURL is the base URL of requests through the admin socket: the
// socket's transport ignores the host.
const LocalBaseURL = "http://ztpd"

// Client calls one server. Its zero value is not usable: use New or
// NewLocal.
type Client struct {
	// BaseURL is scheme://host:port, without /client/api or /api/v1.
	BaseURL string
	Key     string
	Secret  []byte
	HTTP    *http.Client
	// Local requests go through the admin socket, which serves the API as
	// the local administrator: they carry no signature.
	Local bool
}

// New is a client of the server at baseURL (a trailing / or /client/api
// is dropped) signing with key and secret. A nil hc is
// http.DefaultClient.
func New(baseURL, key string, secret []byte, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	base := strings.TrimSuffix(strings.TrimSuffix(baseURL, "/"), "/client/api")
	return &Client{BaseURL: base, Key: key, Secret: secret, HTTP: hc}
}

// NewLocal is a client of the admin socket hc dials.
func NewLocal(hc *http.Client) *Client {
	return &Client{BaseURL: LocalBaseURL, HTTP: hc, Local: true}
}

// Error is an answer of either API that is not a success: the REST API's
// error body, a CloudStack error answer or a failed asynchronous job.
type Error struct {
	// HTTPStatus is the answer's status (200 for a failed job: the query
	// about it succeeded).
	HTTPStatus int
	// Code is the REST API's error code (e.g. "not_found").
	Code string
	// CSErrorCode and CSCode are CloudStack's errorcode and cserrorcode.
	CSErrorCode int
	CSCode      int
	Message     string
	// RequestID is the ID the server logged the request under.
	RequestID string
	// Method and Path name a REST request whose answer held no error
	// body (Message then is the start of what it held).
	Method, Path string
	cloudStack   bool
}

func (e *Error) Error() string {
	switch {
	case e.cloudStack:
		return fmt.Sprintf("%s (error %d)", e.Message, e.CSErrorCode)
	case e.Code == "":
		return fmt.Sprintf("%s %s: HTTP %d: %.200s", e.Method, e.Path, e.HTTPStatus, e.Message)
	}
	return fmt.Sprintf("%s (%s, HTTP %d)", e.Message, e.Code, e.HTTPStatus)
}

// CloudStack reports whether the error is a CloudStack answer.
func (e *Error) CloudStack() bool { return e.cloudStack }

func csErrorOf(b CSErrorBody, status int, requestID string) *Error {
	return &Error{HTTPStatus: status, CSErrorCode: b.ErrorCode, CSCode: b.CSErrorCode, Message: b.ErrorText,
		RequestID: requestID, cloudStack: true}
}

// CS calls a CloudStack command and returns the envelope's inner object.
// A failure is an *Error wrapped with the command's name.
func (c *Client) CS(command string, params url.Values) (map[string]json.RawMessage, error) {
	return c.CSContext(context.Background(), command, params)
}

// CSContext is CS bounded by ctx.
func (c *Client) CSContext(ctx context.Context, command string, params url.Values) (map[string]json.RawMessage, error) {
	if params == nil {
		params = url.Values{}
	}
	params.Set("command", command)
	params.Set("response", "json")
	q := params.Encode()
	if !c.Local {
		q = c.SignCS(params, time.Now().Add(SignatureLifetime))
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.BaseURL+"/client/api", strings.NewReader(q))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", command, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, err
	}
	var env map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &env); err != nil || len(env) != 1 {
		return nil, fmt.Errorf("%s: HTTP %d, unexpected answer: %.200s", command, resp.StatusCode, raw)
	}
	for _, inner := range env {
		if resp.StatusCode != http.StatusOK {
			var b CSErrorBody
			if raw, err := json.Marshal(inner); err == nil {
				_ = json.Unmarshal(raw, &b)
			}
			if b.ErrorText == "" {
				b = CSErrorBody{ErrorCode: resp.StatusCode, ErrorText: resp.Status}
			}
			return nil, fmt.Errorf("%s: %w", command, csErrorOf(b, resp.StatusCode, resp.Header.Get("X-Request-Id")))
		}
		return inner, nil
	}
	return nil, nil
}

// CSList calls a list command and decodes its items (key: the object
// name, e.g. "kubernetescluster") into out.
func (c *Client) CSList(command, key string, params url.Values, out any) error {
	inner, err := c.CS(command, params)
	if err != nil {
		return err
	}
	raw := inner[key]
	if len(raw) == 0 {
		raw = json.RawMessage("[]")
	}
	return json.Unmarshal(raw, out)
}

// CSStart starts an asynchronous command and returns its job's ID.
func (c *Client) CSStart(command string, params url.Values) (string, error) {
	inner, err := c.CS(command, params)
	if err != nil {
		return "", err
	}
	var jobID string
	_ = json.Unmarshal(inner["jobid"], &jobID)
	return jobID, nil
}

// Job status values of queryAsyncJobResult.
const (
	JobPending   = 0
	JobSucceeded = 1
	JobFailed    = 2
)

// QueryJob asks once about an asynchronous job (started through either
// API): its status and, when it ended, its result. A failed job's error
// is an *Error.
func (c *Client) QueryJob(jobID string) (status int, result json.RawMessage, err error) {
	j, err := c.CS("queryAsyncJobResult", url.Values{"jobid": {jobID}})
	if err != nil {
		return JobPending, nil, err
	}
	_ = json.Unmarshal(j["jobstatus"], &status)
	if status == JobFailed {
		var b CSErrorBody
		_ = json.Unmarshal(j["jobresult"], &b)
		return status, j["jobresult"], csErrorOf(b, http.StatusOK, "")
	}
	return status, j["jobresult"], nil
}

// REST calls the REST API (path from /api/v1 on) with body as JSON (none
// when nil) and decodes a success into out (unless nil). A failure is an
// *Error.
func (c *Client) REST(method, path string, query url.Values, body, out any) error {
	return c.RESTContext(context.Background(), method, path, query, body, out)
}

// RESTContext is REST bounded by ctx.
func (c *Client) RESTContext(ctx context.Context, method, path string, query url.Values, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	u := c.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.SignREST(req, raw)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{HTTPStatus: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"), Method: method, Path: path}
		var b ErrorBody
		if json.Unmarshal(data, &b) == nil && b.Error.Message != "" {
			e.Code, e.Message = b.Error.Code, b.Error.Message
			if b.Error.RequestID != "" {
				e.RequestID = b.Error.RequestID
			}
		} else {
			e.Message = string(data)
		}
		return e
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// SignREST sets req's Authorization header for the REST API (nothing for
// a local client); body is what req sends.
func (c *Client) SignREST(req *http.Request, body []byte) {
	if c.Local {
		return
	}
	req.Header.Set("Authorization", c.RESTAuthorization(req.Method, req.URL.EscapedPath(), req.URL.Query(), body,
		time.Now().Add(SignatureLifetime)))
}

// RESTAuthorization is the Authorization header of a REST request valid
// until expires (the server refuses expiries further ahead than its
// api.max_signature_lifetime).
func (c *Client) RESTAuthorization(method, path string, query url.Values, body []byte, expires time.Time) string {
	return signing.RESTAuthorization(method, path, query, body, c.Key, c.Secret, expires)
}

// SignCS returns the query string of a CloudStack request (params with
// command and response set) signed to be valid until expires.
func (c *Client) SignCS(params url.Values, expires time.Time) string {
	return signing.SignQuery(params, c.Key, c.Secret, expires)
}

// All follows next_cursor through every page of a REST list (empty query
// values are dropped); max > 0 bounds the count.
func All[T any](c *Client, path string, query url.Values, max int) ([]T, error) {
	var all []T
	q := url.Values{}
	for k, v := range query {
		if len(v) > 0 && v[0] != "" {
			q[k] = v
		}
	}
	q.Set("limit", "1000")
	for {
		var p Page[T]
		if err := c.REST("GET", path, q, nil, &p); err != nil {
			return nil, err
		}
		all = append(all, p.Items...)
		if p.NextCursor == "" || (max > 0 && len(all) >= max) {
			break
		}
		q.Set("cursor", p.NextCursor)
	}
	if max > 0 && len(all) > max {
		all = all[:max]
	}
	if all == nil {
		all = []T{}
	}
	return all, nil
}
