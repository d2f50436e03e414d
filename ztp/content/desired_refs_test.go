package content

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
)

// The images a profile's desired: block names (its target image, its
// hooks' scripts) are checked against the store by profile check and at
// start, as warnings: loading checks only their form.
func TestCheckReferencesDesiredImages(t *testing.T) {
	f := filepath.Join(t.TempDir(), "leaf.yaml")
	if err := os.WriteFile(f, []byte(`name: leaf
match: {kind: sonic}
desired:
  image: sonic-202411.bin
  hooks:
    pre_upgrade: snapshot-bgp.sh
    post_upgrade: check-bgp.sh
`), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := profile.Load([]string{f})
	if err != nil {
		t.Fatal(err)
	}
	images := listedImages{{SHA256: strings.Repeat("c", 64), Name: "check-bgp.sh", Kind: "file"}}
	got := strings.Join(CheckReferences(set, images, nil), "\n")
	want := f + `:4: profile "leaf": desired image "sonic-202411.bin" is not in the image store: its devices' agents are given no target image until it is (ztpd image add FILE --name sonic-202411.bin --kind sonic-installer)` + "\n" +
		f + `:6: profile "leaf": hook pre_upgrade script "snapshot-bgp.sh" is not in the image store (ztpd image add FILE --name snapshot-bgp.sh --kind file)`
	if got != want {
		t.Fatalf("warnings:\n%s\nwant:\n%s", got, want)
	}
	images = append(images, core.Image{SHA256: strings.Repeat("d", 64), Name: "sonic-202411.bin", Kind: "sonic-installer"},
		core.Image{SHA256: strings.Repeat("e", 64), Name: "snapshot-bgp.sh", Kind: "file"})
	if w := CheckReferences(set, images, nil); len(w) != 0 {
		t.Fatalf("everything stored, warnings %v", w)
	}
}
