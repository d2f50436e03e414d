package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/ztp/content"
)

// DevicePreviewer is the loaded profile set as the API needs it
// (internal/app implements it over the profiles in use).
type DevicePreviewer interface {
	// PreviewDevice is what d fetches under the loaded profiles
	// (content.PreviewDevice with the server's options and image store).
	PreviewDevice(d core.Device) (*content.Preview, error)
	// ProfilesNaming names the loaded profiles that serve image im: by
	// sonic.image, or an installer of the SONiC version they pin.
	ProfilesNaming(im core.Image) []string
}

// previewDevice answers what a device fetches, rendered by the same code
// that serves it, with every secret masked: the console shows it to any
// admin looking over an operator's shoulder.
func (s *Door) previewDevice(c *gin.Context) {
	if s.console.preview == nil {
		Refuse(c, core.KindUnavailable, "device previews are not available: no profiles are loaded in this process")
		return
	}
	ref := c.Param("id")
	d, err := s.lookupDevice(callerOf(c), ref)
	if errors.Is(err, core.ErrNotFound) {
		Refuse(c, core.KindNotFound, "device "+ref+" not found")
		return
	}
	if err != nil {
		s.restFail(c, err)
		return
	}
	pv, err := s.console.preview.PreviewDevice(d)
	if err != nil {
		Refuse(c, core.KindInvalid, "preview of "+ref+": "+err.Error())
		return
	}
	out := client.Preview{Kind: pv.Kind, Profile: pv.Profile, ByDefault: pv.ByDefault, Fetches: []client.Fetch{},
		Documents: []client.Document{}, Notes: nonNil(pv.Notes), Warnings: nonNil(pv.Warnings)}
	for _, f := range pv.Fetches {
		out.Fetches = append(out.Fetches, client.Fetch{What: f.What, URL: maskText(f.URL)})
	}
	// Notes and warnings quote the profile (a refused firmware URL).
	out.Notes, out.Warnings = maskTexts(out.Notes), maskTexts(out.Warnings)
	addJSON := func(name string, doc []byte) {
		if doc != nil {
			out.Documents = append(out.Documents, client.Document{Name: name, ContentType: "application/json", Body: maskJSON(doc)})
		}
	}
	addJSON("ztp.json", pv.ZTPJSON)
	addJSON("config_db.json", pv.ConfigDB)
	if pv.Metadata != nil {
		md, err := json.Marshal(pv.Metadata)
		if err != nil {
			s.restFail(c, err)
			return
		}
		addJSON("meta-data", md)
	}
	if pv.UserData != nil {
		out.Documents = append(out.Documents, client.Document{Name: "user-data", ContentType: "text/plain", Body: maskText(string(pv.UserData))})
	}
	if im := pv.Installer; im != nil {
		out.Installer = &client.Image{SHA256: im.SHA256, Name: im.Name, Kind: im.Kind, Platform: im.Platform, Version: im.Version,
			Size: im.Size, Created: im.Created}
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}

// maskTexts is texts masked, in a new slice.
func maskTexts(texts []string) []string {
	out := make([]string, len(texts))
	for i, t := range texts {
		out[i] = maskText(t)
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// lookupDevice finds a device caller sees by ID, MAC or serial number
// (core.ErrNotFound for one it does not see).
func (s *Door) lookupDevice(caller core.Caller, ref string) (core.Device, error) {
	var d core.Device
	err := s.queries.Read(caller, func(r devices.Reader) error {
		var err error
		d, err = r.Device(ref)
		return err
	})
	return d, err
}

// masked replaces every secret a preview shows.
const masked = "********"

var (
	// secretName: a JSON or YAML key whose value is a secret (password,
	// passkey, token, private key, community string, MACsec CAK, ...).
	// Conservative: masking a public key costs less than showing a
	// private one.
	secretName = regexp.MustCompile(`(?i)(pass(word|wd|phrase|key)|secret|token|private|credential|community|psk|(^|[-_])keys?$|certificate[-_]?key|api[-_]?key|(^|[-_])cak$|authorization)`)
	// In free text: PEM private keys, kubeadm bootstrap tokens, a URL's
	// user information, and the value after a secret's name ("password:
	// x", "--token x", "K3S_TOKEN=x", "hashed_passwd: x", quoted values
	// with spaces whole).
	pemPrivate     = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|$)`)
	bootstrapToken = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)
	urlUserinfo    = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@"'<>]+@`)
	namedSecret    = regexp.MustCompile(`(?i)(` + secretWord + `)(["']?[ \t]*[:=][ \t]*|[ \t]+)("[^"\n]*"|'[^'\n]*'|[^\s"',;&}]+)`)
	// secretFlag is a command line's flag whose next argument is a secret
	// (["--password", "x"] in a JSON argument array).
	secretFlag = regexp.MustCompile(`(?i)^-{1,2}` + secretWord + `$`)
	// yamlKey is a YAML mapping line: indent (with a sequence dash), key,
	// and the value after the colon.
	yamlKey = regexp.MustCompile(`^([ \t]*(?:-[ \t]+)?)["']?([^\s:"'#][^:"'#]*?)["']?[ \t]*:(?:[ \t]+(.*))?$`)
	// yamlBlock is a block scalar's indicator ("|", ">-", "|2+").
	yamlBlock = regexp.MustCompile(`^[|>][-+0-9]*([ \t]+#.*)?$`)
)

// secretWord is a secret's name in free text, with any prefix and suffix
// (hashed_passwd, K3S_TOKEN, access_token, --discovery-token,
// AWS_SECRET_ACCESS_KEY, password_hash, ENCRYPTION_KEY).
const secretWord = `[A-Za-z0-9_.-]*(?:password|passwd|passphrase|passkey|secret|token|certificate[-_]key|api[-_]?key|private[-_]?key|psk|[-_]keys?\b)[A-Za-z0-9_.-]*`

// maskText masks the secrets free text (user-data, URLs, JSON strings)
// shows.
func maskText(s string) string {
	s = pemPrivate.ReplaceAllString(s, masked)
	s = bootstrapToken.ReplaceAllString(s, masked)
	s = urlUserinfo.ReplaceAllString(s, "${1}"+masked+"@")
	s = maskYAML(s)
	return namedSecret.ReplaceAllStringFunc(s, func(m string) string {
		g := namedSecret.FindStringSubmatch(m)
		v := masked
		if q := g[3][0]; q == '"' || q == '\'' {
			v = string(q) + masked + string(q)
		}
		return g[1] + g[2] + v
	})
}

// maskYAML masks, line by line, the value of every secret-named YAML key:
// a scalar on its line whole, and a block scalar ("password: |") or a
// nested block ("chpasswd:" and its list) on the lines below it.
func maskYAML(s string) string {
	lines := strings.Split(s, "\n")
	block := -1 // while >= 0: the column of the key whose block is masked
	for i, ln := range lines {
		trimmed := strings.TrimLeft(ln, " \t")
		indent := len(ln) - len(trimmed)
		if block >= 0 {
			if strings.TrimSpace(trimmed) == "" {
				continue
			}
			if indent > block || (indent == block && strings.HasPrefix(trimmed, "- ")) {
				lines[i] = ln[:indent] + masked
				continue
			}
			block = -1
		}
		m := yamlKey.FindStringSubmatchIndex(ln)
		if m == nil || !secretName.MatchString(ln[m[4]:m[5]]) {
			continue
		}
		if m[6] < 0 || yamlBlock.MatchString(strings.TrimSpace(ln[m[6]:m[7]])) || strings.TrimSpace(ln[m[6]:m[7]]) == "" {
			block = m[3] // the key's column: its indent and dash
			continue
		}
		lines[i] = ln[:m[6]] + masked
	}
	return strings.Join(lines, "\n")
}

// maskJSON re-encodes a JSON document, indented and in its own key order,
// with the value of every secret-named key and the secrets inside every
// string masked. A document that is not JSON is masked as text.
func maskJSON(doc []byte) string {
	var buf bytes.Buffer
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := maskValue(dec, &buf); err != nil {
		return maskText(string(doc))
	}
	var out bytes.Buffer
	if err := json.Indent(&out, buf.Bytes(), "", "  "); err != nil {
		return maskText(string(doc))
	}
	return out.String()
}

// maskValue copies the next JSON value from dec to w, masking as maskJSON.
func maskValue(dec *json.Decoder, w *bytes.Buffer) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			w.WriteByte('{')
			for i := 0; dec.More(); i++ {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := kt.(string)
				if i > 0 {
					w.WriteByte(',')
				}
				writeJSONString(w, key)
				w.WriteByte(':')
				if secretName.MatchString(key) {
					if err := skipValue(dec); err != nil {
						return err
					}
					writeJSONString(w, masked)
					continue
				}
				if err := maskValue(dec, w); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil { // '}'
				return err
			}
			w.WriteByte('}')
		case '[':
			w.WriteByte('[')
			afterFlag := false // the previous element was "--password"
			for i := 0; dec.More(); i++ {
				if i > 0 {
					w.WriteByte(',')
				}
				if afterFlag {
					afterFlag = false
					if err := skipValue(dec); err != nil {
						return err
					}
					writeJSONString(w, masked)
					continue
				}
				start := w.Len()
				if err := maskValue(dec, w); err != nil {
					return err
				}
				var elem string
				afterFlag = json.Unmarshal(w.Bytes()[start:], &elem) == nil && secretFlag.MatchString(elem)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return err
			}
			w.WriteByte(']')
		}
	case string:
		writeJSONString(w, maskText(t))
	case json.Number:
		w.WriteString(t.String())
	case bool:
		if t {
			w.WriteString("true")
		} else {
			w.WriteString("false")
		}
	case nil:
		w.WriteString("null")
	}
	return nil
}

// skipValue consumes the next JSON value.
func skipValue(dec *json.Decoder) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// writeJSONString writes s as a JSON string, leaving <, > and & as they
// are (the console shows the text; it never becomes HTML).
func writeJSONString(w *bytes.Buffer, s string) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	w.Truncate(w.Len() - 1) // Encode's newline
}
