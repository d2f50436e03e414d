// Command testsummary reads `go test -json` on stdin and prints what a
// person reads from `go test`: every package's result, the output of tests
// that failed (and of packages that did not build), and at the end the list
// of skipped tests with their reasons, so a tool missing on a machine is
// visible rather than silent. It exits 1 when anything failed.
//
//	go test -json ./... | go run ./testenv/cmd/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	out := map[string][]string{} // package/test -> output lines
	var skipped []string
	failed := false
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Println(string(line)) // build errors and anything not JSON
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output", "build-output":
			out[key] = append(out[key], e.Output)
		case "skip":
			if e.Test != "" {
				skipped = append(skipped, fmt.Sprintf("%s %s: %s", e.Package, e.Test, reason(out[key])))
			}
			delete(out, key)
		case "pass":
			if e.Test == "" {
				fmt.Printf("ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
			}
			delete(out, key)
		case "fail", "build-fail":
			failed = true
			fmt.Print(strings.Join(out[key], "")) // a package's output ends with its FAIL line
			delete(out, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	sort.Strings(skipped)
	fmt.Printf("\n%d tests skipped", len(skipped))
	if len(skipped) > 0 {
		fmt.Print(":")
	}
	fmt.Println()
	for _, s := range skipped {
		fmt.Println("  " + s)
	}
	if failed {
		os.Exit(1)
	}
}

// reason is the t.Skip message among a skipped test's output lines.
func reason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		return l
	}
	return "(no reason given)"
}
