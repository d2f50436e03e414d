package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

// TestKeyedBurstThenOnePerInterval: a key gets its burst at once,
// then one event per interval, and the next allowed event says how many
// were refused in between; keys do not share a bucket.
func TestKeyedBurstThenOnePerInterval(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(3, 10*time.Second, 100)
	for i := range 3 {
		if ok, sup := l.Allow("a", t0); !ok || sup != 0 {
			t.Fatalf("event %d of the burst: ok=%v suppressed=%d", i, ok, sup)
		}
	}
	for i := range 5 {
		if ok, _ := l.Allow("a", t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatalf("event %d past the burst allowed before the interval", i)
		}
	}
	if ok, _ := l.Allow("b", t0); !ok {
		t.Fatal("another key was limited by the first one's events")
	}
	ok, sup := l.Allow("a", t0.Add(10*time.Second))
	if !ok || sup != 5 {
		t.Fatalf("after one interval: ok=%v suppressed=%d, want true and 5", ok, sup)
	}
	if ok, _ := l.Allow("a", t0.Add(11*time.Second)); ok {
		t.Fatal("a second event within the interval was allowed")
	}
	// A long pause refills the burst, not more.
	for i := range 4 {
		ok, _ := l.Allow("a", t0.Add(time.Hour))
		if ok != (i < 3) {
			t.Fatalf("after an hour, event %d: ok=%v", i, ok)
		}
	}
}

// TestKeyedIsBounded: a flood of new keys never grows the limiter
// past its bound, and keys still limited survive a sweep while idle ones go.
func TestKeyedIsBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(1, time.Second, 50)
	l.Allow("busy", t0)
	l.Allow("busy", t0) // refused: "busy" has a suppressed count to report
	for i := range 10000 {
		l.Allow(fmt.Sprint("k", i), t0.Add(time.Duration(i)*time.Millisecond))
		if n := l.Len(); n > 50 {
			t.Fatalf("%d keys remembered, bound 50", n)
		}
	}
	l2 := New(1, time.Second, 3)
	l2.Allow("old", t0)
	l2.Allow("held", t0.Add(5*time.Second))
	l2.Allow("held", t0.Add(5*time.Second)) // refused: kept by the sweep
	l2.Allow("new", t0.Add(5*time.Second))
	l2.Allow("newer", t0.Add(5*time.Second)) // full: "old" (refilled, nothing to report) goes
	if ok, sup := l2.Allow("held", t0.Add(7*time.Second)); !ok || sup != 1 {
		t.Errorf("the limited key lost its count in the sweep: ok=%v suppressed=%d", ok, sup)
	}
}
