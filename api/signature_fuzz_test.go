package api

import (
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// loweredParams is what a CloudStack signature can tell apart: names and
// values, lowercased (the signed string is lowercased whole).
func loweredParams(v url.Values) map[string]string {
	out := map[string]string{}
	for _, p := range signing.Params(v) {
		out[strings.ToLower(p.Name)] = strings.ToLower(p.Value)
	}
	return out
}

// FuzzCloudStackRequestVerification mutates a correctly signed write the
// way an attacker on the network can (any bytes of the query, no secret).
// Whatever the server still accepts must be the same request, up to the
// case CloudStack's algorithm ignores; and nothing panics.
func FuzzCloudStackRequestVerification(f *testing.F) {
	fx := storetest.Open(f)
	st := fx.Store
	keys := apikeys.New(st, fx.Keys)
	info, secret, err := keys.Create("fuzz", apikeys.RoleAdmin)
	if err != nil {
		f.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	srv := New(Deps{Metrics: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler), Store: st, Keys: keys, Now: func() time.Time { return clock }})
	orig := url.Values{"command": {"deleteKubernetesCluster"}, "id": {"Prod-1"}, "response": {"json"}}
	q := signing.SignQuery(orig, info.APIKey, []byte(secret), clock.Add(-time.Minute)) // expired
	base, _ := url.ParseQuery(q)
	want := loweredParams(base)
	f.Add(q)
	f.Add(strings.Replace(q, "&response=json&signatureversion=3", "&response%3Djson%26signatureversion=3", 1))
	f.Add(strings.Replace(q, "command=", "COMMAND=", 1))
	f.Add(strings.Replace(q, "expires=", "expires=2026-01-01T00%3A10%3A00Z&x=", 1))
	f.Fuzz(func(t *testing.T, raw string) {
		form, err := url.ParseQuery(raw)
		if err != nil || signing.CheckNames(form) != nil {
			return // the server answers 430 before verifying
		}
		if _, err := srv.verifier.VerifyCloudStack(form, false); err != nil {
			return
		}
		// The seed itself is expired, so anything accepted was reshaped.
		got := loweredParams(form)
		if len(got) != len(want) {
			t.Fatalf("accepted a different request: %v (signed %v)", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("accepted a different request: %s=%q, signed %q", k, got[k], v)
			}
		}
		t.Fatalf("accepted the expired request reshaped as %q", raw)
	})
}
