package dhcp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestFullDiskWithholdsACKs: when the lease commit fails because the disk is
// full, no ACK leaves and nothing committed is lost; once there is room the
// client's retried REQUEST is answered and its lease is durable.
func TestFullDiskWithholdsACKs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	h := newHarness(t, func(c *Options) {
		c.Subnets[0].Pools = pools("10.99.0.10-10.99.0.250")
	})
	h.st.Close()
	small := filepath.Join(t.TempDir(), "small")
	os.Mkdir(small, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	h.dir = small
	h.open()
	t.Cleanup(func() { h.st.Close(); exec.Command("umount", small).Run() })
	// Fill the file system: the store has only the pages it already has.
	filler := filepath.Join(small, "filler")
	if f, err := os.Create(filler); err == nil {
		buf := make([]byte, 4096)
		for {
			if _, err := f.Write(buf); err != nil {
				break
			}
		}
		f.Close()
	}
	hostname := dhcpv4.WithOption(dhcpv4.OptHostName(strings.Repeat("h", 200)))
	committed := map[string]bool{}
	var failedOffer *dhcpv4.DHCPv4
	var commitErr error
	for i := 0; i < 240 && failedOffer == nil; i++ {
		offer, _ := h.exchange(discover(mac(i), hostname))
		if offer == nil {
			t.Fatalf("no OFFER for client %d", i)
		}
		x := &exchange{ifc: h.ifc, req: &Packet{}, out: make([]byte, 0, 1500), now: h.now}
		if err := x.req.Parse(requestFor(offer, hostname).ToBytes()); err != nil {
			t.Fatal(err)
		}
		if !h.s.decide(x) || !x.commit {
			t.Fatalf("REQUEST %d not decided for a commit", i)
		}
		snap := &snapshot{}
		h.s.mu.Lock()
		h.s.take(snap, h.now)
		h.s.mu.Unlock()
		h.s.handOver(snap)
		if commitErr = h.s.commitSnapshot(snap); commitErr != nil {
			h.s.mu.Lock()
			h.s.restore(snap) // what the committer does: retry the records, drop the ACKs
			h.s.mu.Unlock()
			failedOffer = offer
			break
		}
		if len(snap.acks) != 1 || snap.acks[0].b != x.b {
			t.Fatalf("commit %d released %d ACKs", i, len(snap.acks))
		}
		committed[offer.YourIPAddr.String()] = true
	}
	if failedOffer == nil {
		t.Fatal("the disk never filled up")
	}
	if !strings.Contains(commitErr.Error(), "no space left") {
		t.Fatalf("commit error %v, want no space left on device", commitErr)
	}
	ip := failedOffer.YourIPAddr.String()
	if _, ok := h.lease(ip); ok {
		t.Fatalf("lease %s is in the store although its commit failed", ip)
	}
	for c := range committed {
		if l, ok := h.lease(c); !ok || l.IP != c {
			t.Fatalf("committed lease %s lost after the failed commit", c)
		}
	}
	t.Logf("%d leases committed before the disk was full", len(committed))

	// Room again: the client's retried REQUEST gets its address, durably.
	os.Remove(filler)
	ack, _ := h.exchange(requestFor(failedOffer, hostname))
	if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck || ack.YourIPAddr.String() != ip {
		t.Fatalf("retried REQUEST: %v", ack)
	}
	if _, ok := h.lease(ip); !ok {
		t.Fatalf("lease %s not in the store after its ACK", ip)
	}
	// Device records that did not fit were kept for later, not dropped.
	if strings.Contains(h.logs.String(), "cannot be stored; dropped") {
		t.Fatalf("records dropped on a full disk:\n%s", h.logs.String())
	}
	h.commit()
	for i := 0; i <= len(committed); i++ {
		if d := h.device(mac(i).String()); d.IP == "" {
			t.Fatalf("device %s has no address on record", mac(i))
		}
	}
	h.restart()
	for c := range committed {
		if _, ok := h.lease(c); !ok {
			t.Fatalf("lease %s lost across a restart", c)
		}
	}
}
