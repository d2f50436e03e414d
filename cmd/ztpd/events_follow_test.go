package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// followStatus is the --follow command's stderr, read while it runs.
type followStatus struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *followStatus) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *followStatus) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// "events --follow" outlives a restart of the service: while the admin
// socket is gone it says once that it reconnects, and it then prints the
// events recorded by the new server.
func TestEventsFollowReconnectsAcrossARestart(t *testing.T) {
	bin := buildZtpd(t)
	data := filepath.Join(t.TempDir(), "data")
	s := startServe(t, bin, data)
	env := cliEnv(t)

	follow := exec.Command(bin, "--data-dir", data, "events", "--follow", "-o", "json")
	follow.Env = env
	status := &followStatus{}
	follow.Stderr = status
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	defer func() { follow.Process.Kill(); <-ended }()
	lines := make(chan eventView, 100)
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e eventView
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				lines <- e
			}
		}
		follow.Wait()
		close(lines)
	}()
	time.Sleep(1500 * time.Millisecond) // it follows

	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, s.stderr)
	}
	time.Sleep(2500 * time.Millisecond) // it polls the missing socket more than once
	startServe(t, bin, data)
	out, err := exec.Command(bin, "--data-dir", data, "apikey", "create", "--role", "user", "--name", "after-restart").CombinedOutput()
	if err != nil {
		t.Fatalf("apikey create: %v\n%s", err, out)
	}
	deadline := time.After(15 * time.Second)
	for found := false; !found; {
		select {
		case e, ok := <-lines:
			if !ok {
				t.Fatalf("events --follow ended across the restart; stderr:\n%s", status)
			}
			found = e.Type == "apikey.created" && e.Fields["name"] == "after-restart"
		case <-deadline:
			t.Fatalf("events --follow printed no event of the new server; stderr:\n%s", status)
		}
	}
	// stderr is copied apart from stdout: give it a moment.
	for end := time.Now().Add(3 * time.Second); !strings.Contains(status.String(), "reconnected") && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	if n := strings.Count(status.String(), "reconnecting"); n != 1 {
		t.Errorf("%d reconnecting lines, want 1:\n%s", n, status)
	}
	if !strings.Contains(status.String(), "reconnected") {
		t.Errorf("no reconnected line:\n%s", status)
	}
}
