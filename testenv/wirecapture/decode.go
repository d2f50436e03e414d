package wirecapture

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net/http"
	"regexp"
	"strings"
)

// The decoders undo every encoding a secret may travel under in clear:
// an HTTP body compressed (Content-Encoding: gzip) or chunked, and files
// inside JSON or YAML as base64 or gzip+base64 (the join bundle's files,
// cloud-init's write_files, a kubeconfig's client-key-data). Compressed or
// encoded is not encrypted: a listener decodes it as easily, so the scan
// must too, or compression would hide a leak from the test but not from
// the listener.

// maxDecoded bounds what one decoding yields (a gzip bomb on the wire must
// not take the test's memory).
const maxDecoded = 64 << 20

// maxDepth bounds nested encodings (base64 of gzip of base64 ...).
const maxDepth = 4

// view is bytes to scan and where they came from.
type view struct {
	where string
	data  []byte
}

// expand emits data and every decoding found inside it: gzip as a whole,
// and each base64 run (decoded, and gunzipped if that is gzip).
func expand(where string, data []byte, depth int, emit func(view)) {
	emit(view{where, data})
	if depth >= maxDepth {
		return
	}
	if isGzip(data) {
		if out, ok := gunzip(data); ok {
			expand(where+" (gzip)", out, depth+1, emit)
		}
		return
	}
	for _, loc := range base64Run.FindAllIndex(data, -1) {
		dec, ok := decodeBase64(data[loc[0]:loc[1]])
		if !ok {
			continue
		}
		if isGzip(dec) {
			if out, ok := gunzip(dec); ok {
				expand(where+" (gzip+base64)", out, depth+1, emit)
			}
			continue
		}
		expand(where+" (base64)", dec, depth+1, emit)
	}
}

// base64Run is a candidate base64 text: 24 characters at least (18
// bytes; the shortest secret of interest, a bootstrap token, is 23), line
// breaks allowed (MIME and PEM wrap their base64).
var base64Run = regexp.MustCompile(`[A-Za-z0-9+/_-]{24,}(?:={0,2})(?:\r?\n[A-Za-z0-9+/_-]{4,}={0,2})*`)

func decodeBase64(b []byte) ([]byte, bool) {
	s := strings.NewReplacer("\r", "", "\n", "").Replace(string(b))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if out, err := enc.DecodeString(s); err == nil {
			return out, true
		}
	}
	// A run may start or end in the middle of the text around it (a word
	// glued to it): try the longest prefix of whole quantums.
	t := strings.TrimRight(s, "=")
	t = t[:len(t)/4*4]
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if out, err := enc.DecodeString(t); err == nil && len(t) >= 24 {
			return out, true
		}
	}
	return nil, false
}

func isGzip(b []byte) bool { return len(b) >= 10 && b[0] == 0x1f && b[1] == 0x8b && b[2] == 8 }

// gunzip decodes what it can: a body cut short by the capture still
// yields its beginning.
func gunzip(b []byte) ([]byte, bool) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, false
	}
	out, _ := io.ReadAll(io.LimitReader(zr, maxDecoded))
	return out, len(out) > 0
}

// httpViews parses a connection as HTTP/1.x: each request's head and
// body from the client's stream, each response's from the server's,
// bodies de-chunked and decompressed. Where it is not HTTP it yields
// nothing (the raw streams are scanned anyway). labels get each message's
// place, e.g. "HTTP response to POST /join".
func httpViews(c *Conn, redact func(string) string, emit func(dir Flow, v view)) {
	if len(c.Client.Pieces) == 0 {
		return
	}
	// Only the first piece: after a hole the stream is mid-message.
	br := bufio.NewReader(bytes.NewReader(c.Client.Pieces[0]))
	var reqs []*http.Request
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			break
		}
		label := "HTTP " + req.Method + " " + redact(req.URL.Path)
		reqs = append(reqs, req)
		body, _ := io.ReadAll(io.LimitReader(req.Body, maxDecoded))
		req.Body.Close()
		// The request line too: a secret in a query is in clear as well.
		emitBody(c.Client.Flow, label+" request", req.Method+" "+req.RequestURI+"\n", req.Header, body, emit)
	}
	if len(reqs) == 0 || len(c.Server.Pieces) == 0 {
		return
	}
	br = bufio.NewReader(bytes.NewReader(c.Server.Pieces[0]))
	for i := 0; ; {
		var req *http.Request
		if i < len(reqs) {
			req = reqs[i]
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			break
		}
		// An interim response (100 Continue, which curl asks for before a
		// large body) precedes the request's own.
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		i++
		label := "HTTP response"
		if req != nil {
			label += " to " + req.Method + " " + redact(req.URL.Path)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxDecoded))
		resp.Body.Close()
		emitBody(c.Server.Flow, label, resp.Status+"\n", resp.Header, body, emit)
		if resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
}

func emitBody(dir Flow, label, first string, h http.Header, body []byte, emit func(Flow, view)) {
	var head bytes.Buffer
	head.WriteString(first)
	h.Write(&head)
	emit(dir, view{label + " header", head.Bytes()})
	if len(body) == 0 {
		return
	}
	if strings.Contains(strings.ToLower(h.Get("Content-Encoding")), "gzip") {
		if out, ok := gunzip(body); ok {
			expand(label+" body (Content-Encoding: gzip)", out, 1, func(v view) { emit(dir, v) })
			return
		}
	}
	expand(label+" body", body, 0, func(v view) { emit(dir, v) })
}

// tftpFile reassembles a TFTP transfer from the sender's DATA packets
// (opcode 3): blocks in order, each once (a retransmitted block is the
// same block again). ok is false when the flow is not TFTP data.
func tftpFile(datagrams [][]byte) ([]byte, bool) {
	var out []byte
	var last uint16
	n := 0
	for _, d := range datagrams {
		if len(d) < 4 || binary.BigEndian.Uint16(d) != 3 {
			continue
		}
		block := binary.BigEndian.Uint16(d[2:])
		if n > 0 && block != last+1 {
			continue
		}
		out = append(out, d[4:]...)
		last = block
		n++
	}
	return out, n > 0
}

// tftpRequest is the file name of a TFTP read or write request.
func tftpRequest(d []byte) (string, bool) {
	if len(d) < 4 {
		return "", false
	}
	if op := binary.BigEndian.Uint16(d); op != 1 && op != 2 {
		return "", false
	}
	name, _, ok := bytes.Cut(d[2:], []byte{0})
	return string(name), ok && len(name) > 0
}
