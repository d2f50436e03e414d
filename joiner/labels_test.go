package joiner

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ztpd/ztpd/internal/core"
)

// TestNodeLabelsAreValidAndScoped: facts under ztpd.io/, operator labels
// under label.ztpd.io/ (the device's own over its profile's), hostile
// device-supplied values made valid or left out.
func TestNodeLabelsAreValidAndScoped(t *testing.T) {
	dev := core.Device{Kind: core.KindSONiC, MAC: "02:00:00:00:02:01", Serial: "LAB,0001=x", Product: "Accton-AS7712-32X",
		SONiCVer: "SONiC.202405.1", Platform: "x86_64-accton_as7712_32x-r0", Profile: "leaf",
		Labels: map[string]string{"rack": "r7", "bad key!": "  -v-  ", "empty": "///"}}
	got := NodeLabels(dev, RoleSONiC, map[string]string{"rack": "r1", "tier": "leaf"})
	want := map[string]string{
		"ztpd.io/role": "sonic", "ztpd.io/kind": "sonic", "ztpd.io/profile": "leaf", "ztpd.io/serial": "LAB_0001_x",
		"ztpd.io/sonic_version": "SONiC.202405.1", "ztpd.io/hwsku": "Accton-AS7712-32X",
		"ztpd.io/platform": "x86_64-accton_as7712_32x-r0", "ztpd.io/mac": "02-00-00-00-02-01",
		"label.ztpd.io/rack": "r7", "label.ztpd.io/tier": "leaf", "label.ztpd.io/bad_key": "v",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("labels\n got %v\nwant %v", got, want)
	}
	long := labelValue(string(make([]byte, 100)) + "abc")
	if long != "" {
		t.Fatalf("NULs made a value: %q", long)
	}
	if v := labelValue("a" + string(make([]byte, 80))); len(v) > 63 || v != "a" {
		t.Fatalf("long value %q", v)
	}
}

// FuzzNodeLabels: whatever a device says about itself, every label ztpd
// derives is one Kubernetes accepts (key and value).
func FuzzNodeLabels(f *testing.F) {
	f.Add("SONiC.202405.1", "Accton-AS7712-32X", "rack", "r7")
	f.Add("a,b=c", "\x00\xff", "bad key!", " -v- ")
	f.Add(strings.Repeat("x", 100), "", "", "")
	f.Fuzz(func(t *testing.T, ver, product, key, value string) {
		dev := core.Device{Kind: core.KindSONiC, MAC: "02:00:00:00:00:01", SONiCVer: ver, Product: product, Serial: value,
			Labels: map[string]string{key: value}}
		for k, v := range NodeLabels(dev, RoleSONiC, map[string]string{value: key}) {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				t.Fatalf("key %q: %v", k, errs)
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 || v == "" {
				t.Fatalf("value %q of %q: %v", v, k, errs)
			}
			if strings.ContainsAny(k+v, ",=") {
				t.Fatalf("%s=%s would break --node-labels", k, v)
			}
		}
	})
}
