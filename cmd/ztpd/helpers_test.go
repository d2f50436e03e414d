package main

import (
	"io"
	"os"
	"testing"

	"github.com/ztpd/ztpd/testenv/hermetic"
)

// cliEnv is the environment of a run of the real binary as an operator on
// the appliance without API credentials: none of the user's ZTPD_ variables
// or ~/.config/ztpd/cli.yaml (local commands use the data directory's admin
// socket), and no configuration file unless the test names one (never the
// host's /etc/ztpd/ztpd.yaml, which the package test installs).
func cliEnv(t *testing.T) []string {
	t.Helper()
	return hermetic.TestEnv(t)
}

// runCLI runs the root command in-process with args and returns stdout.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	runErr := root.Execute()
	w.Close()
	os.Stdout = old
	return string(<-done), runErr
}
