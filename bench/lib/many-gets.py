#!/usr/bin/env python3
"""GETs COUNT distinct URLs through a forward proxy over CONNS keep-alive
connections (absolute-form requests), for bench/cache-index.

Usage: many-gets.py PROXY_PORT URL_PREFIX COUNT [CONNS]
Each URL is URL_PREFIX followed by its number. Prints one line:
`done=N errors=E statuses=... seconds=S`. Exits 1 on any error.
"""
import asyncio
import sys
import time


async def worker(port, prefix, numbers, counts):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    host = prefix.split("://", 1)[1].split("/", 1)[0]
    for n in numbers:
        writer.write(
            f"GET {prefix}{n} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: bench/1.0\r\n\r\n".encode()
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(" ")[1]
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length:
            await reader.readexactly(length)
        counts[status] = counts.get(status, 0) + 1
    writer.close()


async def main():
    port, prefix, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    conns = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    counts = {}
    started = time.monotonic()
    await asyncio.gather(
        *(worker(port, prefix, range(i, count, conns), counts) for i in range(conns))
    )
    took = time.monotonic() - started
    errors = sum(v for k, v in counts.items() if k != "200")
    statuses = ",".join(f"{k}:{v}" for k, v in sorted(counts.items()))
    print(f"done={sum(counts.values())} errors={errors} statuses={statuses} seconds={took:.1f}")
    sys.exit(1 if errors else 0)


asyncio.run(main())
