package joiner

import (
	"encoding/json"
	"strings"
	"testing"
)

// A Delivery encodes as encoding/json writes it, whatever its strings hold
// (HTML characters, line separators, invalid UTF-8, control characters),
// with fields left out exactly when encoding/json omits them; and the
// encoding of a large file is kept only when the file is not a secret.
func TestDeliveryEncodesAsEncodingJSON(t *testing.T) {
	big := strings.Repeat("#!/usr/bin/env python3\nprint('<a> & \"b\"')\t\u2028\n", 200)
	hostile := "x<y>&z\"\\\x00\x1f\u2028\u2029\xff\xfe é"
	cases := []Delivery{
		{},
		{Cluster: "c", ClusterName: hostile, Device: "02:00:00:00:00:01", Role: "sonic", Method: "kubeadm"},
		{Cluster: "c", Init: true, NodeName: "leaf-1", NodeLabels: map[string]string{"b": hostile, "a": "1", "ztpd.io/rack": "r1"},
			CloudConfig: "#cloud-config\n" + hostile, ReportURL: "http://10.99.0.1/join/report?x=<>", ReportToken: "t&k", Agent: true},
		{Cluster: "c", ConfigDB: json.RawMessage("{\n    \"KUBERNETES_MASTER\": {\n        \"SERVER\": {\"ip\": \"10.99.0.1<\"}\n    }\n}"),
			Files: []DeliveredFile{
				{Path: "/usr/local/bin/ztpd-agent", Mode: "0755", Content: big},
				{Path: "/etc/ztpd/agent.json", Mode: "0600", Content: big + "secret", secret: true},
				{Path: "/etc/x", Mode: "0644", Content: hostile},
				{Path: hostile, Mode: "0644", Content: ""},
			}},
		{NodeLabels: map[string]string{}, Files: []DeliveredFile{}},
	}
	// The same files compressed for a device that accepts gzip+base64.
	packed := cases[3]
	packed.Files = append([]DeliveredFile(nil), packed.Files...)
	if err := packed.CompressFiles(); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, packed)
	for i, d := range cases {
		want, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second time from the kept encodings
			got, err := d.AppendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
			}
		}
	}
	for i, f := range packed.Files {
		plain := cases[3].Files[i]
		if (i == 0) != (f.Encoding == FileEncodingGzip) {
			t.Errorf("%s: encoding %q (only the large non-secret file is compressed)", f.Path, f.Encoding)
		}
		if i == 0 {
			if got, err := f.Decoded(); err != nil || string(got) != plain.Content {
				t.Errorf("compressed agent script does not decode to the original: %v", err)
			}
		} else if f.Content != plain.Content {
			t.Errorf("%s: content changed without an encoding", f.Path)
		}
	}
	if _, err := (DeliveredFile{Path: "/x", Content: "abc", Encoding: "zstd"}).Decoded(); err == nil {
		t.Error("an unknown encoding decoded")
	}
	compressedContent.mu.Lock()
	for s := range compressedContent.m {
		if strings.HasSuffix(s, "secret") {
			t.Error("a secret file was compressed and kept")
		}
	}
	compressedContent.mu.Unlock()
	staticContent.mu.Lock()
	defer staticContent.mu.Unlock()
	if _, ok := staticContent.m[big]; !ok {
		t.Error("the large non-secret file's encoding was not kept")
	}
	for s := range staticContent.m {
		if strings.HasSuffix(s, "secret") {
			t.Error("a secret file's encoding was kept")
		}
	}
}
