package jsontext

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// hostile are values an appender could get wrong: every ASCII control
// character, JSON's own specials, HTML's, invalid and truncated UTF-8,
// U+2028/U+2029, non-ASCII text.
func hostile() []string {
	var ctl strings.Builder
	for b := 0; b < 0x20; b++ {
		ctl.WriteByte(byte(b))
	}
	return []string{
		"", "plain", ctl.String(), "\x7f", `"quoted" \back\slash/`, "<script>alert(1)</script>&amp;",
		"\xff\xfe", "abc\xe2\x82", "\xe2\x28\xa1", "line\u2028sep\u2029para", "héllo wörld ✓ 🚀 日本語",
		"\ufffd", "\x00", "tab\there\nnewline\rcr\bbs\fff", strings.Repeat("<&>", 100), "\xed\xa0\x80",
	}
}

func TestAppendStringAndMapMatchEncodingJSON(t *testing.T) {
	m := map[string]string{}
	for _, s := range hostile() {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s want %s", s, got, want)
		}
		m[s], m["k"+s] = s, ""
	}
	for _, mm := range []map[string]string{nil, {}, m} {
		want, _ := json.Marshal(mm)
		if mm == nil {
			want = []byte("{}") // a nil map is written as an empty object; callers omit it
		}
		if got := AppendStringMap(nil, mm); !bytes.Equal(got, want) {
			t.Fatalf("map: got %s want %s", got, want)
		}
	}
}

func TestAppendTimeMatchesMarshalJSON(t *testing.T) {
	for _, tm := range []time.Time{
		{}, time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC), time.Date(2026, 3, 4, 5, 6, 7, 100000000, time.UTC),
		time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("IST", 5*3600+1800)),
		time.Date(1999, 12, 31, 23, 59, 59, 1, time.FixedZone("x", -(9*3600+30*60))),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("odd", 23*3600+59*60+30)), time.Now(),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600)),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", -25*3600)),
	} {
		want, werr := json.Marshal(tm)
		got, err := AppendTime(nil, tm)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%v: error %v, encoding/json %v", tm, err, werr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("%v: got %s want %s", tm, got, want)
		}
		if werr != nil && (got[0] != '"' || got[len(got)-1] != '"') {
			t.Fatalf("%v: refused time not written whole: %s", tm, got)
		}
	}
}

// FuzzString: AppendString is encoding/json's string encoding for any
// input.
func FuzzString(f *testing.F) {
	for _, s := range hostile() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s want %s", s, got, want)
		}
	})
}
