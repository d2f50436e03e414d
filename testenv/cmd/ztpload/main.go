// Command ztpload is bench/ztp-json.sh's load generator: a fleet of SONiC
// switches asking for ztp.json, each from its own address, as real switches
// do. (wrk cannot choose a source address per request, and ztpd identifies a
// switch by the address it asks from, so a load from one address would be
// one switch.) Switch k asks from 10.99.(100+k/250).(1+k%250), the address
// testenv/cmd/ztpseed leased to it, with the headers sonic-ztp sends; the bench
// makes those addresses local in its namespace.
//
// Each switch keeps one HTTP/1.1 connection (raw TCP, a pre-built request,
// Content-Length framing), so the generator spends little CPU beside the
// server. Two modes:
//
//	-rate 0   peak: -conns workers, each cycling over its share of the
//	          switches, asking as fast as answers come back;
//	-rate R   paced: the same workers together send R requests/s on a fixed
//	          schedule; latency is measured from the scheduled send time, so
//	          a stalled server shows up in the tail (no coordinated omission).
//
// Output lines: CHECK errors=<n> non2xx=<n>, RPS <n>, P50_US <n>, P99_US <n>.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	target := flag.String("target", "10.99.0.1:18090", "ztpd HTTP listener")
	devices := flag.Int("devices", 2000, "switches (as seeded by ztpseed)")
	conns := flag.Int("conns", 64, "concurrent workers")
	dur := flag.Duration("duration", 20*time.Second, "how long to run")
	rate := flag.Float64("rate", 0, "requests per second in total; 0 = as fast as possible")
	flag.Parse()
	if *devices < 1 || *conns < 1 || *conns > *devices {
		log.Fatal("ztpload: need 1 <= conns <= devices")
	}
	var (
		ok, non2xx, errs atomic.Int64
		mu               sync.Mutex
		lat              []time.Duration
		firstErr         error
	)
	start := time.Now()
	deadline := start.Add(*dur)
	var wg sync.WaitGroup
	for w := 0; w < *conns; w++ {
		wg.Go(func() {
			var mine []*sw
			for k := w; k < *devices; k += *conns {
				mine = append(mine, newSwitch(k, *target))
			}
			defer func() {
				for _, s := range mine {
					s.close()
				}
			}()
			var interval time.Duration
			if *rate > 0 {
				interval = time.Duration(float64(*conns) / *rate * float64(time.Second))
			}
			local := make([]time.Duration, 0, 1<<14)
			next := start.Add(time.Duration(w) * interval / time.Duration(*conns))
			for i := 0; ; i++ {
				if interval > 0 {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
				}
				sent := time.Now()
				if interval > 0 {
					sent = next // measure from the schedule
					next = next.Add(interval)
				}
				if sent.After(deadline) {
					break
				}
				s := mine[i%len(mine)]
				code, err := s.get()
				switch {
				case err != nil:
					if errs.Add(1) == 1 {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					s.close()
				case code != 200:
					non2xx.Add(1)
				default:
					ok.Add(1)
					local = append(local, time.Since(sent))
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	fmt.Printf("CHECK errors=%d non2xx=%d\n", errs.Load(), non2xx.Load())
	if firstErr != nil {
		fmt.Printf("FIRST_ERROR %v\n", firstErr)
	}
	fmt.Printf("RPS %.0f\n", float64(ok.Load())/elapsed.Seconds())
	fmt.Printf("P50_US %d\n", pct(0.50).Microseconds())
	fmt.Printf("P99_US %d\n", pct(0.99).Microseconds())
	if errs.Load() > 0 {
		os.Exit(1)
	}
}

// sw is one switch: its address, its request, its connection.
type sw struct {
	local  *net.TCPAddr
	target string
	req    []byte
	conn   net.Conn
	br     *bufio.Reader
}

func newSwitch(k int, target string) *sw {
	ip := net.IPv4(10, 99, byte(100+k/250), byte(1+k%250))
	req := fmt.Sprintf("GET /ztp/ztp.json HTTP/1.1\r\nHost: %s\r\nUser-Agent: SONiC-ZTP/0.1\r\n"+
		"SERIAL-NUMBER: BENCH%06d\r\nBASE-MAC-ADDRESS: 52:54:00:%02x:%02x:%02x\r\n"+
		"PRODUCT-NAME: Accton-AS7712-32X\r\nSONiC-VERSION: SONiC.202311.1\r\n\r\n",
		target, k, k>>16&0xff, k>>8&0xff, k&0xff)
	return &sw{local: &net.TCPAddr{IP: ip}, target: target, req: []byte(req)}
}

func (s *sw) close() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

// get sends the request and reads one response, reconnecting once when a
// kept connection turns out closed.
func (s *sw) get() (int, error) {
	for attempt := 0; ; attempt++ {
		fresh := s.conn == nil
		if fresh {
			c, err := (&net.Dialer{LocalAddr: s.local, Timeout: 5 * time.Second}).Dial("tcp", s.target)
			if err != nil {
				return 0, err
			}
			s.conn, s.br = c, bufio.NewReaderSize(c, 16<<10)
		}
		s.conn.SetDeadline(time.Now().Add(10 * time.Second))
		code, err := s.roundTrip()
		if err == nil || fresh || attempt > 0 {
			return code, err
		}
		s.close()
	}
}

func (s *sw) roundTrip() (int, error) {
	if _, err := s.conn.Write(s.req); err != nil {
		return 0, err
	}
	line, err := s.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, err
	}
	length, closing := -1, false
	for {
		h, err := s.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, val, _ := bytes.Cut(h, []byte(":"))
		val = bytes.TrimSpace(val)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(val)); err != nil {
				return 0, err
			}
		case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(val, []byte("close")):
			closing = true
		}
	}
	if length < 0 {
		return 0, fmt.Errorf("response without Content-Length")
	}
	if _, err := s.br.Discard(length); err != nil {
		return 0, err
	}
	if closing {
		s.close()
	}
	return code, nil
}
