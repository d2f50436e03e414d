package joiner

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// agentFiles stands in for the app's renderer: the credential lands in
// the agent's configuration file.
func agentFiles(cred string) ([]bundle.File, error) {
	return []bundle.File{{Path: "/etc/ztpd/agent.json", Mode: 0o600, Content: []byte(`{"credential":"` + cred + `"}`), Secret: true},
		{Path: "/usr/local/bin/ztpd-agent", Mode: 0o755, Content: []byte("#!/usr/bin/python3\n")}}, nil
}

func agentCredentialOf(t *testing.T, content string) string {
	t.Helper()
	i := strings.Index(content, "ztpa1.")
	if i < 0 {
		t.Fatalf("no agent credential in %q", content)
	}
	return content[i : i+len("ztpa1.")+12+1+32]
}

// TestAgentCredential: a bundle installs the agent with a credential of
// its own; the credential works only from the address its device holds,
// is replaced by a re-issued bundle and refused once revoked.
func TestAgentCredential(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, AgentFiles: agentFiles})
	e.cluster(clusterSpec{Name: "prod", Size: 2, ControlNodes: 1})
	b := e.must(e.join("prod", 1))
	files := cloudFiles(t, b)
	cred := agentCredentialOf(t, files["/etc/ztpd/agent.json"])
	if _, ok := files["/usr/local/bin/ztpd-agent"]; !ok {
		t.Fatalf("cloud-config writes no agent: %v", files)
	}
	if !strings.Contains(string(b.CloudConfig), "systemctl enable --now ztpd-agent.timer") {
		t.Fatal("cloud-config does not enable the agent's timer")
	}
	home := netip.MustParseAddr(addrOf(1))
	dev, err := e.svc.AuthenticateAgent(bg, cred, home)
	if err != nil || dev != mac(1) {
		t.Fatalf("agent from its own address: %q %v", dev, err)
	}
	// The same credential from another device's address, and from an
	// address nobody holds.
	e.must(e.join("prod", 2))
	for _, from := range []string{addrOf(2), "10.99.77.7"} {
		_, err := e.svc.AuthenticateAgent(bg, cred, netip.MustParseAddr(from))
		var ref *AgentRefusal
		if !errors.Is(err, ErrAgentRefused) || !errors.As(err, &ref) || ref.Device != mac(1) {
			t.Fatalf("agent credential from %s: %v", from, err)
		}
		if strings.Contains(err.Error(), cred[len(cred)-32:]) {
			t.Fatal("a refusal prints the secret")
		}
	}
	// Malformed and wrong secrets.
	// The last character changed for another (one that differs from it,
	// so the credential really is wrong).
	last := "x"
	if strings.HasSuffix(cred, "x") {
		last = "y"
	}
	for _, bad := range []string{"", "ztpa1.x", cred[:len(cred)-1] + last, strings.Replace(cred, "ztpa1", "ztpr1", 1)} {
		if _, err := e.svc.AuthenticateAgent(bg, bad, home); !errors.Is(err, ErrAgentRefused) {
			t.Fatalf("credential %q: %v", bad, err)
		}
	}
	rec := e.tokenRecord(tokens.KindAgent, cred[6:18])
	if rec.Device != mac(1) || rec.SecretHash == "" || strings.Contains(rec.SecretHash, cred[19:]) {
		t.Fatalf("stored agent token %+v", rec)
	}
	// Revoked: refused from home too.
	if err := e.svc.RevokeAgent(bg, mac(1), "scaled down"); err != nil {
		t.Fatal(err)
	}
	var ref *AgentRefusal
	if _, err := e.svc.AuthenticateAgent(bg, cred, home); !errors.As(err, &ref) || ref.Reason != "credential revoked" {
		t.Fatalf("revoked agent credential: %v", err)
	}
}

// TestAgentFilesForSwitches: a switch's delivery carries the agent files
// and asks the plugin to enable the agent.
func TestAgentFilesForSwitches(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, AgentFiles: agentFiles})
	e.cluster(clusterSpec{Name: "fabric", Size: 4})
	e.must(e.join("fabric", 1))
	sw := mac(50)
	secret := e.enroll("fabric", sw, "")
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: sw, RemoteIP: e.hold("10.99.5.1", sw), Kind: "sonic", CSR: switchCSR(t)}))
	d := b.Deliver()
	if !d.Agent {
		t.Fatal("delivery does not ask for the agent")
	}
	var cred string
	for _, f := range d.Files {
		if f.Path == "/etc/ztpd/agent.json" {
			cred = agentCredentialOf(t, f.Content)
			if f.Mode != "0600" {
				t.Fatalf("agent config mode %s", f.Mode)
			}
		}
	}
	if dev, err := e.svc.AuthenticateAgent(bg, cred, netip.MustParseAddr("10.99.5.1")); err != nil || dev != sw {
		t.Fatalf("switch agent: %q %v", dev, err)
	}
}
