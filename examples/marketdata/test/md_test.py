#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Market-data gateway tests against real processes (one case per ctest):
  md_test.py CASE BIN_DIR [WORK_DIR]
reference  bars of a recorded 2-day feed against mdref.reference_bars, every code x period
restart    LMDB: the same answers after a restart; ticks missed while down mark a gap
gap        a lossy feed: prizma's loss events become gap flags, every bar that differs from
           the reference carries one
http       bad input: malformed queries, unknown codes, reversed / huge ranges, slow and
           half-open clients, 10,000 idle connections; v2 + ETag; metrics
push       WebSocket (python3-websocket) and SSE (curl) clients get bar updates; a stalled
           client does not stall the gateway
ab         A/B feeds (two md-feed processes, same seed) on two channels, A killed -9 midway:
           bars == reference, no gap; a divergent B (another seed) on A's channel is reported
recorder   md-recorder + md-gateway --recorder: the gateway killed -9 mid-feed and restarted
           fetches what it missed: bars == reference, no gap; a new gateway replays it all
redis      a second gateway joins the shared redis-server mid-feed: every bar in Redis ==
           reference; a gateway started after the feed serves it all from Redis
address    a second md-gateway (or any program) on an address in use is refused with a clear
           error; the first keeps all the connections on its per-core listeners
limits     push sessions within --max-connections and --max-push, WebSocket message size and
           idle clients, write timeouts, Origin and Host, answer caches bounded by bytes and
           keyed by the query, /v2 answer cap, security headers; honest clients still served
liveness   the feed's state (down, live, stale) in /healthz (503 unless live) and /metrics,
           pushed to WebSocket and SSE clients with heartbeats; /healthz after a restart
consistency  two gateways on one Redis, one joining late, then killed -9 and restarted:
           the missed interval filled from Redis; every series equal on both
compat     --compat reference: unknown parameters ignored, [] for start > end and unknown
           codes, the reference's Redis layout written and read back
redis_auth Redis AUTH (file, environment), MOVED only to members CLUSTER SLOTS lists
redis_cluster  the same on a 3-master cluster, then a code's slot migrating (SETSLOT
           MIGRATING/IMPORTING, MIGRATE): writes and reads follow ASK (counted)
"""
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mdref  # noqa: E402

CASE, BIN = sys.argv[1], sys.argv[2]
FEED = os.path.join(BIN, "md-feed")
GATEWAY = os.path.join(BIN, "md-gateway")
RECORDER = os.path.join(BIN, "md-recorder")
WORK = tempfile.mkdtemp(prefix="md-%s-" % CASE)
FEED_ONE = ["--symbols", "40", "--day-ticks", "30000", "--seed", "11"]
FEED_ARGS = FEED_ONE + ["--days", "2"]
GROUPS = {"reference": 1, "restart": 2, "gap": 3, "http": 4, "push": 5, "web": 6, "redis": 7,
          "redis_cluster": 8, "ab": 10, "recorder": 12, "address": 13, "limits": 14,
          "redis_auth": 15, "liveness": 16,
          "consistency": 17, "compat": 18, "address_race": 19}
URI = mdref.group_uri(GROUPS[CASE])
RANGE = "&start=202308180000&end=202308222359"


def all_answers(gw, codes):
    out = {}
    for code in codes:
        for p in mdref.PERIODS:
            st, _, body = mdref.get(gw.port, "/getStockData?code=%s&period=%s%s" % (
                mdref.code_text(code), p, RANGE))
            assert st == 200, (code, p, st, body)
            out[(code, p)] = body
    return out


_REF = {}
_RECS = {}


def reference(ticks):
    """mdref.reference_bars, computed once per tick list."""
    if id(ticks) not in _REF:
        _REF[id(ticks)] = mdref.reference_bars(ticks)
    return _REF[id(ticks)]


def expected(ticks, code, period):
    """The reference answer."""
    ref = reference(ticks).get((code, period), [])
    return "[" + ",".join(mdref.bar_json(code, b) for b in ref) + "]\n"


def case_reference():
    rec = os.path.join(WORK, "feed.rec")
    gw = mdref.Gateway(GATEWAY, URI)
    try:
        n = mdref.run_feed(FEED, URI, *FEED_ARGS, "--rate", "60000", "--record", rec)
        gw.wait_ticks(n)
        assert gw.metric("md_feed_loss_events_total") == 0, "loss on loopback: cannot compare"
        instruments, ticks = mdref.read_recording(rec)
        assert len(ticks) == n
        codes = sorted({i[0] for i in instruments})
        answers = all_answers(gw, codes)
        for (code, p), body in answers.items():
            mdref.check_same(body, expected(ticks, code, p), "%s %s" % (mdref.code_text(code), p))
        # Session boundaries: the busiest code has the first and last bar of each session.
        times = [b["time"] % 10000 for b in json.loads(answers[(codes[0], "1m")])]
        for hhmm in (931, 1130, 1301, 1500):
            assert hhmm in times, hhmm
        sixty = {b["time"] % 10000 for b in json.loads(answers[(codes[0], "60m")])}
        assert sixty == {1030, 1130, 1400, 1500}, sixty
        # The limit-up symbol closes each day at its upper limit.
        limit_up = mdref_code("600001.SH")
        days = json.loads(answers[(limit_up, "1d")])
        limits = {i[1]: i[3] for i in instruments if i[0] == limit_up}
        assert len(days) == 2
        for d in days:
            assert round(d["close"] * 100) == limits[d["time"] // 10000], (d, limits)
        # A suspended symbol: known, no bars.
        assert answers[(mdref_code("000002.SZ"), "1m")] == "[]\n"
        st, _, body = mdref.get(gw.port, "/getStockData?code=688999.SH&period=1m" + RANGE)
        assert st == 404 and "unknown code" in body, (st, body)
    finally:
        gw.stop()


def mdref_code(text):
    number, exch = text.split(".")
    return (int(number) << 2) | (0 if exch == "SH" else 1)


def case_restart():
    store = os.path.join(WORK, "store")
    gw = mdref.Gateway(GATEWAY, URI, store=store)
    try:
        n = mdref.run_feed(FEED, URI, *FEED_ONE, "--rate", "60000")
        gw.wait_ticks(n)
        codes = [mdref_code(c) for c in ("600000.SH", "300525.SZ", "600001.SH", "000002.SZ")]
        before = all_answers(gw, codes)
        v2 = mdref.get(gw.port, "/v2/bars?codes=600000.SH,300525.SZ&period=5m&last=30")[2]
    finally:
        gw.stop()
    gw = mdref.Gateway(GATEWAY, URI, store=store)
    try:
        assert gw.health()["bars_loaded"] > 0
        after = all_answers(gw, codes)
        for k in before:
            mdref.check_same(after[k], before[k], "after restart %s" % (k,))
        mdref.check_same(mdref.get(gw.port, "/v2/bars?codes=600000.SH,300525.SZ&period=5m"
                                   "&last=30")[2], v2, "v2 after restart")
        assert '"gap"' not in "".join(after.values())
    finally:
        gw.stop()
    # Ticks published while the gateway is down: the 2-day feed's first day is the same
    # stream, its channel sequence goes on... a restarted gateway that sees seq N+k marks the
    # gap instead of serving the bars as complete.
    rec = os.path.join(WORK, "two.rec")
    mdref.run_feed(FEED, "mem://md:1", *FEED_ARGS, "--rate", "0", "--record", rec)
    instruments, ticks = mdref.read_recording(rec)
    gw = mdref.Gateway(GATEWAY, URI, store=os.path.join(WORK, "store2"))
    try:
        # Publish day 1 minus its last 20 % while up, then day 2 after a restart.
        cut = os.path.join(WORK, "cut.rec")
        split_recording(rec, cut, lambda t: t[3] == 20230818 and t[4] < 13 * 3600000)
        n1 = mdref.run_feed(FEED, URI, "--replay", cut, "--rate", "60000")
        gw.wait_ticks(n1)
    finally:
        gw.stop()
    gw = mdref.Gateway(GATEWAY, URI, store=os.path.join(WORK, "store2"))
    try:
        late = os.path.join(WORK, "late.rec")
        split_recording(rec, late, lambda t: t[3] == 20230821)
        n2 = mdref.run_feed(FEED, URI, "--replay", late, "--rate", "60000")
        gw.wait_ticks(n2)
        assert gw.health()["gaps"] >= 1
        body = mdref.get(gw.port, "/getStockData?code=600000.SH&period=1d" + RANGE)[2]
        days = json.loads(body)
        assert [d.get("gap", False) for d in days] == [True, True], body
        # Bars before the outage stay unflagged and right; the one holding the last tick seen
        # before it is flagged (later ticks of the same bar may be missing).
        morning = json.loads(mdref.get(gw.port, "/getStockData?code=600000.SH&period=60m"
                                       "&start=202308180930&end=202308181130")[2])
        want = expected(ticks, mdref_code("600000.SH"), "60m")
        assert morning[0] == json.loads(want)[0], morning
        assert morning[1]["gap"] is True, morning
    finally:
        gw.stop()


def split_recording(src, dst, keep):
    """Writes the instrument messages and the tick messages whose ticks all satisfy `keep`."""
    mdref.drop_messages(src, dst, lambda _, ticks: not (ticks and all(keep(t) for t in ticks)))


def case_gap():
    rec = os.path.join(WORK, "feed.rec")
    gw = mdref.Gateway(GATEWAY, URI + "&loss=0.2&seed=5")
    try:
        mdref.run_feed(FEED, URI, *FEED_ARGS, "--rate", "0", "--window", "64", "--record", rec)
        time.sleep(2)
        loss = gw.metric("md_feed_loss_events_total")
        gaps = gw.metric("md_feed_gaps_total")
        assert loss > 0, "no unrecoverable loss: the test needs a smaller window"
        assert gaps > 0, "loss events but no gap marked"
        instruments, ticks = mdref.read_recording(rec)
        codes = sorted({i[0] for i in instruments})
        flagged = differing = 0
        for (code, p), body in all_answers(gw, codes).items():
            got = {b["time"]: b for b in json.loads(body)}
            want = {b["time"]: b for b in json.loads(expected(ticks, code, p))}
            for t, b in got.items():
                if b.get("gap"):
                    flagged += 1
                    continue
                b.pop("gap", None)
                assert want.get(t) == b, ("unflagged bar differs", code, p, b, want.get(t))
            for t in want:
                if t not in got:
                    differing += 1
        assert flagged > 0
        print("gap: %d loss events, %d gaps, %d flagged bars" % (loss, gaps, flagged))
    finally:
        gw.stop()


def raw(port, data, read=True, timeout=5):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if not read:
            return b""
        chunks = []
        while True:
            try:
                c = s.recv(65536)
            except socket.timeout:
                break
            if not c:
                break
            chunks.append(c)
        return b"".join(chunks)


def case_http():
    gw = mdref.Gateway(GATEWAY, URI, extra=["--idle-timeout", "2", "--max-bars", "300"])
    try:
        n = mdref.run_feed(FEED, URI, *FEED_ARGS, "--rate", "60000")
        gw.wait_ticks(n)
        check_bad_queries(gw)
        check_v2(gw)
        check_slow_clients(gw)
        check_idle_connections(gw)
        check_metrics(gw)
        check_answers_follow_updates(gw)
        assert gw.proc.poll() is None
    finally:
        gw.stop()


def check_bad_queries(gw):
    good = "/getStockData?code=600000.SH&period=1m&start=202308180930&end=202308181030"
    st, _, body = mdref.get(gw.port, good)
    assert st == 200 and len(json.loads(body)) == 60, body[:200]
    bad = {
        "/getStockData?code=600000.SH&period=1m&start=202308181030&end=202308180930": "after",
        "/getStockData?code=600000.SH&period=7m" + RANGE: "bad period",
        "/getStockData?code=600000&period=1m" + RANGE: "bad code",
        "/getStockData?code=600000.SH&period=1m&start=202302300930&end=202308180930": "bad start",
        "/getStockData?code=600000.SH&period=1m&start=2023081809&end=202308180930": "bad start",
        "/getStockData?period=1m" + RANGE: "missing parameter 'code'",
        "/getStockData?code=600000.SH&code=600000.SH&period=1m" + RANGE: "twice",
        "/getStockData?code=%zz&period=1m" + RANGE: "malformed",
        "/getStockData?code=600000.SH&period=1m&start=202001010000&end=202312312359": "at most",
        "/getStockData?code=600000.SH&period=1m&bogus=1" + RANGE: "unknown parameter",
        "/v2/bars?codes=600000.SH&period=1m&last=100000": "bad last",
        "/ws?code=600000.SH&period=1m": "WebSocket upgrade",
    }
    for path, words in bad.items():
        st, _, body = mdref.get(gw.port, path)
        assert st == 400 and words in json.loads(body)["error"], (path, st, body[:300])
    st, _, body = mdref.get(gw.port, "/getStockData?code=688001.SH&period=1m" + RANGE)
    assert st == 404 and "unknown code" in body
    st, _, body = mdref.get(gw.port, "/nope")
    assert st == 404
    reply = raw(gw.port, b"POST /getStockData HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                b"Connection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 405") and b"\r\nAllow: GET, HEAD\r\n" in reply, reply[:300]
    # Raw garbage and an oversized header: a 400 (or a close), never a crash.
    assert b"400" in raw(gw.port, b"GARBAGE\r\n\r\n").split(b"\r\n")[0]
    assert b"400" in raw(gw.port, b"GET / HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n")[:20]
    big = raw(gw.port, b"GET /getStockData?" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n"
              b"Connection: close\r\n\r\n")
    assert b"400" in big.split(b"\r\n")[0], big[:100]


def check_v2(gw):
    path = "/v2/bars?codes=600000.SH,300525.SZ&period=5m&last=10"
    st, h, body = mdref.get(gw.port, path)
    data = json.loads(body)
    assert st == 200 and len(data["600000.SH"]) == 10 and len(data["300525.SZ"]) == 10
    etag = h["ETag"]
    st, _, _ = mdref.get(gw.port, path, headers={"If-None-Match": etag})
    assert st == 304, st
    st, _, _ = mdref.get(gw.port, path, headers={"If-None-Match": '"other"'})
    assert st == 200
    # By range: the same bars as the reference API.
    st, _, body = mdref.get(gw.port, "/v2/bars?codes=600000.SH&period=15m" + RANGE)
    v1 = mdref.get(gw.port, "/getStockData?code=600000.SH&period=15m" + RANGE)[2]
    assert json.loads(body)["600000.SH"] == json.loads(v1)


def check_slow_clients(gw):
    # A client that sends half a request and stops is closed after --idle-timeout (2 s).
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHo")
    s.settimeout(10)
    t0 = time.time()
    assert s.recv(100) == b"", "half-sent request not closed"
    assert time.time() - t0 < 9
    s.close()
    # One that sends a byte a second: cut off too (the timeout is per request, not per byte).
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.settimeout(0.5)
    closed = False
    for ch in b"GET /healthz HTTP/1.1\r\nHost: x\r\n":
        try:
            s.sendall(bytes([ch]))
            if s.recv(100) == b"":
                closed = True
                break
        except socket.timeout:
            pass
        except OSError:
            closed = True
            break
    s.close()
    assert closed, "slowloris client never cut off"
    # A client that never reads its answers: the gateway still answers others.
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    req = b"GET /getStockData?code=600000.SH&period=1m" + RANGE.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    s.setblocking(False)
    for _ in range(200):
        try:
            s.send(req)
        except BlockingIOError:
            break
    assert mdref.get(gw.port, "/healthz")[0] in (200, 503)  # answered (503: feed not live)
    s.close()


def check_idle_connections(gw):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 10_000
    if hard < want + 200:
        print("idle connections: hard fd limit %d, testing %d" % (hard, hard - 200))
        want = hard - 200
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want + 200), hard))
    conns = []
    try:
        for _ in range(want):
            conns.append(socket.create_connection(("127.0.0.1", gw.port)))
        deadline = time.time() + 10
        while gw.metric("md_http_connections") < want * 0.99 and time.time() < deadline:
            time.sleep(0.1)
        assert gw.metric("md_http_connections") >= want * 0.99
        st, _, body = mdref.get(gw.port, "/getStockData?code=600000.SH&period=60m" + RANGE)
        assert st == 200 and len(json.loads(body)) == 8
    finally:
        for c in conns:
            c.close()
    # The idle ones are closed by the gateway after --idle-timeout anyway.
    deadline = time.time() + 10
    while gw.metric("md_http_connections") > 5 and time.time() < deadline:
        time.sleep(0.2)
    assert gw.metric("md_http_connections") <= 5


def check_answers_follow_updates(gw):
    # The same query before and after more ticks: the (cached) answer follows the bars.
    path = "/getStockData?code=600000.SH&period=1d&start=202308180000&end=202308312359"
    before = json.loads(mdref.get(gw.port, path)[2])
    assert [b["time"] for b in before] == [202308181500, 202308211500], before
    n0 = gw.health()["ticks"]
    n = mdref.run_feed(FEED, URI, *FEED_ONE, "--date", "20230822", "--rate", "60000")
    gw.wait_ticks(n0 + n)
    after = json.loads(mdref.get(gw.port, path)[2])
    assert [b["time"] for b in after] == [202308181500, 202308211500, 202308221500], after


def check_metrics(gw):
    text = mdref.get(gw.port, "/metrics")[2]
    # The feed lag: a real sum (md-feed stamps its send time), buckets to tens of seconds.
    assert gw.metric("md_feed_lag_seconds_sum") > 0, "the lag sum does not move"
    assert gw.metric("md_feed_lag_seconds_count") > 0
    assert 'md_feed_lag_seconds_bucket{le="60"}' in text
    assert 'md_feed_lag_seconds_bucket{le="10"}' in text
    for name in ("md_http_requests_total{code=\"2xx\"}", "md_http_requests_total{code=\"4xx\"}",
                 "md_http_request_duration_seconds_bucket{le=\"+Inf\"}", "md_feed_lag_seconds_count",
                 "md_feed_loss_events_total", "md_feed_gaps_total", "md_feed_ticks_total"):
        assert any(line.startswith(name + " ") for line in text.splitlines()), name
    assert gw.metric("md_http_not_modified_total") >= 1
    assert float([l for l in text.splitlines() if l.startswith('md_http_requests_total{code="4xx"}')]
                 [0].split()[1]) >= 10


def case_push():
    import websocket  # python3-websocket
    gw = mdref.Gateway(GATEWAY, URI)
    feed = None
    try:
        # Day 1 first, so that the code is known; then day 2 while clients listen.
        n1 = mdref.run_feed(FEED, URI, *FEED_ONE, "--rate", "60000")
        gw.wait_ticks(n1)  # day 1 applied: every update from here on is day 2's
        ws = websocket.create_connection("ws://127.0.0.1:%d/ws?code=600000.SH&period=1m" % gw.port,
                                         timeout=10)
        snap = json.loads(ws.recv())
        assert snap["period"] == "1m" and snap["bar"]["code"] == "600000.SH", snap
        # A stalled client: subscribed over SSE, never reads.
        stalled = socket.create_connection(("127.0.0.1", gw.port))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        stalled.sendall(b"GET /sse?code=600000.SH&period=1m HTTP/1.1\r\nHost: x\r\n\r\n")
        sse = subprocess.Popen(["curl", "-sN", "--max-time", "30",
                                "http://127.0.0.1:%d/sse?code=600000.SH&period=1m" % gw.port],
                               stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        feed = subprocess.Popen([FEED, URI, "--symbols", "40", "--day-ticks", "30000", "--days",
                                 "1", "--seed", "12", "--date", "20230821", "--rate", "20000"],
                                stdout=subprocess.PIPE, text=True)
        got = []
        while len(got) < 20:
            m = json.loads(ws.recv())
            if "type" not in m:  # bars (state messages and heartbeats have a type)
                got.append(m["bar"])
        times = [b["time"] for b in got]
        assert all(t // 10000 == 20230821 for t in times), times
        assert times == sorted(times), times
        lines = []
        for line in sse.stdout:
            if line.startswith("data: ") and '"type"' not in line:
                lines.append(json.loads(line[6:]))
            if len(lines) >= 20:
                break
        sse.kill()
        assert lines[0]["bar"]["code"] == "600000.SH"
        assert any(m["bar"]["time"] // 10000 == 20230821 for m in lines[1:]), lines[:3]
        assert feed.wait(60) == 0
        n = int(feed.stdout.read().split("published ")[1].split()[0])
        gw.wait_ticks(n1 + n)
        ws.close()
        stalled.close()
        assert gw.metric("md_push_sent_total") > 20
    finally:
        if feed and feed.poll() is None:
            feed.kill()
        gw.stop()


def start_redis(cluster_ports=None):
    """redis-server(s) on free loopback ports in WORK; returns (processes, ports)."""
    ports = cluster_ports or [mdref.free_port()]
    procs = []
    try:
        return start_redis_on(ports, procs, cluster_ports is not None)
    except BaseException:
        for proc in procs:
            proc.kill()
            proc.wait()
        raise


def cluster_ports():
    """Three free ports whose cluster bus ports (port + 10000) are valid too."""
    ports = []
    while len(ports) < 3:
        p = mdref.free_port()
        if p < 55000 and mdref.port_free(p + 10000):
            ports.append(p)
    return ports


def start_redis_on(ports, procs, cluster):
    for p in ports:
        d = os.path.join(WORK, "redis-%d" % p)
        os.makedirs(d)
        args = ["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", d, "--daemonize", "no"]
        if cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    for p in ports:
        deadline = time.time() + 10
        while subprocess.run(["redis-cli", "-p", str(p), "ping"], capture_output=True,
                             text=True).stdout.strip() != "PONG":
            assert time.time() < deadline, "redis-server on %d did not start" % p
            time.sleep(0.05)
    if cluster:
        out = subprocess.run(["redis-cli", "--cluster", "create"]
                             + ["127.0.0.1:%d" % p for p in ports]
                             + ["--cluster-replicas", "0", "--cluster-yes"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        for p in ports:
            deadline = time.time() + 20
            while "cluster_state:ok" not in subprocess.run(
                    ["redis-cli", "-p", str(p), "cluster", "info"], capture_output=True,
                    text=True).stdout:
                assert time.time() < deadline, "cluster not ok"
                time.sleep(0.1)
    return procs, ports


def case_redis(cluster=False):
    """Two gateways share Redis, the second joining mid-feed: every bar in Redis equals the
    reference (the late one's gap-flagged bars never replace complete ones); a gateway started
    after the feed serves the whole history from Redis. In a cluster, a code's slot then
    migrates (MIGRATING/IMPORTING, MIGRATE): writes and reads follow ASK."""
    procs, ports = start_redis(cluster_ports() if cluster else None)
    recs = [os.path.join(WORK, "days.rec")]
    gws = []
    feed = None
    try:
        a = mdref.Gateway(GATEWAY, URI, extra=["--redis", "127.0.0.1:%d" % ports[0]])
        gws.append(a)
        small = ["--symbols", "40", "--day-ticks", "10000", "--seed", "11", "--rate", "60000"]
        if cluster:  # the late join is the standalone case's; here the redirections
            b = mdref.Gateway(GATEWAY, URI, extra=["--redis", "127.0.0.1:%d" % ports[-1]])
            gws.append(b)
            feed = Feed(URI, *small, "--record", recs[0])
        else:
            # One day over 3 s: the second gateway (which loads Redis first, slower under
            # ASan) joins at a quarter of it, well before its end.
            feed = Feed(URI, *FEED_ONE, "--rate", "10000", "--record", recs[0])
            wait_for("a quarter of the feed", lambda: a.health()["ticks"] >= 7500)
            b = mdref.Gateway(GATEWAY, URI, extra=["--redis", "127.0.0.1:%d" % ports[-1]])
            gws.append(b)  # joins while the feed runs
            assert b.health()["bars_loaded"] > 0
        n, last = feed.result()
        for g in gws:
            wait_seq(g, last)
        assert cluster or 0 < b.health()["ticks"] < n, "the second gateway did not join mid-feed"
        time.sleep(0.6)  # the last batches (every 200 ms)
        if not cluster:  # (the cluster case checks it all after one more day)
            instruments, ticks = mdref.read_recording(recs[0])
            check_redis_reference(ports, ticks, sorted({i[0] for i in instruments}))
        if cluster:
            migrate_slot(ports, "{600000.SH}_1m")
            # Another day while the slot migrates: 600000.SH's keys are on the target now, so
            # the source answers ASK and the gateways write there (ASKING first).
            recs.append(os.path.join(WORK, "day2.rec"))
            before = [g.health()["ticks"] for g in gws]
            n3 = mdref.run_feed(FEED, URI, *small, "--date", "20230821", "--record", recs[1])
            for g, t0 in zip(gws, before):
                g.wait_ticks(t0 + n3)
            time.sleep(0.6)
            assert a.metric("md_redis_ask_total") > 0, "no ASK followed on writes"
            assert a.metric("md_redis_errors_total") == 0
        a.stop()
        # A gateway that starts after the feed: the whole history from Redis.
        env = dict(os.environ, MD_REDIS_LAZY_SLOTS="1") if cluster else None
        late = mdref.Gateway(GATEWAY, URI, extra=["--redis", "127.0.0.1:%d" % ports[1 % len(ports)]],
                             env=env)
        gws.append(late)
        assert late.health()["bars_loaded"] > 0
        # Redis is checked whole; the late gateway's answers for a few codes (600000.SH's slot
        # migrated in the cluster case).
        ticks, codes = check_all_reference(late, recs, "late gateway from Redis",
                                           only=("600000.SH", "300525.SZ", "600001.SH",
                                                 "000002.SZ", "000001.SZ"))
        check_redis_reference(ports, ticks, codes)
        if cluster:
            assert late.metric("md_redis_redirections_total") > 0, "no MOVED followed"
            assert late.metric("md_redis_ask_total") > 0, "no ASK followed on reads"
        else:
            zs = subprocess.run(["redis-cli", "-p", str(ports[0]), "zrange", "{300525.SZ}_1d",
                                 "0", "-1", "withscores"], capture_output=True, text=True).stdout
            assert '"code":"300525.SZ"' in zs and "202308181500" in zs, zs
    finally:
        if feed:
            feed.kill()
        for g in gws:
            g.stop()
        for p in procs:
            p.terminate()
            p.wait()


def case_address():
    """Item 1 of issue 35: SO_REUSEPORT would let a second gateway join the first one's
    listeners and take half the connections; it must be refused instead."""
    gw = mdref.Gateway(GATEWAY, URI)  # --threads 2: two SO_REUSEPORT listeners, one process
    try:
        out = subprocess.run([GATEWAY, URI, "--http", "127.0.0.1:%d" % gw.port, "--threads", "2"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
        assert "in use" in out.stderr and "127.0.0.1:%d" % gw.port in out.stderr, out.stderr
        # Every connection still reaches the first gateway (one pid, uptime only growing).
        pids, uptimes = set(), []
        for _ in range(40):
            h = gw.health()
            pids.add(h["pid"])
            uptimes.append(h["uptime_s"])
        assert pids == {gw.proc.pid}, pids
        assert uptimes == sorted(uptimes), uptimes
        # Another program's listener: refused too.
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            other.listen()
            port = other.getsockname()[1]
            out = subprocess.run([GATEWAY, URI, "--http", "127.0.0.1:%d" % port],
                                 capture_output=True, text=True, timeout=30)
            assert out.returncode == 1 and "in use" in out.stderr, out.stderr
        # Once the first is gone, the address can be taken again (no TIME_WAIT trouble).
    finally:
        gw.stop()
    again = mdref.Gateway(GATEWAY, URI, port=gw.port)
    again.stop()


def case_address_race(rounds=5):
    """Item 1 of issue 35, at the same moment: two md-gateways started together on one free
    address (both may probe before either listens). Exactly one serves, every connection
    reaches it; the other exits 1 with the address-in-use error. Repeated `rounds` times."""
    for r in range(rounds):
        port = mdref.free_port()
        args = [GATEWAY, URI, "--http", "127.0.0.1:%d" % port, "--threads", "2"]
        procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        try:
            deadline = time.time() + 30
            while sum(p.poll() is not None for p in procs) == 0:
                assert time.time() < deadline, "round %d: both gateways still run" % r
                time.sleep(0.05)
            lost = [p for p in procs if p.poll() is not None]
            assert len(lost) == 1, "round %d: both exited" % r
            err = lost[0].stderr.read()
            assert lost[0].returncode == 1, (r, lost[0].returncode, err)
            assert "in use" in err and "127.0.0.1:%d" % port in err, err
            won = [p for p in procs if p is not lost[0]][0]
            pids = set()
            while not pids:
                try:
                    pids.add(json.loads(mdref.get(port, "/healthz", timeout=2)[2])["pid"])
                except OSError:
                    assert won.poll() is None, won.stderr.read()
                    assert time.time() < deadline, "round %d: the winner never answered" % r
                time.sleep(0.02)
            for _ in range(40):
                pids.add(json.loads(mdref.get(port, "/healthz")[2])["pid"])
            assert pids == {won.pid}, (r, pids, won.pid)
            assert won.poll() is None
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(20)
        assert won.returncode == 0, won.stderr.read()[-2000:]
    # 0.0.0.0:P and 127.0.0.1:P overlap (SO_REUSEPORT would let both serve): started at once,
    # at least one refuses, naming the other gateway.
    for r in range(rounds):
        port = mdref.free_port()
        procs = [subprocess.Popen([GATEWAY, URI, "--http", "%s:%d" % (a, port), "--threads", "2"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for a in ("0.0.0.0", "127.0.0.1")]
        try:
            deadline = time.time() + 30
            while all(p.poll() is None for p in procs):
                assert time.time() < deadline, "round %d: 0.0.0.0 and 127.0.0.1 both serve" % r
                time.sleep(0.05)
            for p in procs:
                if p.poll() is not None:
                    err = p.stderr.read()
                    assert p.returncode == 1 and "md-gateway" in err, (r, p.returncode, err)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(20)
    print("address_race: %d rounds, one gateway served each time, the other refused; a "
          "wildcard and a specific address of one port never both served" % rounds)


def proc_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sse_open(port, path="/sse?code=600000.SH&period=1m", headers=b""):
    """A raw SSE subscription: (socket, the answer's head)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(4096)
        if not c:
            break
        head += c
    return s, head


def ws_handshake(port, origin=None, path="/ws?code=600000.SH&period=1m"):
    """A raw WebSocket handshake: (socket, status line)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" % (
               path, port))
    if origin:
        req += "Origin: %s\r\n" % origin
    s.sendall((req + "\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(4096)
        if not c:
            break
        head += c
    return s, head.split(b"\r\n")[0]


def closed_within(s, seconds):
    """True when the peer closes `s` within `seconds` (what it sends meanwhile is read)."""
    s.settimeout(0.2)
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if s.recv(65536) == b"":
                return True
        except socket.timeout:
            pass
        except OSError:
            return True
    return False


def case_limits():
    """Issue 35 item 4: push sessions inside --max-connections and --max-push, WebSocket
    messages and idle clients bounded, Origin and Host checked, caches bounded by bytes and
    keyed by the query, /v2 answers capped, security headers everywhere; each limit with an
    honest client that is still served."""
    import websocket  # python3-websocket
    gw = mdref.Gateway(GATEWAY, URI, extra=[
        "--max-connections", "40", "--max-push", "10", "--idle-timeout", "3",
        "--push-write-timeout", "2", "--max-answer-kib", "64", "--cache-mib", "1",
        "--allow-origin", "https://trader.example"])
    good = "/getStockData?code=600000.SH&period=1m&start=202308180930&end=202308181030"
    try:
        mdref.run_feed(FEED, URI, *FEED_ONE, "--rate", "60000")
        want = mdref.get(gw.port, good)[2]
        assert len(json.loads(want)) == 60
        check_push_caps(gw, good, want)
        check_ws_bounds(gw, websocket)
        check_origin_host(gw, good)
        check_cache_bounds(gw, want)
        check_v2_cap(gw)
        check_security_headers(gw, good)
        check_stalled_push(gw)
        assert gw.proc.poll() is None
    finally:
        gw.stop()


def check_push_caps(gw, good, want):
    subs = [sse_open(gw.port) for _ in range(10)]
    try:
        assert all(h.startswith(b"HTTP/1.1 200") for _, h in subs), [h[:40] for _, h in subs]
        wait_for("10 push clients", lambda: gw.metric("md_push_clients") == 10)
        # Push sessions count as connections (they did not: 300 SSE at --max-connections 10).
        assert gw.metric("md_http_connections") >= 10
        s, head = sse_open(gw.port)
        s.close()
        assert head.startswith(b"HTTP/1.1 503") and b"--max-push" in head + s.recv(0), head
        st, _, body = mdref.get(gw.port, "/sse?code=600000.SH&period=1m")
        assert st == 503 and "too many push clients" in body, (st, body)
        assert gw.metric("md_push_refused_total") >= 2
        # Honest queries are still answered.
        assert mdref.get(gw.port, good)[2] == want
        # 10 push + 30 plain connections reach --max-connections 40: the rest are refused.
        plain = [socket.create_connection(("127.0.0.1", gw.port)) for _ in range(40)]
        wait_for("refused connections", lambda: plain_refused(gw) > 0, 10)
        for p in plain:
            p.close()
        wait_for("connections closed", lambda: gw.metric("md_http_connections") <= 12, 10)
    finally:
        for s, _ in subs:
            s.close()
    wait_for("push clients gone", lambda: gw.metric("md_push_clients") == 0, 10)
    s, head = sse_open(gw.port)  # a place again
    s.close()
    assert head.startswith(b"HTTP/1.1 200"), head


def plain_refused(gw):
    try:
        return gw.metric("md_http_connections_refused_total")
    except OSError:  # this very request may be the one refused
        return 0


def check_ws_bounds(gw, websocket):
    rss0 = proc_rss_kib(gw.proc.pid)
    # 16 clients (two rounds of 8: --max-push is 10) announce 16 MiB messages and send 1 MiB
    # of each: closed at the header (a message over 4 KiB), nothing buffered.
    for _ in range(2):
        socks = []
        for _ in range(8):
            s, status = ws_handshake(gw.port)
            assert status.startswith(b"HTTP/1.1 101"), status
            s.sendall(b"\x81\xff" + (16 << 20).to_bytes(8, "big") + b"\0\0\0\0")
            socks.append(s)
        for s in socks:
            try:
                s.sendall(b"x" * (1 << 20))
            except OSError:
                pass
        for s in socks:
            assert closed_within(s, 10), "a 16 MiB WebSocket message was not refused"
            s.close()
        wait_for("push clients gone", lambda: gw.metric("md_push_clients") == 0, 10)
    grew = proc_rss_kib(gw.proc.pid) - rss0
    assert grew < 40 * 1024, "RSS grew by %d KiB" % grew
    # A WebSocket client that never answers a ping is closed after --idle-timeout (3 s)...
    silent, status = ws_handshake(gw.port)
    assert status.startswith(b"HTTP/1.1 101")
    # ...while an honest one (it answers pings as it reads) stays for twice that.
    honest = websocket.create_connection("ws://127.0.0.1:%d/ws?code=600000.SH&period=1m" % gw.port,
                                         timeout=1)
    assert json.loads(honest.recv())["bar"]["code"] == "600000.SH"
    errors = []

    def read_honestly():  # reading answers the gateway's pings
        t1 = time.time()
        while time.time() - t1 < 7:
            try:
                honest.recv()
            except websocket.WebSocketTimeoutException:
                pass
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)
                return

    reader = threading.Thread(target=read_honestly)
    reader.start()
    t0 = time.time()
    assert closed_within(silent, 10), "a silent WebSocket client was never closed"
    assert time.time() - t0 >= 2, "closed before the idle timeout"
    silent.close()
    reader.join()
    assert not errors and honest.connected, errors
    honest.ping()
    honest.close()


def check_origin_host(gw, good):
    for origin, want in (("https://evil.example", b"403"), ("null", b"403"),
                         ("https://trader.example", b"101"),
                         ("http://127.0.0.1:%d" % gw.port, b"101"), (None, b"101")):
        s, status = ws_handshake(gw.port, origin)
        s.close()
        assert want in status, (origin, status)
    s, head = sse_open(gw.port, headers=b"Origin: https://evil.example\r\n")
    s.close()
    assert head.startswith(b"HTTP/1.1 403"), head
    assert gw.metric("md_http_forbidden_origin_total") == 3
    # Host: a DNS-rebinding name is refused, for cached answers and others alike.
    for req in (b"GET " + good.encode() + b" HTTP/1.1\r\nHost: evil.example:80\r\n\r\n",
                b"GET /healthz HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as s:
            s.sendall(req)
            assert s.recv(100).startswith(b"HTTP/1.1 421"), req
    for host in ("localhost:%d" % gw.port, "127.0.0.1", "[::1]:80"):
        assert mdref.get(gw.port, good, headers={"Host": host})[0] == 200, host
    assert gw.metric("md_http_forbidden_host_total") == 2


def check_cache_bounds(gw, want):
    # Spellings of one query: %-escapes (either case), another parameter order. One entry per
    # loop, however many spellings.
    e0 = gw.metric("md_http_cache_entries")
    for i in range(300):
        hexfmt = "%%%02x" if i % 3 == 1 else "%%%02X"
        code = "".join(hexfmt % ord(ch) if (i >> k) & 1 else ch
                       for k, ch in enumerate("600000.SH"))
        q = ["code=" + code, "period=1m", "start=202308180930", "end=202308181030"]
        if i % 2:
            q.reverse()
        st, _, body = mdref.get(gw.port, "/getStockData?" + "&".join(q))
        assert st == 200 and body == want, (q, st, body[:200])
    assert gw.metric("md_http_cache_entries") <= e0 + 2, gw.metric("md_http_cache_entries")
    # Many distinct queries: the cache stays within --cache-mib (1 MiB) per loop (2 loops), and
    # every answer is still right.
    for i in range(400):
        path = "/getStockData?code=600000.SH&period=1m&start=2023081809%02d&end=202308181500" % (i % 60)
        if i % 2:
            path = path.replace("period=1m", "period=5m")
        st, _, body = mdref.get(gw.port, path.replace("09%02d" % (i % 60), "09%02d" % (i % 60)))
        assert st == 200
    for i in range(300):
        m = 30 + i // 3
        st, _, _ = mdref.get(gw.port, "/getStockData?code=%s&period=1m&start=20230818%02d%02d"
                             "&end=202308181500" % (("600000.SH", "300525.SZ", "000001.SZ")[i % 3],
                                                    9 + m // 60, m % 60))
        assert st == 200
    assert gw.metric("md_http_cache_bytes") <= 2 * 1024 * 1024, gw.metric("md_http_cache_bytes")
    assert mdref.get(gw.port, "/getStockData?code=600000.SH&period=1m&start=202308180930"
                     "&end=202308181030")[2] == want


def check_v2_cap(gw):
    codes = ",".join(mdref.code_text(c) for c in mdref_codes(gw)[:30])
    st, _, body = mdref.get(gw.port, "/v2/bars?codes=%s&period=1m&last=240" % codes)
    assert st == 400 and "--max-answer-kib" in body, (st, body[:200])
    assert gw.metric("md_http_answer_too_large_total") == 1
    st, _, body = mdref.get(gw.port, "/v2/bars?codes=600000.SH&period=1m&last=100")
    assert st == 200 and len(json.loads(body)["600000.SH"]) == 100


def mdref_codes(gw):
    """The first 30 codes md-feed lists (docs/MARKETDATA.md: 600000.SH, 300525.SZ, 000001.SZ,
    then 600001.SH, 000002.SZ, 300001.SZ, ...)."""
    assert gw.health()["codes"] >= 30
    texts = ["600000.SH", "300525.SZ", "000001.SZ"]
    for k in range(1, 10):
        texts += ["%06d.SH" % (600000 + k), "%06d.SZ" % (1 + k), "%06d.SZ" % (300000 + k)]
    return [mdref_code(t) for t in texts]


def check_security_headers(gw, good):
    for path in (good, "/", "/healthz", "/nope", "/app.js", "/favicon.ico",
                 "/v2/bars?codes=600000.SH&period=1d&last=1"):
        _, h, _ = mdref.get(gw.port, path)
        assert h.get("X-Content-Type-Options") == "nosniff", (path, dict(h))
        assert "frame-ancestors 'none'" in h.get("Content-Security-Policy", ""), (path, dict(h))
    _, h, page = mdref.get(gw.port, "/")
    assert "script-src" not in h["Content-Security-Policy"] and "default-src 'self'" in \
        h["Content-Security-Policy"] and "<script>" not in page, h["Content-Security-Policy"]
    _, h, _ = mdref.get(gw.port, "/favicon.ico")
    assert h["Content-Type"] == "image/svg+xml"


def check_stalled_push(gw):
    # A client that subscribes and never reads: once its socket is full, the write pending
    # over --push-write-timeout (2 s) closes it. A reading client on the same bars stays.
    stalled = socket.create_connection(("127.0.0.1", gw.port))
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    stalled.sendall(b"GET /sse?code=600000.SH&period=1m HTTP/1.1\r\nHost: x\r\n\r\n")
    reader = subprocess.Popen(["curl", "-sN", "--max-time", "60",
                               "http://127.0.0.1:%d/sse?code=600000.SH&period=1m" % gw.port],
                              stdout=subprocess.PIPE, text=True)
    n0 = gw.health()["ticks"]
    try:
        n = mdref.run_feed(FEED, URI, *FEED_ONE, "--date", "20230821", "--rate", "10000")
        gw.wait_ticks(n0 + n)
        wait_for("the stalled client closed",
                 lambda: gw.metric("md_push_write_timeouts_total") >= 1, 20)
        assert gw.metric("md_sse_clients") == 1, gw.metric("md_sse_clients")
    finally:
        stalled.close()
        reader.kill()
        reader.wait()


def case_redis_auth():
    """Redis AUTH (a password from a file or MD_REDIS_PASSWORD), and MOVED followed only to
    members of the cluster as CLUSTER SLOTS lists them."""
    port = mdref.free_port()
    d = os.path.join(WORK, "redis")
    os.makedirs(d)
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", d,
                             "--requirepass", "s3cret"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while "PONG" not in subprocess.run(["redis-cli", "-p", str(port), "-a", "s3cret",
                                            "--no-auth-warning", "ping"],
                                           capture_output=True, text=True).stdout:
            assert time.time() < deadline
            time.sleep(0.05)
        hp = "127.0.0.1:%d" % port
        out = subprocess.run([GATEWAY, URI, "--http", "127.0.0.1:%d" % mdref.free_port(),
                              "--redis", hp], capture_output=True, text=True, timeout=30)
        assert out.returncode == 1 and ("NOAUTH" in out.stderr or "auth" in out.stderr.lower()), \
            out.stderr
        env = dict(os.environ, MD_REDIS_PASSWORD="wrong")
        out = subprocess.run([GATEWAY, URI, "--http", "127.0.0.1:%d" % mdref.free_port(),
                              "--redis", hp], capture_output=True, text=True, timeout=30, env=env)
        assert out.returncode == 1 and "AUTH" in out.stderr, out.stderr
        pw = os.path.join(WORK, "pw")
        with open(pw, "w") as f:
            f.write("s3cret\n")
        gw = mdref.Gateway(GATEWAY, URI, extra=["--redis", hp, "--redis-password-file", pw])
        try:
            n = mdref.run_feed(FEED, URI, "--symbols", "10", "--day-ticks", "3000", "--rate",
                               "30000")
            gw.wait_ticks(n)
            wait_for("a Redis write", lambda: gw.metric("md_redis_writes_total") > 0, 10)
            assert gw.metric("md_redis_errors_total") == 0
        finally:
            gw.stop()
    finally:
        proc.terminate()
        proc.wait()
    check_moved_outside()


def check_moved_outside():
    """A cluster node (a fake one) that answers MOVED to a host outside the cluster: refused,
    and nothing connects there."""
    outsider = socket.socket()
    outsider.bind(("127.0.0.1", 0))
    outsider.listen()
    outsider.settimeout(0.1)
    fake = socket.socket()
    fake.bind(("127.0.0.1", 0))
    fake.listen()
    fake_port, out_port = fake.getsockname()[1], outsider.getsockname()[1]
    stop = threading.Event()

    def serve():
        fake.settimeout(0.1)
        while not stop.is_set():
            try:
                c, _ = fake.accept()
            except socket.timeout:
                continue
            threading.Thread(target=fake_node, args=(c, fake_port, out_port), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        out = subprocess.run([GATEWAY, URI, "--http", "127.0.0.1:%d" % mdref.free_port(),
                              "--redis", "127.0.0.1:%d" % fake_port], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 1 and "not a member of the cluster" in out.stderr, out.stderr
        try:
            outsider.accept()
            raise AssertionError("md-gateway connected to the host a MOVED named")
        except socket.timeout:
            pass
    finally:
        stop.set()
        t.join()
        fake.close()
        outsider.close()


def fake_node(c, port, out_port):
    """RESP: SCRIPT LOAD and CLUSTER SLOTS answered (this node holds every slot), every other
    command MOVED to out_port."""
    buf = b""
    try:
        while True:
            while True:
                cmd, buf = resp_command(buf)
                if cmd is None:
                    break
                name = b" ".join(cmd[:2]).upper()
                if name.startswith(b"SCRIPT LOAD"):
                    c.sendall(b"$40\r\n" + b"0" * 40 + b"\r\n")
                elif name.startswith(b"CLUSTER SLOTS"):
                    c.sendall(b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n" % port)
                else:
                    c.sendall(b"-MOVED 42 127.0.0.1:%d\r\n" % out_port)
            data = c.recv(65536)
            if not data:
                return
            buf += data
    except OSError:
        pass
    finally:
        c.close()


def resp_command(buf):
    """One RESP array of bulk strings from `buf`: (args, rest), or (None, buf)."""
    if not buf.startswith(b"*") or b"\r\n" not in buf:
        return None, buf
    head, rest = buf.split(b"\r\n", 1)
    args = []
    for _ in range(int(head[1:])):
        if b"\r\n" not in rest:
            return None, buf
        ln, rest2 = rest.split(b"\r\n", 1)
        n = int(ln[1:])
        if len(rest2) < n + 2:
            return None, buf
        args.append(rest2[:n])
        rest = rest2[n + 2:]
    return args, rest


def case_liveness():
    """Issue 35 item 2: the feed's state (down, live, stale) in /healthz (503 unless live) and
    /metrics, pushed to WebSocket and SSE clients as it changes, with heartbeats; after a
    restart /healthz says what the store held."""
    import websocket  # python3-websocket
    store = os.path.join(WORK, "store")
    extra = ["--stale-after", "1", "--down-after", "4", "--heartbeat", "0.5"]
    gw = mdref.Gateway(GATEWAY, URI, store=store, extra=extra)
    feed = None
    try:
        st, _, body = mdref.get(gw.port, "/healthz")
        assert st == 503 and json.loads(body)["status"] == "down", (st, body)
        assert json.loads(body)["last_record_age_s"] is None
        n1 = mdref.run_feed(FEED, URI, *FEED_ONE, "--rate", "60000")
        gw.wait_ticks(n1)
        # A WebSocket and an SSE client: each gets the state after its snapshot, heartbeats,
        # and every change.
        ws = websocket.create_connection("ws://127.0.0.1:%d/ws?code=600000.SH&period=1m" % gw.port,
                                         timeout=1)
        sse = subprocess.Popen(["curl", "-sN", "--max-time", "60",
                                "http://127.0.0.1:%d/sse?code=600000.SH&period=1m" % gw.port],
                               stdout=subprocess.PIPE, text=True)
        ws_msgs, sse_msgs = [], []
        stop = threading.Event()
        threads = [threading.Thread(target=collect_ws, args=(ws, ws_msgs, stop, websocket)),
                   threading.Thread(target=collect_sse, args=(sse, sse_msgs))]
        for t in threads:
            t.start()
        # The feed ended: stale after 1 s (503), down after 4 s.
        wait_for("stale", lambda: gw.health()["status"] in ("stale", "down"), 10)
        st, _, body = mdref.get(gw.port, "/healthz")
        assert st == 503, (st, body)
        wait_for("down", lambda: gw.health()["status"] == "down", 10)
        assert gw.metric('md_feed_state{state="down"}') == 1
        # A feed again (a paced day of 3 s): live (200), pushed as a recovery; then kill -9.
        feed = Feed(URI, *FEED_ONE, "--date", "20230821", "--rate", "10000")
        wait_for("live", lambda: mdref.get(gw.port, "/healthz")[0] == 200, 20)
        assert gw.health()["last_record_age_s"] < 1
        assert gw.metric('md_feed_state{state="live"}') == 1
        time.sleep(0.5)
        feed.kill()
        t_kill = time.time()
        wait_for("stale after kill -9", lambda: gw.health()["status"] == "stale", 10)
        print("liveness: stale %.1f s after md-feed was killed" % (time.time() - t_kill))
        time.sleep(1.2)  # heartbeats while stale
        stop.set()
        ws.close()
        sse.kill()
        for t in threads:
            t.join()
        for name, msgs in (("ws", ws_msgs), ("sse", sse_msgs)):
            states = [m["state"] for m in msgs if m.get("type") == "state"]
            beats = [m for m in msgs if m.get("type") == "heartbeat"]
            # The first (after the snapshot) says live; then stale, down, live, stale.
            changes = [x for i, x in enumerate(states) if i == 0 or states[i - 1] != x]
            assert changes[-4:] == ["stale", "down", "live", "stale"] or \
                changes[-5:-1] == ["stale", "down", "live", "stale"], (name, changes)
            assert len(beats) >= 4, (name, len(beats))
            assert any(b["state"] == "stale" for b in beats), name
            assert any("bar" in m for m in msgs), name
        assert gw.metric("md_feed_state_changes_total") >= 4
    finally:
        if feed:
            feed.kill()
        gw.stop()
    # After a restart: what the store held (bars, codes, the feed position), not zeros.
    gw = mdref.Gateway(GATEWAY, URI, store=store, extra=extra)
    try:
        h = gw.health()
        assert h["status"] == "down" and h["ticks"] == 0, h
        loaded = h["loaded"]
        assert loaded["from"] == "lmdb" and loaded["bars"] > 0 and loaded["codes"] == 40, h
        assert loaded["last_channel_seq"] >= n1 and h["last_channel_seq"] == \
            loaded["last_channel_seq"], h
        assert loaded["stream_next"] > 0, h
    finally:
        gw.stop()


def collect_ws(ws, out, stop, websocket):
    while not stop.is_set():
        try:
            out.append(json.loads(ws.recv()))
        except websocket.WebSocketTimeoutException:
            pass
        except Exception:  # noqa: BLE001 (closed)
            return


def collect_sse(proc, out):
    for line in proc.stdout:
        if line.startswith("data: "):
            out.append(json.loads(line[6:]))


def case_consistency():
    """Issue 35 item 3: two gateways sharing Redis answer alike, series by series, although one
    joins late (day 1) and is killed with SIGKILL and restarted mid-feed (day 2): the interval
    each time it missed is filled from the bars the other wrote to Redis."""
    procs, ports = start_redis()
    recs = [os.path.join(WORK, "day1.rec"), os.path.join(WORK, "day2.rec")]
    redis = ["--redis", "127.0.0.1:%d" % ports[0]]
    a = mdref.Gateway(GATEWAY, URI, extra=redis)
    b = c = None
    feed = None
    try:
        feed = Feed(URI, *FEED_ONE, "--rate", "10000", "--record", recs[0])
        wait_for("a quarter of day 1", lambda: a.health()["ticks"] >= 7500)
        # Joins late. A day here is ~900 messages, within the 1,024 packets of history a
        # gateway takes from a young feed: this one takes none, so that it misses the head.
        b = mdref.Gateway(GATEWAY, URI, extra=redis + ["--join-history", "1"])
        # One at its defaults, at the same moment, takes the young feed from its start.
        c = mdref.Gateway(GATEWAY, URI)
        n, last = feed.result()
        assert 0 < b.health()["ticks"] < n, "the second gateway did not join mid-feed"
        wait_seq(c, last)
        h = c.health()
        assert h["ticks"] == n and h["gaps"] == 0 and h["loss_events"] == 0, h
        c.stop()
        c = None
        compare_gateways(a, b, recs[:1], last, "late join")
        # Day 2: the second one killed (SIGKILL) at 40 % and restarted at 60 %.
        t0 = a.health()["ticks"]
        feed = Feed(URI, *FEED_ONE, "--date", "20230821", "--rate", "10000",
                    "--record", recs[1])
        wait_for("40 % of day 2", lambda: a.health()["ticks"] >= t0 + 12000)
        b.proc.kill()
        b.proc.wait()
        b = None
        wait_for("60 % of day 2", lambda: a.health()["ticks"] >= t0 + 18000)
        b = mdref.Gateway(GATEWAY, URI, extra=redis + ["--join-history", "1"])
        assert b.health()["loaded"]["from"] == "redis"
        n, last = feed.result()
        compare_gateways(a, b, recs, last, "kill -9 and restart")
    finally:
        if feed:
            feed.kill()
        for g in (a, b, c):
            if g:
                g.stop()
        for p in procs:
            p.terminate()
            p.wait()


def compare_gateways(a, b, recs, last, what):
    """Both have the feed's last record and nothing left to fill: every code x period is the
    same on both, equal to the reference, with no gap flag."""
    for g in (a, b):
        wait_seq(g, last)
    wait_for("the missed interval filled", lambda: filled(b), 30)
    h = b.health()
    assert h["fill"]["done"] >= 1 and h["fill"]["given_up"] == 0, h
    assert b.metric("md_fill_bars_total") > 0
    instruments = []
    for path in recs:
        instruments += mdref.read_recording(path)[0]
    codes = sorted({i[0] for i in instruments})
    got_a, got_b = all_answers(a, codes), all_answers(b, codes)
    for k in got_a:
        mdref.check_same(got_b[k], got_a[k], "%s: %s %s on both" % (what, mdref.code_text(k[0]),
                                                                   k[1]))
    check_all_reference(b, recs, what)
    print("consistency (%s): %d series equal on both gateways, %d bars filled" % (
        what, len(got_a), b.metric("md_fill_bars_total")))


def filled(gw):
    h = gw.health()
    return h["fill"]["waiting"] == 0 and h["fill"]["unresolved_series"] == 0 and \
        h["fill"]["done"] >= 1


def case_compat():
    """Issue 35 item 6: --compat reference answers /getStockData as the reference service
    (unknown parameters ignored, [] for start > end and for an unknown code) and writes and
    reads the reference's Redis layout (`600000.SH_1m`, members without "sseq")."""
    procs, ports = start_redis()
    rec = os.path.join(WORK, "day.rec")
    redis = ["--redis", "127.0.0.1:%d" % ports[0], "--compat", "reference"]
    a = mdref.Gateway(GATEWAY, URI, extra=redis)
    late = None
    try:
        n = mdref.run_feed(FEED, URI, *FEED_ONE, "--rate", "60000", "--record", rec)
        a.wait_ticks(n)
        good = "/getStockData?code=600000.SH&period=1m&start=202308180930&end=202308181030"
        st, _, want = mdref.get(a.port, good)
        assert st == 200 and len(json.loads(want)) == 60
        for path, body in ((good + "&_=1692322200", want), (good + "&foo=bar&_=1", want),
                           ("/getStockData?code=600000.SH&period=1m&start=202308181030"
                            "&end=202308180930", "[]\n"),
                           ("/getStockData?code=688999.SH&period=1m" + RANGE, "[]\n")):
            st, _, got = mdref.get(a.port, path)
            assert st == 200 and got == body, (path, st, got[:200])
        # Still refused: what the reference refuses too (a bad period).
        assert mdref.get(a.port, "/getStockData?code=600000.SH&period=7m" + RANGE)[0] == 400
        time.sleep(0.6)  # the last Redis batch
        zs = subprocess.run(["redis-cli", "-p", str(ports[0]), "zrange", "600000.SH_1m", "0",
                             "-1"], capture_output=True, text=True).stdout.split("\n")
        zs = [m for m in zs if m]
        _, ticks = mdref.read_recording(rec)
        ref = reference(ticks)[(mdref_code("600000.SH"), "1m")]
        assert zs == [mdref.bar_json(mdref_code("600000.SH"), b) for b in ref], zs[:2]
        keys = subprocess.run(["redis-cli", "-p", str(ports[0]), "keys", "{*"],
                              capture_output=True, text=True).stdout.split()
        assert keys == [], keys[:5]
        # A second compat gateway reads the reference layout back: the same answers.
        late = mdref.Gateway(GATEWAY, URI, extra=redis)
        assert late.health()["bars_loaded"] > 0
        check_all_reference(late, [rec], "compat gateway from the reference layout",
                            only=("600000.SH", "300525.SZ", "000001.SZ", "600001.SH"))
    finally:
        for g in (a, late):
            if g:
                g.stop()
        for p in procs:
            p.terminate()
            p.wait()


class Feed:
    """A md-feed process in the background."""

    def __init__(self, uri, *args):
        self.proc = subprocess.Popen([FEED, uri, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def result(self, timeout=120):
        """(ticks published, last channel seq) once it has finished."""
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        words = out.split("published ")[1].split()
        return int(words[0]), int(words[-1])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def wait_for(what, predicate, timeout=60):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, "timed out waiting for " + what
        time.sleep(0.05)


def wait_seq(gw, last, timeout=60):
    """Until the gateway has applied the feed's last channel sequence number."""
    try:
        wait_for("channel seq %d" % last, lambda: gw.health()["last_channel_seq"] >= last,
                 timeout)
    except AssertionError:
        print("gateway on %d: %s" % (gw.port, gw.health()))
        print("\n".join(line for line in mdref.get(gw.port, "/metrics")[2].splitlines()
                        if line.startswith(("md_feed", "md_stream", "md_recorder", "md_redis"))))
        raise


def check_all_reference(gw, rec_paths, what, only=None):
    """Every code (or those in `only`) x period of the recordings' ticks equals the reference,
    with no gap flag."""
    key = tuple(rec_paths)
    if key not in _RECS:  # read once: the reference is then computed once too
        instruments, ticks = [], []
        for path in rec_paths:
            i, t = mdref.read_recording(path)
            instruments += i
            ticks += t
        _RECS[key] = (instruments, ticks)
    instruments, ticks = _RECS[key]
    codes = sorted({i[0] for i in instruments})
    asked = [c for c in codes if only is None or mdref.code_text(c) in only]
    for (code, p), body in all_answers(gw, asked).items():
        mdref.check_same(body, expected(ticks, code, p), "%s: %s %s" % (
            what, mdref.code_text(code), p))
    return ticks, codes


def case_ab():
    uri_b = mdref.group_uri(GROUPS["ab"] + 1)
    rec = os.path.join(WORK, "b.rec")
    ab = ["--epoch", "7", "--deterministic", "--rate", "40000"]
    gw = mdref.Gateway(GATEWAY, URI, extra=["--feed", uri_b])
    feeds = []
    try:
        # A first, B (the same seed: the same records) a little later on its own channel.
        feeds.append(Feed(URI, *FEED_ARGS, *ab))
        time.sleep(0.2)
        feeds.append(Feed(uri_b, *FEED_ARGS, *ab, "--record", rec))
        wait_for("40 % of the feed", lambda: gw.health()["ticks"] >= 24000)
        feeds[0].kill()  # kill -9 A midway: B carries on
        n, _ = feeds[1].result()
        gw.wait_ticks(n)
        assert gw.health()["ticks"] == n
        check_all_reference(gw, [rec], "A/B, A killed")
        assert gw.metric("md_stream_duplicates_total") > 0, "B's copies never arbitrated"
        assert gw.metric("md_stream_divergences_total") == 0
        assert gw.metric("md_feed_loss_events_total") == 0
        assert gw.health()["gaps"] == 0
        print("ab: %d ticks, %d duplicate records dropped" % (
            n, gw.metric("md_stream_duplicates_total")))
        # A divergent B: another seed, the same stream and a new epoch, on A's channel.
        feeds = []
        small = ["--symbols", "40", "--day-ticks", "3000", "--epoch", "9", "--deterministic",
                 "--rate", "30000"]
        feeds.append(Feed(URI, *small, "--seed", "11"))
        # (A second publisher on one host needs its own address: any of lo's 127/8.)
        feeds.append(Feed(URI.replace("iface=127.0.0.1", "iface=127.0.0.2"), *small, "--seed", "12"))
        for f in feeds:
            f.result()
        wait_for("divergence reported", lambda: gw.metric("md_stream_divergences_total") > 0)
        assert gw.metric("md_stream_resets_total") >= 1  # epoch 9 after 7
    finally:
        for f in feeds:
            f.kill()
        gw.stop()


def start_recorder(journal):
    """md-recorder on URI; returns (process, replay port)."""
    proc = subprocess.Popen([RECORDER, URI, "--journal", journal], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    assert "serving" in line, line + proc.stdout.read()
    return proc, int(line.strip().rsplit(":", 1)[1])


def case_recorder():
    rec = os.path.join(WORK, "feed.rec")
    store = os.path.join(WORK, "store")
    recorder, port = start_recorder(os.path.join(WORK, "journal"))
    extra = ["--recorder", "127.0.0.1:%d" % port]
    gw = mdref.Gateway(GATEWAY, URI, store=store, extra=extra)
    feed = Feed(URI, *FEED_ARGS, "--rate", "40000", "--record", rec)
    try:
        wait_for("a third of the feed", lambda: gw.health()["ticks"] >= 20000)
        gw.proc.kill()  # kill -9 mid-feed
        gw.proc.wait()
        time.sleep(0.3)  # ticks published while it is down
        gw = mdref.Gateway(GATEWAY, URI, store=store, extra=extra)
        n, last = feed.result()
        wait_seq(gw, last)
        wait_for("records fetched from the recorder",
                 lambda: gw.metric("md_recorder_replayed_total") > 0, 5)
        assert gw.metric("md_recorder_errors_total") == 0
        assert gw.health()["gaps"] == 0
        check_all_reference(gw, [rec], "restarted with a recorder")
        print("recorder: %d ticks, %d records replayed after the restart" % (
            n, gw.metric("md_recorder_replayed_total")))
        gw.stop()
        # A new gateway without a store: the whole journal from the recorder.
        gw = mdref.Gateway(GATEWAY, URI, extra=extra)
        wait_seq(gw, last)
        assert gw.health()["ticks"] == n
        check_all_reference(gw, [rec], "a new gateway from the recorder",
                            only=("600000.SH", "300525.SZ", "600001.SH", "000001.SZ"))
    finally:
        feed.kill()
        gw.stop()
        recorder.terminate()
        out = recorder.communicate(timeout=20)[0]
        assert recorder.returncode == 0, out


class Resp:
    """A minimal Redis client (RESP2) on one node."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-", b":"):
            return (kind + rest).decode()
        n = int(rest)
        if kind == b"$":
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(65536)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data.decode()
        return [self._reply() for _ in range(max(n, 0))]

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._reply()


def redis_zrange(clients, key):
    """The members of a sorted set wherever it is in a cluster (ASKING: a migrating slot)."""
    for c in clients:
        c.call("ASKING")
        got = c.call("ZRANGE", key, "0", "-1")
        if isinstance(got, list):
            return got
    raise AssertionError("no node holds " + key)


def check_redis_reference(ports, ticks, codes):
    """Every bar in Redis equals the reference: the whole sorted set of every code x period."""
    import re
    clients = [Resp(p) for p in ports]
    try:
        ref = reference(ticks)
        for code in codes:
            for p in mdref.PERIODS:
                key = "{%s}_%s" % (mdref.code_text(code), p)
                got = [re.sub(r',"sseq":\d+', "", m) for m in redis_zrange(clients, key)]
                want = [mdref.bar_json(code, b) for b in ref.get((code, p), [])]
                mdref.check_same(got, want, "Redis " + key)
    finally:
        for c in clients:
            c.close()


def cli(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *map(str, args)], capture_output=True,
                         text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def migrate_slot(ports, key):
    """Starts moving `key`'s slot to another master and moves its keys (MIGRATE), leaving the
    slot MIGRATING/IMPORTING: a client gets ASK for it. Returns (slot, source port, target port)."""
    slot = int(cli(ports[0], "cluster", "keyslot", key))
    ids = {}
    owner = None
    for line in cli(ports[0], "cluster", "nodes").splitlines():
        f = line.split()
        port = int(f[1].split("@")[0].split(":")[1])
        ids[port] = f[0]
        for r in f[8:]:
            lo, _, hi = r.partition("-")
            if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                owner = port
    src, dst = owner, [p for p in ports if p != owner][0]
    assert cli(dst, "cluster", "setslot", slot, "importing", ids[src]) == "OK"
    assert cli(src, "cluster", "setslot", slot, "migrating", ids[dst]) == "OK"
    keys = cli(src, "cluster", "getkeysinslot", slot, "100").split()
    assert key in keys, keys
    assert cli(src, "migrate", "127.0.0.1", dst, "", "0", "5000", "keys", *keys) == "OK"
    return slot, src, dst


def main():
    try:
        {"reference": case_reference, "restart": case_restart, "gap": case_gap,
         "http": case_http, "push": case_push, "redis": case_redis,
         "redis_cluster": lambda: case_redis(cluster=True), "ab": case_ab,
         "recorder": case_recorder, "address": case_address,
         "limits": case_limits, "redis_auth": case_redis_auth,
         "liveness": case_liveness, "consistency": case_consistency,
         "compat": case_compat, "address_race": case_address_race}[CASE]()
        print("marketdata %s: ok" % CASE)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
