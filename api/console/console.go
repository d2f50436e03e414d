// Package console is the web console's door. It holds the page shells
// (html/template) and static assets (app.js, style.css, the icon),
// embedded in the binary: no front-end toolchain, no runtime fetch. Pages
// carry no data; app.js fills them from the REST API with the session
// cookie, so roles and account ownership have one implementation (package
// rest's).
//
// The door (door.go) serves the pages and assets (pages.go) with a strict
// CSP, signs in with an API key and its secret at POST /ui/signin for an
// in-memory session cookie and CSRF token (session.go), and streams what
// changes in the event log to signed-in pages (stream.go, GET /ui/stream).
// REST accepts the session on /api/v1 through rest.Sessions, which the
// door satisfies; every write must carry the session's CSRF token
// (X-CSRF-Token). Failed sign-ins count in the same per-address limiter
// (package auth) as failed signatures. The stream sends REST's views of
// devices and events and REST's device counts. Package api mounts the
// door on the API's engine.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"mime"
	"path"
	"strings"
)

// StaticPrefix is where assets are served: StaticPrefix + <hash>/<name>.
// The hash is of the content, so an asset's URL changes with it and may be
// cached forever.
const StaticPrefix = "/ui/static/"

//go:embed templates/*.html static/*
var files embed.FS

// Asset is one static file.
type Asset struct {
	Name        string
	Hash        string // first 16 hex digits of the content's SHA-256
	ContentType string
	Body        []byte
}

// URL is where the asset is served.
func (a Asset) URL() string { return StaticPrefix + a.Hash + "/" + a.Name }

// View is what a page shell shows: never device or cluster data (app.js
// fetches that), only who is signed in and which page this is.
type View struct {
	Page  string // <main data-page>: overview, devices, device, ..., rollouts, rollout, signin, forbidden
	Nav   string // the nav entry marked current
	Title string
	// The signed-in key; zero on the sign-in form.
	Signed bool
	Name   string
	Role   string
	Admin  bool
	CSRF   string
	// ID is the device, cluster or rollout a detail page shows (<main data-id>).
	ID string
	// Sign-in form: where to go after, and whether the last try failed.
	Next         string
	SigninFailed bool
	// Message is the forbidden page's text.
	Message string
}

var (
	assets = map[string]Asset{}
	pages  = map[string]*template.Template{}
)

func init() {
	ents, err := fs.ReadDir(files, "static")
	if err != nil {
		panic(err)
	}
	for _, e := range ents {
		b, err := files.ReadFile("static/" + e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(e.Name()))
		switch path.Ext(e.Name()) { // not left to the host's mime tables
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		assets[e.Name()] = Asset{Name: e.Name(), Hash: hex.EncodeToString(sum[:8]), ContentType: ct, Body: b}
	}
	funcs := template.FuncMap{"asset": func(name string) string {
		a, ok := assets[name]
		if !ok {
			panic("console: no asset " + name)
		}
		return a.URL()
	}}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html"))
	ents, err = fs.ReadDir(files, "templates")
	if err != nil {
		panic(err)
	}
	for _, e := range ents {
		name := strings.TrimSuffix(e.Name(), ".html")
		if name == "layout" {
			continue
		}
		pages[name] = template.Must(template.Must(base.Clone()).ParseFS(files, "templates/"+e.Name()))
	}
}

// StaticAsset returns the asset named name.
func StaticAsset(name string) (Asset, bool) {
	a, ok := assets[name]
	return a, ok
}

// HasPage reports whether a page template exists.
func HasPage(page string) bool { return pages[page] != nil }

// Render writes the page shell of v.Page.
func Render(w io.Writer, v View) error {
	t, ok := pages[v.Page]
	if !ok {
		return fmt.Errorf("console: no page %q", v.Page)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}
