package semver

import "testing"

func TestParse(t *testing.T) {
	for _, bad := range []string{"", "1", "1.2", "1.2.3.4", "v1.2.3", "1.2.x", "1..3", "1.2.3-rc1", "-1.2.3", "1.2.1234567890"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if v, err := Parse("1.31.04"); err != nil || v != (Version{1, 31, 4}) || v.String() != "1.31.4" || v.Tag() != "v1.31.4" {
		t.Errorf("1.31.04: %v %v", v, err)
	}
}

func TestParseRelease(t *testing.T) {
	for _, bad := range []string{"", "1.2", "1.2.3.4", "1.x.3", "v1.02.3", "1.2.-3", "1..3", " 1.2.3", "1.2.1234567"} {
		if _, err := ParseRelease(bad); err == nil {
			t.Errorf("ParseRelease(%q) accepted", bad)
		}
	}
	for _, s := range []string{"v1.28.4", "1.28.4"} {
		if v, err := ParseRelease(s); err != nil || v != (Version{1, 28, 4}) {
			t.Errorf("%s: %v %v", s, v, err)
		}
	}
}

func TestOrder(t *testing.T) {
	a, b, c := MustParse("1.30.2"), MustParse("1.31.0"), MustParse("2.0.0")
	if a.Compare(b) != -1 || b.Compare(a) != 1 || a.Compare(a) != 0 || !b.Less(c) || c.Less(a) {
		t.Fatal("order")
	}
	if !b.AtLeast(1, 31) || a.AtLeast(1, 31) || !c.AtLeast(1, 99) {
		t.Fatal("AtLeast")
	}
}

func TestProvisionable(t *testing.T) {
	for _, ok := range []string{"1.11.0", "1.31.4", "1.99.999999"} {
		if err := Provisionable(MustParse(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"2.0.0", "0.31.4", "1.10.9", "1.31.1234567"} {
		if err := Provisionable(MustParse(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
