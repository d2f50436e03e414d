// Package wirecapture records what crosses a network interface (tcpdump)
// and finds the secrets in it that travel in clear: it reassembles TCP in
// both directions, TFTP transfers and UDP datagrams, undoes the encodings
// that hide nothing (HTTP chunking and gzip, base64, gzip+base64) and
// scans for private keys, bootstrap and k3s tokens, ztpd's credentials and
// any secret the test knows by value. A finding names the secret by a
// digest, never by its value.
package wirecapture

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ztpd/ztpd/testenv/netns"
)

// Available reports whether tcpdump can be run.
func Available() error {
	if _, err := exec.LookPath("tcpdump"); err != nil {
		return fmt.Errorf("capturing needs tcpdump: %w", err)
	}
	return nil
}

// Capture is a running tcpdump writing a pcap file.
type Capture struct {
	Path    string
	cmd     *exec.Cmd
	stderr  lockedBuffer
	done    chan struct{}
	err     error
	once    sync.Once
	stats   Stats
	stopErr error
}

// Stats is what tcpdump counted.
type Stats struct {
	Captured, Dropped int // Dropped: by the kernel, the buffer full
}

// Start captures every packet on iface ("any": every interface) inside ns
// (nil: this namespace)
// into path, packet-buffered (-U) so that what was captured is in the file
// however the capture ends. It returns once tcpdump listens.
func Start(ns *netns.NS, iface, path string) (*Capture, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	// Whole packets (-s 0), no name lookups, a large kernel buffer so a
	// burst is not dropped, and root kept so the file stays writable where
	// it is. Not --immediate-mode: libpcap then uses a ring of fixed slots
	// as large as the snapshot length (256 KiB), 128 packets in 32 MiB,
	// and a lab's bursts overflowed it; the default ring packs packets in
	// blocks the kernel hands over when full or after the read timeout
	// (Stop waits for the last one).
	args := []string{"-i", iface, "-w", path, "-U", "-n", "-s", "0", "-B", "32768", "-Z", "root"}
	if iface == "any" {
		// Every interface of the namespace: the cooked header of version
		// 1, which gopacket reads (tcpdump's default for "any" is v2).
		args = append(args, "-y", "LINUX_SLL")
	}
	var cmd *exec.Cmd
	if ns != nil {
		cmd = ns.Command(context.Background(), "tcpdump", args...)
	} else {
		cmd = exec.Command("tcpdump", args...)
	}
	c := &Capture{Path: path, cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &c.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start tcpdump: %w", err)
	}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	deadline := time.After(15 * time.Second)
	for !strings.Contains(c.stderr.String(), "listening on") {
		select {
		case <-c.done:
			return nil, fmt.Errorf("tcpdump -i %s exited: %v: %s", iface, c.err, strings.TrimSpace(c.stderr.String()))
		case <-deadline:
			c.kill()
			return nil, fmt.Errorf("tcpdump -i %s did not listen within 15 s: %s", iface, strings.TrimSpace(c.stderr.String()))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return c, nil
}

// blockTimeout is tcpdump's read timeout, which libpcap makes the kernel's
// block retire timeout.
const blockTimeout = time.Second

var (
	capturedRe = regexp.MustCompile(`(\d+) packets? captured`)
	droppedRe  = regexp.MustCompile(`(\d+) packets? dropped by kernel`)
)

// Stop ends the capture as an operator would (SIGINT): tcpdump flushes the
// file and prints its counts, which Stop returns. Stopping twice returns
// the first result. Packets sent up to Stop's call are in the file.
func (c *Capture) Stop() (Stats, error) {
	c.once.Do(func() {
		var err error
		// The kernel hands a block over when a timer of tcpdump's read
		// timeout finds it active since its last tick: at most two
		// timeouts after a packet. On SIGINT tcpdump reads no further, so
		// the last block must have been handed over first.
		time.Sleep(2*blockTimeout + 500*time.Millisecond)
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			c.kill()
			err = errors.New("tcpdump did not stop within 15 s of SIGINT: killed, the file may be cut short")
		}
		out := c.stderr.String()
		if m := capturedRe.FindStringSubmatch(out); m != nil {
			c.stats.Captured, _ = strconv.Atoi(m[1])
		} else if err == nil {
			err = fmt.Errorf("tcpdump printed no counts (%v): %s", c.err, strings.TrimSpace(out))
		}
		if m := droppedRe.FindStringSubmatch(out); m != nil {
			c.stats.Dropped, _ = strconv.Atoi(m[1])
		}
		c.stopErr = err
	})
	return c.stats, c.stopErr
}

func (c *Capture) kill() {
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.done
}

// lockedBuffer is tcpdump's stderr, read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
