// SPDX-License-Identifier: Apache-2.0
// LD_PRELOAD library: times every UDP send and receive call of a process with the TSC and
// writes one line per call at exit (or SIGTERM with SYSCALL_TIMER_TERM=1) to
// $SYSCALL_TIMER_OUT.<pid>: "kind entry_tsc exit_tsc result" (kind 1 = send, 2 = receive).
// Both parties of a ping-pong on one machine share the TSC, so their calls can be lined up.
// A diagnostic for bench/rtt_breakdown/run.sh; it costs ~20 ns per call.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

typedef struct {
    unsigned long long t0, t1;
    int kind, ret;
} rec_t;

enum { kMax = 1 << 22, kSend = 1, kRecv = 2 };
static rec_t* recs;
static unsigned long nrec;
static unsigned long long tsc0;
static struct timespec ts0;

static void dump(void) {
    struct timespec ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    const unsigned long long tsc1 = __rdtsc();
    const double ns = (double)(ts1.tv_sec - ts0.tv_sec) * 1e9 + (double)(ts1.tv_nsec - ts0.tv_nsec);
    const char* out = getenv("SYSCALL_TIMER_OUT");
    if (out == NULL || recs == NULL) {
        return;
    }
    char name[512];
    snprintf(name, sizeof name, "%s.%d", out, (int)getpid());
    FILE* f = fopen(name, "w");
    if (f == NULL) {
        return;
    }
    fprintf(f, "# tsc_per_ns %f\n", (double)(tsc1 - tsc0) / ns);
    for (unsigned long i = 0; i < nrec; ++i) {
        fprintf(f, "%d %llu %llu %d\n", recs[i].kind, recs[i].t0, recs[i].t1, recs[i].ret);
    }
    fclose(f);
    recs = NULL;
}

static void on_term(int sig) {
    (void)sig;
    dump();
    _exit(0);
}

__attribute__((constructor)) static void init(void) {
    recs = calloc(kMax, sizeof(rec_t));
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    tsc0 = __rdtsc();
    atexit(dump);
    if (getenv("SYSCALL_TIMER_TERM") != NULL) {
        signal(SIGTERM, on_term);
    }
}

static void record(int kind, unsigned long long a, unsigned long long b, long r) {
    if (recs != NULL && nrec < kMax) {
        recs[nrec++] = (rec_t){a, b, kind, (int)r};
    }
}

#define TIMED(ret_t, fn, kind, params, args)                     \
    ret_t fn params {                                             \
        static ret_t(*real) params;                               \
        if (real == NULL) {                                       \
            *(void**)(&real) = dlsym(RTLD_NEXT, #fn);             \
        }                                                         \
        const unsigned long long t_a = __rdtsc();                 \
        const ret_t r = real args;                                \
        record(kind, t_a, __rdtsc(), (long)r);                    \
        return r;                                                 \
    }

TIMED(ssize_t, sendmsg, kSend, (int fd, const struct msghdr* m, int fl), (fd, m, fl))
TIMED(int, sendmmsg, kSend, (int fd, struct mmsghdr* m, unsigned n, int fl), (fd, m, n, fl))
TIMED(ssize_t, sendto, kSend,
      (int fd, const void* b, size_t n, int fl, const struct sockaddr* to, socklen_t tl),
      (fd, b, n, fl, to, tl))
TIMED(int, recvmmsg, kRecv, (int fd, struct mmsghdr* m, unsigned n, int fl, struct timespec* t),
      (fd, m, n, fl, t))
TIMED(ssize_t, recvmsg, kRecv, (int fd, struct msghdr* m, int fl), (fd, m, fl))
TIMED(ssize_t, recv, kRecv, (int fd, void* b, size_t n, int fl), (fd, b, n, fl))
TIMED(ssize_t, recvfrom, kRecv,
      (int fd, void* b, size_t n, int fl, struct sockaddr* from, socklen_t* fl2),
      (fd, b, n, fl, from, fl2))
