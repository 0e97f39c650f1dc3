#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-hop breakdown of a ping-pong from two syscall_timer.c traces: PREFIX.ping.* PREFIX.pong.*"""
import bisect
import glob
import statistics
import sys


def load(pattern):
    path = glob.glob(pattern)[0]
    lines = open(path).read().split("\n")
    per_ns = float(lines[0].split()[2])
    calls = [tuple(map(int, l.split())) for l in lines[1:] if l]
    return per_ns, calls


def med(xs):
    return statistics.median(xs) if xs else float("nan")


prefix = sys.argv[1]
g, ping = load(prefix + ".ping.*")
_, pong = load(prefix + ".pong.*")
out = {}
for side, calls in (("ping", ping), ("pong", pong)):
    send = [(b - a) / g for k, a, b, r in calls if k == 1]
    data = [(b - a) / g for k, a, b, r in calls if k == 2 and r > 0]
    empty = [(b - a) / g for k, a, b, r in calls if k == 2 and r <= 0]
    turn, gaps, last, prev = [], [], None, None
    for k, a, b, r in calls:
        if prev is not None and k == 2:
            gaps.append((a - prev) / g)  # user time between two calls of the poll loop
        if k == 2 and r > 0:
            last = b
        elif k == 1 and last is not None:
            turn.append((a - last) / g)  # user time from a datagram read to the next send
            last = None
        prev = b
    out[side] = (med(send), med(data), med(empty), med(turn), med(gaps))


def wire(src, dst):
    reads = sorted(b for k, a, b, r in dst if k == 2 and r > 0)
    xs = []
    for k, a, b, r in src:
        i = bisect.bisect_left(reads, a) if k == 1 else len(reads)
        if i < len(reads) and reads[i] - a < 200_000 * g:
            xs.append((reads[i] - a) / g)
    return med(xs)


print("side  send_ns  read_data_ns  read_empty_ns  user_read_to_send_ns  user_per_poll_ns")
for side, v in out.items():
    print(f"{side:5s} " + "  ".join(f"{x:8.0f}" for x in v))
print(f"ping send entry -> pong read exit: {wire(ping, pong):.0f} ns; "
      f"pong send entry -> ping read exit: {wire(pong, ping):.0f} ns")
