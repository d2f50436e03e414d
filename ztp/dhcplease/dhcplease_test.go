package dhcplease

import (
	"testing"
	"time"
)

func TestCached(t *testing.T) {
	now := time.Date(2026, 12, 5, 15, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		durable time.Time
		rest    time.Duration
		ok      bool
	}{
		{"nothing committed", time.Time{}, 0, false},
		{"just committed", now.Add(time.Hour), time.Hour, true},
		{"ten minutes ago: 50 whole minutes left", now.Add(50*time.Minute + 300*time.Millisecond), 50 * time.Minute, true},
		{"at the threshold: written again", now.Add(45 * time.Minute), 0, false},
		{"expired", now.Add(-time.Minute), 0, false},
	} {
		rest, ok := Cached(c.durable, now, time.Hour)
		if rest != c.rest || ok != c.ok {
			t.Errorf("%s: Cached = %s, %v; want %s, %v", c.name, rest, ok, c.rest, c.ok)
		}
	}
}
