package netns

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPairPingAndDo(t *testing.T) {
	p := ForTest(t, "zd-nstest", "10.99.250.1/24", "10.99.250.2/24")
	for _, ns := range []*NS{p.A, p.B} {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns.Name)); err != nil {
			t.Fatalf("namespace %s missing: %v", ns.Name, err)
		}
	}
	// A socket opened inside Do lives in the namespace: it can bind the
	// namespace's address, which the host does not have.
	var ln net.PacketConn
	if err := p.A.Do(func() error {
		var err error
		ln, err = net.ListenPacket("udp4", "10.99.250.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if c, err := net.ListenPacket("udp4", "10.99.250.1:0"); err == nil {
		c.Close()
		t.Fatal("the host namespace has 10.99.250.1: Do did not isolate")
	}
	// A command in the other namespace reaches it across the veth.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := p.B.Command(ctx, "bash", "-c", "echo hello > /dev/udp/10.99.250.1/"+
		strings.TrimPrefix(ln.LocalAddr().String(), "10.99.250.1:"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("send from %s failed: %v\n%s", p.B.Name, err, out)
	}
	ln.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := ln.ReadFrom(buf)
	if err != nil || strings.TrimSpace(string(buf[:n])) != "hello" {
		t.Fatalf("read %q from %v: %v", buf[:n], from, err)
	}
	if !strings.HasPrefix(from.String(), "10.99.250.2:") {
		t.Fatalf("datagram came from %v, want 10.99.250.2", from)
	}
	mac, err := p.A.MAC("a0")
	if err != nil || strings.Count(mac, ":") != 5 {
		t.Fatalf("MAC(a0) = %q, %v", mac, err)
	}
}

func TestCloseRemoves(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip("skipping:", err)
	}
	n, err := Add("zd-nstest-close")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/var/run/netns/zd-nstest-close"); !os.IsNotExist(err) {
		t.Fatalf("namespace still present after Close: %v", err)
	}
}
