/* SPDX-License-Identifier: Apache-2.0 */
/* pgm_perf: throughput and round-trip benchmark peer on OpenPGM (Debian libpgm 5.3.128), the
 * baseline prizma is compared against.
 *
 *   pgm_perf send NETWORK PORT COUNT SIZE [RATE_MSGS_PER_S]
 *   pgm_perf recv NETWORK PORT COUNT TIMEOUT_S [spin|block]
 *   pgm_perf pong NET_A PORT_A NET_B PORT_B COUNT [spin|block]
 *   pgm_perf ping NET_A PORT_A NET_B PORT_B COUNT SIZE WARMUP [spin|block]
 *
 * NETWORK is OpenPGM's "IFADDR;GROUP", e.g. "127.0.0.1;239.192.88.1" (never "lo;..." or ";GROUP":
 * docs/PROTOCOL.md §8.7). PORT is the UDP encapsulation port (unicast and multicast). Results are one
 * JSON line on stdout; OpenPGM's own log goes to stderr.
 * send  COUNT messages of SIZE bytes, message i starting with i (64-bit LE); unpaced unless RATE;
 *       lingers 1 s afterwards to answer NAKs. Start the receivers first (no late join in PGM).
 * recv  until COUNT distinct counters or TIMEOUT_S; rate from first to last message; loss_events
 *       counts unrecoverable-loss resets. Exit 0 only if all arrived. "spin" busy-polls
 *       pgm_recv (as the raw UDP receiver does); "block" (default) waits in poll().
 * pong  echoes each message from channel A unchanged onto channel B; exits 0 after COUNT echoes
 *       of measured messages (ping's WARMUP + COUNT; probes do not count; 0 = no limit) or on
 *       SIGINT/SIGTERM. Waits with poll() unless "spin".
 * ping  probes channel A every 10 ms until pong answers (10 s, else exit 1), then WARMUP + COUNT
 *       closed-loop round trips of SIZE >= 16 bytes (seq LE, CLOCK_MONOTONIC send ns LE) and prints
 *       RTT percentiles of the last COUNT. "spin" busy-polls pgm_recv; "block" (default) polls the
 *       socket's fds with OpenPGM's timer (PGM_TIME_REMAIN/PGM_RATE_REMAIN) as the timeout.
 * Exit codes: 0 ok, 1 incomplete, 2 usage, 3 OpenPGM error. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <linux/filter.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <pgm/pgm.h>

#define PROBE_FLAG (UINT64_C(1) << 63) /* set in the seq of ping's handshake probes */
#define MAX_SQNS 1000000
#define BUF_BYTES 65536
#define MAX_SINGLE 1444 /* largest unfragmented message at MTU 1496 (1448 at 1500) */

static atomic_int g_stop; /* SIGINT/SIGTERM, or the end of a run for service threads */
/* OpenPGM's checksum-copy faults on some alignments (docs/PROTOCOL.md §8.2): an unfragmented message
 * is sent from a 16-aligned buffer, a fragmented one with MTU 1496 from a buffer at 4 mod 16. */
static _Alignas(16) unsigned char g_tx[BUF_BYTES + 16], g_rx[BUF_BYTES];

/* One PGM socket, what to poll for it (the UDP receive socket plus a notifier pipe), and for a
 * sender the service thread. */
typedef struct {
    pgm_sock_t* sock;
    struct pollfd fds[2];
    int nfds, sender, woke; /* woke: the last wait ended with input rather than a timeout */
    uint64_t resets;
    pthread_t service;
} chan_t;

static void die(const char* what, pgm_error_t* err) {
    fprintf(stderr, "pgm_perf: %s: %s\n", what, err != NULL ? err->message : "failed");
    exit(3);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put_le64(unsigned char* p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_le64(const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static void set_int(pgm_sock_t* s, int level, int opt, int value) {
    pgm_setsockopt(s, level, opt, &value, sizeof value);
}

/* Same-host quirks (docs/PROTOCOL.md §8.5, §8.9), fixed on a source's UDP receive socket:
 * - it shares 0.0.0.0:PORT with local receivers through SO_REUSEPORT, so the kernel hashes unicast
 *   NAKs/SPMRs to any of them; a reuseport program picks the source (index = bind order);
 * - it hears its own multicast, which a send-only socket discards anyway; a socket filter drops all
 *   downstream types in the kernel, so NAKs never queue behind them and input means NAK/SPMR. */
static void tune_source_fd(pgm_sock_t* sock, int port) {
    int fd = -1;
    socklen_t len = sizeof fd;
    if (!pgm_getsockopt(sock, IPPROTO_PGM, PGM_RECV_SOCK, &fd, &len) || fd < 0) return;
    char line[256];
    unsigned bound = 0, addr, lp; /* sockets on 0.0.0.0:PORT; ours was bound last */
    FILE* f = fopen("/proc/net/udp", "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "%*d: %x:%x", &addr, &lp) == 2 && addr == 0) bound += lp == (unsigned)port;
    }
    if (f != NULL) fclose(f);
    struct sock_filter pick[] = {BPF_STMT(BPF_RET | BPF_K, bound - 1)};
    struct sock_fprog pick_prog = {1, pick};
    if (bound == 0 || setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &pick_prog,
                                 sizeof pick_prog) != 0) {
        fprintf(stderr, "pgm_perf: cannot pin NAKs to the source (port %d)\n", port);
    }
    struct sock_filter drop[] = {
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 8 + 4),      /* UDP header, then the PGM type byte */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x00, 4, 0), /* SPM */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x04, 3, 0), /* ODATA */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x05, 2, 0), /* RDATA */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0a, 1, 0), /* NCF */
        BPF_STMT(BPF_RET | BPF_K, 0xffffffffu),
        BPF_STMT(BPF_RET | BPF_K, 0),
    };
    struct sock_fprog drop_prog = {7, drop};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &drop_prog, sizeof drop_prog) != 0) {
        perror("pgm_perf: SO_ATTACH_FILTER");
    }
}

/* One non-blocking pgm_recv. Returns 1 with a message; 0 without one, after waiting (unless spin)
 * for input or OpenPGM's next timer, at most cap_ms; -1 if the socket failed or closed. */
static int recv_one(chan_t* c, void* buf, size_t* len, int spin, int cap_ms) {
    pgm_error_t* err = NULL;
    const int st = pgm_recv(c->sock, buf, BUF_BYTES, MSG_DONTWAIT, len, &err);
    if (err != NULL) pgm_error_free(err);
    if (st == PGM_IO_STATUS_NORMAL) return 1;
    if (st == PGM_IO_STATUS_ERROR || st == PGM_IO_STATUS_EOF) return -1;
    c->resets += st == PGM_IO_STATUS_RESET; /* unrecoverable loss: count it and carry on */
    if (spin || st == PGM_IO_STATUS_RESET) return 0;
    int ms = cap_ms;
    struct timeval tv;
    socklen_t tl = sizeof tv;
    const int opt = st == PGM_IO_STATUS_TIMER_PENDING ? PGM_TIME_REMAIN : PGM_RATE_REMAIN;
    if (st != PGM_IO_STATUS_WOULD_BLOCK && pgm_getsockopt(c->sock, IPPROTO_PGM, opt, &tv, &tl)) {
        const long t = (long)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000; /* no 0-ms spins */
        if (t < ms) ms = (int)t;
    }
    c->woke = poll(c->fds, (nfds_t)c->nfds, ms) > 0;
    return 0;
}

/* A source answers NAKs and sends SPMs only inside pgm_recv (docs/PROTOCOL.md §8.8). A non-blocking call
 * sends at most ONE queued RDATA, and nothing signals the rest (the repair fd fires only when rate
 * limited), so after any upstream input keep calling without waiting for 2 ms. */
static void* service_thread(void* arg) {
    chan_t* c = arg;
    static _Thread_local unsigned char buf[BUF_BYTES];
    size_t len;
    uint64_t hot_until = 0;
    while (!atomic_load(&g_stop)) {
        c->woke = 0;
        if (recv_one(c, buf, &len, now_ns() < hot_until, 10) < 0) break;
        if (c->woke) hot_until = now_ns() + 2000000u;
    }
    return NULL;
}

/* Opens a send-only socket (sqns = TXW) or a receive-only one (sqns = RXW) on NETWORK and PORT. */
static void open_chan(chan_t* c, const char* network, int port, int sender, int mtu, int sqns) {
    pgm_error_t* err = NULL;
    struct pgm_addrinfo_t* res = NULL;
    memset(c, 0, sizeof *c);
    c->sender = sender;
    if (!pgm_getaddrinfo(network, NULL, &res, &err)) die("pgm_getaddrinfo", err);
    if (!pgm_socket(&c->sock, AF_INET, SOCK_SEQPACKET, IPPROTO_UDP, &err)) die("pgm_socket", err);
    pgm_sock_t* s = c->sock;
    set_int(s, IPPROTO_PGM, PGM_UDP_ENCAP_UCAST_PORT, port);
    set_int(s, IPPROTO_PGM, PGM_UDP_ENCAP_MCAST_PORT, port);
    set_int(s, IPPROTO_PGM, PGM_MTU, mtu);
    set_int(s, IPPROTO_PGM, PGM_NOBLOCK, 1);
    if (sender) {
        /* LAN heartbeats: a receiver sees a lost tail packet ~10 ms after the last data. */
        const int heartbeat[] = {pgm_msecs(10),  pgm_msecs(10),  pgm_msecs(25),
                                 pgm_msecs(50),  pgm_msecs(100), pgm_msecs(250),
                                 pgm_msecs(500), pgm_secs(1),    pgm_secs(2)};
        set_int(s, IPPROTO_PGM, PGM_SEND_ONLY, 1);
        set_int(s, IPPROTO_PGM, PGM_TXW_SQNS, sqns); /* no PGM_TXW_MAX_RTE: no rate limit */
        set_int(s, IPPROTO_PGM, PGM_AMBIENT_SPM, pgm_secs(2));
        pgm_setsockopt(s, IPPROTO_PGM, PGM_HEARTBEAT_SPM, heartbeat, sizeof heartbeat);
        set_int(s, SOL_SOCKET, SO_SNDBUF, 4 << 20);
    } else {
        set_int(s, IPPROTO_PGM, PGM_RECV_ONLY, 1);
        set_int(s, IPPROTO_PGM, PGM_PASSIVE, 0);
        set_int(s, IPPROTO_PGM, PGM_ABORT_ON_RESET, 0); /* report a loss once, then go on */
        set_int(s, IPPROTO_PGM, PGM_RXW_SQNS, sqns);
        set_int(s, IPPROTO_PGM, PGM_PEER_EXPIRY, pgm_secs(60));
        set_int(s, IPPROTO_PGM, PGM_SPMR_EXPIRY, pgm_msecs(25));
        set_int(s, IPPROTO_PGM, PGM_NAK_BO_IVL, pgm_msecs(20));
        set_int(s, IPPROTO_PGM, PGM_NAK_RPT_IVL, pgm_msecs(100));
        set_int(s, IPPROTO_PGM, PGM_NAK_RDATA_IVL, pgm_msecs(100));
        set_int(s, IPPROTO_PGM, PGM_NAK_DATA_RETRIES, 50);
        set_int(s, IPPROTO_PGM, PGM_NAK_NCF_RETRIES, 50);
        set_int(s, SOL_SOCKET, SO_RCVBUF, 4 << 20);
    }
    struct pgm_sockaddr_t addr;
    memset(&addr, 0, sizeof addr);
    addr.sa_port = 7500; /* PGM data-destination port; channels differ by UDP port instead */
    addr.sa_addr.sport = 0;
    if (!pgm_gsi_create_from_hostname(&addr.sa_addr.gsi, &err)) die("pgm_gsi_create", err);
    struct pgm_interface_req_t ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ir_interface = res->ai_recv_addrs[0].gsr_interface;
    memcpy(&ifr.ir_address, &res->ai_recv_addrs[0].gsr_addr, sizeof(struct sockaddr_storage));
    if (!pgm_bind3(s, &addr, sizeof addr, &ifr, sizeof ifr, &ifr, sizeof ifr, &err)) {
        die("pgm_bind3", err);
    }
    const socklen_t gl = sizeof(struct group_req);
    for (unsigned i = 0; i < res->ai_recv_addrs_len; i++) {
        pgm_setsockopt(s, IPPROTO_PGM, PGM_JOIN_GROUP, &res->ai_recv_addrs[i], gl);
    }
    pgm_setsockopt(s, IPPROTO_PGM, PGM_SEND_GROUP, &res->ai_send_addrs[0], gl);
    pgm_freeaddrinfo(res);
    set_int(s, IPPROTO_PGM, PGM_MULTICAST_LOOP, 1);
    set_int(s, IPPROTO_PGM, PGM_MULTICAST_HOPS, 1);
    if (!pgm_connect(s, &err)) die("pgm_connect", err);
    /* Only sources have a repair notifier and only receivers a pending one: asked for the other,
     * getsockopt "succeeds" with fd 0 (stdin), and poll() would spin on it. */
    const int kinds[] = {PGM_RECV_SOCK, sender ? PGM_REPAIR_SOCK : PGM_PENDING_SOCK};
    for (int i = 0; i < 2; i++) {
        int fd = -1;
        socklen_t len = sizeof fd;
        if (pgm_getsockopt(s, IPPROTO_PGM, kinds[i], &fd, &len) && fd > 0) {
            c->fds[c->nfds].fd = fd;
            c->fds[c->nfds++].events = POLLIN;
        }
    }
    if (sender) {
        tune_source_fd(s, port);
        pthread_create(&c->service, NULL, service_thread, c);
    } else if (c->nfds > 0) { /* beyond net.core.rmem_max when root; harmless if refused */
        const int bytes = 32 << 20;
        setsockopt(c->fds[0].fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes);
    }
}

static void close_chan(chan_t* c) {
    if (c->sender) {
        atomic_store(&g_stop, 1);
        pthread_join(c->service, NULL);
    }
    pgm_close(c->sock, c->sender); /* a source flushes: 3 SPMs with OPT_FIN */
}

static void send_msg(chan_t* c, const void* msg, size_t size) {
    size_t sent = 0;
    int st;
    while ((st = pgm_send(c->sock, msg, size, &sent)) != PGM_IO_STATUS_NORMAL) {
        if (st != PGM_IO_STATUS_WOULD_BLOCK && st != PGM_IO_STATUS_RATE_LIMITED) {
            int pdu = 0;
            socklen_t pl = sizeof pdu;
            pgm_getsockopt(c->sock, IPPROTO_PGM, PGM_PDU, &pdu, &pl);
            fprintf(stderr, "pgm_perf: pgm_send of %zu bytes failed (max APDU %d)\n", size, pdu);
            exit(3);
        }
    }
}

static int sqns_for(uint64_t packets) {
    return packets + 1024 < MAX_SQNS ? (int)(packets + 1024) : MAX_SQNS;
}

static int do_send(const char* net, int port, uint64_t count, size_t size, double rate) {
    chan_t c;
    const int frag = size > 1448;
    open_chan(&c, net, port, 1, frag ? 1496 : 1500, sqns_for(count * (frag ? size / 1424 + 1 : 1)));
    unsigned char* buf = g_tx + (frag ? 4 : 0);
    const uint64_t start = now_ns();
    for (uint64_t i = 0; i < count; i++) {
        const uint64_t due = rate > 0 ? start + (uint64_t)((double)i * 1e9 / rate) : 0;
        if (due > now_ns()) { /* paced: sleep to the slot; late slots are sent at once */
            const struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        }
        put_le64(buf, i);
        send_msg(&c, buf, size);
    }
    const double secs = (double)(now_ns() - start) / 1e9;
    usleep(1000000); /* linger: the service thread keeps answering NAKs */
    close_chan(&c);
    printf("{\"mode\":\"send\",\"count\":%" PRIu64 ",\"size\":%zu,\"seconds\":%.6f,"
           "\"msgs_per_sec\":%.1f}\n", count, size, secs, secs > 0 ? (double)count / secs : 0.0);
    return 0;
}

static int do_recv(const char* net, int port, uint64_t count, double timeout, int spin) {
    chan_t c;
    open_chan(&c, net, port, 0, 1500, sqns_for(count) > 65536 ? sqns_for(count) : 65536);
    unsigned char* seen = calloc(count, 1);
    if (seen == NULL) die("calloc", NULL);
    uint64_t got = 0, bytes = 0, first = 0, last = 0;
    const uint64_t deadline = now_ns() + (uint64_t)(timeout * 1e9);
    size_t len = 0;
    while (got < count && !atomic_load(&g_stop) && now_ns() < deadline) {
        const int r = recv_one(&c, g_rx, &len, spin, 100);
        if (r < 0) break;
        if (r == 0 || len < 8) continue;
        const uint64_t i = get_le64(g_rx);
        if (i >= count || seen[i]) continue;
        seen[i] = 1;
        last = now_ns();
        if (got++ == 0) first = last;
        bytes += len;
    }
    const double secs = (double)(last - first) / 1e9;
    printf("{\"mode\":\"recv\",\"count\":%" PRIu64 ",\"received\":%" PRIu64 ",\"seconds\":%.6f,"
           "\"msgs_per_sec\":%.1f,\"mb_per_sec\":%.3f,\"loss_events\":%" PRIu64 "}\n",
           count, got, secs, secs > 0 ? (double)got / secs : 0.0,
           secs > 0 ? (double)bytes / secs / 1e6 : 0.0, c.resets);
    close_chan(&c);
    free(seen);
    return got == count ? 0 : 1;
}

static int do_pong(const char* net_a, int port_a, const char* net_b, int port_b, uint64_t count,
                   int spin) {
    chan_t in, out;
    /* Closed loop: only the latest echoes can need repair, so a 64 Ki window is plenty. */
    open_chan(&in, net_a, port_a, 0, 1500, 65536);
    open_chan(&out, net_b, port_b, 1, 1496, 65536); /* 1496: an echo of any size can be sent */
    uint64_t echoed = 0;
    size_t len = 0;
    while (!atomic_load(&g_stop) && (count == 0 || echoed < count)) {
        const int r = recv_one(&in, g_rx, &len, spin, 100);
        if (r < 0) break;
        if (r == 0) continue;
        if (len > MAX_SINGLE) memcpy(g_tx + 4, g_rx, len); /* fragmented: needs 4 mod 16 */
        send_msg(&out, len > MAX_SINGLE ? g_tx + 4 : g_rx, len);
        echoed += len >= 8 && !(get_le64(g_rx) & PROBE_FLAG);
    }
    if (!atomic_load(&g_stop)) usleep(300000); /* answer NAKs for the last echoes */
    fprintf(stderr, "pgm_perf: pong echoed %" PRIu64 ", loss events %" PRIu64 "\n", echoed,
            in.resets);
    close_chan(&out);
    close_chan(&in);
    return 0;
}

static int cmp_u64(const void* a, const void* b) {
    const uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
    return x < y ? -1 : x > y;
}

static uint64_t pct(const uint64_t* v, uint64_t n, double q) { /* nearest rank */
    const uint64_t k = (uint64_t)(q * (double)n + 0.999999);
    return v[k == 0 ? 0 : (k > n ? n - 1 : k - 1)];
}

static int do_ping(const char* net_a, int port_a, const char* net_b, int port_b, uint64_t count,
                   size_t size, uint64_t warmup, int spin) {
    chan_t out, in;
    const int frag = size > 1448;
    open_chan(&in, net_b, port_b, 0, 1500, 65536);
    open_chan(&out, net_a, port_a, 1, frag ? 1496 : 1500, 65536);
    unsigned char *msg = g_tx + (frag ? 4 : 0), *buf = g_rx;
    uint64_t* rtt = malloc(count * sizeof *rtt); /* before measuring: no allocation in the loop */
    if (rtt == NULL) die("malloc", NULL);
    size_t len = 0;
    int rc = 1;
    /* Handshake: a receiver takes data only from sources it has heard, so probe until an echo. */
    const uint64_t hs_end = now_ns() + 10000000000u;
    for (uint64_t p = 0; rc != 0 && !atomic_load(&g_stop) && now_ns() < hs_end; p++) {
        put_le64(msg, PROBE_FLAG | p);
        put_le64(msg + 8, now_ns());
        send_msg(&out, msg, size);
        for (const uint64_t next = now_ns() + 10000000u; rc != 0 && now_ns() < next;) {
            const int r = recv_one(&in, buf, &len, 0, 2);
            if (r > 0 && len >= 8 && (get_le64(buf) & PROBE_FLAG)) rc = 0;
        }
    }
    if (rc != 0) {
        fprintf(stderr, "pgm_perf: ping: no echo in 10 s; is 'pgm_perf pong %s %d %s %d ...' up?\n",
                net_a, port_a, net_b, port_b);
    }
    uint64_t start = now_ns();
    for (uint64_t seq = 0; rc == 0 && seq < warmup + count; seq++) {
        if (seq == warmup) start = now_ns();
        put_le64(msg, seq);
        put_le64(msg + 8, now_ns());
        send_msg(&out, msg, size);
        for (const uint64_t give_up = now_ns() + 5000000000u;;) {
            const int r = recv_one(&in, buf, &len, spin, 100);
            const uint64_t t = now_ns();
            if (r > 0 && len >= 16 && get_le64(buf) == seq) {
                if (seq >= warmup) rtt[seq - warmup] = t - get_le64(buf + 8);
                break;
            }
            if (r < 0 || t > give_up || atomic_load(&g_stop)) {
                fprintf(stderr, "pgm_perf: ping: no echo of %" PRIu64 " (5 s or signal)\n", seq);
                rc = 1;
                break;
            }
        }
    }
    const double secs = (double)(now_ns() - start) / 1e9;
    close_chan(&out);
    close_chan(&in);
    if (rc == 0) {
        qsort(rtt, count, sizeof *rtt, cmp_u64);
        printf("{\"mode\":\"ping\",\"count\":%" PRIu64 ",\"size\":%zu,\"rtt_ns\":{\"min\":%" PRIu64
               ",\"p50\":%" PRIu64 ",\"p90\":%" PRIu64 ",\"p99\":%" PRIu64 ",\"p99_9\":%" PRIu64
               ",\"max\":%" PRIu64 "},\"round_trips_per_sec\":%.1f}\n", count, size, rtt[0],
               pct(rtt, count, 0.5), pct(rtt, count, 0.9), pct(rtt, count, 0.99),
               pct(rtt, count, 0.999), rtt[count - 1], secs > 0 ? (double)count / secs : 0.0);
    }
    if (in.resets > 0) fprintf(stderr, "pgm_perf: ping: %" PRIu64 " loss events\n", in.resets);
    free(rtt);
    return rc;
}

static void log_to_stderr(const int level, const char* message, void* arg) {
    (void)level;
    (void)arg;
    fprintf(stderr, "pgm_perf: openpgm: %s\n", message);
}

static void on_signal(int sig) {
    (void)sig;
    atomic_store(&g_stop, 1);
}

/* Whole-string number in [lo, hi]; whole numbers only unless frac. */
static int num(const char* s, double lo, double hi, int frac, double* out) {
    char* end = NULL;
    *out = strtod(s, &end);
    if (end == s || *end != '\0' || !(*out >= lo && *out <= hi)) return 0;
    return frac || *out == (double)(uint64_t)*out;
}

static int usage(void) {
    fprintf(stderr, "usage: pgm_perf send NETWORK PORT COUNT SIZE [RATE_MSGS_PER_S]\n"
                    "       pgm_perf recv NETWORK PORT COUNT TIMEOUT_S [spin|block]\n"
                    "       pgm_perf pong NET_A PORT_A NET_B PORT_B COUNT [spin|block]\n"
                    "       pgm_perf ping NET_A PORT_A NET_B PORT_B COUNT SIZE WARMUP [spin|block]"
                    "\nNETWORK is \"IFADDR;GROUP\", e.g. \"127.0.0.1;239.192.88.1\"; SIZE 8..65535"
                    " (ping: 16..65535)\n");
    return 2;
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    const int send = !strcmp(mode, "send"), recv = !strcmp(mode, "recv");
    const int pong = !strcmp(mode, "pong"), ping = !strcmp(mode, "ping");
    double port = 0, port_b = 0, count = 0, size = 0, warmup = 0, real = 0; /* RATE, TIMEOUT_S */
    int ok = (send && (argc == 6 || argc == 7)) || (recv && (argc == 6 || argc == 7)) ||
             (pong && (argc == 7 || argc == 8)) || (ping && (argc == 9 || argc == 10));
    const int wait_arg = ping ? 9 : pong ? 7 : recv ? 6 : 0;
    const char* wait = wait_arg != 0 && argc > wait_arg ? argv[wait_arg] : "block";
    const int spin = !strcmp(wait, "spin");
    ok = ok && num(argv[3], 1, 65535, 0, &port) && (spin || !strcmp(wait, "block"));
    if (ok && send) {
        ok = num(argv[4], 0, 1e12, 0, &count) && num(argv[5], 8, 65535, 0, &size) &&
             (argc == 6 || num(argv[6], 0, 1e9, 1, &real));
    } else if (ok && recv) {
        ok = num(argv[4], 1, 1e12, 0, &count) && num(argv[5], 1e-3, 1e6, 1, &real);
    } else if (ok) {
        ok = num(argv[5], 1, 65535, 0, &port_b) && num(argv[6], ping, 1e12, 0, &count) &&
             (pong || (num(argv[7], 16, 65535, 0, &size) && num(argv[8], 0, 1e12, 0, &warmup)));
    }
    if (!ok) return usage();

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: a pending poll() returns early */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    pgm_log_set_handler(log_to_stderr, NULL); /* OpenPGM logs to stdout by default */
    pgm_error_t* err = NULL;
    if (!pgm_init(&err)) die("pgm_init", err);
    int rc;
    if (send) {
        rc = do_send(argv[2], (int)port, (uint64_t)count, (size_t)size, real);
    } else if (recv) {
        rc = do_recv(argv[2], (int)port, (uint64_t)count, real, spin);
    } else if (pong) {
        rc = do_pong(argv[2], (int)port, argv[4], (int)port_b, (uint64_t)count, spin);
    } else {
        rc = do_ping(argv[2], (int)port, argv[4], (int)port_b, (uint64_t)count, (size_t)size,
                     (uint64_t)warmup, spin);
    }
    fflush(stdout);
    pgm_shutdown();
    return rc;
}
