package joiner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// noGroupCommit turns the store's group commit off: every join is its own
// fsynced transaction. It is the baseline the group commit is measured against.
type noGroupCommit struct{ core.Store }

func (s noGroupCommit) Batch(fn func(core.Tx) error) error { return s.Store.Update(fn) }

// BenchmarkJoin measures join bundles issued and durably recorded (bbolt
// commit with fsync before the bundle is returned) per second, with
// concurrent devices as a fleet boots. Each op is one device: enrollment
// check, admission, token, membership, event, commit, bundle rendering.
// Enrollment secrets are issued (and switches' certificate signing
// requests made) before the timer starts.
//
//	go test -run '^$' -bench BenchmarkJoin -benchtime 20000x ./joiner/
func BenchmarkJoin(b *testing.B) {
	for _, c := range []struct {
		name    string
		version string
		kind    core.DeviceKind
		group   bool
	}{
		{"kubeadm-vm", "1.30.4", core.KindVM, true},
		{"kubeadm-vm-no-group-commit", "1.30.4", core.KindVM, false},
		{"sonic-rsa-ca", "1.30.4", core.KindSONiC, true},
		{"sonic-ecdsa-ca", "1.31.2", core.KindSONiC, true},
	} {
		b.Run(c.name, func(b *testing.B) { benchJoin(b, c.version, c.kind, c.group) })
	}
}

func benchJoin(b *testing.B, version string, kind core.DeviceKind, group bool) {
	ctx := context.Background()
	f := storetest.Open(b)
	bs := f.Store
	var st core.Store = bs
	if !group {
		st = noGroupCommit{bs}
	}
	svc, err := New(st, f.Keys, Options{AutoApprove: []Rule{{ControlPlane: true}}, BaseURL: "http://10.99.0.1:8080",
		Devices: recorder(b, bs)})
	if err != nil {
		b.Fatal(err)
	}
	n := b.N
	// The cluster as the clusters service stores it and has the joiner
	// provision it (directly: a benchmark's size may exceed the API's bound).
	c := core.Cluster{ID: "5b0c8a3e-2f4d-4e1a-9c6b-7d8e9f0a1b2c", Name: "bench", VersionID: "bench-version", Size: n, ControlNodes: 1,
		State: core.ClusterStarting, JoinMethod: MethodKubeadm}
	err = bs.Update(func(tx core.Tx) error {
		if err := tx.Versions().Put(core.Version{ID: c.VersionID, Name: "v" + version, SemVer: version, State: "Enabled"}); err != nil {
			return err
		}
		return tx.Clusters().Put(c)
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Provision(ctx, c); err != nil {
		b.Fatal(err)
	}
	// Joins come from the holder of their address: every device holds a lease.
	addr := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", 100+i>>16, (i>>8)&255, i&255) }
	lease := func(tx core.Tx, ip, m string) error {
		return tx.Leases().Put(core.Lease{IP: ip, MAC: m, State: core.LeaseActive, Reserved: true})
	}
	if err := bs.Update(func(tx core.Tx) error { return lease(tx, "10.99.0.10", "02:ff:00:00:00:01") }); err != nil {
		b.Fatal(err)
	}
	cp, _ := svc.Enroll(ctx, EnrollRequest{Cluster: "bench", MAC: "02:ff:00:00:00:01"})
	if _, err := svc.Join(ctx, JoinRequest{Enrollment: cp.Reveal(), MAC: "02:ff:00:00:00:01", RemoteIP: "10.99.0.10"}); err != nil {
		b.Fatal(err)
	}
	// The control plane came up: Running, as ztpd's watch would make it
	// (switches wait for that).
	err = bs.Update(func(tx core.Tx) error {
		cur, err := tx.Clusters().Get(c.ID)
		if err != nil {
			return err
		}
		cur.State = core.ClusterRunning
		return tx.Clusters().Put(cur)
	})
	if err != nil {
		b.Fatal(err)
	}
	secrets := make([]string, n)
	// Switches send a request for a key they made: made here, before the
	// timer, as the switches' work.
	csrs := make([]string, n)
	err = bs.Update(func(tx core.Tx) error {
		for i := range n {
			m := mac(i)
			if err := tx.Devices().Put(core.Device{ID: m, MAC: m, Kind: kind, Serial: fmt.Sprintf("SN%07d", i), Hostname: fmt.Sprintf("node-%d", i)}); err != nil {
				return err
			}
			if err := lease(tx, addr(i), m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				c, err := svc.Enroll(ctx, EnrollRequest{Cluster: "bench", MAC: mac(i)})
				if err != nil {
					b.Error(err)
					return
				}
				secrets[i] = c.Reveal()
				if kind == core.KindSONiC {
					csrs[i] = switchCSR(b)
				}
			}
		})
	}
	wg.Wait()

	const workers = 64 // devices asking at once
	next.Store(0)
	var failed atomic.Int64
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				bd, err := svc.Join(ctx, JoinRequest{Enrollment: secrets[i], MAC: mac(i), RemoteIP: addr(i), CSR: csrs[i]})
				if err != nil || (bd.CloudConfig == nil && bd.SONiC == nil) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d joins failed", f, n)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "joins/s")
	// CPU per join (all goroutines, user+system) is what other load on a
	// shared machine cannot distort; joins/s above is the wall-clock rate.
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-us/join")
	// Every bundle is on disk: the membership count matches.
	var members int
	bs.View(func(tx core.Tx) error {
		return tx.Memberships().Roster(c.ID, func(string, string) (bool, error) { members++; return true, nil })
	})
	if members != n+1 {
		b.Fatalf("%d memberships recorded, want %d", members, n+1)
	}
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
