package main

import (
	"slices"
	"strings"
	"testing"
)

// Regression: shell completion did not complete names. The shells ask
// the real binary (`ztpd __complete ...`, what cobra's bash, zsh and fish
// scripts run on TAB); names come live from the server's admin socket.
func TestCompletionOfNames(t *testing.T) {
	env := cliEnv(t)
	data := loudServeWithCluster(t, env)
	complete := func(args ...string) []string {
		t.Helper()
		r := loudRun(t, env, append([]string{"--data-dir", data, "__complete"}, args...)...)
		if r.code != 0 {
			t.Fatalf("__complete %v: exit %d: %s", args, r.code, r.stderr)
		}
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if l != "" && !strings.HasPrefix(l, ":") {
				out = append(out, strings.SplitN(l, "\t", 2)[0])
			}
		}
		return out
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "show", ""}, "c1"},
		{[]string{"cluster", "delete", "c"}, "c1"},
		{[]string{"device", "list", "--cluster", ""}, "c1"},
		{[]string{"events", "--cluster", "c"}, "c1"},
		{[]string{"cluster", "create", "c2", "--version", ""}, "1.31.4"},
		{[]string{"device", "list", "--state", "un"}, "unmatched"},
		{[]string{"lease", "list", "--state", ""}, "active"},
		{[]string{"image", "add", "f", "--kind", "onie"}, "onie-installer"},
		{[]string{"rollout", "start", "--kind", ""}, "kubernetes"},
		{[]string{"rollout", "start", "--cluster", ""}, "c1"},
		{[]string{"device", "desired", "set", "02:00:00:00:00:01", "--mode", "st"}, "standalone"},
	} {
		got := complete(c.args...)
		if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, c.want) }) {
			t.Errorf("ztpd %s<TAB> offers %q, want %q among them", strings.Join(c.args, " "), got, c.want)
		}
	}
	r := loudRun(t, env, "--data-dir", data, "apikey", "create", "--role", "user", "--name", "completion", "-o", "json")
	if r.code != 0 {
		t.Fatalf("apikey create: %s", r.stderr)
	}
	if got := complete("apikey", "revoke", ""); !slices.ContainsFunc(got, func(k string) bool { return strings.Contains(r.stdout, k) }) {
		t.Errorf("ztpd apikey revoke <TAB> offers %q, want the key just created (%s)", got, r.stdout)
	}
	// A prefix nothing has: nothing, and no error printed into the shell.
	if got := complete("cluster", "show", "zz"); len(got) != 0 {
		t.Errorf("ztpd cluster show zz<TAB> offers %q", got)
	}
}
