package ztphttp

import (
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/ztpd/ztpd/internal/httpserve"
)

// FrontDoor is where a person who opens the device port in a browser (or
// curls it) finds the web console and the API, when they are served on a
// listener of their own. The zero FrontDoor: "/" answers 404 as any
// unknown path does.
type FrontDoor struct {
	ConsoleURL string // e.g. https://10.0.0.1:8443/
	APIURL     string // e.g. https://10.0.0.1:8443/api/v1/
}

// frontDoorAnswer is the JSON answer of "/" for clients that do not prefer
// HTML.
type frontDoorAnswer struct {
	Service string `json:"service"`
	Message string `json:"message"`
	Console string `json:"console"`
	API     string `json:"api"`
}

const frontDoorMessage = "this port serves devices (ZTP content, joins, images); the web console and the API are on the API listener"

// frontDoorPage is the HTML answer; html/template escapes every value.
var frontDoorPage = template.Must(template.New("door").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ztpd</title></head>
<body>
<h1>ztpd</h1>
<p>This port serves devices (ZTP content, joins, images). The web console and the API are on the API listener:</p>
<ul>
<li>Web console: <a href="{{.Console}}">{{.Console}}</a></li>
<li>API: <a href="{{.API}}">{{.API}}</a></li>
</ul>
</body></html>
`))

// frontDoor answers "/" for a person: where the console and the API are,
// as HTML when the request prefers it (a browser), else as JSON.
func (s *Server) frontDoor(w http.ResponseWriter, r *http.Request) {
	ans := frontDoorAnswer{Service: "ztpd", Message: frontDoorMessage, Console: s.door.ConsoleURL, API: s.door.APIURL}
	w.Header().Add("Vary", "Accept")
	if !prefersHTML(r.Header.Values("Accept")) {
		httpserve.WriteJSON(w, http.StatusOK, ans)
		return
	}
	var b strings.Builder
	if err := frontDoorPage.Execute(&b, ans); err != nil {
		s.fail(w, r, err)
		return
	}
	writeDoc(w, "text/html; charset=utf-8", []byte(b.String()))
}

// prefersHTML reports whether Accept values rank text/html above
// application/json (RFC 9110 12.5.1): a browser's Accept does, curl's */*
// and an API client's do not.
func prefersHTML(values []string) bool {
	html, json := -1.0, -1.0 // -1: not named, nor by a wildcard
	var html1, json1 int     // how specific the range that set each is
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			mt, params, _ := strings.Cut(strings.TrimSpace(item), ";")
			mt = strings.ToLower(strings.TrimSpace(mt))
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(strings.TrimSpace(k), "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
						q = f
					} else {
						q = 0
					}
				}
			}
			rank := func(full, group string) int {
				switch mt {
				case full:
					return 3
				case group:
					return 2
				case "*/*":
					return 1
				}
				return 0
			}
			if n := rank("text/html", "text/*"); n > html1 {
				html, html1 = q, n
			}
			if n := rank("application/json", "application/*"); n > json1 {
				json, json1 = q, n
			}
		}
	}
	return html > 0 && html > json
}
