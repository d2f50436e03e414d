package content

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
)

// BenchmarkZTPJSON is the hot path of bench/ztp-json.sh in-process: identify,
// match, render, resolve the firmware image, record progress.
func BenchmarkZTPJSON(b *testing.B) {
	e := newBenchEnv(b)
	const n = 2000
	clients := make([]*Client, n)
	for k := range clients {
		// Every switch asks from the address it leased (identity is the
		// lease holder of the source address).
		clients[k] = &Client{Addr: netip.MustParseAddr(fmt.Sprintf("10.99.%d.%d", 100+k/250, 1+k%250)), Transport: "http", Serial: fmt.Sprintf("BENCH%06d", k),
			BaseMAC: fmt.Sprintf("52:54:00:%02x:%02x:%02x", k>>16&0xff, k>>8&0xff, k&0xff), Product: "Accton-AS7712-32X", SONiCVersion: "SONiC.202311.1"}
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, err := e.svc.ZTPJSON(context.Background(), clients[(i*7919)%n]); err != nil {
				b.Fatal(err)
			}
		}
	})
	e.svc.Flush()
	// CPU time per request (rendering and recording), steadier than wall
	// time on a shared machine.
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func newBenchEnv(b *testing.B) *env {
	b.Helper()
	dir := b.TempDir()
	db, ims := openStores(b, dir)
	svc, err := New(Options{Store: db, Devices: newDevices(b, db), Images: ims, Endpoints: testEndpoints(b, "10.99.0.1", ":8080")})
	if err != nil {
		b.Fatal(err)
	}
	set, err := profile.Load([]string{filepath.Join("..", "..", "bench", "profiles")})
	if err != nil {
		b.Fatal(err)
	}
	svc.SetProfiles(set)
	b.Cleanup(func() { svc.Close() })
	e := &env{svc: svc, db: db, images: ims}
	if _, _, err := ims.Add(context.Background(), stringsReader("img"), imagestore.Meta{Name: "sonic-bench-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"}, ""); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	db.Update(func(tx core.Tx) error {
		for k := 0; k < 2000; k++ {
			mac := fmt.Sprintf("52:54:00:%02x:%02x:%02x", k>>16&0xff, k>>8&0xff, k&0xff)
			d := core.Device{ID: mac, MAC: mac, Kind: core.KindSONiC, Serial: fmt.Sprintf("BENCH%06d", k), Product: "Accton-AS7712-32X",
				IP: fmt.Sprintf("10.99.%d.%d", 100+k/250, 1+k%250), State: core.StateLeased, FirstSeen: now}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			l := core.Lease{IP: d.IP, MAC: mac, Subnet: "bench", State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)}
			if err := tx.Leases().Put(l); err != nil {
				return err
			}
		}
		return nil
	})
	return e
}
