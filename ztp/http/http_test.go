package ztphttp

import (
	"net/http/httptest"
	"testing"
)

func TestHeaderNamesAreCaseInsensitive(t *testing.T) {
	for _, names := range [][4]string{
		{"SERIAL-NUMBER", "BASE-MAC-ADDRESS", "PRODUCT-NAME", "SONiC-VERSION"},
		{"serial-number", "base-mac-address", "product-name", "sonic-version"},
		{"Serial-Number", "Base-Mac-Address", "Product-Name", "Sonic-Version"},
	} {
		req := httptest.NewRequest("GET", "/ztp/ztp.json", nil)
		req.RemoteAddr = "10.99.40.10:1234"
		req.Header.Set(names[0], " SN1 ")
		req.Header.Set(names[1], "52:54:00:40:00:10")
		req.Header.Set(names[2], "Accton-AS7712-32X")
		req.Header.Set(names[3], "N.A")
		c := ClientFrom(req)
		if c.Serial != "SN1" || c.BaseMAC != "52:54:00:40:00:10" || c.Product != "Accton-AS7712-32X" || c.SONiCVersion != "N.A" || c.ONIE != nil {
			t.Errorf("%v: %+v", names, c)
		}
		if c.Addr.String() != "10.99.40.10" {
			t.Errorf("addr %v", c.Addr)
		}
	}
	req := httptest.NewRequest("GET", "/onie/installer", nil)
	req.Header.Set("onie-arch", "x86_64")
	req.Header.Set("ONIE-MACHINE", "accton_as7712_32x")
	req.Header.Set("Onie-Machine-Rev", "0")
	req.Header.Set("ONIE-SERIAL-NUMBER", "bad\x01value")
	c := ClientFrom(req)
	if c.ONIE == nil || c.ONIE.Platform() != "x86_64-accton_as7712_32x-r0" || c.ONIE.Serial != "" {
		t.Errorf("onie: %+v", c.ONIE)
	}
}
