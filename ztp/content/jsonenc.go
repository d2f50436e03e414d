package content

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/ztpd/ztpd/internal/jsontext"
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
		return jsontext.AppendString(b, x), nil
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
			b = jsontext.AppendString(b, k)
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
