package console

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// Deps are what the console's door needs; the composer (package api)
// shares the limiter and failure log with the other doors.
type Deps struct {
	Log      *slog.Logger
	Store    core.Store
	Keys     *apikeys.Service
	Limiter  *auth.FailLimiter
	Failures *auth.Failures
	// AuthFailures counts failed authentications by API and outcome.
	AuthFailures *prometheus.CounterVec
	// Counts are the device counts REST's overview shows, in the scope of
	// own (all devices when nil): the live stream sends them with every
	// update (package rest's Door.DeviceCounts).
	Counts func(own map[string]bool) (client.DeviceCounts, error)
	Now    func() time.Time
}

// consoleMetrics are the metrics the console's door records.
type consoleMetrics struct {
	authFailures *prometheus.CounterVec
}

// Door is the web console: its pages, sessions and live stream.
type Door struct {
	log      *slog.Logger
	st       core.Store
	keys     *apikeys.Service
	limiter  *auth.FailLimiter
	failures *auth.Failures
	now      func() time.Time
	counts   func(own map[string]bool) (client.DeviceCounts, error)
	sessions *sessionTable    // console sessions (session.go)
	hub      *streamHub       // the live stream (stream.go)
	queries  *devices.Queries // the stream's reads of the event log and devices
	metrics  consoleMetrics
}

// New builds the console's door; Route registers its routes.
func New(d Deps) *Door {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	s := &Door{log: d.Log, st: d.Store, keys: d.Keys, limiter: d.Limiter, failures: d.Failures, now: d.Now,
		counts: d.Counts, sessions: newSessionTable(), queries: devices.NewQueries(d.Store),
		metrics: consoleMetrics{authFailures: d.AuthFailures}}
	s.hub = newStreamHub(s)
	return s
}

// Route registers the console's routes on e: sign-in and sign-out, the
// live stream, the pages and their static assets.
func (s *Door) Route(e *gin.Engine) {
	s.routeConsoleSession(e)
	s.routeConsolePages(e)
}

// HasSession reports whether r carries a session cookie (rest.Sessions).
func (s *Door) HasSession(r *http.Request) bool { return hasSessionCookie(r) }

// Authenticate answers the credential of the request's session, checking
// its CSRF token on writes, or refuses the request and reports false
// (rest.Sessions).
func (s *Door) Authenticate(c *gin.Context) (apikeys.Credential, bool) { return s.consoleAuth(c) }

// fail answers err in the REST error shape (the console's routes are
// refused as REST's are: rest.Refuse) and stops the handler chain.
// Internal errors are logged with a request id, which is all the client
// sees.
func (s *Door) fail(c *gin.Context, err error) {
	httpserve.WriteError(c.Writer, c.Request, s.log, err)
	c.Abort()
}
