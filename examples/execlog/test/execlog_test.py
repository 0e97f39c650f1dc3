#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The ExecLog example's checks (docs/EXECLOG.md): real processes on loopback multicast
(iface=127.0.0.1), or in network namespaces for the iptables loss case.

  execlog_test.py CASE BIN_DIR [--trials N] [--seed S]

Every run ends with the same verdict: the archive is contiguous from 0 with no loss entry and
ends with the session-end record; execlog-risk's state equals the reference model computed
here from the archive; execlog-fix's output is exactly the archive's ExecutionReports, each
once, in order (BodyLength and CheckSum verified); every consumer and the monitor report no
loss. Fault times are drawn from a seeded generator; the seed is printed with each trial.
"""
import argparse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import execlog_ref as ref  # noqa: E402

CASES = ["consistency", "kill_core", "kill_consumers", "sigstop", "loss", "kill_archiver",
         "order_file", "bad_orders", "unknown_type", "divergence", "stale_epoch", "loss_netns",
         "silent_tail", "order_limits", "fix_sessions", "session_end_guard",
         "divergence_active", "divergence_continue",
         "divergence_quorum", "divergence_majority"]
RATE = 10000        # orders per second of input time (~16,000 records/s)
COUNT = 20000       # orders per trial (2 s of stream, ~32,000 records)
FAULT_COUNT = 30000  # fault trials: 3 s of stream, faults within its first 2 s
FLOW = "flow=tagged&flow_tag=21&flow_group=1&flow_timeout_ms=1000"


class Fail(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Proc:
    """One program, restartable with the same arguments; its output appended to a log."""

    def __init__(self, session, name, args, prefix=()):
        self.name, self.args, self.prefix = name, args, list(prefix)
        self.log = os.path.join(session.dir, name + ".log")
        self.p = None
        self.starts = 0

    def start(self):
        self.starts += 1
        with open(self.log, "a") as log:
            log.write("---- start %d\n" % self.starts)
            log.flush()
            self.p = subprocess.Popen(self.prefix + self.args, stdout=log, stderr=subprocess.STDOUT)
        return self

    def signal(self, sig):
        if self.p and self.p.poll() is None:
            self.p.send_signal(sig)

    def kill9(self):
        self.signal(signal.SIGKILL)
        self.p.wait()

    def wait(self, timeout):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def this_run(self):
        """The log since the last start."""
        text = self.text()
        return text[text.rfind("---- start %d\n" % self.starts):]

    def wait_for(self, pattern, timeout=10, this_run=False):
        end = time.time() + timeout
        while time.time() < end:
            if re.search(pattern, self.this_run() if this_run else self.text()):
                return True
            if self.p.poll() is not None:
                break
            time.sleep(0.02)
        raise Fail("%s: no '%s' in its log" % (self.name, pattern))


class Session:
    """An archiver, risk, fix and monitor, and a core pair, on one channel."""

    # Over verbs (--verbs A,B): which of the two devices each role uses.
    VERBS_DEV = {"archiver": 0, "risk": 0, "fix": 1, "monitor": 1, "core_a": 0, "core_b": 1}

    def __init__(self, bindir, work, group, port, rate=RATE, count=COUNT, seed=1,
                 consumer_keys="", ns=None, fix_keys="", fix_args=(), archiver_args=(),
                 verbs=None, arbitration=(), metrics=False):
        self.bin, self.dir, self.rate, self.count, self.seed = bindir, work, rate, count, seed
        # Every program writes Prometheus metrics (--metrics-file) into one textfile directory,
        # which a real node-exporter serves (NodeExporter).
        self.metrics_dir = os.path.join(work, "metrics") if metrics else None
        self.group, self.port, self.verbs = group, port, verbs
        self.channel = "udp://%s:%d?iface=" % (group, port)
        self.uri = self.channel + "127.0.0.1" if verbs is None else self.verbs_uri("archiver")
        self.ck = consumer_keys
        self.fix_keys, self.fix_args = fix_keys, tuple(fix_args)  # the FIX drop copy's own
        self.archiver_args = tuple(archiver_args)
        self.arbitration = tuple(arbitration)  # the archiver's, risk's and FIX's
        self.ns = ns  # {role: (network namespace, its address)}, or None: all on this loopback
        self.replay_port = free_port() if ns is None else 7700
        self.fix_port = free_port() if ns is None else 7701
        self.procs = {}
        self.cores = []

    def prefix(self, role):
        return [] if self.ns is None else ["ip", "netns", "exec", self.ns[role][0]]

    def verbs_uri(self, role):
        """The channel over RDMA UD on the role's device (rx_depth: a key to start the query)."""
        dev = self.verbs[self.VERBS_DEV.get(role, 0)]
        return "verbs://%s:1/%s:%d?rx_depth=4096" % (dev, self.group, self.port)

    def uri_for(self, role):
        if self.verbs is not None:
            return self.verbs_uri(role)
        return self.uri if self.ns is None else self.channel + self.ns[role][1]

    def add(self, name, prog, *args, role=None):
        if self.metrics_dir is not None and prog != "execlog-dump":
            os.makedirs(self.metrics_dir, exist_ok=True)
            args = args + ("--metrics-file", "%s/%s.prom" % (self.metrics_dir, name),
                           "--metrics-ms", "200")
        p = Proc(self, name, [os.path.join(self.bin, prog), *args], self.prefix(role or name))
        self.procs[name] = p
        return p

    def sub_uri(self, tag, role=None):
        return self.uri_for(role) + "&flow=tagged&flow_tag=%d" % tag + self.ck

    def start_consumers(self):
        d = self.dir
        replay = "%s:%d" % ("127.0.0.1" if self.ns is None else self.ns["archiver"][1],
                            self.replay_port)
        # Off loopback the replay carries the order flow over a network: TLS with a key.
        sec = []
        if self.ns is not None:
            key = d + "/replay.key"
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, ("1 %s\n" % os.urandom(16).hex()).encode())
            os.close(fd)
            sec = ["--replay-key-file", key]
        self.add("archiver", "execlog-archiver", self.sub_uri(21, "archiver"), "--journal",
                 d + "/journal",
                 "--listen", "%s:%d" % ("127.0.0.1" if self.ns is None else "0.0.0.0", self.replay_port),
                 "--port-file", d + "/port", *sec, *self.arbitration,
                 *getattr(self, "archiver_args", ())).start()
        deadline = time.time() + 10
        while not os.path.exists(d + "/port") and time.time() < deadline:
            time.sleep(0.02)
        self.add("risk", "execlog-risk", self.sub_uri(22, "risk"), "--state", d + "/risk.state",
                 "--replay", replay, "--exit-at-end", "--print-ms", "0", *sec,
                 *self.arbitration).start()
        self.add("fix", "execlog-fix", self.sub_uri(23, "fix") + self.fix_keys, "--listen",
                 str(self.fix_port), "--store", d + "/fix", "--replay", replay,
                 *(() if "--no-exit-at-end" in self.fix_args else ("--exit-at-end",)),
                 *sec, *self.arbitration,
                 *(a for a in self.fix_args if a != "--no-exit-at-end")).start()
        self.add("monitor", "execlog-monitor", self.uri_for("monitor") + self.ck, "--exit-at-end",
                 "--interval-ms", "500").start()
        for n in ("risk", "fix", "monitor"):
            self.procs[n].wait_for("from sequence|records/s|^", 10)
        # execlog-fix makes its thousand sessions' stores first (~1.5 s under ASan, fresh).
        self.procs["fix"].wait_for("listening on port", 20)

    def core_uri(self, name, role="core_a"):
        """core-a publishes from 127.0.0.1, core-b from .2, any other core from .3 (lo's); in
        namespaces, from its role's host."""
        if self.verbs is not None:  # each core a QP (and QPN) of its own: a NAK address each
            return self.verbs_uri("core_b" if name == "core-b" else "core_a")
        if self.ns is not None:
            return self.uri_for(role)
        if name == "core-a":
            return self.uri
        return self.uri.replace("iface=127.0.0.1",
                                "iface=127.0.0.2" if name == "core-b" else "iface=127.0.0.3")

    def core(self, name, *extra, role="core"):
        # Each core its own unicast address: the library refuses a second publisher on one
        # iface:port, where each receiver's NAKs would reach only one of them.
        uri = self.core_uri(name, role)
        p = self.add(name, "execlog-core", uri + "&" + FLOW, "--seed", str(self.seed),
                     "--rate", str(self.rate), "--count", str(self.count), "--state",
                     "%s/%s.state" % (self.dir, name), *extra, role=role)
        return p

    def start_cores(self, b_extra=(), a_extra=(), c_extra=None):
        a = self.core("core-a", *a_extra, role="core_a").start()
        a.wait_for("publishing from", 15)
        self.t_a = time.time()
        # A standby listens up to 3 s for the live stream (not the default 0.5 s): on a loaded
        # host a late start heard nothing in time and began the stream afresh, far behind.
        # A third voter starts with the second: one started later, on a loaded host, may
        # listen only once the stream is held (a halt), hear no record, and begin afresh.
        wait = ("--join-wait-ms", "3000")
        b = self.core("core-b", *wait, *b_extra, role="core_b").start()
        self.cores = [a, b]
        if c_extra is not None:
            self.cores.append(self.core("core-c", *wait, *c_extra, role="core_b").start())
        for c in self.cores[1:]:
            c.wait_for("publishing from|error", 15)

    def kill_active_core(self, delay):
        victim = self.cores.pop(0)
        if victim.p.poll() is not None:
            raise Fail("%s had already exited: the kill came too late" % victim.name)
        victim.kill9()
        time.sleep(delay)
        victim.start()
        self.cores.append(victim)

    def finish(self, timeout=60):
        end = time.time() + timeout
        for n in ("risk", "fix", "monitor"):
            if self.procs[n].wait(max(1, end - time.time())) is None:
                raise Fail("%s did not reach the session end in %d s" % (n, timeout))
        # The archive is complete once it holds what the risk engine applied.
        want = int(re.findall(r"final: next (\d+)", self.procs["risk"].text())[-1])
        dump = os.path.join(self.bin, "execlog-dump")
        while True:
            r = subprocess.run([dump, self.dir + "/journal", "--quiet"], capture_output=True, text=True)
            m = re.search(r"records \[\d+, (\d+)\)", r.stderr)
            if m and int(m.group(1)) >= want:
                break
            if time.time() > end:
                raise Fail("the archive did not reach %d: %s" % (want, r.stderr.strip()))
            time.sleep(0.2)
        for p in [self.procs["archiver"]] + self.cores:  # done: cores would linger for repairs
            p.signal(signal.SIGTERM)
        for p in [self.procs["archiver"]] + self.cores:
            if p.wait(10) is None:
                raise Fail("%s did not stop" % p.name)

    def kill_all(self):
        if getattr(self, "exporter", None) is not None and self.exporter.p.poll() is None:
            self.exporter.stop()
        for p in self.procs.values():
            p.signal(signal.SIGCONT)
            p.signal(signal.SIGTERM)
        for p in self.procs.values():
            if p.p and p.wait(3) is None:
                p.signal(signal.SIGKILL)
                p.p.wait()

    def verify(self, late=(), expect_divergence=False, expect_unknown=0, expect_logs=None,
               epoch=1, records=None, fix_clients=False, check_marker=False,
               ignore_divergences=False):
        """Everything agrees: returns the summary line, raises Fail otherwise."""
        entries = ref.read_journal(os.path.join(self.bin, "execlog-dump"), self.dir + "/journal")
        for name, pattern in (expect_logs or {}).items():
            if not re.search(pattern, self.procs[name].text()):
                raise Fail("%s: no '%s' in its log" % (name, pattern))
        epochs = set(e.epoch for e in entries if e.kind in "RU")
        if epochs != {epoch}:
            raise Fail("archive: epochs %s, expected only %d" % (epochs, epoch))
        if records is not None:
            check_records(entries, *records)
        first, end, problems = ref.contiguous(entries)
        if first != 0 or problems:
            raise Fail("archive: from %d, %s" % (first, problems[:3]))
        last = entries[-1]
        if last.kind != 'R' or last.rec['type'] != ref.SESSION_END or last.rec['order_id'] != self.count:
            raise Fail("archive: does not end with the session end after %d orders" % self.count)
        unknown = sum(1 for e in entries if e.kind == 'U')
        if unknown != expect_unknown:
            raise Fail("archive: %d unknown records, expected %d" % (unknown, expect_unknown))
        if not expect_divergence:
            want = ref.reference_risk_state(entries)
            for name in ("risk",) + tuple(late):
                with open("%s/%s.state" % (self.dir, name)) as f:
                    got = f.read()
                if ignore_divergences:  # outvoted copies, counted by each consumer
                    got = re.sub(r"^divergences \d+\n", "", got, flags=re.M)
                    want = re.sub(r"^divergences \d+\n", "", want, flags=re.M)
                if got != want:
                    gl, wl = got.splitlines(), want.splitlines()
                    diff = [(a, b) for a, b in zip(gl, wl) if a != b][:3]
                    raise Fail("%s state differs from the reference model: %s (%d/%d lines)"
                               % (name, diff, len(gl), len(wl)))
        else:
            nxt = None
            with open(self.dir + "/risk.state") as f:
                nxt = int(re.search(r"^next (\d+)", f.read(), re.M).group(1))
            if nxt != end:
                raise Fail("risk: next %d, archive end %d" % (nxt, end))
        # State and FIX sessions are nobody else's business: written 0600 (umask or not).
        fixdir = os.path.join(self.dir, "fix")
        for path in [os.path.join(self.dir, "risk.state")] + [
                os.path.join(fixdir, n) for n in os.listdir(fixdir)]:
            mode = os.stat(path).st_mode & 0o777
            if mode != 0o600:
                raise Fail("%s: mode %o, expected 600" % (path, mode))
        fix_problems, msgs = ref.check_fix_stores(fixdir, entries, range(1, 1001))
        if fix_problems and not expect_divergence:
            raise Fail("fix: %s" % fix_problems)
        clients = ""
        if check_marker:
            clients += ", the marker holds both copies (the journal %s's)" % self.marker_check()
            if getattr(self, "metrics_line", None):
                clients += ", " + self.metrics_line
        if fix_clients:
            cp, cn, resent = ref.check_client_logs(
                [(c.log.replace(".log", ".txt"), accts) for c, accts in self.fix_clients], entries)
            if cp:
                raise Fail("fix clients: %s" % cp[:5])
            if resent == 0:
                raise Fail("fix clients: no message came by resend: the gap was not tested")
            clients = ", clients got %d messages exact (%d by resend)" % (cn, resent)
        mon = self.procs["monitor"].text()
        m = re.findall(r"final: records (\d+), next (\d+), gaps (\d+)", mon)
        # A restarted monitor joins mid-stream with no state and no archiver: its own gaps
        # right after joining are its view only; one that ran throughout must have none.
        if not m or (int(m[-1][2]) != 0 and self.procs["monitor"].starts == 1):
            raise Fail("monitor: %s" % (m[-1:] or "no final line"))
        for n in ("risk", "fix") + tuple(late):
            if "LOSS" in self.procs[n].text():
                raise Fail("%s reported a loss" % n)
        return ("archive [0, %d) contiguous, risk = reference model (%d trades), fix %d messages "
                "exact in their sessions%s, monitor saw %s records"
                % (end, sum(1 for e in entries if e.kind == 'R' and e.rec['type'] == ref.TRADE),
                   msgs, clients, m[-1][0]))


def wait_archive(s, timeout=60):
    """The archive's entries once it holds the session end (the risk engine has applied it)."""
    if s.procs["risk"].wait(timeout) is None:
        raise Fail("risk did not reach the session end")
    want = int(re.findall(r"final: next (\d+)", s.procs["risk"].text())[-1])
    dump = os.path.join(s.bin, "execlog-dump")
    end = time.time() + timeout
    while True:
        out = subprocess.run([dump, s.dir + "/journal", "--quiet"], capture_output=True, text=True)
        m = re.search(r"records \[\d+, (\d+)\)", out.stderr)
        if m and int(m.group(1)) >= want:
            return ref.read_journal(dump, s.dir + "/journal")
        if time.time() > end:
            raise Fail("the archive did not reach %d" % want)
        time.sleep(0.2)


def check_the_checker(s):
    """The operator's checker (execlog-check DIR) agrees on a good day, and fails a day whose
    risk state or FIX store was tampered with, saying which."""
    tool = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "execlog-check"),
            s.dir, "--bin", s.bin]
    r = subprocess.run(tool, capture_output=True, text=True)
    if r.returncode != 0 or "execlog-check: OK" not in r.stdout:
        raise Fail("execlog-check on a good day: exit %d: %s" % (r.returncode, r.stdout))
    with open(s.dir + "/risk.state") as f:
        text = f.read()
    with open(s.dir + "/risk.state", "w") as f:
        f.write(re.sub(r"^(pos \d+ \d+ )(-?\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 1),
                       text, count=1, flags=re.M))
    body = sorted(n for n in os.listdir(s.dir + "/fix") if n.endswith(".body")
                  and os.path.getsize(os.path.join(s.dir, "fix", n)) > 0)[0]
    with open(os.path.join(s.dir, "fix", body), "r+b") as f:
        data = bytearray(f.read())
        at = data.index(b"\x0114=") + 4  # one CumQty digit
        data[at] = ord("9") if data[at] != ord("9") else ord("8")
        f.seek(0)
        f.write(data)
    r = subprocess.run(tool, capture_output=True, text=True)
    if r.returncode != 1 or "execlog-check: FAIL: risk, fix" not in r.stdout:
        raise Fail("execlog-check on a tampered day: exit %d: %s" % (r.returncode, r.stdout))
    return "execlog-check: OK, and FAIL on a tampered risk state and FIX store"


def run_trial(args, case_idx, trial, rnd, plan_fn, **kw):
    work = tempfile.mkdtemp(prefix="execlog-%s-" % args.case)
    group = "239.192.%d.%d" % (131 + case_idx // 3, 10 + (case_idx % 3) * 80 + trial % 80)
    port = 25000 + case_idx * 100 + trial % 100
    # A slower stream (the VM's emulated CPU) keeps its duration, times --stream-scale (there a
    # second core takes seconds to start: the fault must find the first one still running).
    scale = args.rate / RATE * args.stream_scale
    if args.case != "consistency":
        kw.setdefault("count", int(FAULT_COUNT * scale))
    else:
        kw.setdefault("count", int(COUNT * scale))
    kw.setdefault("rate", args.rate)
    if args.verbs:
        devs = args.verbs.split(",")
        kw["verbs"] = (devs[0], devs[-1])
    s = Session(args.bindir, work, group, port, seed=rnd.randrange(1, 10**6), **kw)
    ok = False
    try:
        t0 = time.time()
        s.start_consumers()
        t1 = time.time()
        desc = plan_fn(s, rnd)
        t2 = time.time()
        s.finish()
        t3 = time.time()
        line = s.verify(**getattr(s, "verify_kw", {}))
        if args.case == "consistency":
            line += "; " + check_the_checker(s)
        print("trial %d: %s: OK: %s (start %.1f s, run %.1f s, finish %.1f s, check %.1f s)"
              % (trial, desc, line, t1 - t0, t2 - t1, t3 - t2, time.time() - t3), flush=True)
        ok = True
    except Fail as e:
        print("trial %d: FAIL: %s" % (trial, e), flush=True)
        s.kill_all()
        for p in s.procs.values():
            print("----- %s" % p.name)
            print(p.text()[-3000:])
    finally:
        s.kill_all()
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept %s" % work)
    return ok


def plan_none(s, rnd):
    s.start_cores()
    time.sleep(0.5)
    # A late joiner: a second risk engine with no state, started mid-day, from the archiver.
    # It asks PGM for one packet of history: a whole window's (the default) would still hold
    # the day so far, and it would never need the archiver.
    late = s.add("risk-late", "execlog-risk", s.sub_uri(24), "--state", s.dir + "/risk-late.state",
                 "--replay", "127.0.0.1:%d" % s.replay_port, "--exit-at-end", "--print-ms", "0",
                 "--pgm-history", "1")
    late.start()
    s.verify_kw = {"late": ("risk-late",)}
    s.procs["risk-late"] = late
    if late.wait(90) is None:
        raise Fail("the late risk engine did not finish")
    if not re.search(r"final: next \d+, applied \d+, skipped \d+, late joins [1-9]", late.text()):
        raise Fail("the late risk engine did not catch up from the archiver")
    return "no fault, late joiner at 0.5 s"


def sleep_until(s, t):
    """Sleeps until `t` s after core A's first record (faults land inside the 3 s stream)."""
    time.sleep(max(0.0, s.t_a + t - time.time()))


def plan_kill_core(s, rnd):
    # core-b follows core-a's schedule (--schedule-file), as two cores fed by one input feed:
    # its anchor must be core-a's, so the takeover resumes the pair's schedule.
    anchor_a, anchor_b = s.dir + "/anchor-a", s.dir + "/anchor-b"
    s.start_cores(a_extra=("--anchor-file", anchor_a),
                  b_extra=("--anchor-file", anchor_b, "--schedule-file", anchor_a))
    a_ns, b_ns = (int(open(f).read()) for f in (anchor_a, anchor_b))
    if abs(b_ns - a_ns) > 1_000_000:
        raise Fail("core-b's schedule is %.3f ms off core-a's" % ((b_ns - a_ns) / 1e6))
    t = rnd.uniform(0.8, 2.0)
    sleep_until(s, t)
    s.kill_active_core(rnd.uniform(0.1, 0.4))
    return "killed the active core at %.3f s" % t


def plan_kill_consumers(s, rnd):
    s.start_cores()
    victims = s.victims
    rnd.shuffle(victims)
    times = sorted(rnd.uniform(0.5, 2.0) for _ in victims)
    t0 = s.t_a
    for v, t in zip(victims, times):
        sleep_until(s, t)
        if s.procs[v].p.poll() is not None:
            raise Fail("%s had already exited: the kill came too late" % v)
        s.procs[v].kill9()
        print("  %.3f s: killed %s" % (time.time() - t0, v), flush=True)
        time.sleep(rnd.uniform(0.05, 0.3))
        s.procs[v].start()
    return "killed -9 and restarted " + ", ".join("%s at %.2f s" % (v, t) for v, t in zip(victims, times))


def plan_sigstop(s, rnd):
    s.start_cores()
    victim = ["risk", "fix", "archiver"][rnd.randrange(3)]
    t = rnd.uniform(0.6, 1.2)
    d = rnd.uniform(1.5, 2.5)  # longer than the flow-control timeout (1 s)
    sleep_until(s, t)
    s.procs[victim].signal(signal.SIGSTOP)
    time.sleep(d)
    s.procs[victim].signal(signal.SIGCONT)
    return "stopped %s at %.2f s for %.2f s (flow timeout 1 s)" % (victim, t, d)


def case_silent_tail(args, idx, rnd):
    """The FIX renderer (a 256 KiB socket buffer) is stopped early; the stream ends and both
    cores stop while it is stopped, so the live tail it missed (dropped by its full socket
    buffer) has nothing after it to show the loss. Resumed, it must notice live is silent and
    get the rest from the archiver (--silence-probe-ms), not wait for ever. The environment
    variable EXECLOG_SILENCE_PROBE_MS overrides the probe (0 shows the hang it prevents)."""
    def plan(s, r):
        s.start_cores()
        t = r.uniform(0.3, 0.8)
        sleep_until(s, t)
        fix = s.procs["fix"]
        fix.signal(signal.SIGSTOP)
        # Until the archive holds the session end (the risk engine has applied it).
        if s.procs["risk"].wait(60) is None:
            raise Fail("risk did not reach the session end")
        want = int(re.findall(r"final: next (\d+)", s.procs["risk"].text())[-1])
        dump = os.path.join(s.bin, "execlog-dump")
        end = time.time() + 30
        while True:
            out = subprocess.run([dump, s.dir + "/journal", "--quiet"], capture_output=True,
                                 text=True)
            m = re.search(r"records \[\d+, (\d+)\)", out.stderr)
            if m and int(m.group(1)) >= want:
                break
            if time.time() > end:
                raise Fail("the archive did not reach %d" % want)
            time.sleep(0.2)
        for c in s.cores:
            c.signal(signal.SIGTERM)
        for c in s.cores:
            if c.wait(10) is None:
                raise Fail("%s did not stop" % c.name)
        fix.signal(signal.SIGCONT)
        if fix.wait(30) is None:
            raise Fail("fix did not reach the session end after the cores stopped")
        probed = "live silent" in fix.text()
        return ("stopped fix at %.2f s until the cores had stopped; it %s" %
                (t, "asked the archiver when live went silent" if probed else
                 "did not need to ask (its buffer held the tail)"))
    probe = os.environ.get("EXECLOG_SILENCE_PROBE_MS")
    passed = sum(one_session(args, idx, rnd, plan, fix_keys="&rcvbuf=262144",
                             fix_args=("--silence-probe-ms", probe) if probe else ())
                 for _ in range(args.trials))
    print("execlog_test silent_tail: %d of %d trials passed" % (passed, args.trials))
    return passed == args.trials


def plan_loss(s, rnd):
    s.start_cores()
    t = rnd.uniform(0.8, 2.0)
    sleep_until(s, t)
    s.kill_active_core(0.2)
    return "5%% loss on every receiver, killed the active core at %.2f s" % t


ORDER_FILE = """# A hand-checked session (docs/EXECLOG.md, "Order file"): TIME_NS VERB ACCOUNT ...
1767605400000001000 NEW 1 0 BUY LIMIT DAY 100 1000
1767605400000002000 NEW 2 0 SELL LIMIT DAY 60 990
1767605400000003000 NEW 3 0 SELL MARKET IOC 50 0

1767605400000004000 NEW 4 0 BUY LIMIT DAY 10 1010
1767605400000005000 REPLACE 4 4 20 1005
1767605400000006000 CANCEL 9 4
1767605400000007000 CANCEL 4 4
1767605400000008000 CANCEL 4 4
1767605400000009000 NEW 5 7 BUY LIMIT IOC 0 1000
"""
# (type, order_id, last_qty, price, leaves) of each record the file must make.
ORDER_FILE_RECORDS = [(1, 1, 0, 1000, 100), (1, 2, 0, 990, 60), (3, 2, 60, 1000, 0),
                      (1, 3, 0, 0, 50), (3, 3, 40, 1000, 10), (6, 3, 10, 0, 0),
                      (1, 4, 0, 1010, 10), (5, 4, 0, 1005, 20), (8, 4, 0, 1005, 20),
                      (4, 4, 20, 1005, 0), (8, 4, 0, 0, 0), (2, 9, 0, 1000, 0), (7, 9, 0, 0, 0)]


def one_session(args, idx, rnd, plan, count=None, verify_kw=None, **kw):
    """A trial with a plan of its own; returns True when it passed."""
    def wrapped(s, r):
        if count is not None:
            s.count = count
        s.verify_kw = verify_kw or {}
        return plan(s, r)
    return run_trial(args, idx, 0, rnd, wrapped, **kw)


def case_order_file(args, idx, rnd):
    path = tempfile.mktemp(prefix="execlog-orders-")
    with open(path, "w") as f:
        f.write(ORDER_FILE)

    def plan(s, r):
        a = s.core("core-a", "--orders", path, role="core_a").start()
        a.wait_for("published records", 15)
        s.cores = [a]
        return "the order file of %d orders" % s.count

    ok = one_session(args, idx, rnd, plan, count=9,
                     verify_kw={"records": (ORDER_FILE_RECORDS, ORDER_FILE_FIELDS)})
    os.unlink(path)
    return ok


ORDER_FILE_FIELDS = ("type", "order_id", "last_qty", "price", "leaves")


def check_records(entries, want, fields):
    got = [tuple(e.rec[f] for f in fields) for e in entries if e.kind == "R"]
    if got != want:
        raise Fail("order file: records %s, expected %s (%s)" % (got, want, ", ".join(fields)))


MAX_PRICE, MAX_QTY = 9223372036854, 1000000  # execlog::kMaxPrice (INT64_MAX / kMaxQty), kMaxQty
LIMITS_FILE = """# Prices and quantities at and past the engine's limits (docs/EXECLOG.md)
1767605400000001000 NEW 1 0 SELL LIMIT DAY 10 9223372036854775807
1767605400000002000 NEW 2 0 SELL LIMIT DAY 1 %(p1)d
1767605400000003000 NEW 3 0 SELL LIMIT DAY %(q)d %(p)d
1767605400000004000 NEW 4 0 BUY MARKET IOC %(q)d 0
1767605400000005000 NEW 5 1 BUY LIMIT DAY 10 1000
1767605400000006000 NEW 6 1 SELL LIMIT DAY 4 1000
1767605400000007000 REPLACE 5 5 %(q3)d 1000
1767605400000008000 REPLACE 5 5 %(q4)d 1000
1767605400000009000 NEW 7 1 SELL LIMIT DAY %(q1)d 1000
""" % {"p": MAX_PRICE, "p1": MAX_PRICE + 1, "q": MAX_QTY, "q1": MAX_QTY + 1, "q3": MAX_QTY - 3,
       "q4": MAX_QTY - 4}
LIMITS_FIELDS = ("type", "order_id", "last_qty", "price", "leaves", "reason", "notional")
# A price near 2^63 and one past the limit: bad price; the largest honest trade there is (its
# notional MAX_PRICE x MAX_QTY); a replace that would take an order past MAX_QTY lots (4 filled
# + MAX_QTY - 3) and one that reaches it; a quantity past it: bad quantity.
LIMITS_RECORDS = [(2, 1, 0, 2**63 - 1, 0, 3, 0), (2, 2, 0, MAX_PRICE + 1, 0, 3, 0),
                  (1, 3, 0, MAX_PRICE, MAX_QTY, 0, 0), (1, 4, 0, 0, MAX_QTY, 0, 0),
                  (3, 4, MAX_QTY, MAX_PRICE, 0, 0, MAX_PRICE * MAX_QTY),
                  (1, 5, 0, 1000, 10, 0, 0), (1, 6, 0, 1000, 4, 0, 0), (3, 6, 4, 1000, 0, 0, 4000),
                  (9, 5, 0, 1000, 6, 2, 4000), (5, 5, 0, 1000, MAX_QTY - 4, 0, 4000),
                  (2, 9, 0, 1000, 0, 2, 0), (7, 9, 0, 0, 0, 0, 0)]


def case_order_limits(args, idx, rnd):
    """Orders past the price and quantity limits are rejected and counted; the core goes on,
    and orders at the limits trade: risk and FIX agree with the reference model (Python's
    integers do not overflow) on a notional of 9.2 x 10^18 ticks x lots."""
    path = tempfile.mktemp(prefix="execlog-limits-")
    with open(path, "w") as f:
        f.write(LIMITS_FILE)

    def plan(s, r):
        a = s.core("core-a", "--orders", path, role="core_a").start()
        a.wait_for("published records", 15)
        s.cores = [a]
        return "an order file of %d orders at and past the limits" % s.count

    ok = one_session(args, idx, rnd, plan, count=9, verify_kw={
        "records": (LIMITS_RECORDS, LIMITS_FIELDS),
        "expect_logs": {"core-a": r"4 rejected \(4 past the price or quantity limit\)"}})
    os.unlink(path)
    return ok


def case_fix_sessions(args, idx, rnd):
    """Firms' drop-copy clients (execlog-fix-client: QuickFIX initiators, every message cracked
    by QuickFIX's FIX 4.4 classes and checked) log on as several accounts. One client drops
    half its sessions for a while mid-stream and logs on again (the acceptor's MsgSeqNum moved
    on: resend from the store); execlog-fix itself is killed -9 and restarted (its sessions
    recover from their stores); a second client logs on only after the session end (all of
    its day by resend). Every account's executions must arrive once each, in order, equal to
    the archive's; the stores too."""
    accounts_a = [1, 2, 3, 5, 8, 13, 21, 34]
    accounts_b = [55, 89, 144, 233]

    def plan(s, r):
        client = os.path.join(s.bin, "execlog-fix-client")
        a = s.add("client-a", "execlog-fix-client", "--port", str(s.fix_port), "--accounts",
                  ",".join(map(str, accounts_a)), "--out", s.dir + "/client-a.txt",
                  "--gap-after-ms", "%d" % r.randrange(300, 900), "--gap-ms", "1500",
                  "--gap-accounts", "4")
        assert os.path.exists(client)
        a.start()
        s.start_cores()
        a.wait_for("logged on", 10)
        # Killed once its checkpoint is past record 5000, 0-300 ms after a checkpoint.
        fix = s.procs["fix"]
        state = s.dir + "/fix/execlog-fix.state"
        deadline = time.time() + 20
        while True:
            try:
                with open(state) as f:
                    m = re.search(r"^next (\d+)", f.read(), re.M)
            except FileNotFoundError:
                m = None
            if m and int(m.group(1)) > 5000:
                break
            if time.time() > deadline:
                raise Fail("execlog-fix's checkpoint did not pass record 5000")
            time.sleep(0.02)
        time.sleep(r.uniform(0, 0.3))
        t = time.time() - s.t_a
        fix.kill9()
        time.sleep(r.uniform(0.1, 0.4))
        fix.start()
        fix.wait_for(r"already in the sessions' stores", 10, this_run=True)
        resumed = re.findall(r"from sequence (\d+); (\d+) messages of later records already",
                             fix.this_run())[-1]
        if int(resumed[0]) == 0:
            raise Fail("execlog-fix restarted from record 0: its checkpoint was not read")
        # Until every record is in the sessions: fix has applied the session end.
        fix.wait_for(r"session end at record \d+", 60, this_run=True)
        b = s.add("client-b", "execlog-fix-client", "--port", str(s.fix_port), "--accounts",
                  ",".join(map(str, accounts_b)), "--out", s.dir + "/client-b.txt").start()
        s.fix_clients = [(a, accounts_a), (b, accounts_b)]
        # Every message of the archive's records at its client, then the clients and fix stop.
        want = {}
        entries = wait_archive(s)
        for acct, msgs in ref.expected_by_account(entries).items():
            want[acct] = len(msgs)
        end = time.time() + 30
        for c, accts in s.fix_clients:
            while True:
                got = ref.client_counts(c.log.replace(".log", ".txt"))
                if all(got.get(x, 0) >= want.get(x, 0) for x in accts):
                    break
                if time.time() > end:
                    raise Fail("%s: messages %s, expected %s" % (c.name, got, {x: want.get(x, 0) for x in accts}))
                time.sleep(0.1)
        for c, _ in s.fix_clients:
            c.signal(signal.SIGTERM)
            if c.wait(10) != 0:
                raise Fail("%s: exit %s (a message broke FIX 4.4's rules?)" % (c.name, c.p.returncode))
        fix.signal(signal.SIGTERM)
        if fix.wait(10) != 0:
            raise Fail("fix did not stop cleanly on SIGTERM")
        return ("clients for %d accounts; 4 sessions dropped for 1.5 s; execlog-fix killed at "
                "%.2f s and restarted (from record %s, %s messages already stored); 4 more "
                "accounts logged on after the end" % (len(accounts_a), t, *resumed))

    return one_session(args, idx, rnd, plan, fix_args=("--no-exit-at-end",),
                       verify_kw={"fix_clients": True})


def case_session_end_guard(args, idx, rnd):
    """A core never publishes a finished session again. The standby is killed -9 mid-stream
    (its saved state is behind); the active core finishes the session. Restarted after the
    end, the active core refuses by its own state ('ended'), the standby by the archive
    (--archive): both say so and exit 0 without publishing."""
    def plan(s, r):
        arch = ("--archive", "127.0.0.1:%d" % s.replay_port)
        s.start_cores(a_extra=arch, b_extra=arch)
        t = r.uniform(0.8, 1.6)
        sleep_until(s, t)
        b = s.cores[1]
        b.kill9()
        wait_archive(s)
        a = s.cores[0]
        if a.wait(30) != 0:
            raise Fail("core-a did not finish the session")
        for core, why in ((a, r"this core published its end at record \d+ \('[^']+'\)"),
                          (b, r"the archive \(127\.0\.0\.1:\d+\) holds its end at record \d+")):
            core.start()
            if core.wait(20) != 0:
                raise Fail("%s restarted after the end: exit %s" % (core.name, core.p.returncode))
            run = core.this_run()
            if not re.search(why + "; refusing to publish it again", run) or "publishing from" in run:
                raise Fail("%s restarted after the end: %s" % (core.name, run.strip()[-400:]))
        return ("killed the standby at %.2f s; after the end both cores restarted and refused "
                "(own state, archive)" % t)

    return one_session(args, idx, rnd, plan)


def case_bad_orders(args, idx, rnd):
    core = os.path.join(args.bindir, "execlog-core")
    uri = "udp://239.192.137.1:25901?iface=127.0.0.1"
    good = "1767605400000001000 NEW 1 0 BUY LIMIT DAY 100 1000\n"
    cases = [
        ("1767605400000001000 NEW 1 0 BY LIMIT DAY 100 1000\n", r":1: side 'BY' is not BUY or SELL"),
        (good + "# comment\n1767605400000000500 NEW 1 0 BUY LIMIT DAY 100 1000\n", r":3: time \d+ goes backwards"),
        (good + good + "1767605400000001000 NEW 1 0 BUY LIMIT DAY 1O0 1000\n", r":3: quantity '1O0' is not a number"),
        (good + "1767605400000001000 HOLD 1 0\n", r":2: 'HOLD' is not NEW, CANCEL or REPLACE"),
        (good + "1767605400000001000 CANCEL 1 5 extra\n", r":2: unexpected 'extra' at the end"),
    ]
    ok = True
    for text, want in cases:
        path = tempfile.mktemp(prefix="execlog-bad-orders-")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([core, uri, "--orders", path], capture_output=True, text=True, timeout=30)
        passed = r.returncode == 1 and re.search(re.escape(path) + want, r.stderr) is not None
        print("bad order file %r: exit %d, %s: %s" % (text.splitlines()[-1], r.returncode,
                                                       r.stderr.strip(), "OK" if passed else "FAIL"))
        ok = ok and passed
        os.unlink(path)
    r = subprocess.run([core, uri, "--orders", "/nonexistent/orders"], capture_output=True, text=True)
    passed = r.returncode == 1 and "cannot read order file '/nonexistent/orders'" in r.stderr
    print("missing order file: exit %d, %s: %s" % (r.returncode, r.stderr.strip(), "OK" if passed else "FAIL"))
    ok = ok and passed
    for bad_uri, want in (("udp://239.192.137.1:25901?iface=10.9.9.9", "10.9.9.9"),
                          ("udp://239.192.137.1:25901?iface=127.0.0.1&colour=red", "colour")):
        r = subprocess.run([core, bad_uri, "--count", "10"], capture_output=True, text=True, timeout=30)
        passed = r.returncode == 1 and want in r.stderr
        print("bad URI %s: exit %d, %s: %s" % (bad_uri, r.returncode, r.stderr.strip(), "OK" if passed else "FAIL"))
        ok = ok and passed
    return ok


def case_unknown_type(args, idx, rnd):
    at = 20000

    def plan(s, r):
        s.start_cores(a_extra=("--fault", "unknown-type@%d" % at),
                      b_extra=("--fault", "unknown-type@%d" % at))
        return "both cores write record %d with type 99" % at

    ok = one_session(args, idx, rnd, plan, verify_kw={"expect_unknown": 1,
                                                      "expect_logs": {"risk": "record %d: unknown record type 99" % at,
                                                                      "fix": "record %d: unknown record type 99" % at}})
    return ok


def core_source(core):
    """The source (TSI) a core published from, as it printed it."""
    m = re.findall(r"source (\S+) publishing from", core.text())
    if not m:
        raise Fail("%s: no source line" % core.name)
    return m[-1]


def check_marker(s, at, wrong):
    """The archive's divergence marker of record `at`: both copies, one from each core, differing
    in the one byte the fault flips (payload byte 44, order_qty) and the checksum; returns which
    core's copy the journal holds."""
    path = s.dir + "/journal.divergences"
    if not os.path.exists(path):
        raise Fail("no divergence marker file")
    lines = [l.split() for l in open(path) if l.startswith("divergence record %d " % at)]
    if len(lines) != 1:
        raise Fail("divergence markers of record %d: %d" % (at, len(lines)))
    w = lines[0]
    j_src, j_hex, d_src, d_hex = w[4], w[5], w[7], w[8]
    sources = {core_source(c): c.name for c in s.cores}
    if not {j_src, d_src} <= set(sources) or j_src == d_src or "-" in (j_hex, d_hex):
        raise Fail("marker %s: sources %s, expected both cores' copies %s" % (w[:3], (j_src, d_src), sources))
    a, b = bytes.fromhex(j_hex), bytes.fromhex(d_hex)
    diff = [k for k in range(len(a)) if a[k] != b[k]]
    # The header's checksum (bytes 20-27) covers the payload, so it differs too (a byte of it
    # may match by chance: 1 in 256 each).
    if (len(a) != len(b) or 28 + 44 not in diff or not any(20 <= k < 28 for k in diff)
            or any(not 20 <= k < 28 and k != 28 + 44 for k in diff)):
        raise Fail("marker: the copies differ at %s, expected the checksum and byte %d only"
                   % (diff, 28 + 44))
    return sources[j_src]


def risk_next(s):
    """execlog-risk's checkpointed position: the stream it sees is held when it stops."""
    with open(s.dir + "/risk.state") as f:
        return int(re.search(r"^next (\d+)", f.read(), re.M).group(1))


class NodeExporter:
    """Debian's prometheus-node-exporter serving a textfile directory (its textfile collector
    only): the real reader of the programs' --metrics-file. scrape() parses what it serves:
    {(metric, ((label, value), ...)): value}, and fails on a textfile it could not read."""

    def __init__(self, directory):
        exe = shutil.which("prometheus-node-exporter")
        if exe is None:
            raise Fail("prometheus-node-exporter is not installed (scripts/setup-debian.sh)")
        self.port = free_port()
        self.p = subprocess.Popen(
            [exe, "--collector.disable-defaults", "--collector.textfile",
             "--collector.textfile.directory=" + directory,
             "--web.listen-address=127.0.0.1:%d" % self.port],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def scrape(self):
        import urllib.request
        deadline = time.time() + 10
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.port,
                                            timeout=5) as r:
                    text = r.read().decode()
                break
            except OSError:
                if time.time() > deadline:
                    raise Fail("node-exporter did not answer on port %d" % self.port)
                time.sleep(0.1)
        samples = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)', line)
            if not m:
                raise Fail("node-exporter served a line that is not a sample: %r" % line)
            labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
            samples[(m.group(1), labels)] = float(m.group(3))
        errors = [v for (k, _), v in samples.items() if k == "node_textfile_scrape_error"]
        if errors != [0.0]:
            raise Fail("node-exporter could not read the metrics files (scrape error %s)" % errors)
        return samples

    @staticmethod
    def value(samples, metric, **labels):
        """The one sample of `metric` whose labels include `labels`."""
        got = [v for (k, ls), v in samples.items()
               if k == metric and set(labels.items()) <= set(ls)]
        if len(got) != 1:
            raise Fail("metrics: %d samples of %s%s" % (len(got), metric, labels))
        return got[0]

    def stop(self):
        self.p.terminate()
        self.p.wait()


def journal_end(s):
    r = subprocess.run([os.path.join(s.bin, "execlog-dump"), s.dir + "/journal", "--quiet"],
                       capture_output=True, text=True)
    m = re.search(r"records \[\d+, (\d+)\)", r.stderr)
    return int(m.group(1)) if m else None


def wait_halted(s, arch, at):
    """The archiver says it halted at `at`; once the cores' flow-control window has run out,
    neither the journal nor risk moves for 1.5 s. Returns where they stand."""
    arch.wait_for(r"HALTED at record %d: " % at, 30)
    time.sleep(1.0)  # the cores' flow-control window runs out
    end1, risk1 = journal_end(s), risk_next(s)
    time.sleep(1.5)
    end2, risk2 = journal_end(s), risk_next(s)
    if end1 != end2 or risk1 != risk2:
        raise Fail("halted, yet the journal went on from %s to %s, risk from %s to %s"
                   % (end1, end2, risk1, risk2))
    return end1, risk1


def divergence_case(args, idx, rnd, wrong, policy):
    """One core (`wrong`: core-a is the active one) writes record `at` differently. Every
    consumer reports it; the archive keeps both copies in its marker file. Under the default
    policy (halt) the archiver halts at it and the stream is held until the operator writes
    `continue SEQ` to the decision file; under `continue` it goes on at once. Record 28000 of
    ~47,000: late enough for the standby to have joined (under ASan on a loaded host it joins
    up to ~1.5 s in), early enough that the rest of the session is longer than the cores'
    flow-control window (4096) plus the time the second copy takes to come, so the hold shows."""
    at = 28000

    def plan(s, r):
        fault = ("--fault", "diverge@%d" % at)
        s.start_cores(a_extra=fault if wrong == "core-a" else (),
                      b_extra=fault if wrong == "core-b" else ())
        arch = s.procs["archiver"]
        joined = int(re.findall(r"publishing from sequence (\d+)", s.cores[1].text())[-1])
        if joined >= at:
            raise Fail("core-b joined at record %d, past the faulted one: no second copy" % joined)
        held = ""
        if policy == "halt":
            end1, risk1 = wait_halted(s, arch, at)
            held = "halted: the journal held at %s and risk at %s for 1.5 s; " % (end1, risk1)
            # Loud: the cores say they are held and by what, the monitor raises an alert.
            if not any(re.search(r"HELD for \d+\.\d s at record \d+: flow control", c.text())
                       for c in s.cores):
                raise Fail("no core said it was held")
            if not re.search(r"ALERT: no record for \d+ ms after record", s.procs["monitor"].text()):
                raise Fail("the monitor raised no alert while the stream was held")
            with open(s.dir + "/journal.decision", "w") as f:
                f.write("continue %d\n" % at)
            arch.wait_for(r"the operator let the stream go on after record %d" % at, 10)
        else:
            arch.wait_for(r"divergence marker of record %d" % at, 30)
        s.verify_kw["expect_logs"]["archiver"] = r"divergence marker of record %d .*\(both copies\)" % at
        s.marker_check = lambda: check_marker(s, at, wrong)
        return "%s (%s) writes record %d differently, policy %s; %s" % (
            wrong, "active" if wrong == "core-a" else "standby", at, policy, held)

    pat = "DIVERGENCE.*record %d" % at
    if policy == "continue":
        kw = {"archiver_args": ("--on-divergence", "continue")}
    else:
        kw = {}
    return one_session(args, idx, rnd, plan, verify_kw={
        "expect_divergence": True, "check_marker": True,
        # Not execlog-fix: when it is catching up through the archiver's replay at that
        # moment (it may fall behind live), it reads the journaled copy only, and rightly
        # reports nothing; the marker, the halt and risk's report are the checks.
        "expect_logs": {"risk": pat, "monitor": "DIVERGENCE at record %d" % at}},
        **kw)


def case_divergence(args, idx, rnd):
    return divergence_case(args, idx, rnd, "core-b", "halt")


def case_divergence_active(args, idx, rnd):
    return divergence_case(args, idx, rnd, "core-a", "halt")


def case_divergence_continue(args, idx, rnd):
    return divergence_case(args, idx, rnd, "core-a", "continue")


def quorum_case(args, idx, rnd, wrong, cores):
    """The consumers arbitrate by quorum (--arbitration quorum; the archiver with a flow gate
    per core, --cores): no one applies either copy of record `at` until enough cores agree.
    `wrong` (core-a: the active one) writes it differently. Two cores never agree: the archiver
    halts at exactly that record with nothing of it journaled, every copy in its marker file,
    the stream held, until the operator writes `use SEQ SOURCE` (the right core's copy); the
    consumers then read that copy from the archive, so every consumer's state is the
    reference model's. Three cores: the two that agree outvote the wrong one, no halt, the
    wrong copy only marked."""
    # Late in the 3 s stream: on a loaded host a standby has taken 1.7 s to hear the stream.
    at = 36000
    right = "core-b"
    names = ["core-a", "core-b", "core-c"][:cores]

    def plan(s, r):
        fault = ("--fault", "diverge@%d" % at)
        s.start_cores(a_extra=("--name", "core-a") + (fault if wrong == "core-a" else ()),
                      b_extra=("--name", "core-b") + (fault if wrong == "core-b" else ()),
                      c_extra=("--name", "core-c") if cores == 3 else None)
        arch = s.procs["archiver"]
        for c in s.cores[1:]:
            joined = int(re.findall(r"publishing from sequence (\d+)", c.text())[-1])
            if joined >= at:
                raise Fail("%s joined at record %d, past the faulted one: no second copy"
                           % (c.name, joined))
        held = ""
        if cores == 2:
            end1, risk1 = wait_halted(s, arch, at)
            if end1 != at or risk1 > at:
                raise Fail("halted with the journal at %s and risk at %s, not at record %d"
                           % (end1, risk1, at))
            check_halted_metrics(s, at)
            pick = core_source(next(c for c in s.cores if c.name == right))
            with open(s.dir + "/journal.decision", "w") as f:
                f.write("use %d %s\n" % (at, pick))
            arch.wait_for(r"the operator let the stream go on at record %d" % at, 10)
            held = ("halted exactly there (journal at %s, risk at %s for 1.5 s); the operator "
                    "chose %s's copy; " % (end1, risk1, right))
            s.verify_kw["expect_logs"]["archiver"] = r"DISPUTE at record %d: copy from" % at
        joined = [int(re.findall(r"publishing from sequence (\d+)", c.text())[-1])
                  for c in s.cores[1:]]
        agreeing = [n for n in names if n != wrong] if cores == 3 else [right]
        s.marker_check = lambda: check_quorum(s, at, agreeing, cores, max(joined))
        return "%s (active) writes record %d differently, %d cores, quorum; %s" % (
            wrong, at, cores, held)

    logs = {"monitor": "DIVERGENCE at record %d" % at}
    if cores == 2:
        # Risk halts there reading live, or reads across it from the archive, which holds the
        # operator's choice (a record whose quorum timed out is read from there too); its
        # state is then checked against the reference model either way.
        logs["risk"] = r"HALTED at record %d|catching up from the archiver" % at
    return one_session(args, idx, rnd, plan, verify_kw={
        "expect_divergence": False, "check_marker": True,
        "ignore_divergences": cores == 3, "expect_logs": logs},
        arbitration=("--arbitration", "quorum", "--quorum", "2"),
        archiver_args=("--cores", ",".join(names)), metrics=True)


def check_halted_metrics(s, at):
    """While the archiver is halted: node-exporter serves every program's metrics, and they
    say so: the archiver halted at `at`, the cores held by flow control, everything up."""
    s.exporter = NodeExporter(s.metrics_dir)
    time.sleep(0.5)  # two metrics periods
    m = s.exporter.scrape()
    v = NodeExporter.value
    for role in ("archiver", "risk", "fix", "monitor"):
        if v(m, "execlog_up", role=role) != 1:
            raise Fail("metrics: %s is not up" % role)
    if v(m, "execlog_halted", role="archiver") != 1 or \
            v(m, "execlog_archive_halted_at", role="archiver") != at:
        raise Fail("metrics: the archiver halted at %d, its metrics do not say so" % at)
    for c in s.cores:
        if v(m, "execlog_core_held", role="core", name=c.name) != 1:
            raise Fail("metrics: %s is held by flow control, its metrics say not" % c.name)
    s.metrics_halted = m


def check_final_metrics(s):
    """After the session: the programs' last metrics agree with the journal."""
    m = s.exporter.scrape()
    s.exporter.stop()
    v = NodeExporter.value
    end = journal_end(s)
    if v(m, "execlog_records_total", role="archiver") != end:
        raise Fail("metrics: the archiver's records_total %s, the journal holds %s"
                   % (v(m, "execlog_records_total", role="archiver"), end))
    for role in ("archiver", "risk", "fix"):
        if v(m, "execlog_next_sequence", role=role) != end or \
                v(m, "execlog_halted", role=role) != 0:
            raise Fail("metrics: %s ends at %s (halted %s), the journal at %s" % (
                role, v(m, "execlog_next_sequence", role=role),
                v(m, "execlog_halted", role=role), end))
    held_before = v(s.metrics_halted, "execlog_core_held_seconds_total", name="core-a")
    held_after = v(m, "execlog_core_held_seconds_total", name="core-a")
    if not held_after >= held_before > 0:
        raise Fail("metrics: core-a held %s s while halted, %s s in all" % (held_before,
                                                                          held_after))
    return "metrics agree (node-exporter: core-a held %.1f s)" % held_after


def check_quorum(s, at, right, cores, joined):
    """The marker file holds both copies; the journal holds the right core's. Every record the
    cores both sent was confirmed by a quorum: only those before the last core was heard went
    unconfirmed (`joined`, where it started, plus what the others sent while it started: at
    most 2,000 here; with one flow gate for both cores it was 43,642 of 47,738). Three cores:
    no halt, no dispute."""
    held = check_marker(s, at, None)
    # Two cores: the operator chose `right`. Three: the two agreeing cores' copies are the
    # same bytes, and either may complete the quorum first; only the wrong one must not win.
    if held not in right:
        raise Fail("the journal holds %s's copy of record %d, not %s" % (
            held, at, " or ".join("%s's" % r for r in right)))
    text = s.procs["archiver"].text()
    counts = re.findall(r"disputes (\d+), unconfirmed (\d+)", text)
    if not counts:
        raise Fail("the archiver printed no disputes/unconfirmed counts")
    disputes, unconfirmed = (int(x) for x in counts[-1])
    if unconfirmed > joined + 2000:
        raise Fail("the archiver delivered %d records unconfirmed; the last core joined at %d"
                   % (unconfirmed, joined))
    # Three cores: no halt, unless an agreeing core was more than the quorum timeout behind
    # (a loaded host); then its copy, when it comes, settles the dispute with no operator.
    late = cores == 3 and re.search(r"the quorum came for record %d: 2 cores" % at, text)
    if disputes != (1 if cores == 2 or late else 0):
        raise Fail("the archiver counted %d disputes with %d cores" % (disputes, cores))
    if cores == 3 and not late and re.search(r"HALTED|DISPUTE", text):
        raise Fail("three cores, two agreeing, yet the archiver halted")
    if cores == 2:
        s.metrics_line = check_final_metrics(s)
    return held


def case_divergence_quorum(args, idx, rnd):
    return quorum_case(args, idx, rnd, "core-a", 2)


def case_divergence_majority(args, idx, rnd):
    return quorum_case(args, idx, rnd, "core-a", 3)


def case_stale_epoch(args, idx, rnd):
    def plan(s, r):
        s.start_cores(a_extra=("--epoch", "2"), b_extra=("--epoch", "2"))
        stale = s.core("core-stale", "--epoch", "1", role="core_b").start()
        if stale.wait(20) != 1 or "is stale (refusing to publish it)" not in stale.text():
            raise Fail("a core of an older epoch did not refuse: %s" % stale.text())
        # A core of epoch 1 that does not listen first, resuming (its saved state) beyond
        # the live sequence: its records are newer by sequence, older by epoch.
        os.makedirs(s.dir + "/core-forced.state", exist_ok=True)
        with open(s.dir + "/core-forced.state/core.state", "w") as f:
            f.write("epoch 1\nnext 60000\n")
        forced = s.add("core-forced", "execlog-core", s.core_uri("core-forced"), "--seed", "5", "--rate",
                       str(s.rate), "--count", "200000", "--state", s.dir + "/core-forced.state",
                       "--epoch", "1", "--join-wait-ms", "0", "--linger-ms", "0", role="core_b").start()
        s.cores.append(forced)
        forced.wait_for("publishing from", 30)
        time.sleep(0.3)
        return "epoch 2 pair; an epoch-1 core refused; another forced to publish epoch 1"

    return one_session(args, idx, rnd, plan, verify_kw={
        "expect_logs": {"archiver": r"final: .*stale-epoch [1-9]"},
        "epoch": 2})


# loss_netns: each program on a host of its own (a network namespace with a veth on one
# bridge), 5% of the UDP datagrams each host receives dropped at random by iptables.
NETNS_HOSTS = {"core_a": "ca", "core_b": "cb", "archiver": "ar", "risk": "rk", "fix": "fx",
               "monitor": "mn"}


def netns_up(tag):
    """The hosts of loss_netns; returns {role: (namespace, address)}, or None (skip)."""
    def ip(*a):
        subprocess.run(["ip", *a], check=True, capture_output=True)
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        return None
    try:
        ip("netns", "add", tag + "-br")
    except (subprocess.CalledProcessError, OSError):
        return None
    ip("-n", tag + "-br", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
    ip("-n", tag + "-br", "link", "set", "br0", "up")
    hosts = {}
    for i, (role, h) in enumerate(NETNS_HOSTS.items()):
        ns, dev, addr = "%s-%s" % (tag, h), tag + h, "198.18.7.%d" % (i + 1)
        ip("netns", "add", ns)
        ip("link", "add", dev, "type", "veth", "peer", "name", "b" + dev)
        ip("link", "set", dev, "netns", ns)
        ip("link", "set", "b" + dev, "netns", tag + "-br")
        ip("-n", tag + "-br", "link", "set", "b" + dev, "master", "br0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "link", "set", dev, "up")
        ip("-n", ns, "addr", "add", addr + "/24", "dev", dev)
        ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", dev)
        subprocess.run(["ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-p", "udp", "-m",
                        "statistic", "--mode", "random", "--probability", "0.05", "-j", "DROP"],
                       check=True, capture_output=True)
        hosts[role] = (ns, addr)
    return hosts


def netns_down(tag):
    for h in list(NETNS_HOSTS.values()) + ["br"]:
        subprocess.run(["ip", "netns", "del", "%s-%s" % (tag, h)], capture_output=True)


def case_loss_netns(args, idx, rnd):
    tag = "xl%d" % (os.getpid() % 100000)
    try:
        hosts = netns_up(tag)
        if hosts is None:
            print("SKIP: needs root, network namespaces, a bridge and iptables")
            netns_down(tag)
            sys.exit(77)
        passed = sum(run_trial(args, idx, t, rnd, plan_loss_netns, ns=hosts)
                     for t in range(args.trials))
        # The loss was real: every host's rule dropped datagrams.
        drops = {}
        for role, (ns, _) in hosts.items():
            out = subprocess.run(["ip", "netns", "exec", ns, "iptables", "-L", "INPUT", "-v", "-x",
                                  "-n"], capture_output=True, text=True).stdout
            m = re.search(r"^\s*(\d+)\s+\d+\s+DROP", out, re.M)
            drops[role] = int(m.group(1)) if m else 0
        print("datagrams dropped by iptables: " + ", ".join("%s %d" % kv for kv in drops.items()))
        if min(drops.values()) == 0:
            print("FAIL: a host dropped nothing: the loss was not applied")
            passed = 0
    finally:
        netns_down(tag)
    print("execlog_test %s: %d of %d trials passed" % (args.case, passed, args.trials))
    return passed == args.trials


def plan_loss_netns(s, rnd):
    s.start_cores()
    t = rnd.uniform(0.8, 2.0)
    sleep_until(s, t)
    s.kill_active_core(0.2)
    return "six hosts, 5%% of each host's UDP input dropped (iptables), killed the active " \
           "core at %.2f s" % t


def private_loopback():
    """Re-runs this script in a network namespace of its own (unshare -n) whose loopback also
    has 127.0.0.2, the second core's address: no other test's traffic, no change to the host.
    Returns the exit code of that run, or None when already inside one."""
    if os.environ.get("EXECLOG_PRIVATE_NET") == "1":
        return None
    setup = "ip link set lo up && ip addr add 127.0.0.2/8 dev lo && exec \"$0\" \"$@\""
    env = dict(os.environ, EXECLOG_PRIVATE_NET="1")
    try:
        # Not root: a user namespace too (-r), as root of which the user may set up lo.
        unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
        return subprocess.run(unshare + ["sh", "-c", setup, sys.executable]
                              + sys.argv, env=env).returncode
    except OSError as e:
        print("SKIP: cannot make a network namespace (%s)" % e)
        return 77


def main():
    # Over verbs the RDMA devices live in this network namespace: no private loopback.
    if (os.environ.get("EXECLOG_PRIVATE_NET") != "1" and sys.argv[1:2] != ["loss_netns"]
            and "--verbs" not in sys.argv):
        rc = private_loopback()
        if rc is not None:
            return rc
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=CASES)
    ap.add_argument("bindir")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--verbs", default=None, metavar="DEV_A,DEV_B",
                    help="run over verbs:// (RDMA UD): cores, archiver and risk on DEV_A's port 1,"
                         " core-b, FIX and monitor on DEV_B's (the Soft-RoCE VM's rxe0,rxe1)")
    ap.add_argument("--rate", type=int, default=RATE,
                    help="orders per second (the stream keeps its duration: fewer orders)")
    ap.add_argument("--stream-scale", type=float, default=1.0,
                    help="the stream lasts this many times longer (more orders)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    print("execlog_test %s: %d trials, seed %d (rerun: %s %s %s --trials %d --seed %d)"
          % (args.case, args.trials, seed, sys.argv[0], args.case, args.bindir, args.trials, seed),
          flush=True)
    rnd = random.Random(seed)
    idx = CASES.index(args.case)
    special = globals().get("case_" + args.case)
    if special:
        return 0 if special(args, idx, rnd) else 1
    plan = {"consistency": plan_none, "kill_core": plan_kill_core,
            "kill_consumers": plan_kill_consumers, "kill_archiver": plan_kill_consumers,
            "sigstop": plan_sigstop, "loss": plan_loss}[args.case]
    # The archiver's restart is its own case: it sometimes journals a loss (docs/EXECLOG.md,
    # "Known problems"), so it runs under long only.
    Session.victims = ["archiver"] if args.case == "kill_archiver" else ["risk", "fix", "monitor"]
    kw = {}
    if args.case == "loss":
        kw["consumer_keys"] = "&loss=0.05&seed=%d" % rnd.randrange(1, 10**6)
    passed = sum(run_trial(args, idx, t, rnd, plan, **kw) for t in range(args.trials))
    print("execlog_test %s: %d of %d trials passed (seed %d)" % (args.case, passed, args.trials, seed))
    return 0 if passed == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
