package kv

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// TestBatchRacingCloseNeverHangs: callers that race Close either commit or
// get ErrClosed; none waits forever for a loop that has returned (a
// devices service flushing after its store closed hung so).
func TestBatchRacingCloseNeverHangs(t *testing.T) {
	for round := 0; round < 200; round++ {
		g := NewGroup(8, func(fns []func(core.Tx) error) (int, error) {
			for i, fn := range fns {
				if err := fn(nil); err != nil {
					return i, err
				}
			}
			return -1, nil
		}, nil)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- g.Batch(func(core.Tx) error { return nil })
			}()
		}
		g.Close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: a Batch racing Close never returned", round)
		}
		close(errs)
		for err := range errs {
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if err := g.Batch(func(core.Tx) error { return nil }); !errors.Is(err, ErrClosed) {
			t.Fatalf("Batch after Close: %v, want ErrClosed", err)
		}
	}
}
