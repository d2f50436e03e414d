package bodycache

import (
	"errors"
	"fmt"
	"testing"
)

func TestBodyCacheStaysBounded(t *testing.T) {
	c := New(100, nil, nil)
	body := func(n int) func() ([]byte, error) {
		return func() ([]byte, error) { return make([]byte, n), nil }
	}
	for i := 0; i < 50; i++ {
		c.Get(fmt.Sprint("k", i), 1, body(28))
		if c.bytes > 100 {
			t.Fatalf("cache holds %d bytes, bound 100", c.bytes)
		}
	}
	// Too big to keep at all: served, not kept.
	if b, _ := c.Get("big", 1, body(500)); len(b) != 500 {
		t.Fatal("big body not served")
	}
	if _, ok := c.m["big"]; ok {
		t.Fatal("body over the bound kept")
	}
	// An error is shared with nobody later: the next call renders again.
	calls := 0
	fail := func() ([]byte, error) { calls++; return nil, errors.New("render failed") }
	c.Get("e", 1, fail)
	c.Get("e", 1, fail)
	if calls != 2 {
		t.Fatalf("an error was cached (%d renders)", calls)
	}
	// A newer generation renders again; an older request may use the newer body.
	n := 0
	count := func() ([]byte, error) { n++; return []byte{byte(n)}, nil }
	c.Get("g", 5, count)
	c.Get("g", 5, count)
	c.Get("g", 4, count)
	if n != 1 {
		t.Fatalf("same or older generation rendered again (%d)", n)
	}
	if b, _ := c.Get("g", 6, count); n != 2 || b[0] != 2 {
		t.Fatal("newer generation served an old body")
	}
	total := 0
	for _, e := range c.m {
		total += e.size
	}
	if total != c.bytes {
		t.Fatalf("byte count %d, entries hold %d", c.bytes, total)
	}
}
