package content

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// appendJSON encodes v exactly as json.MarshalIndent(v, "", indent) does for
// the types ztp.json and config_db.json are built from (maps with string
// keys, lists, strings, numbers, bools, nil), without reflection: this is on
// the hot path of every ztp.json. Other types fall back to encoding/json.
func appendJSON(b []byte, v any, indent string, depth int) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendString(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case json.Number:
		if x == "" {
			return append(b, '0'), nil
		}
		return append(b, x...), nil
	case map[string]any:
		if len(x) == 0 {
			return append(b, "{}"...), nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = newline(b, indent, depth+1)
			b = appendString(b, k)
			b = append(b, ':', ' ')
			var err error
			if b, err = appendJSON(b, x[k], indent, depth+1); err != nil {
				return nil, err
			}
		}
		b = newline(b, indent, depth)
		return append(b, '}'), nil
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, s := range x {
			m[k] = s
		}
		return appendJSON(b, m, indent, depth)
	case []any:
		if len(x) == 0 {
			return append(b, "[]"...), nil
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = newline(b, indent, depth+1)
			var err error
			if b, err = appendJSON(b, e, indent, depth+1); err != nil {
				return nil, err
			}
		}
		b = newline(b, indent, depth)
		return append(b, ']'), nil
	case []string:
		l := make([]any, len(x))
		for i, s := range x {
			l[i] = s
		}
		return appendJSON(b, l, indent, depth)
	}
	raw, err := json.MarshalIndent(v, "", indent)
	if err != nil {
		return nil, err
	}
	// Re-indent the fallback to the current depth.
	for _, c := range raw {
		b = append(b, c)
		if c == '\n' {
			for i := 0; i < depth; i++ {
				b = append(b, indent...)
			}
		}
	}
	return b, nil
}

func newline(b []byte, indent string, depth int) []byte {
	b = append(b, '\n')
	for i := 0; i < depth; i++ {
		b = append(b, indent...)
	}
	return b
}

const hex = "0123456789abcdef"

// appendString escapes like encoding/json with HTML escaping on.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
