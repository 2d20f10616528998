#!/usr/bin/env python3
"""Locked instructions executed per request, from a callgrind profile.

Usage: locked.py CALLGRIND_OUT REQUESTS [TOP]

The profile must be recorded with --dump-instr=yes (bench/cost LOCKED=1
does so). Every object the profile names is disassembled with objdump;
each `lock`-prefixed instruction, and each `xchg` with memory (locked
without a prefix), is matched with the times callgrind saw it run. Prints
the total per request, then the TOP sites (default 15) with the function
they are in. An atomic read-modify-write drains the store buffer: what
one costs on a machine, `cargo bench --bench atomics` says.
"""

import collections
import re
import subprocess
import sys


def read_profile(path):
    """Instruction addresses with their execution counts, by object."""
    names = {}

    def name(kind, text):
        m = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not m:
            return text
        key = (kind, m.group(1))
        if m.group(2) is not None:
            names[key] = m.group(2)
        return names.get(key, "?")

    counts = collections.defaultdict(collections.Counter)
    function_at = {}
    obj = fn = None
    last = 0
    after_call = False
    kinds = {"ob": "ob", "cob": "ob", "fn": "fn", "cfn": "fn"}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            key, eq, rest = line.partition("=")
            if eq and re.fullmatch(r"c?(ob|fn|fl|fi|fe)|cf[il]", key):
                value = name(kinds.get(key, "fl"), rest)
                if key == "ob":
                    obj = value
                elif key == "fn":
                    fn = value
                continue
            if line.startswith("calls="):
                # The next cost line is the call's inclusive cost.
                after_call = True
                continue
            if not line or line[0] not in "0123456789+-*":
                continue
            fields = line.split()
            pos = fields[0]
            if pos == "*":
                addr = last
            elif pos[0] in "+-":
                step = int(pos[1:], 16)
                addr = last + step if pos[0] == "+" else last - step
            else:
                addr = int(pos, 16)
            last = addr
            if after_call:
                after_call = False
                continue
            if len(fields) >= 3:
                counts[obj][addr] += int(fields[2])
                function_at[(obj, addr)] = fn
    return counts, function_at


def locked_instructions(obj):
    """Addresses of the locked instructions of an object file."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True, text=True
    ).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(lock\b.*|xchg\s+.*\(.*)", line)
        if m:
            found[int(m.group(1), 16)] = " ".join(m.group(2).split())
    return found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, requests = sys.argv[1], float(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    counts, function_at = read_profile(path)
    sites = collections.Counter()
    for obj, by_addr in counts.items():
        if not obj or not obj.startswith("/"):
            continue
        for addr, text in locked_instructions(obj).items():
            n = by_addr.get(addr, 0)
            if n:
                fn = function_at.get((obj, addr), "?")
                sites[(text.split()[0] + " " + text.split()[1], fn)] += n
    total = sum(sites.values())
    print(f"locked/req {total / requests:.1f}")
    for (text, fn), n in sites.most_common(top):
        print(f"  {n / requests:6.2f}  {text[:28]:28s} {fn[:110]}")


if __name__ == "__main__":
    main()
