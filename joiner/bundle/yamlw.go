package bundle

import (
	"fmt"
	"strconv"
	"strings"
)

// yamlWriter emits the small, fixed-shape YAML documents of a join bundle
// (kubeadm configuration, cloud-config) directly. A generic encoder spent
// most of a join's CPU time reflecting over the same shapes; the output is
// checked against real YAML parsers in the tests (yaml.v3, sigs.k8s.io/yaml
// strict decoding, PyYAML) and fuzzed.
type yamlWriter struct{ b strings.Builder }

func (w *yamlWriter) indent(n int) {
	for range n {
		w.b.WriteByte(' ')
	}
}

// kv writes "key: value" with value as a string scalar.
func (w *yamlWriter) kv(ind int, key, value string) {
	w.indent(ind)
	w.b.WriteString(key)
	w.b.WriteString(": ")
	w.b.WriteString(yamlString(value))
	w.b.WriteByte('\n')
}

// kvRaw writes "key: value" with value written as is (numbers, booleans).
func (w *yamlWriter) kvRaw(ind int, key, value string) {
	w.indent(ind)
	w.b.WriteString(key)
	w.b.WriteString(": ")
	w.b.WriteString(value)
	w.b.WriteByte('\n')
}

// key writes "key:" opening a nested mapping or sequence.
func (w *yamlWriter) key(ind int, key string) {
	w.indent(ind)
	w.b.WriteString(key)
	w.b.WriteString(":\n")
}

// item writes "- value" as a sequence entry of strings.
func (w *yamlWriter) item(ind int, value string) {
	w.indent(ind)
	w.b.WriteString("- ")
	w.b.WriteString(yamlString(value))
	w.b.WriteByte('\n')
}

// block writes "key: |" and content as a literal block indented by ind+2,
// or a quoted scalar when content cannot be a literal block.
func (w *yamlWriter) block(ind int, key, content string) {
	if !literalSafe(content) {
		w.kv(ind, key, content)
		return
	}
	w.indent(ind)
	w.b.WriteString(key)
	switch {
	case !strings.HasSuffix(content, "\n"):
		w.b.WriteString(": |-\n")
	case strings.HasSuffix(content, "\n\n"):
		w.b.WriteString(": |+\n")
	default:
		w.b.WriteString(": |\n")
	}
	for line := range strings.Lines(content) {
		if line != "\n" {
			w.indent(ind + 2)
		}
		w.b.WriteString(line)
	}
	if !strings.HasSuffix(content, "\n") {
		w.b.WriteByte('\n')
	}
}

func (w *yamlWriter) String() string { return w.b.String() }

// literalSafe reports whether content can be a literal block scalar
// without an indentation indicator: printable text (tabs allowed), no
// carriage returns, not starting with a space or an empty line.
func literalSafe(s string) bool {
	if s == "" || s[0] == ' ' || s[0] == '\n' || s[0] == '\t' {
		return false
	}
	for _, r := range s {
		if r == '\n' || r == '\t' {
			continue
		}
		// YAML's printable set, less the YAML 1.1 line breaks and the BOM.
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x2028 || r == 0x2029 || r == 0xfeff || r == 0xfffe || r == 0xffff {
			return false
		}
	}
	return true
}

// yamlString renders s as a YAML scalar that reads back as exactly the
// string s (valid UTF-8): plain when that is unambiguous, else a
// double-quoted scalar with everything YAML does not allow raw escaped.
func yamlString(s string) string {
	if plainSafe(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0xfeff || r == 0x2028 || r == 0x2029 || r == 0xfffe || r == 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// plainSafe: the string starts with a letter, digit or "/", holds no YAML
// indicator that matters inside a block-context plain scalar (no ": ", no
// " #", no quotes, brackets, braces or backslashes), does not end in a space
// or colon, and is nothing a YAML 1.1 or 1.2 resolver would read as a
// number, boolean, null or timestamp.
func plainSafe(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	if c := s[0]; !(isLetter(c) || c >= '0' && c <= '9' || c == '/' && !strings.HasPrefix(s, "//")) {
		return false
	}
	if c := s[len(s)-1]; c == ' ' || c == ':' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isLetter(c), c >= '0' && c <= '9':
		case strings.IndexByte("/._@+=-()&<>'*,!~?;%$|^", c) >= 0:
		case c == ':':
			// "system:bootstrappers:...", "unix:///run/...": a colon not
			// followed by a space is plain text, unless the scalar starts
			// with a digit (YAML 1.1 reads "10:30" as a number).
			if !isLetter(s[0]) || s[i+1] == ' ' {
				return false
			}
		case c == ' ':
			if s[i+1] == '#' || s[i+1] == ' ' {
				return false
			}
		default:
			return false
		}
	}
	switch strings.ToLower(s) {
	case "y", "n", "yes", "no", "on", "off", "true", "false", "null", "~":
		return false
	}
	// YAML resolvers drop underscores before reading a number ("0_X00" is 0).
	digits := strings.ReplaceAll(s, "_", "")
	if _, err := strconv.ParseFloat(digits, 64); err == nil {
		return false
	}
	if s[0] >= '0' && s[0] <= '9' && (strings.Count(s, "-") >= 2 || strings.ContainsAny(s, " :")) {
		return false // a date or timestamp (2026-03-01)
	}
	if l := strings.ToLower(digits); strings.HasPrefix(l, "0x") || strings.HasPrefix(l, "0o") || strings.HasPrefix(l, "0b") {
		return false // hexadecimal, octal and binary integers
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
