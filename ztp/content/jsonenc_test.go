package content

import (
	"encoding/json"
	"testing"
)

func FuzzAppendJSONMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`{"a":{"b":[1,"x",true,null,{}]},"c":[]}`, `{"ztp":{"01-x":{"url":{"source":"http://h/<a>&\u2028"}}}}`,
		`["\u0000\u001f\"\\", "é", 1.5, -3, 1e40]`, `{"":{"":""}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var v any
		dec := json.NewDecoder(bytesReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return
		}
		want, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return
		}
		got, err := appendJSON(nil, v, "  ", 0)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("appendJSON differs from encoding/json:\n%s\n---\n%s", got, want)
		}
	})
}
