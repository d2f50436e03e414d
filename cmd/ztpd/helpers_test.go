package main

import (
	"io"
	"os"
	"testing"
)

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
