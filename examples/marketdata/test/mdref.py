# SPDX-License-Identifier: Apache-2.0
"""Shared pieces of the market-data tests (Debian's /usr/bin/python3, standard library only):
reading a md-feed recording, an independent reference computation of the bars, and running
md-feed / md-gateway on loopback multicast."""
import json
import os
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request

PERIODS = {"1m": 1, "5m": 5, "15m": 15, "30m": 30, "60m": 60, "1d": 240}


def read_recording(path):
    """Returns (instruments, ticks): dicts / tuples straight from the binary format."""
    instruments, ticks = [], []
    with open(path, "rb") as f:
        assert f.read(8) == b"MDREC001", "not a recording"
        while True:
            n = f.read(4)
            if not n:
                break
            msg = f.read(struct.unpack("<I", n)[0])
            magic, kind, count, _feed, _sent = struct.unpack_from("<IHHQq", msg, 0)
            assert magic == 0x3154444D
            off = 24
            for _ in range(count):
                if kind == 1:
                    ticks.append(struct.unpack_from("<QIIIIiIq", msg, off))
                    off += 40
                else:
                    instruments.append(struct.unpack_from("<IIiii", msg, off))
                    off += 20
    return instruments, ticks


def code_text(code):
    return "%06d.%s" % (code >> 2, "SH" if code & 3 == 0 else "SZ")


def day_labels():
    """The 240 one-minute labels (HHMM) of a trading day, in order."""
    out = []
    for start, count in ((9 * 60 + 30, 120), (13 * 60, 120)):
        for k in range(1, count + 1):
            t = start + k
            out.append((t // 60) * 100 + t % 60)
    return out


LABELS = day_labels()
LABEL_INDEX = {label: i for i, label in enumerate(LABELS)}


def minute_label(ms):
    """HHMM of the one-minute bar a trade at `ms` (exchange ms of day) belongs to, or None."""
    minute = ms // 60000  # minutes since midnight, floored
    if 9 * 60 + 25 <= minute < 9 * 60 + 31:
        return 931
    if 9 * 60 + 31 <= minute < 11 * 60 + 30:
        t = minute + 1
    elif 11 * 60 + 30 <= minute < 13 * 60:
        return 1130
    elif 13 * 60 <= minute < 14 * 60 + 59:
        t = minute + 1
    elif 14 * 60 + 59 <= minute < 15 * 60 + 30:
        return 1500
    else:
        return None
    return (t // 60) * 100 + t % 60


def period_label(hhmm, n):
    i = LABEL_INDEX[hhmm]
    return LABELS[(i // n) * n + n - 1]


def price(cents):
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return "%s%d.%02d" % (sign, cents // 100, cents % 100)


def reference_bars(ticks):
    """{(code, period): [bar dict in time order]} computed from the ticks."""
    bars = {}
    for (_cseq, _sseq, code, date, ms, px, _flags, vol) in ticks:
        one = minute_label(ms)
        if one is None:
            continue
        for name, n in PERIODS.items():
            label = date * 10000 + (1500 if name == "1d" else period_label(one, n))
            series = bars.setdefault((code, name), {})
            b = series.get(label)
            if b is None:
                series[label] = {"time": label, "open": px, "high": px, "low": px, "close": px,
                                 "volume": vol, "turnover": px * vol}
            else:
                b["high"] = max(b["high"], px)
                b["low"] = min(b["low"], px)
                b["close"] = px
                b["volume"] += vol
                b["turnover"] += px * vol
    return {k: [v[t] for t in sorted(v)] for k, v in bars.items()}


def bar_json(code, b):
    return ('{"code":"%s","time":%d,"open":%s,"high":%s,"low":%s,"close":%s,"volume":%d,'
            '"turnover":%s}' % (code_text(code), b["time"], price(b["open"]), price(b["high"]),
                                price(b["low"]), price(b["close"]), b["volume"],
                                price(b["turnover"])))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def drop_messages(src, dst, drop):
    """Copies a recording without the tick messages for which drop(index, ticks) is true
    (index: the tick message's place among the tick messages): a feed with real holes in its
    channel sequence, as after an unrecoverable loss."""
    with open(src, "rb") as f, open(dst, "wb") as out:
        out.write(f.read(8))
        index = 0
        while True:
            n = f.read(4)
            if not n:
                break
            msg = f.read(struct.unpack("<I", n)[0])
            _, kind, count, _, _ = struct.unpack_from("<IHHQq", msg, 0)
            if kind == 1:
                ticks = [struct.unpack_from("<QIIIIiIq", msg, 24 + 40 * i) for i in range(count)]
                index += 1
                if drop(index - 1, ticks):
                    continue
            out.write(n + msg)


def group_uri(index):
    """A loopback-pinned multicast channel of its own per test (239.192.122.x)."""
    return "udp://239.192.122.%d:%d?iface=127.0.0.1" % (index, 24720 + index)


def get(port, path, headers=None, timeout=10):
    """(status, headers, body text) of GET path."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


class Gateway:
    """A md-gateway process on a free port."""

    def __init__(self, binary, uri, store=None, extra=(), web=None, port=None, env=None):
        self.port = port or free_port()
        args = [binary, uri, "--http", "127.0.0.1:%d" % self.port, "--threads", "2"]
        if store:
            args += ["--store", store]
        if web:
            args += ["--web", web]
        args += list(extra)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
        deadline = time.time() + 20
        while True:
            assert self.proc.poll() is None, "md-gateway exited: " + self.proc.stdout.read()
            try:
                # 200 when the feed is live, 503 until then (or when stale): up either way.
                if get(self.port, "/healthz", timeout=1)[0] in (200, 503):
                    break
            except OSError:
                pass
            assert time.time() < deadline, "md-gateway did not answer"
            time.sleep(0.05)

    def health(self):
        return json.loads(get(self.port, "/healthz")[2])

    def wait_ticks(self, n, timeout=60):
        deadline = time.time() + timeout
        while self.health()["ticks"] < n:
            assert time.time() < deadline, "gateway has %s of %d ticks" % (self.health(), n)
            time.sleep(0.05)

    def metric(self, name):
        for line in get(self.port, "/metrics")[2].splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError("no metric " + name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        out = self.proc.stdout.read()
        # A clean exit on SIGTERM, and nothing from the sanitizers (ASan/UBSan builds).
        assert self.proc.returncode == 0, "md-gateway exited %d:\n%s" % (self.proc.returncode,
                                                                         out[-3000:])
        assert "Sanitizer" not in out and "runtime error" not in out, out[-3000:]
        return out


def run_feed(binary, uri, *args):
    """Runs md-feed to its end; returns the number of ticks it published."""
    out = subprocess.run([binary, uri, *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split("published ")[1].split()[0])


def check_same(got, want, what):
    if got != want:
        at = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
        lo = max(0, at - 200)
        raise AssertionError("%s differs (at %d of %d / %d):\n got  %s\n want %s" % (
            what, at, len(got), len(want), got[lo:at + 400], want[lo:at + 400]))
