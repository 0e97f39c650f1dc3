# SPDX-License-Identifier: Apache-2.0
"""Independent checks of the ExecLog example (docs/EXECLOG.md), for the tests and demo.sh.

Nothing here shares code with the C++ programs: the risk reference model and the FIX mapping
are written again from the documented record layout, so a mistake in either side shows up.
  read_journal(dump_bin, journal)  -> entries from `execlog-dump`
  reference_risk_state(entries)    -> the text execlog-risk's --state file must hold
  check_fix_stores(dir, entries, accounts) -> every session's store (QuickFIX FileStore) holds
                                      its records' messages once, in order, field by field
                                      (BodyLength, CheckSum, MsgSeqNum, CompIDs verified)
"""
import datetime
import os
import re
import subprocess

FIELDS = ("type side ord_type tif instrument reason time order_id request_id orig_request_id "
          "account order_qty price last_qty leaves cum maker_account maker_order_id "
          "maker_request_id maker_leaves maker_cum notional maker_notional").split()
TRADE, SESSION_END = 3, 7


class Entry:
    """One journal entry: kind 'R' (record, with .rec fields), 'U' (unknown record), 'L', 'E'."""

    def __init__(self, line):
        w = line.split()
        self.kind = w[0]
        self.seq = int(w[1])
        self.rec = None
        self.typebyte = None
        self.size = None
        if self.kind == 'R':
            self.epoch = int(w[2])
            self.rec = dict(zip(FIELDS, (int(x) for x in w[3:])))
            assert len(w) == 3 + len(FIELDS), line
        elif self.kind == 'U':
            self.epoch, self.typebyte, self.size = int(w[2]), int(w[3]), int(w[4])
        elif self.kind == 'L':
            self.count = int(w[2])
        elif self.kind == 'E':
            self.epoch = int(w[2])


def read_journal(dump_bin, journal):
    out = subprocess.run([dump_bin, journal], check=True, capture_output=True, text=True)
    return [Entry(line) for line in out.stdout.splitlines() if line]


def contiguous(entries):
    """(first, end, problems): the archive must be gap-free, duplicate-free, loss-free."""
    problems = []
    if not entries:
        return 0, 0, ["empty journal"]
    expect = entries[0].seq
    for e in entries:
        if e.kind == 'L':
            problems.append("loss entry at %d (%d records)" % (e.seq, e.count))
        if e.seq != expect and e.kind != 'E':
            problems.append("break at %d (expected %d)" % (e.seq, expect))
        expect = e.seq + (e.count if e.kind == 'L' else 0 if e.kind == 'E' else 1)
    return entries[0].seq, expect, problems


def reference_risk_state(entries, divergences=0):
    """execlog-risk's state after all of `entries`, computed from the trades alone."""
    pos = {}
    last = {}
    types = [0] * 11
    lost = 0
    nxt = 0
    for e in entries:
        if e.kind == 'L':
            lost += e.count
            nxt = e.seq + e.count
            continue
        if e.kind == 'E':
            nxt = e.seq
            continue
        nxt = e.seq + 1
        if e.kind == 'U':
            types[0 if e.size != 112 else 10] += 1
            continue
        r = e.rec
        types[r['type']] += 1
        if r['type'] != TRADE:
            continue
        q, px, instr = r['last_qty'], r['price'], r['instrument']
        buyer, seller = ((r['account'], r['maker_account']) if r['side'] == 1
                         else (r['maker_account'], r['account']))
        for acct, sign in ((buyer, 1), (seller, -1)):
            p = pos.setdefault((acct, instr), [0, 0, 0, 0])
            p[0] += sign * q
            p[1] -= sign * q * px
            p[2 if sign > 0 else 3] += q
        last[instr] = px
    lines = ["execlog-risk-state 2", "next %d" % nxt, "lost %d" % lost,
             "divergences %d" % divergences, "types " + " ".join(str(t) for t in types)]
    lines += ["last %d %d" % (i, last[i]) for i in sorted(last)]
    lines += ["pos %d %d %d %d %d %d" % (a, i, *pos[(a, i)]) for (a, i) in sorted(pos)]
    return "\n".join(lines + ["end"]) + "\n"


def _price(t):
    return "%s%d.%02d" % ("-" if t < 0 else "", abs(t) // 100, abs(t) % 100)


def _avg(notional, cum):
    """notional / cum ticks in units to 4 decimals, rounded half away from zero (exact:
    Python's integers)."""
    if cum == 0:
        return "0"
    a = (2 * abs(notional) * 100 + cum) // (2 * cum)
    return "%s%d.%04d" % ("-" if notional < 0 else "", a // 10000, a % 10000)


_SECONDS = {}


def _time(ns):
    s = ns // 10**9
    text = _SECONDS.get(s)
    if text is None:
        t = datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=s)
        text = _SECONDS[s] = t.strftime("%Y%m%d-%H:%M:%S")
    return text + ".%03d" % (ns // 10**6 % 1000)


REASONS = {0: "none", 1: "unknown instrument", 2: "bad quantity", 3: "bad price",
           4: "unknown order", 5: "not the order's account"}
# FIX 4.4 OrdRejReason(103) and CxlRejReason(102) of the record's reason (docs/EXECLOG.md).
ORD_REJ = {1: 1, 2: 13, 3: 99, 4: 6, 5: 99, 0: 99}
CXL_REJ = {4: 1, 5: 2, 2: 99, 3: 99, 1: 99, 0: 99}
# ExecType, OrdStatus by record type; None: OrdStatus from the order's state.
EXEC = {1: ('0', '0'), 2: ('8', '8'), 4: ('4', '4'), 5: ('5', None), 6: ('C', 'C')}
CANCEL_REJECTED, REPLACE_REJECTED = 8, 9


def _text(r):
    if r['type'] == 2 and r['reason'] == 4:
        return "duplicate order id"
    return REASONS[r['reason']]


def expected_messages(seq, r):
    """Record `seq`'s application messages: [(account, MsgType, [(tag, value), ...])], the
    body only (no 8, 9, 10, 34, 35, 49, 52, 56)."""
    t = r['type']
    if t == SESSION_END:
        return []
    if t in (CANCEL_REJECTED, REPLACE_REJECTED):
        unknown = r['reason'] == 4
        f = [('37', 'NONE' if unknown else str(r['order_id'])), ('11', str(r['request_id'])),
             ('41', str(r['orig_request_id'])),
             ('39', '8' if unknown else ('1' if r['cum'] else '0')), ('1', str(r['account'])),
             ('60', _time(r['time'])), ('434', '1' if t == CANCEL_REJECTED else '2'),
             ('102', str(CXL_REJ[r['reason']])), ('58', _text(r))]
        return [(r['account'], '9', f)]
    if t == TRADE:
        taker = dict(order=r['order_id'], req=r['request_id'], acct=r['account'], side=r['side'],
                     qty=r['order_qty'], ordtype=r['ord_type'], price=0, tif=r['tif'],
                     leaves=r['leaves'], cum=r['cum'], notional=r['notional'], exec='F',
                     status='2' if r['leaves'] == 0 else '1')
        maker = dict(order=r['maker_order_id'], req=r['maker_request_id'], acct=r['maker_account'],
                     side=3 - r['side'], qty=r['maker_leaves'] + r['maker_cum'], ordtype=2,
                     price=0, tif=0, leaves=r['maker_leaves'], cum=r['maker_cum'],
                     notional=r['maker_notional'], exec='F',
                     status='2' if r['maker_leaves'] == 0 else '1')
        legs = [taker, maker]
    else:
        ex, st = EXEC[t]
        rejected = t == 2
        legs = [dict(order=r['order_id'], req=r['request_id'], acct=r['account'], side=r['side'],
                     qty=r['order_qty'], ordtype=r['ord_type'],
                     price=r['price'] if r['ord_type'] == 2 else 0, tif=r['tif'],
                     leaves=0 if rejected else r['leaves'], cum=0 if rejected else r['cum'],
                     notional=0 if rejected else r['notional'], exec=ex,
                     status=st if st else ('1' if r['cum'] else '0'))]
    out = []
    for n, l in enumerate(legs, 1):
        f = [('37', str(l['order'])), ('11', str(l['req']))]
        if t in (4, 5):
            f.append(('41', str(r['orig_request_id'])))
        f += [('17', '%d-%d' % (seq, n)), ('150', l['exec']), ('39', l['status']),
              ('1', str(l['acct'])), ('55', 'S%d' % r['instrument']), ('54', str(l['side'])),
              ('38', str(l['qty'])), ('40', str(l['ordtype']))]
        if l['price'] > 0:
            f.append(('44', _price(l['price'])))
        f.append(('59', str(l['tif'])))
        if l['exec'] == 'F':
            f += [('32', str(r['last_qty'])), ('31', _price(r['price']))]
        f += [('151', str(l['leaves'])), ('14', str(l['cum'])), ('6', _avg(l['notional'], l['cum']))]
        if l['exec'] == '8':
            f += [('103', str(ORD_REJ[r['reason']])), ('58', _text(r))]
        f.append(('60', _time(r['time'])))
        out.append((l['acct'], '8', f))
    return out


SOH = b"\x01"
HEADER_TAGS = {"8", "9", "35", "34", "49", "52", "56", "10"}


def parse_message(raw):
    """[(tag, value)] of one SOH-delimited message; raises AssertionError when its
    BodyLength(9) or CheckSum(10) is wrong."""
    head = b"8=FIX.4.4" + SOH + b"9="
    if not raw.startswith(head):
        raise AssertionError("no FIX.4.4 header")
    le = raw.index(SOH, len(head))
    body_start = le + 1
    ck = body_start + int(raw[len(head):le])
    if raw[ck:ck + 3] != b"10=" or raw[ck + 6:ck + 7] != SOH or len(raw) != ck + 7:
        raise AssertionError("BodyLength wrong")
    if int(raw[ck + 3:ck + 6]) != sum(raw[:ck]) % 256:
        raise AssertionError("CheckSum wrong")
    return [(k.decode(), v.decode()) for k, v in
            (x.split(b"=", 1) for x in raw[:ck].split(SOH)[:-1])]


def read_store(store_dir, sender, account):
    """The messages a QuickFIX FileStore holds for session sender->A<account>: {MsgSeqNum:
    bytes}, from its header file's (seq, offset, size) entries (the last entry of a sequence
    number wins, as QuickFIX reads it)."""
    base = os.path.join(store_dir, "FIX.4.4-%s-A%d" % (sender, account))
    try:
        with open(base + ".header") as f:
            header = f.read().split()
        with open(base + ".body", "rb") as f:
            body = f.read()
    except FileNotFoundError:
        return {}
    msgs = {}
    for entry in header:
        seq, off, size = (int(x) for x in entry.split(","))
        msgs[seq] = body[off:off + size]
    return msgs


TIME_RE = re.compile(r"^\d{8}-\d\d:\d\d:\d\d\.\d{3}$")


def expected_by_account(entries):
    want = {}
    for e in entries:
        if e.kind == 'R':
            for acct, mtype, fields in expected_messages(e.seq, e.rec):
                want.setdefault(acct, []).append((mtype, fields))
    return want


def check_session(acct, got, want, sender='PRIZMA'):
    """got: [(MsgSeqNum, [(tag, value)])] of one session's application messages in sequence
    order; want: [(MsgType, body fields)]. Problems, empty when each is there once, in order,
    field for field."""
    problems = []
    if len(got) != len(want):
        problems.append("A%d: %d messages, expected %d" % (acct, len(got), len(want)))
    last = 0
    for i, ((seq, fields), (mtype, body)) in enumerate(zip(got, want)):
        d = dict(fields)
        if len(d) != len(fields):
            problems.append("A%d message %d: a tag twice" % (acct, seq))
        if seq <= last:
            problems.append("A%d: MsgSeqNum %d after %d" % (acct, seq, last))
        last = seq
        if (d.get("35"), d.get("49"), d.get("56"), d.get("34")) != (mtype, sender, "A%d" % acct, str(seq)):
            problems.append("A%d message %d: header %s" % (acct, seq, [(k, v) for k, v in fields
                                                                        if k in HEADER_TAGS]))
        if not TIME_RE.match(d.get("52", "")):
            problems.append("A%d message %d: SendingTime %r" % (acct, seq, d.get("52")))
        gb = {k: v for k, v in fields if k not in HEADER_TAGS and k not in ("43", "122")}
        if gb != dict(body):
            diff = sorted(set(gb.items()) ^ set(body))[:4]
            problems.append("A%d message %d (#%d) differs from its record: %s" % (acct, seq, i + 1, diff))
        if len(problems) > 5:
            break
    return problems


def check_fix_stores(store_dir, entries, accounts, sender='PRIZMA'):
    """Every account's session store holds exactly its records' messages, once, in order.
    Returns (problems, messages)."""
    want = expected_by_account(entries)
    problems = []
    total = 0
    for acct in accounts:
        stored = read_store(store_dir, sender, acct)
        got = []
        for seq in sorted(stored):
            try:
                fields = parse_message(stored[seq])
            except AssertionError as e:
                problems.append("A%d message %d: %s" % (acct, seq, e))
                continue
            if dict(fields).get("35") in ("8", "9"):
                got.append((seq, fields))
        total += len(got)
        problems += check_session(acct, got, want.get(acct, []), sender)
        if len(problems) > 5:
            break
    missing = sorted(set(want) - set(accounts))
    if missing:
        problems.append("accounts without a session: %s" % missing[:5])
    return problems, total


def read_client_log(path):
    """execlog-fix-client's --out: {account: [(MsgSeqNum, PossDup, [(tag, value)])]}."""
    got = {}
    with open(path, "rb") as f:
        for line in f:
            acct, seq, dup, raw = line.rstrip(b"\n").split(b" ", 3)
            fields = parse_message(raw.replace(b"|", SOH))
            got.setdefault(int(acct[1:]), []).append((int(seq), dup == b"Y", fields))
    return got


def check_client_logs(paths_accounts, entries):
    """Each client's sessions received their records' messages once each, in order (resent
    ones included, PossDupFlag or not). Returns (problems, messages, resent)."""
    want = expected_by_account(entries)
    problems = []
    total = resent = 0
    for path, accounts in paths_accounts:
        got = read_client_log(path) if os.path.exists(path) else {}
        for acct in accounts:
            msgs = got.get(acct, [])
            total += len(msgs)
            resent += sum(1 for m in msgs if m[1])
            problems += check_session(acct, [(q, f) for q, _, f in msgs], want.get(acct, []))
    return problems, total, resent


def client_counts(path):
    """{account: messages} so far in a client's --out (a line being written is not counted)."""
    counts = {}
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.endswith(b"\n"):
                    a = int(line.split(b" ", 1)[0][1:])
                    counts[a] = counts.get(a, 0) + 1
    except FileNotFoundError:
        pass
    return counts
