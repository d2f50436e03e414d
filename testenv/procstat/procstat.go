// Package procstat reads a process's CPU time and memory counters from
// /proc, for the benchmarks that measure ztpd from outside (bootstorm,
// scalebench, observedjoin).
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPU is pid's utime + stime.
func CPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces): state is
	// field 3, utime 14, stime 15.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// StatusKB returns the kB counters of /proc/<pid>/status by name (VmHWM,
// VmRSS, RssAnon, RssFile, ...).
func StatusKB(pid int) (map[string]int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v, isKB := strings.CutSuffix(strings.TrimSpace(v), " kB")
		if !isKB {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// StatusMB is one kB counter of /proc/<pid>/status in MiB.
func StatusMB(pid int, name string) (float64, error) {
	kb, err := StatusKB(pid)
	if err != nil {
		return 0, err
	}
	v, ok := kb[name]
	if !ok {
		return 0, fmt.Errorf("/proc/%d/status: no %s", pid, name)
	}
	return float64(v) / 1024, nil
}
