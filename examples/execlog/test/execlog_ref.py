# SPDX-License-Identifier: Apache-2.0
"""Independent checks of the ExecLog example (docs/EXECLOG.md), for the tests and demo.sh.

Nothing here shares code with the C++ programs: the risk reference model and the FIX mapping
are written again from the documented record layout, so a mistake in either side shows up.
  read_journal(dump_bin, journal)  -> entries from `execlog-dump`
  reference_risk_state(entries)    -> the text execlog-risk's --state file must hold
  check_fix(path, entries, delim)  -> every message verified (BodyLength, CheckSum) and equal,
                                      field by field and in order, to the records' expected ones
"""
import datetime
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
    types = [0] * 9
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
            types[0 if e.size != 112 else 8] += 1
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
    lines = ["execlog-risk-state 1", "next %d" % nxt, "lost %d" % lost,
             "divergences %d" % divergences, "types " + " ".join(str(t) for t in types)]
    lines += ["last %d %d" % (i, last[i]) for i in sorted(last)]
    lines += ["pos %d %d %d %d %d %d" % (a, i, *pos[(a, i)]) for (a, i) in sorted(pos)]
    return "\n".join(lines + ["end"]) + "\n"


def _price(t):
    return "%s%d.%02d" % ("-" if t < 0 else "", abs(t) // 100, abs(t) % 100)


def _avg(notional, cum):
    if cum == 0:
        return "0"
    a = notional * 100 // cum
    return "%d.%04d" % (a // 10000, a % 10000)


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
EXEC = {1: ('0', '0'), 2: ('8', '8'), 4: ('4', '4'), 5: ('5', '5'), 6: ('C', 'C')}


def expected_messages(seq, r):
    """The ExecutionReports of record `seq` as lists of (tag, value), without 8/9/10/34."""
    if r['type'] == SESSION_END:
        return []
    legs = []
    if r['type'] == TRADE:
        taker = dict(order=r['order_id'], req=r['request_id'], orig=r['orig_request_id'],
                     acct=r['account'], side=r['side'], qty=r['order_qty'], ordtype=r['ord_type'],
                     price=0, tif=r['tif'], leaves=r['leaves'], cum=r['cum'],
                     notional=r['notional'], exec='F', status='2' if r['leaves'] == 0 else '1')
        maker = dict(order=r['maker_order_id'], req=r['maker_request_id'], orig=r['orig_request_id'],
                     acct=r['maker_account'], side=3 - r['side'],
                     qty=r['maker_leaves'] + r['maker_cum'], ordtype=2, price=0, tif=0,
                     leaves=r['maker_leaves'], cum=r['maker_cum'], notional=r['maker_notional'],
                     exec='F', status='2' if r['maker_leaves'] == 0 else '1')
        legs = [taker, maker]
    else:
        ex, st = EXEC[r['type']]
        rejected = r['type'] == 2
        legs = [dict(order=r['order_id'], req=r['request_id'], orig=r['orig_request_id'],
                     acct=r['account'], side=r['side'], qty=r['order_qty'], ordtype=r['ord_type'],
                     price=r['price'] if r['ord_type'] == 2 else 0, tif=r['tif'],
                     leaves=0 if rejected else r['leaves'], cum=0 if rejected else r['cum'],
                     notional=r['notional'], exec=ex, status=st)]
    out = []
    for n, l in enumerate(legs, 1):
        t = _time(r['time'])
        f = [('35', '8'), ('49', 'PRIZMA'), ('56', 'A%d' % l['acct']), ('52', t),
             ('37', str(l['order'])), ('11', str(l['req']))]
        if l['orig']:
            f.append(('41', str(l['orig'])))
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
            f += [('103', str(r['reason'])), ('58', REASONS[r['reason']])]
        f.append(('60', t))
        out.append(f)
    return out


def parse_fix(data, delim):
    """Splits a renderer's output into messages; checks BodyLength(9) and CheckSum(10)."""
    msgs = []
    at = 0
    d = delim.encode()
    while at < len(data):
        head = b"8=FIX.4.4" + d + b"9="
        if data[at:at + len(head)] != head:
            raise AssertionError("no message header at byte %d" % at)
        le = data.index(d, at + len(head))
        body_len = int(data[at + len(head):le])
        body_start = le + 1
        ck = body_start + body_len
        if data[ck:ck + 3] != b"10=" or data[ck + 6:ck + 7] != d:
            raise AssertionError("BodyLength wrong at byte %d" % at)
        want = sum(data[at:ck]) % 256
        if int(data[ck + 3:ck + 6]) != want:
            raise AssertionError("CheckSum wrong at byte %d" % at)
        fields = [tuple(x.split(b"=", 1)) for x in data[body_start:ck].split(d)[:-1]]
        msgs.append([(k.decode(), v.decode()) for k, v in fields])
        at = ck + 7
    return msgs


def expected_fix(entries, delim='|'):
    """The whole output a renderer must have written for `entries`: (bytes, messages)."""
    out = []
    n = 0
    for e in entries:
        if e.kind != 'R':
            continue
        for fields in expected_messages(e.seq, e.rec):
            n += 1
            fields.insert(3, ('34', str(n)))
            body = "".join("%s=%s%s" % (k, v, delim) for k, v in fields).encode()
            head = b"8=FIX.4.4%s9=%d%s" % (delim.encode(), len(body), delim.encode())
            out.append(head + body)
            out.append(b"10=%03d%s" % ((sum(head) + sum(body)) % 256, delim.encode()))
    return b"".join(out), n


def check_fix(path, entries, delim='|'):
    """Returns (problems, messages): problems empty when the file is exactly the records'
    reports, once each, in order (BodyLength and CheckSum as computed here)."""
    with open(path, 'rb') as f:
        data = f.read()
    want, n = expected_fix(entries, delim)
    if data == want:
        return [], n
    return check_fix_detail(data, entries, delim), n


def check_fix_detail(data, entries, delim):
    """Why the output differs: message by message."""
    msgs = parse_fix(data, delim)
    want = []
    for e in entries:
        if e.kind == 'R':
            want += expected_messages(e.seq, e.rec)
    problems = []
    if len(msgs) != len(want):
        problems.append("%d messages, expected %d" % (len(msgs), len(want)))
    for i, (m, w) in enumerate(zip(msgs, want)):
        seqnum = [v for k, v in m if k == '34']
        body = [(k, v) for k, v in m if k != '34']
        if seqnum != [str(i + 1)]:
            problems.append("message %d: MsgSeqNum %s" % (i + 1, seqnum))
        if body != w:
            diff = [(a, b) for a, b in zip(body, w) if a != b][:3]
            problems.append("message %d differs from its record: %s (lengths %d/%d)"
                            % (i + 1, diff, len(body), len(w)))
        if len(problems) > 5:
            break
    return problems
