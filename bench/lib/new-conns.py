#!/usr/bin/env python3
"""Opens a new connection to a forward proxy every INTERVAL_MS for SECONDS
and GETs URL over it (absolute form, Connection: close), each on a schedule
of its own: a stalled one does not delay the next. For bench/cache-purge:
a proxy that does not accept meanwhile shows in these latencies.

Usage: new-conns.py PROXY_PORT URL SECONDS [INTERVAL_MS [STOP_FILE]]
Stops opening connections after SECONDS, or as soon as STOP_FILE exists,
then waits for those under way (each up to 10 minutes). Prints one line:
`RESULT n=N errors=E p50_us=... p99_us=... max_us=... slowest_at_ms=T`
(T: when the slowest one started, from the start).
"""
import asyncio
import os
import sys
import time

TIMEOUT = 600


async def one(port, url, host, started, out):
    t0 = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT)
        writer.write(
            f"GET {url} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: bench/1.0\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), TIMEOUT)
        writer.close()
        ok = data.startswith(b"HTTP/1.1 200")
    except (OSError, asyncio.TimeoutError):
        ok = False
    t1 = time.monotonic()
    out.append((ok, (t1 - t0) * 1e6, (t0 - started) * 1e3))


async def main():
    port, url, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    interval = (float(sys.argv[4]) if len(sys.argv) > 4 else 20.0) / 1000
    stop_file = sys.argv[5] if len(sys.argv) > 5 else None
    host = url.split("://", 1)[1].split("/", 1)[0]
    out = []
    tasks = []
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < seconds and not (stop_file and os.path.exists(stop_file)):
        tasks.append(asyncio.create_task(one(port, url, host, started, out)))
        n += 1
        await asyncio.sleep(max(0.0, started + n * interval - time.monotonic()))
    await asyncio.gather(*tasks)
    good = sorted(us for ok, us, _ in out if ok)
    errors = sum(1 for ok, _, _ in out if not ok)

    def pct(p):
        return int(good[min(len(good) - 1, int(len(good) * p / 100))]) if good else 0

    slowest = max(out, key=lambda o: o[1]) if out else (True, 0, 0)
    print(
        f"RESULT n={len(out)} errors={errors} p50_us={pct(50)} p99_us={pct(99)} "
        f"max_us={int(good[-1]) if good else 0} slowest_at_ms={int(slowest[2])}"
    )


asyncio.run(main())
