package app

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ztpd/ztpd/internal/backup"
	"github.com/ztpd/ztpd/internal/core"
)

// TestBackupWhileTheStoreChanges: a backup taken while other writes land
// (devices stored and deleted, so the store's free pages are reused
// meanwhile) is written whole every time. The store file used to be read
// twice, once to hash it and once to send it, and a free page rewritten in
// between failed the backup with "changed while it was read" (seen with
// 30,000 devices under bench/scale.sh). No snapshot file is left behind,
// and one left by a killed backup is removed when the store is opened.
func TestBackupWhileTheStoreChanges(t *testing.T) {
	cfg := keysTestConfig(t)
	a, err := keysOpen(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 3000) // a page or so per record
	put := func(i int) error {
		return a.Store.Update(func(tx core.Tx) error {
			id := fmt.Sprintf("02:70:00:%02x:%02x:%02x", (i>>16)&0xff, (i>>8)&0xff, i&0xff)
			return tx.Devices().Put(core.Device{ID: id, MAC: id, Kind: core.KindVM, State: core.StateLeased, Hostname: "h", Labels: map[string]string{"pad": pad}})
		})
	}
	for i := range 2000 {
		if err := put(i); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // churn: delete and store again, reusing freed pages
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			id := fmt.Sprintf("02:70:00:%02x:%02x:%02x", ((i%2000)>>16)&0xff, ((i%2000)>>8)&0xff, (i%2000)&0xff)
			a.Store.Update(func(tx core.Tx) error { return tx.Devices().Delete(id) })
			put(i % 2000)
		}
	}()
	for n := range 15 {
		if err := a.WriteBackup(io.Discard, false, false, nil); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("backup %d while the store changes: %v", n+1, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	left, _ := filepath.Glob(filepath.Join(cfg.DataDir, backup.SnapshotPrefix+"*"))
	if len(left) != 0 {
		t.Fatalf("snapshot files left: %v", left)
	}
	a.Close()
	stale := filepath.Join(cfg.DataDir, backup.SnapshotPrefix+"123")
	if err := os.WriteFile(stale, []byte("half a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err = keysOpen(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("a killed backup's snapshot is still there: %v", err)
	}
}
