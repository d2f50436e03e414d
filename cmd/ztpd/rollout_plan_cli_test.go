package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// TestRolloutPlanCommand: "rollout plan" prints the batches, the steps
// and the fingerprint (text and -o json) and starts nothing; "rollout
// start --plan-fingerprint" is refused with another fingerprint and
// starts with the plan's; "rollout approve" of a rollout not at its gate
// says so.
func TestRolloutPlanCommand(t *testing.T) {
	for _, v := range []string{"ZTPD_API_URL", "ZTPD_API_KEY", "ZTPD_SECRET_KEY", "ZTPD_API_CA"} {
		t.Setenv(v, "")
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	base, cfg, ztpd := inproc.ServeApp(t, nil)
	dd := "--data-dir=" + cfg.DataDir
	out, err := runCLI(t, dd, "apikey", "create", "--role", "admin", "--name", "admin-key", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var key struct {
		APIKey    string `json:"api_key"`
		SecretKey string `json:"secret_key"`
	}
	if err := json.Unmarshal([]byte(out), &key); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, error) {
		t.Helper()
		return runCLI(t, append(args, dd, "--api-url", base, "--api-key", key.APIKey, "--secret-key", key.SecretKey)...)
	}
	const member, standalone, cluster = "02:00:00:00:0e:01", "02:00:00:00:0e:02", "c-fab"
	dayOpsFixture(t, ztpd, cluster, member, standalone)

	planArgs := []string{"rollout", "plan", "--kind", "image", "--target", "sonic-202411.bin", "--devices", standalone,
		"--hook", "post_upgrade=snap.sh"}
	out, err = cli(planArgs...)
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	t.Logf("ztpd rollout plan:\n%s", out)
	for _, want := range []string{"Plan: image to sonic-202411.bin", "batch 1", standalone, "install sonic-202411.bin, reboot, post_upgrade hook snap.sh",
		"Estimated duration: unknown", "Fingerprint: "} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	out, err = cli(append(planArgs, "-o", "json")...)
	var p client.RolloutPlan
	if err != nil || json.Unmarshal([]byte(out), &p) != nil || len(p.Batches) != 1 || p.Fingerprint == "" {
		t.Fatalf("plan -o json: %v\n%s", err, out)
	}
	if out, _ := cli("rollout", "list"); strings.Contains(out, "image") {
		t.Fatalf("a plan started a rollout:\n%s", out)
	}
	start := append([]string{"rollout", "start"}, planArgs[2:]...)
	if out, err := cli(append(start, "--plan-fingerprint", "0123456789abcdef")...); err == nil || !strings.Contains(err.Error(), "changed since the plan") {
		t.Fatalf("start with another fingerprint: %v\n%s", err, out)
	}
	out, err = cli(append(start, "--plan-fingerprint", p.Fingerprint, "-o", "json")...)
	var ro rolloutView
	if err != nil || json.Unmarshal([]byte(out), &ro) != nil || ro.Fingerprint != p.Fingerprint {
		t.Fatalf("start with the plan's fingerprint: %v\n%s", err, out)
	}
	if out, err := cli("rollout", "approve", ro.ID); err == nil || !strings.Contains(err.Error(), "does not wait for an approval") {
		t.Fatalf("approve without a gate: %v\n%s", err, out)
	}
	if _, err := cli("rollout", "abort", ro.ID, "--yes"); err != nil {
		t.Fatal(err)
	}
}
