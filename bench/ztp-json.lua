-- wrk script for bench/ztp-json.sh: every request is a different switch of
-- the seeded fleet, with the headers sonic-ztp sends.
local devices = tonumber(os.getenv("DEVICES") or "1000")
-- DELAY_MS paces each connection (think time between its requests), so a
-- run can hold a given rate instead of saturating the server.
local delay_ms = tonumber(os.getenv("DELAY_MS") or "0")
local counter = 0
local thread_id = 0

function setup(thread)
  thread:set("thread_id", thread_id)
  thread_id = thread_id + 1
end

function delay()
  return delay_ms
end

function request()
  counter = counter + 1
  local k = (counter * 7919 + thread_id * 104729) % devices
  wrk.headers["User-Agent"] = "SONiC-ZTP/0.1"
  wrk.headers["SERIAL-NUMBER"] = string.format("BENCH%06d", k)
  wrk.headers["BASE-MAC-ADDRESS"] = string.format("52:54:00:%02x:%02x:%02x", math.floor(k / 65536) % 256, math.floor(k / 256) % 256, k % 256)
  wrk.headers["PRODUCT-NAME"] = "Accton-AS7712-32X"
  wrk.headers["SONiC-VERSION"] = "SONiC.202311.1"
  return wrk.format("GET", "/ztp/ztp.json")
end

function done(summary, latency, requests)
  local errs = summary.errors
  io.write(string.format("CHECK connect=%d read=%d write=%d timeout=%d non2xx=%d\n",
    errs.connect, errs.read, errs.write, errs.timeout, errs.status))
  io.write(string.format("P99_US %d\n", latency:percentile(99)))
  io.write(string.format("RPS %.0f\n", summary.requests / (summary.duration / 1e6)))
end
