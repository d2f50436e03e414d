package etcdstore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
	"github.com/ztpd/ztpd/testenv/freeport"
	"github.com/ztpd/ztpd/testenv/testpki"
)

// TestReplacedApplianceRejoins: an appliance whose etcd data is gone (a
// new disk) is refused while the cluster still lists it, joins as a new
// member once a survivor replaced it, and then holds everything the
// cluster stored; the cluster's first start (no member has data) still
// bootstraps, with the members started one by one.
func TestReplacedApplianceRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd members")
	}
	names := []string{"a1", "a2", "a3"}
	peers := map[string]string{}
	for _, n := range names {
		peers[n] = freeport.URL(t, "http")
	}
	root := t.TempDir()
	cfg := func(n string) etcdstore.MemberConfig {
		return etcdstore.MemberConfig{Name: n, Dir: filepath.Join(root, n), Peers: peers, ClientURL: freeport.URL(t, "http"), Token: "t-replace"}
	}
	start := func(n string, wait time.Duration) (*etcdstore.Member, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		return etcdstore.StartMember(ctx, cfg(n))
	}
	members := make([]*etcdstore.Member, 3)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Staggered, so later members find earlier ones answering
			// while the cluster forms.
			time.Sleep(time.Duration(i) * 700 * time.Millisecond)
			members[i], errs[i] = start(n, 30*time.Second)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("first start of %s: %v", names[i], err)
		}
	}
	defer func() {
		for _, m := range members {
			if m != nil {
				m.Close()
			}
		}
	}()
	st, err := etcdstore.Open(etcdstore.Options{Client: members[0].Client, Prefix: "/ztpd/", Name: "a1", TempDir: t.TempDir(),
		LocalMember: true, MaxTxnOps: etcdstore.EmbeddedMaxTxnOps})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Update(func(tx core.Tx) error { return tx.Settings().Put("before-replace", "kept") }); err != nil {
		t.Fatal(err)
	}

	// a2's disk dies.
	members[1].Close()
	members[1] = nil
	if err := os.RemoveAll(filepath.Join(root, "a2")); err != nil {
		t.Fatal(err)
	}
	if _, err := start("a2", 20*time.Second); err == nil || !strings.Contains(err.Error(), "ztpd store member replace a2") {
		t.Fatalf("a2 on an empty disk while the cluster still lists it: %v, want a refusal naming the replace command", err)
	}
	if err := os.RemoveAll(filepath.Join(root, "a2")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := etcdstore.ReplaceMember(ctx, members[0].Client, "a1", peers["a1"]); err == nil {
		t.Fatal("replacing the member answering the command was accepted")
	}
	rep, err := etcdstore.ReplaceMember(ctx, members[0].Client, "a2", peers["a2"])
	if err != nil {
		t.Fatal(err)
	}
	if rep.Removed == "" || rep.Added == "" || rep.Removed == rep.Added {
		t.Fatalf("replace: %+v", rep)
	}
	if _, err := etcdstore.ReplaceMember(ctx, members[0].Client, "a2", peers["a2"]); err == nil || !strings.Contains(err.Error(), "not started yet") {
		t.Fatalf("replacing again before the new member started: %v", err)
	}
	if members[1], err = start("a2", 30*time.Second); err != nil {
		t.Fatalf("a2 after the replace: %v", err)
	}
	// The new member holds the data written before it existed.
	st2, err := etcdstore.Open(etcdstore.Options{Client: members[1].Client, Prefix: "/ztpd/", Name: "a2", TempDir: t.TempDir(),
		LocalMember: true, MaxTxnOps: etcdstore.EmbeddedMaxTxnOps, Init: etcdstore.InitWait})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	var got string
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = st2.View(func(tx core.Tx) error {
			v, _, err := tx.Settings().Get("before-replace")
			got = v
			return err
		})
		if got == "kept" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != "kept" {
		t.Fatalf("the replaced member reads %q (%v), want the value stored before it joined", got, err)
	}
	ms, err := etcdstore.Members(ctx, members[0].Client)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, m := range ms {
		listed = append(listed, fmt.Sprintf("%s:%v", m.Name, m.Started))
	}
	if len(ms) != 3 || !strings.Contains(strings.Join(listed, " "), "a2:true") {
		t.Fatalf("members after the replace: %v", listed)
	}
	// And it restarts from its own data as usual.
	members[1].Close()
	if members[1], err = start("a2", 30*time.Second); err != nil {
		t.Fatalf("a2 restarted from its data: %v", err)
	}
}

// TestThreeMembersOnIPv6: the embedded etcd of three appliances on IPv6
// (loopback ::1 here), peers and clients over mutual TLS with bracketed
// URLs: the cluster forms, and what one appliance writes another reads.
func TestThreeMembersOnIPv6(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd members")
	}
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skip("no IPv6 loopback:", err)
	} else {
		ln.Close()
	}
	ca := testpki.New(t, "ztpd appliances")
	names := []string{"a1", "a2", "a3"}
	peers := map[string]string{}
	for _, n := range names {
		peers[n] = "https://" + freeport.On(t, "::1")
	}
	root := t.TempDir()
	members := make([]*etcdstore.Member, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, n := range names {
		cert := ca.Issue(n, net.IPv6loopback)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			members[i], errs[i] = etcdstore.StartMember(ctx, etcdstore.MemberConfig{Name: n, Dir: filepath.Join(root, n), Peers: peers,
				ClientURL: "https://" + freeport.On(t, "::1"), CertFile: cert.CertFile, KeyFile: cert.KeyFile, CAFile: ca.File, Token: "t-v6"})
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, m := range members {
			if m != nil {
				m.Close()
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", names[i], err)
		}
	}
	// The first appliance creates the store; the others wait for it.
	open := func(i int, init etcdstore.InitMode) *etcdstore.Store {
		st, err := etcdstore.Open(etcdstore.Options{Client: members[i].Client, Prefix: "/ztpd/", Name: names[i], TempDir: t.TempDir(),
			LocalMember: true, MaxTxnOps: etcdstore.EmbeddedMaxTxnOps, Init: init})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	if err := open(0, etcdstore.InitCreate).Update(func(tx core.Tx) error { return tx.Settings().Put("over", "ipv6") }); err != nil {
		t.Fatal(err)
	}
	st := open(2, etcdstore.InitWait)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got string
		err := st.View(func(tx core.Tx) error {
			v, _, err := tx.Settings().Get("over")
			got = v
			return err
		})
		if err == nil && got == "ipv6" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a3 reads %q, %v", got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
