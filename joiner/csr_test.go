package joiner

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/testpki"
)

// switchCSR is the request a switch's join plugin sends: a P-256 key made
// on the switch, an empty subject.
func switchCSR(t testing.TB) string {
	t.Helper()
	_, csr, err := testpki.DeviceCSR()
	if err != nil {
		t.Fatal(err)
	}
	return string(csr)
}

// TestSwitchCSRRefusals: a switch's join without a request, or with one
// asking for what ztpd does not issue, is refused with its reason, an
// audit event and a metric; nothing is issued and its enrollment secret
// still works for a good request.
func TestSwitchCSRRefusals(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, Options{AutoApprove: approveAll, Registerer: reg})
	e.cluster(clusterSpec{Name: "fabric", Size: 4})
	e.must(e.join("fabric", 1))
	sw := mac(60)
	ip := e.hold("10.99.5.60", sw)
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: sw, MAC: sw, Kind: core.KindSONiC, Serial: "SN-60", Hostname: "leaf-60"})
	})
	secret := e.enroll("fabric", sw, "SN-60")
	weak, _ := rsa.GenerateKey(rand.Reader, 1024)
	weakDER, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, weak)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	otherDER, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:bootstrap:leaf-61"}}, other)
	pemOf := func(der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	}

	for _, c := range []struct {
		name, csr string
		err       error
		reason    string
	}{
		{"no request", "", ErrCSRMissing, "this join plugin is too old"},
		{"RSA 1024", pemOf(weakDER), ErrCSRRefused, "RSA key of 1024 bits"},
		{"another switch's name", pemOf(otherDER), ErrCSRRefused, `common name "system:bootstrap:leaf-61": this device's is "system:bootstrap:leaf-60"`},
	} {
		b, err := e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: sw, Serial: "SN-60", Kind: core.KindSONiC, RemoteIP: ip, CSR: c.csr})
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.reason) || b != nil {
			t.Fatalf("%s: %v (bundle %v)", c.name, err, b)
		}
		if core.KindOf(err) != core.KindInvalid {
			t.Fatalf("%s: kind %v", c.name, core.KindOf(err))
		}
	}
	if m, err := e.svc.Membership(bg, sw); err == nil && holdsSlot(m.State) {
		t.Fatalf("a refused switch holds a slot: %+v", m)
	}
	var refused []core.Event
	e.store.View(func(tx core.Tx) error {
		return tx.Events().List(core.StreamOf("join.refused"), 0, func(ev core.Event) (bool, error) {
			if ev.Type == "join.refused" && ev.Device == sw {
				refused = append(refused, ev)
			}
			return true, nil
		})
	})
	if core.StreamOf("join.refused") != core.AuditEvents || len(refused) != 3 ||
		!strings.Contains(refused[1].Message, "RSA key of 1024 bits") || refused[0].Fields["reason"] != "no-csr" || refused[1].Fields["reason"] != "bad-csr" {
		t.Fatalf("join.refused events: %+v", refused)
	}
	if n := refusedCount(t, reg, "bad-csr"); n != 2 {
		t.Fatalf("bad-csr refusals counted %v", n)
	}
	if n := refusedCount(t, reg, "no-csr"); n != 1 {
		t.Fatalf("no-csr refusals counted %v", n)
	}
	// Nothing was used up: the same secret with a good request joins.
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: sw, Serial: "SN-60", Kind: core.KindSONiC, RemoteIP: ip, CSR: switchCSR(t)}))
	if b.SONiC == nil || len(b.SONiC.Files) != 2 {
		t.Fatalf("switch bundle %v", b)
	}
	for _, f := range b.SONiC.Files {
		if strings.Contains(string(f.Content), "PRIVATE KEY") || f.Secret {
			t.Fatalf("bundle file %s carries a key", f.Path)
		}
	}
}

// TestCSRIgnoredWithoutCertificate: a VM's kubeadm join issues no
// certificate (its kubelet makes its own key by TLS bootstrap): a request
// it sends is not looked at.
func TestCSRIgnoredWithoutCertificate(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	e.cluster(clusterSpec{Name: "prod", Size: 3})
	m := mac(1)
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("prod", m, ""), MAC: m, RemoteIP: e.hold(addrOf(1), m), CSR: "not a request"}))
	if b.CloudConfig == nil {
		t.Fatalf("VM bundle %v", b)
	}
}

// refusedCount is ztpd_join_refused_total{reason} as reg exports it.
func refusedCount(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ztpd_join_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
