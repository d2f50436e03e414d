// Command ztpload is an open-loop load generator for ztp.json: it starts
// requests at a fixed rate (each from a different switch of the seeded
// fleet, with the SONiC ZTP headers) whatever the server's speed, and
// measures each latency from the moment the request was due, so a stalled
// server cannot hide its queue (no coordinated omission). bench/ztp-json.sh
// uses it for the latency at a given rate; wrk measures the peak rate.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:18090/ztp/ztp.json", "ztp.json URL")
	rate := flag.Int("rate", 5000, "requests started per second")
	dur := flag.Duration("duration", 15*time.Second, "how long to send")
	devices := flag.Int("devices", 2000, "switches in the seeded fleet")
	workers := flag.Int("workers", 256, "maximum requests in flight")
	flag.Parse()

	tr := &http.Transport{MaxIdleConnsPerHost: *workers, MaxConnsPerHost: *workers, DisableCompression: true}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	due := make(chan time.Time, *workers*4)
	var (
		mu       sync.Mutex
		lat      []time.Duration
		errs     atomic.Int64
		late     atomic.Int64 // requests that could not even start on time (all workers busy)
		seq      atomic.Int64
		wg       sync.WaitGroup
		finished atomic.Int64
	)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1024)
			for t := range due {
				k := int(seq.Add(1)*7919) % *devices
				req, _ := http.NewRequest("GET", *url, nil)
				req.Header.Set("User-Agent", "SONiC-ZTP/0.1")
				req.Header.Set("SERIAL-NUMBER", fmt.Sprintf("BENCH%06d", k))
				req.Header.Set("BASE-MAC-ADDRESS", fmt.Sprintf("52:54:00:%02x:%02x:%02x", k>>16&0xff, k>>8&0xff, k&0xff))
				req.Header.Set("PRODUCT-NAME", "Accton-AS7712-32X")
				req.Header.Set("SONiC-VERSION", "SONiC.202311.1")
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					errs.Add(1)
				}
				local = append(local, time.Since(t))
				finished.Add(1)
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	start := time.Now()
	interval := time.Second / time.Duration(*rate)
	total := int(dur.Seconds() * float64(*rate))
	for i := 0; i < total; i++ {
		t := start.Add(time.Duration(i) * interval)
		if d := time.Until(t); d > 0 {
			time.Sleep(d)
		}
		select {
		case due <- t:
		default:
			late.Add(1)
			due <- t // wait for a worker; the latency clock already runs
		}
	}
	close(due)
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds()) / 1000
	}
	fmt.Printf("sent %d requests at %d/s in %.1fs (completed %.0f/s); errors %d; queued behind busy workers %d\n",
		total, *rate, elapsed.Seconds(), float64(finished.Load())/elapsed.Seconds(), errs.Load(), late.Load())
	fmt.Printf("latency from due time: p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms\n", pct(0.5), pct(0.9), pct(0.99), pct(1))
	fmt.Printf("OPEN_LOOP rate=%d achieved=%.0f p99_ms=%.2f errors=%d\n", *rate, float64(finished.Load())/elapsed.Seconds(), pct(0.99), errs.Load())
	if errs.Load() > 0 {
		os.Exit(1)
	}
}
