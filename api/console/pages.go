package console

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/core"
)

// The web console's pages: server-rendered shells from package
// console, filled by its app.js from the REST API with the session cookie.
// A page holds no data, so without a session each answers the sign-in form;
// what a session may see is decided by the REST handlers, as for any key.

// Paths are the path patterns (net/http ServeMux syntax) of the
// console besides "/" itself: internal/app routes them to the API's
// handler on the main listener when the API is served there.
var Paths = []string{"/ui/", "/devices", "/devices/", "/clusters", "/clusters/", "/rollouts", "/rollouts/", "/versions", "/images",
	"/leases", "/positions", "/settings"}

// consoleCSP allows the console's own script, style and images (and data:
// images) only: no inline script or style, no framing.
const consoleCSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'"

type consolePage struct {
	path, page, nav, title string
	admin                  bool // a user session gets the forbidden page
}

var consolePages = []consolePage{
	{"/", "overview", "overview", "Overview", false},
	{"/devices", "devices", "devices", "Devices", false},
	{"/devices/:id", "device", "devices", "Device", false},
	{"/clusters", "clusters", "clusters", "Clusters", false},
	{"/clusters/:id", "cluster", "clusters", "Cluster", false},
	{"/rollouts", "rollouts", "rollouts", "Rollouts", false},
	{"/rollouts/:id", "rollout", "rollouts", "Rollout", false},
	{"/versions", "versions", "versions", "Versions", false},
	{"/images", "images", "images", "Images", false},
	{"/leases", "leases", "leases", "Leases", false},
	{"/positions", "positions", "positions", "Positions", false},
	{"/settings", "settings", "settings", "Settings", true},
}

func (s *Door) routeConsolePages(e *gin.Engine) {
	for _, p := range consolePages {
		e.GET(p.path, s.pgServe(p))
	}
	e.GET(StaticPrefix+":hash/:name", pgStatic)
}

// SecurityHeaders puts pgHeaders on every answer of the API's engine
// before its handler runs, so that refusals (404 on a console path, which
// reflects the path, 405, 401, a static asset not found) carry them too.
// They cost a JSON answer nothing.
func SecurityHeaders(c *gin.Context) {
	pgHeaders(c.Writer.Header())
	c.Next()
}

// pgHeaders are the security headers of every console answer.
func pgHeaders(h http.Header) {
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
}

func (s *Door) pgServe(p consolePage) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Set("op", "console."+p.page)
		v := View{Page: p.page, Nav: p.nav, Title: p.title}
		status := http.StatusOK
		sess, ok := s.sessionOf(c.Request)
		switch {
		case !ok:
			v = View{Page: "signin", Title: "Sign in", Next: pgNext(c.Request), SigninFailed: c.Query("signin") == "failed"}
		case p.admin && !sess.Admin:
			status = http.StatusForbidden
			v.Page, v.Message = "forbidden", "The "+strings.ToLower(p.title)+" page needs an admin API key."
		}
		if ok {
			v.Signed, v.Name, v.Role, v.Admin, v.CSRF = true, sess.Name, string(sess.Role), sess.Admin, sess.CSRF
			if v.Name == "" {
				v.Name = sess.APIKey
			}
			v.ID = c.Param("id")
		}
		var buf bytes.Buffer
		if err := Render(&buf, v); err != nil {
			s.fail(c, core.Errorf(core.KindInternal, "console page %s: %v", v.Page, err))
			return
		}
		h := c.Writer.Header()
		pgHeaders(h)
		h.Set("Cache-Control", "no-store") // it carries the CSRF token
		h.Set("Content-Type", "text/html; charset=utf-8")
		c.Writer.WriteHeader(status)
		_, _ = c.Writer.Write(buf.Bytes())
	}
}

// pgNext is where the sign-in form sends the browser after signing in: the
// page asked for, or after a failed attempt the next it carried. Only a
// local path (starting with one "/") is kept.
func pgNext(r *http.Request) string {
	next := r.URL.RequestURI()
	if r.URL.Path == "/" && (r.URL.Query().Has("next") || r.URL.Query().Has("signin")) {
		next = r.URL.Query().Get("next")
	}
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}

// pgStatic serves an embedded asset under its content hash: the URL
// changes with the content, so it may be cached for good. A stale hash is
// not found, so an old page never runs a newer script by accident.
func pgStatic(c *gin.Context) {
	c.Set("op", "console.static")
	a, ok := StaticAsset(c.Param("name"))
	if !ok || a.Hash != c.Param("hash") {
		rest.Refuse(c, core.KindNotFound, "no such console asset: "+c.Request.URL.Path)
		return
	}
	h := c.Writer.Header()
	pgHeaders(h)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("ETag", `"`+a.Hash+`"`)
	if c.GetHeader("If-None-Match") == `"`+a.Hash+`"` {
		c.Writer.WriteHeader(http.StatusNotModified)
		return
	}
	c.Data(http.StatusOK, a.ContentType, a.Body)
}
