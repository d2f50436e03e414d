package client_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

// A desired change sends only the fields given: "" and {} clear, a field
// left out is not sent.
func TestDesiredChangeEncodes(t *testing.T) {
	for _, c := range []struct {
		change client.DesiredChange
		want   string
	}{
		{client.DesiredChange{}, `{}`},
		{client.DesiredChange{Image: client.Some("sonic-202411.bin")}, `{"image":"sonic-202411.bin"}`},
		{client.DesiredChange{Mode: client.Some(core.ModeStandalone), KubernetesVersion: client.Some("")},
			`{"mode":"standalone","kubernetes_version":""}`},
		{client.DesiredChange{Labels: client.Some(map[string]string{}), Hooks: client.Some(map[string]string{"pre_upgrade": "snap.sh"})},
			`{"labels":{},"hooks":{"pre_upgrade":"snap.sh"}}`},
		{client.DesiredChange{Labels: client.Optional[map[string]string]{Set: true}}, `{"labels":null}`},
	} {
		b, err := json.Marshal(c.change)
		if err != nil || string(b) != c.want {
			t.Errorf("%+v: %s %v, want %s", c.change, b, err, c.want)
		}
	}
}

// The server decodes what the CLI sends, tells a field left out from one
// cleared (null or "", null or {}), and refuses unknown fields as its
// body binding does.
func TestDesiredChangeDecodes(t *testing.T) {
	decode := func(body string) (client.DesiredChange, error) {
		var ch client.DesiredChange
		dec := json.NewDecoder(strings.NewReader(body))
		dec.DisallowUnknownFields()
		return ch, dec.Decode(&ch)
	}
	ch, err := decode(`{"image":null,"kubernetes_version":"","role":"worker","labels":null,"hooks":{}}`)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Mode.Set || ch.Cluster.Set {
		t.Errorf("fields left out are set: %+v", ch)
	}
	if !ch.Image.Set || ch.Image.Value != "" || !ch.KubernetesVersion.Set || ch.KubernetesVersion.Value != "" {
		t.Errorf("cleared targets: %+v", ch)
	}
	if !ch.Role.Set || ch.Role.Value != "worker" {
		t.Errorf("role: %+v", ch.Role)
	}
	if !ch.Labels.Set || ch.Labels.Value != nil || !ch.Hooks.Set || ch.Hooks.Value == nil || len(ch.Hooks.Value) != 0 {
		t.Errorf("cleared maps: %+v %+v", ch.Labels, ch.Hooks)
	}
	// What the CLI encodes decodes to the same change.
	sent := client.DesiredChange{Mode: client.Some(core.ModeCluster), Cluster: client.Some("edge-1"),
		Labels: client.Some(map[string]string{"rack": "7"})}
	b, _ := json.Marshal(sent)
	got, err := decode(string(b))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(got)
	if !bytes.Equal(b, again) || got.Role.Set || got.Hooks.Set {
		t.Errorf("round trip: sent %s, decoded %+v (%s)", b, got, again)
	}
	if _, err := decode(`{"imgae":"sonic-202411.bin"}`); err == nil || !strings.Contains(err.Error(), `unknown field "imgae"`) {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := decode(`{"image":7}`); err == nil {
		t.Error("a number for image decoded")
	}
}
