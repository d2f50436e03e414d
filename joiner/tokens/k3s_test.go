package tokens

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/joiner/pki"
)

func testCAPEM(t testing.TB) []byte {
	t.Helper()
	ca, err := pki.NewCA("k3s-server-ca", pki.ECDSAP256, t0)
	if err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM()
}

var (
	k3sServerRe    = regexp.MustCompile(`^K10[0-9a-f]{64}::server:[0-9a-f]{32}$`)
	k3sBootstrapRe = regexp.MustCompile(`^K10[0-9a-f]{64}::[a-z0-9]{6}\.[a-z0-9]{16}$`)
)

func TestK3sTokensFormat(t *testing.T) {
	bundle := testCAPEM(t)
	sum := sha256.Sum256(bundle)
	wantHash := hex.EncodeToString(sum[:])

	full, err := NewK3sServerToken(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if s := full.Reveal(); !k3sServerRe.MatchString(s) || !strings.HasPrefix(s, "K10"+wantHash+"::server:") {
		t.Fatalf("full token %q", s)
	}
	boot, err := NewK3sBootstrapToken(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if s := boot.Reveal(); !k3sBootstrapRe.MatchString(s) || !strings.HasPrefix(s, "K10"+wantHash+"::") {
		t.Fatalf("bootstrap token %q", s)
	}
	for _, tok := range []K3sToken{full, boot} {
		back, err := ParseK3sToken(tok.Reveal())
		if err != nil {
			t.Fatal(err)
		}
		if back != tok {
			t.Fatalf("round trip changed %v", tok)
		}
		if err := back.ValidateCA(bundle); err != nil {
			t.Fatalf("own CA refused: %v", err)
		}
		if strings.Contains(tok.String(), tok.password) && tok.password != "" {
			t.Fatal("String shows the password")
		}
	}
	if strings.Contains(boot.String(), boot.bootstrap.secret) {
		t.Fatal("String shows the bootstrap secret")
	}
	if full.ID() != "server" || !boot.IsBootstrap() || boot.ID() != boot.Bootstrap().ID() {
		t.Fatal("credential accessors wrong")
	}
}

// TestK3sHashMatchesSha256sum: the hash is over the CA bundle PEM bytes as
// served, the way `sha256sum server-ca.crt` computes it.
func TestK3sHashMatchesSha256sum(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("sha256sum not installed")
	}
	bundle := testCAPEM(t)
	f := filepath.Join(t.TempDir(), "server-ca.crt")
	os.WriteFile(f, bundle, 0o644)
	out, err := exec.Command("sha256sum", f).Output()
	if err != nil {
		t.Fatal(err)
	}
	got, err := HashCABundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields(string(out))[0]; got != want {
		t.Fatalf("hash %s, sha256sum %s", got, want)
	}
}

func TestK3sValidateCARefusesOtherCAs(t *testing.T) {
	bundle := testCAPEM(t)
	tok, _ := NewK3sBootstrapToken(bundle)
	if err := tok.ValidateCA(testCAPEM(t)); !errors.Is(err, ErrCAHashMismatch) {
		t.Fatalf("other CA: %v", err)
	}
	// The hash is over the exact bytes: re-encoding the same certificate
	// differently (an extra newline) is a different bundle, as in k3s.
	if err := tok.ValidateCA(append(append([]byte{}, bundle...), '\n')); !errors.Is(err, ErrCAHashMismatch) {
		t.Fatalf("altered bundle bytes: %v", err)
	}
	if err := tok.ValidateCA([]byte("not pem")); err == nil {
		t.Fatal("garbage bundle accepted")
	}
	bare, _ := ParseK3sToken(tok.Bootstrap().Reveal())
	if err := bare.ValidateCA(bundle); !errors.Is(err, ErrCAHashMismatch) {
		t.Fatalf("unpinned token validated: %v", err)
	}
}

// TestK3sMultiCertBundleHashesRoot follows k3s: with several certificates
// the hash is the DER of the root the first certificate chains to; when the
// first does not chain, the raw bytes.
func TestK3sMultiCertBundleHashesRoot(t *testing.T) {
	mk := func(cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	root, rootKey, rootPEM := mk("root", nil, nil)
	_, _, interPEM := mk("server-ca", root, rootKey)
	bundle := append(append([]byte{}, interPEM...), rootPEM...)
	got, err := HashCABundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(root.Raw)
	if got != hex.EncodeToString(sum[:]) {
		t.Fatalf("chained bundle: hash %s, want root DER hash %x", got, sum)
	}
	// Renewing the intermediate keeps the hash (the point of k3s's rule).
	_, _, interPEM2 := mk("server-ca", root, rootKey)
	if got2, _ := HashCABundle(append(append([]byte{}, interPEM2...), rootPEM...)); got2 != got {
		t.Fatal("renewed intermediate changed the hash")
	}
	// Two unrelated roots: the first does not chain, so the raw bytes.
	_, _, otherPEM := mk("other", nil, nil)
	two := append(append([]byte{}, otherPEM...), rootPEM...)
	raw := sha256.Sum256(two)
	if got, _ := HashCABundle(two); got != hex.EncodeToString(raw[:]) {
		t.Fatalf("unchained bundle: hash %s, want raw %x", got, raw)
	}
}

// TestParseK3sTokenLikeK3s walks the cases k3s's parser distinguishes.
func TestParseK3sTokenLikeK3s(t *testing.T) {
	h := strings.Repeat("ab", 32)
	type want struct {
		hash, user, pass, boot string
	}
	cases := map[string]want{
		"K10" + h + "::server:s3cret":              {hash: h, user: "server", pass: "s3cret"},
		"K10" + h + "::abcdef.0123456789abcdef":    {hash: h, boot: "abcdef.0123456789abcdef"},
		"K10" + h + "::node:p:w":                   {hash: h, user: "node", pass: "p:w"},
		"K10" + h + ":::pw":                        {hash: h, user: "", pass: "pw"},
		"K10::server:pw":                           {user: "server", pass: "pw"},
		"K10::abcdef.0123456789abcdef":             {boot: "abcdef.0123456789abcdef"},
		"K10server:pw":                             {user: "server", pass: "pw"},
		"abcdef.0123456789abcdef":                  {boot: "abcdef.0123456789abcdef"},
		"mypassword":                               {user: "", pass: "mypassword"},
		"server:pw":                                {user: "", pass: "server:pw"},
		"a::b":                                     {user: "", pass: "a::b"},
		"K10" + h + "::server:pw::x":               {hash: h, user: "server", pass: "pw::x"},
		"K10" + h + "::ABCDEF.0123456789abcdef:pw": {hash: h, user: "ABCDEF.0123456789abcdef", pass: "pw"},
	}
	for in, w := range cases {
		tok, err := ParseK3sToken(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		got := want{hash: tok.CAHash(), user: tok.username, pass: tok.password, boot: tok.Bootstrap().Reveal()}
		if got != w {
			t.Fatalf("%q: got %+v want %+v", in, got, w)
		}
		// Reveal then parse again is stable.
		again, err := ParseK3sToken(tok.Reveal())
		if err != nil || again != tok {
			t.Fatalf("%q: reparse of %q: %v", in, tok.Reveal(), err)
		}
	}
	bad := []string{
		"",
		"K10" + h[:63] + "::server:pw", // short hash
		"K10" + h + "0::server:pw",     // long hash
		"K10" + strings.ToUpper(h) + "::server:pw",  // k3s hashes are lower-case hex
		"K10" + strings.Repeat("zz", 32) + "::s:pw", // not hex
		"K10" + h + "::server:",                     // empty password
		"K10" + h + "::nopassword",                  // neither form
		"K10" + h + "::",                            // no credentials
		"K10secret",                                 // K10 prefix, no separator
		strings.Repeat("a", 5000),                   // absurdly long
	}
	for _, in := range bad {
		if _, err := ParseK3sToken(in); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%q accepted (err %v)", in, err)
		}
	}
}

func FuzzParseK3sToken(f *testing.F) {
	h := strings.Repeat("0f", 32)
	for _, s := range []string{
		"K10" + h + "::server:pw", "K10" + h + "::abcdef.0123456789abcdef", "K10::x:y",
		"abcdef.0123456789abcdef", "pw", "K10", "K10::", ":::", "K10" + h + ":::",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseK3sToken(s)
		if err != nil {
			return
		}
		if tok.CAHash() != "" && (len(tok.CAHash()) != 64 || !isLowerHex(tok.CAHash())) {
			t.Fatalf("%q: accepted hash %q", s, tok.CAHash())
		}
		if !tok.IsBootstrap() && tok.password == "" {
			t.Fatalf("%q: accepted an empty password", s)
		}
		again, err := ParseK3sToken(tok.Reveal())
		if err != nil || again != tok {
			t.Fatalf("%q: Reveal %q does not parse back (%v)", s, tok.Reveal(), err)
		}
		// String is Reveal with the secret replaced, nothing else.
		var want string
		if tok.IsBootstrap() {
			want = strings.TrimSuffix(tok.Reveal(), tok.bootstrap.secret) + "<redacted>"
		} else {
			want = strings.TrimSuffix(tok.Reveal(), tok.password) + "<redacted>"
		}
		if tok.String() != want {
			t.Fatalf("%q: String %q, want %q", s, tok.String(), want)
		}
	})
}
