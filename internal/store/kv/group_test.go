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

// TestBackToBackCommitsLinger: a caller queued while a commit runs waits,
// after it, for callers that come soon after (here within the test's long
// linger) and commits with them; a lone caller on a quiet store commits
// at once.
func TestBackToBackCommitsLinger(t *testing.T) {
	hold := make(chan struct{})
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	var sizes []int
	first := true
	g := newGroup(64, func(fns []func(core.Tx) error) (int, error) {
		mu.Lock()
		sizes = append(sizes, len(fns))
		wait := first
		first = false
		mu.Unlock()
		if wait {
			started <- struct{}{}
			<-hold
		}
		return -1, nil
	}, nil, 3*time.Second)
	defer g.Close()
	batch := func(done chan<- error) { done <- g.Batch(func(core.Tx) error { return nil }) }
	a, b, c := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go batch(a)
	<-started // a's commit runs
	go batch(b)
	for len(g.reqs) == 0 { // b is queued behind it: back to back
		time.Sleep(time.Millisecond)
	}
	close(hold)
	if err := <-a; err != nil {
		t.Fatal(err)
	}
	select {
	case <-b:
		t.Fatal("b committed without lingering for more callers")
	case <-time.After(100 * time.Millisecond):
	}
	go batch(c)
	for _, done := range []chan error{b, c} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	got := append([]int(nil), sizes...)
	mu.Unlock()
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("commit sizes %v, want [1 2]: b and c in one commit", got)
	}
	// Quiet now (nothing was queued when the last commit ended): a lone
	// caller does not wait for the linger.
	start := time.Now()
	d := make(chan error, 1)
	go batch(d)
	if err := <-d; err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 1500*time.Millisecond {
		t.Fatalf("a lone caller on a quiet store waited %s", waited)
	}
}
