package core

import (
	"strings"
	"unicode/utf8"
)

// PrintableText is device-written free text (a step's output, a join
// report's detail) made safe for every place it is shown, a terminal
// included: valid UTF-8, line breaks and tabs kept (CR LF and a lone CR as
// LF), every other control character (an ANSI escape sequence's ESC, a
// bell, a C1 control) replaced by its visible Unicode control picture or
// U+FFFD, so it reads as what it was and cannot drive the terminal that
// prints it. HTML escaping stays the job of the document it lands in.
func PrintableText(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (isControl(r) && r != '\n' && r != '\t') {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == '\r':
			b.WriteByte('\n')
			if i < len(s) && s[i] == '\n' {
				i++
			}
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20:
			b.WriteRune(0x2400 + r) // ␀..␟: ESC shows as ␛
		case r == 0x7f:
			b.WriteRune(0x2421) // ␡
		case isControl(r) || r == utf8.RuneError:
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) }
