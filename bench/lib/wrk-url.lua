-- wrk script for bench/compare.
--
-- BENCH_URL is the absolute URL to fetch (http://127.0.0.1:PORT/path).
-- BENCH_MODE=proxy sends it in absolute form (GET http://host/path), as a
-- client of a forward proxy does; BENCH_MODE=direct sends origin form.
-- The Host header names the origin either way.
--
-- There is deliberately no response() callback: defining one makes wrk
-- parse every response in Lua and roughly halves its request rate.
-- done() runs once at the end and prints one machine-readable line.

local url = os.getenv("BENCH_URL") or error("BENCH_URL is not set")
local mode = os.getenv("BENCH_MODE") or "proxy"
local authority, path = url:match("^http://([^/]+)(/.*)$")
if not authority then
   error("BENCH_URL must look like http://host:port/path, got " .. url)
end

wrk.method = "GET"
wrk.headers["Host"] = authority
if mode == "proxy" then
   wrk.path = url
else
   wrk.path = path
end

function done(summary, latency, requests)
   local e = summary.errors
   -- Microseconds; duration in microseconds too.
   io.write(string.format(
      "RESULT requests=%d duration_us=%d bytes=%d p50_us=%d p99_us=%d mean_us=%.1f max_us=%d " ..
      "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
      summary.requests, summary.duration, summary.bytes,
      latency:percentile(50), latency:percentile(99), latency.mean, latency.max,
      e.connect, e.read, e.write, e.status, e.timeout))
end
