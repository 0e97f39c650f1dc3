/* SPDX-License-Identifier: Apache-2.0 */
/* An OpenPGM (Debian libpgm 5.3.128) peer for interop tests with prizma.
 *
 *   pgm_peer send NETWORK PORT COUNT SIZE [RATE_MSGS_PER_S] [LINGER_MS] [FEC_K PROACTIVE ONDEMAND]
 *   pgm_peer recv NETWORK PORT COUNT TIMEOUT_S
 *
 * NETWORK is OpenPGM's "127.0.0.1;239.192.0.1"; PORT is the UDP encapsulation port (unicast
 * and multicast alike); the data-destination port is 7500. Message i carries i as a 64-bit
 * little-endian counter in its first 8 bytes, then (i + k) & 0xff at byte k. `recv` exits 0
 * only when 0..COUNT-1 arrived exactly once with intact payloads.
 *
 * FEC_K (a power of two, 2 to 128) turns on OpenPGM's Reed-Solomon FEC (PGM_USE_FEC, RS(255,
 * FEC_K)): PROACTIVE parity packets after every transmission group, and parity NAKs answered
 * when ONDEMAND is 1. Its SPMs then carry OPT_PARITY_PRM. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pgm/pgm.h>

static atomic_int g_stop;

static void die(const char* what, pgm_error_t* err) {
    fprintf(stderr, "pgm_peer: %s: %s\n", what, err != NULL ? err->message : "failed");
    exit(3);
}

static int g_fec_k, g_fec_proactive, g_fec_ondemand;

static pgm_sock_t* open_socket(const char* network, int port, int sender, int mtu, int count) {
    pgm_error_t* err = NULL;
    struct pgm_addrinfo_t* res = NULL;
    pgm_sock_t* sock = NULL;
    if (!pgm_getaddrinfo(network, NULL, &res, &err)) die("pgm_getaddrinfo", err);
    if (!pgm_socket(&sock, AF_INET, SOCK_SEQPACKET, IPPROTO_UDP, &err)) die("pgm_socket", err);
    const int yes = 1, no = 0, hops = 1;
    pgm_setsockopt(sock, IPPROTO_PGM, PGM_UDP_ENCAP_UCAST_PORT, &port, sizeof port);
    pgm_setsockopt(sock, IPPROTO_PGM, PGM_UDP_ENCAP_MCAST_PORT, &port, sizeof port);
    pgm_setsockopt(sock, IPPROTO_PGM, PGM_MTU, &mtu, sizeof mtu);
    if (sender) {
        const int sqns = count + 1024 < 1000000 ? count + 1024 : 1000000;
        const int ambient = pgm_secs(30);
        const int heartbeat[] = {pgm_msecs(100), pgm_msecs(100), pgm_msecs(100), pgm_msecs(100),
                                 pgm_msecs(1300), pgm_secs(7), pgm_secs(16), pgm_secs(25), pgm_secs(30)};
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_SEND_ONLY, &yes, sizeof yes);
        if (g_fec_k > 0) {
            /* With PGM_TXW_SQNS, 5.3.128 sizes its parity buffer from a TPDU size of 0 and
             * aborts at the first parity packet (txw.c, socket.c): FEC needs the window given
             * as seconds x rate. 12.5 MB/s (a rate limit too) x 20 s / 1500 B: ~166,000 sqns. */
            const int secs = 20, rate = 12500000;
            pgm_setsockopt(sock, IPPROTO_PGM, PGM_TXW_SECS, &secs, sizeof secs);
            pgm_setsockopt(sock, IPPROTO_PGM, PGM_TXW_MAX_RTE, &rate, sizeof rate);
        } else {
            pgm_setsockopt(sock, IPPROTO_PGM, PGM_TXW_SQNS, &sqns, sizeof sqns);
        }
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_AMBIENT_SPM, &ambient, sizeof ambient);
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_HEARTBEAT_SPM, heartbeat, sizeof heartbeat);
        if (g_fec_k > 0) {
            struct pgm_fecinfo_t fec;
            memset(&fec, 0, sizeof fec);
            fec.block_size = 255;
            fec.group_size = (uint8_t)g_fec_k;
            fec.proactive_packets = (uint8_t)g_fec_proactive;
            fec.ondemand_parity_enabled = g_fec_ondemand != 0;
            fec.var_pktlen_enabled = 1;
            if (!pgm_setsockopt(sock, IPPROTO_PGM, PGM_USE_FEC, &fec, sizeof fec)) {
                fprintf(stderr, "pgm_peer: PGM_USE_FEC refused\n");
                exit(3);
            }
        }
    } else {
        const int sqns = 65536;
        const int peer_expiry = pgm_secs(300), spmr_expiry = pgm_msecs(250);
        const int nak_bo = pgm_msecs(50), nak_rpt = pgm_msecs(200), nak_rdata = pgm_msecs(200);
        const int retries = 50;
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_RECV_ONLY, &yes, sizeof yes);
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_PASSIVE, &no, sizeof no);
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_RXW_SQNS, &sqns, sizeof sqns);
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_PEER_EXPIRY, &peer_expiry, sizeof peer_expiry);
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_SPMR_EXPIRY, &spmr_expiry, sizeof spmr_expiry);
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_NAK_BO_IVL, &nak_bo, sizeof nak_bo);
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_NAK_RPT_IVL, &nak_rpt, sizeof nak_rpt);
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_NAK_RDATA_IVL, &nak_rdata, sizeof nak_rdata);
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_NAK_DATA_RETRIES, &retries, sizeof retries);
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_NAK_NCF_RETRIES, &retries, sizeof retries);
    }
    struct pgm_sockaddr_t addr;
    memset(&addr, 0, sizeof addr);
    addr.sa_port = 7500;
    addr.sa_addr.sport = 0;
    if (!pgm_gsi_create_from_hostname(&addr.sa_addr.gsi, &err)) die("gsi", err);
    struct pgm_interface_req_t if_req;
    memset(&if_req, 0, sizeof if_req);
    if_req.ir_interface = res->ai_recv_addrs[0].gsr_interface;
    memcpy(&if_req.ir_address, &res->ai_recv_addrs[0].gsr_addr, sizeof(struct sockaddr_storage));
    if (!pgm_bind3(sock, &addr, sizeof addr, &if_req, sizeof if_req, &if_req, sizeof if_req, &err)) die("pgm_bind3", err);
    for (unsigned i = 0; i < res->ai_recv_addrs_len; i++) {
        pgm_setsockopt(sock, IPPROTO_PGM, PGM_JOIN_GROUP, &res->ai_recv_addrs[i], sizeof(struct group_req));
    }
    pgm_setsockopt(sock, IPPROTO_PGM, PGM_SEND_GROUP, &res->ai_send_addrs[0], sizeof(struct group_req));
    pgm_freeaddrinfo(res);
    pgm_setsockopt(sock, IPPROTO_PGM, PGM_MULTICAST_LOOP, &yes, sizeof yes);
    pgm_setsockopt(sock, IPPROTO_PGM, PGM_MULTICAST_HOPS, &hops, sizeof hops);
    if (!pgm_connect(sock, &err)) die("pgm_connect", err);
    return sock;
}

static double now_s(void);

/* A source must keep calling pgm_recv for NAKs and SPM timers (docs/PROTOCOL.md §8.8). A
 * non-blocking call sends at most one queued repair, and the repair queue does not wake
 * poll(): after upstream input, keep calling for 2 ms before sleeping again, or repairs trickle
 * out one per poll timeout and a lossy receiver runs out of NAK retries. */
static void* nak_thread(void* arg) {
    pgm_sock_t* sock = arg;
    char buf[4096];
    double hot_until = 0;
    while (!atomic_load(&g_stop)) {
        size_t len = 0;
        pgm_error_t* err = NULL;
        const int st = pgm_recvfrom(sock, buf, sizeof buf, MSG_DONTWAIT, &len, NULL, NULL, &err);
        if (err != NULL) pgm_error_free(err);
        if (st == PGM_IO_STATUS_TIMER_PENDING || st == PGM_IO_STATUS_WOULD_BLOCK || st == PGM_IO_STATUS_RATE_LIMITED) {
            if (now_s() < hot_until) continue;
            struct pollfd fds[4];
            int n = 4;
            memset(fds, 0, sizeof fds);
            pgm_poll_info(sock, fds, &n, POLLIN);
            if (poll(fds, (nfds_t)n, 1) > 0) hot_until = now_s() + 0.002;
        }
    }
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int do_send(const char* network, int port, uint64_t count, size_t size, double rate, int linger_ms) {
    /* OpenPGM's checksum-copy crashes on some buffer alignments and on fragments at MTU 1500
     * (docs/PROTOCOL.md §8.2): 16-aligned buffers for single packets, MTU 1496 and offset 4 else. */
    const int fragmented = size > 1444;
    const int mtu = fragmented ? 1496 : 1500;
    char* raw = aligned_alloc(16, size + 32);
    char* buf = raw + (fragmented ? 4 : 0);
    pgm_sock_t* sock = open_socket(network, port, 1, mtu, (int)(count * (fragmented ? (size / 1400 + 1) : 1)));
    pthread_t th;
    pthread_create(&th, NULL, nak_thread, sock);
    const double start = now_s();
    for (uint64_t i = 0; i < count; i++) {
        if (rate > 0) {
            while (now_s() < start + (double)i / rate) usleep(50);
        }
        memcpy(buf, &i, 8);
        for (size_t k = 8; k < size; k++) buf[k] = (char)((i + k) & 0xff);
        size_t sent = 0;
        int st;
        while ((st = pgm_send(sock, buf, size, &sent)) != PGM_IO_STATUS_NORMAL) {
            if (st == PGM_IO_STATUS_ERROR) {
                fprintf(stderr, "pgm_peer: pgm_send failed\n");
                return 3;
            }
            usleep(100);
        }
    }
    printf("pgm_peer: sent %" PRIu64 " messages of %zu bytes\n", count, size);
    fflush(stdout);
    usleep((useconds_t)linger_ms * 1000);
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    pgm_close(sock, 1);
    free(raw);
    return 0;
}

static int do_recv(const char* network, int port, uint64_t count, double timeout) {
    pgm_sock_t* sock = open_socket(network, port, 0, 1500, 0);
    unsigned char* seen = calloc(count, 1);
    static char buf[65536];
    uint64_t unique = 0, dups = 0, bad = 0, resets = 0;
    const double deadline = now_s() + timeout;
    while (unique < count && now_s() < deadline) {
        size_t len = 0;
        pgm_error_t* err = NULL;
        /* Options freeze at pgm_connect, so non-blocking is asked per call. */
        const int st = pgm_recvfrom(sock, buf, sizeof buf, MSG_DONTWAIT, &len, NULL, NULL, &err);
        if (err != NULL) pgm_error_free(err);
        if (st == PGM_IO_STATUS_NORMAL) {
            uint64_t idx = UINT64_MAX;
            if (len >= 8) memcpy(&idx, buf, 8);
            int ok = idx < count;
            for (size_t k = 8; ok && k < len; k++) ok = (unsigned char)buf[k] == ((idx + k) & 0xff);
            if (!ok) { bad++; continue; }
            if (seen[idx]) { dups++; continue; }
            seen[idx] = 1;
            unique++;
        } else if (st == PGM_IO_STATUS_RESET) {
            resets++;
        } else if (st == PGM_IO_STATUS_TIMER_PENDING || st == PGM_IO_STATUS_WOULD_BLOCK || st == PGM_IO_STATUS_RATE_LIMITED) {
            struct pollfd fds[4];
            int n = 4;
            memset(fds, 0, sizeof fds);
            pgm_poll_info(sock, fds, &n, POLLIN);
            poll(fds, (nfds_t)n, 1);
        }
    }
    printf("pgm_peer: received %" PRIu64 " of %" PRIu64 " unique, %" PRIu64 " duplicates, %" PRIu64
           " corrupt, %" PRIu64 " resets (unrecoverable loss)\n", unique, count, dups, bad, resets);
    pgm_close(sock, 0);
    free(seen);
    return unique == count && dups == 0 && bad == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: pgm_peer send NETWORK PORT COUNT SIZE [RATE] [LINGER_MS]\n"
                        "       pgm_peer recv NETWORK PORT COUNT TIMEOUT_S\n");
        return 2;
    }
    pgm_error_t* err = NULL;
    if (!pgm_init(&err)) die("pgm_init", err);
    int rc;
    if (strcmp(argv[1], "send") == 0) {
        if (argc > 10) {
            g_fec_k = atoi(argv[8]);
            g_fec_proactive = atoi(argv[9]);
            g_fec_ondemand = atoi(argv[10]);
        }
        rc = do_send(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 10), strtoull(argv[5], NULL, 10),
                     argc > 6 ? atof(argv[6]) : 0, argc > 7 ? atoi(argv[7]) : 3000);
    } else {
        rc = do_recv(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 10), atof(argv[5]));
    }
    pgm_shutdown();
    return rc;
}
