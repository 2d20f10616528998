#!/usr/bin/env python3
"""Writes a chained audit log for bench/audit-tools.

Usage: audit-log.py LINES FIRST_FILE SECOND_FILE

The lines are chained as docs/compliance.md defines it, computed here with
hashlib: B is the line without its chain field (a JSON object whose first
field is seq), chain = SHA-256(previous chain, 32 raw bytes || B), and the
line is B with `,"chain":"<hex>"}` in place of its final `}`. The first
line is a checkpoint beginning the chain (head: 64 zeros); another
checkpoint opens the second file and comes every 100,000 lines.
"""

import hashlib
import json
import random
import sys


def main():
    total, first, second = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    rng = random.Random(42)
    prev = bytes(32)
    seq = 0
    out = open(first, "w")
    half = total // 2

    def emit(fields):
        nonlocal prev, seq
        seq += 1
        body = json.dumps({"seq": seq, **fields}, separators=(",", ":")).encode()
        prev = hashlib.sha256(prev + body).digest()
        out.write(body[:-1].decode() + ',"chain":"' + prev.hex() + '"}\n')

    def checkpoint(reason, file_start, start=None):
        fields = {"type": "checkpoint", "time": "2026-03-01T00:00:00.000Z",
                  "reason": reason, "file_start": file_start}
        if start:
            fields["chain_start"] = start
        fields["head"] = prev.hex()
        emit(fields)

    checkpoint("start", True, "empty")
    for i in range(1, total):
        if i == half:
            out.close()
            out = open(second, "w")
            checkpoint("reopen", True)
            continue
        if i % 100_000 == 0:
            checkpoint("reopen", False)
            continue
        day = 1 + i * 30 // total
        origin = "https://site%d.example" % rng.randrange(2000)
        path = "/private/%d" % rng.randrange(100) if rng.random() < 0.2 else "/page/%d" % rng.randrange(100)
        blocked = path.startswith("/private")
        emit({
            "time": "2026-%02d-%02dT%02d:%02d:%02d.%03dZ" % (
                3 + (day - 1) // 28, 1 + (day - 1) % 28, rng.randrange(24),
                rng.randrange(60), rng.randrange(60), rng.randrange(1000)),
            "client": "10.%d.%d.%d:%d" % (rng.randrange(2), rng.randrange(50),
                                          rng.randrange(50), 1024 + rng.randrange(60000)),
            **({"user": "user%d" % rng.randrange(25)} if rng.random() < 0.5 else {}),
            "method": "GET",
            "url": origin + path,
            "agent": "agent%d" % rng.randrange(40),
            "decision": "disallowed" if blocked else "allowed",
            "reason": "disallowed by line 2: Disallow: /private" if blocked else "no rule matches",
            "rule_line": 2 if blocked else None,
            "rule": "Disallow: /private" if blocked else None,
            "robots_url": origin + "/robots.txt",
            "fetch_status": 200,
            "fetch_outcome": "ok",
            "cache_age_secs": rng.randrange(86400),
            "robots_sha256": hashlib.sha256(("%s %d" % (origin, day // 10)).encode()).hexdigest(),
        })
    out.close()


if __name__ == "__main__":
    main()
