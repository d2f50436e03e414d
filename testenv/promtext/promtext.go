// Package promtext reads a Prometheus text exposition (ztpd's /metrics)
// for the test tools and benchmarks that check or report a counter.
package promtext

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
)

// Unlabelled fetches url with c and returns its samples without labels,
// by name.
func Unlabelled(c *http.Client, url string) (map[string]float64, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.Contains(line, "{") {
			continue
		}
		var name string
		var v float64
		if _, err := fmt.Sscanf(line, "%s %g", &name, &v); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}
