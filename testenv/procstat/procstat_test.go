package procstat

import (
	"os"
	"testing"
	"time"
)

// The test process's own counters: it has run, and it holds memory.
func TestOwnCounters(t *testing.T) {
	end := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(end) { // burn some CPU
	}
	cpu, err := CPU(os.Getpid())
	if err != nil || cpu <= 0 {
		t.Fatalf("CPU: %v %v", cpu, err)
	}
	for _, name := range []string{"VmHWM", "VmRSS", "RssAnon"} {
		mb, err := StatusMB(os.Getpid(), name)
		if err != nil || mb <= 0 {
			t.Errorf("%s: %v MB %v", name, mb, err)
		}
	}
	if _, err := StatusMB(os.Getpid(), "NoSuchField"); err == nil {
		t.Error("a missing field answered no error")
	}
	if _, err := CPU(-1); err == nil {
		t.Error("CPU of no process answered no error")
	}
}
