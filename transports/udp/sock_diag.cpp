// SPDX-License-Identifier: Apache-2.0
// A NETLINK_SOCK_DIAG dump of UDP sockets (linux/inet_diag.h, man 7 sock_diag): one request
// with NLM_F_DUMP, answers read until NLMSG_DONE. Every length in the answer is checked
// before it is used; structures are copied out of the buffer, never cast in place.
#include "transports/udp/sock_diag.hpp"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"

namespace prizma::udp {

namespace {

using posix::UniqueFd;

Error diag_error(int family, const std::string& what, int err) {
    return {std::error_code(err, std::system_category()),
            std::string("sock_diag: UDP dump (") + (family == AF_INET ? "IPv4" : "IPv6")
                + "): " + what + ": " + std::system_category().message(err)};
}

/// The socket of one inet_diag_msg and its attributes (`body`: the message's payload).
bool read_socket(const std::byte* body, std::size_t len, UdpSocketInfo& out) {
    inet_diag_msg m{};
    if (len < sizeof m) {
        return false;
    }
    std::memcpy(&m, body, sizeof m);
    out.family = m.idiag_family;
    std::memcpy(out.local.data(), m.id.idiag_src, sizeof m.id.idiag_src);
    out.local_port = ntohs(m.id.idiag_sport);
    out.rqueue = m.idiag_rqueue;
    out.uid = m.idiag_uid;
    out.inode = m.idiag_inode;
    std::size_t at = NLMSG_ALIGN(sizeof m);
    while (at + sizeof(rtattr) <= len) {
        rtattr a{};
        std::memcpy(&a, body + at, sizeof a);
        if (a.rta_len < sizeof a || a.rta_len > len - at) {
            return false;  // an attribute longer than its message
        }
        if (a.rta_type == INET_DIAG_SKMEMINFO
            && a.rta_len - RTA_LENGTH(0) >= (SK_MEMINFO_DROPS + 1) * sizeof(std::uint32_t)) {
            std::array<std::uint32_t, SK_MEMINFO_DROPS + 1> mem{};
            std::memcpy(mem.data(), body + at + RTA_LENGTH(0), sizeof mem);
            out.has_meminfo = true;
            out.rmem_alloc = mem[SK_MEMINFO_RMEM_ALLOC];
            out.rcvbuf = mem[SK_MEMINFO_RCVBUF];
            out.drops = mem[SK_MEMINFO_DROPS];
        }
        at += RTA_ALIGN(a.rta_len);
    }
    return true;
}

}  // namespace

Result<UdpSockets, Error> udp_sockets_on_port(int family, std::uint16_t port) {
    if (family != AF_INET && family != AF_INET6) {
        return Error(Errc::invalid_argument, "sock_diag: family must be AF_INET or AF_INET6");
    }
    const UniqueFd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
    if (!fd.valid()) {
        return diag_error(family, "netlink socket", errno);
    }
    struct Request {
        nlmsghdr nlh;
        inet_diag_req_v2 req;
    } rq{};
    rq.nlh.nlmsg_len = sizeof rq;
    rq.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    rq.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    rq.nlh.nlmsg_seq = 1;
    rq.req.sdiag_family = static_cast<std::uint8_t>(family);
    rq.req.sdiag_protocol = IPPROTO_UDP;
    rq.req.idiag_states = ~0U;  // bound and connected alike
    rq.req.idiag_ext = 1U << (INET_DIAG_SKMEMINFO - 1);
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (::sendto(fd.get(), &rq, sizeof rq, 0, reinterpret_cast<const sockaddr*>(&kernel),
                 sizeof kernel)
        != static_cast<ssize_t>(sizeof rq)) {
        return diag_error(family, "send request", errno);
    }
    UdpSockets out;
    alignas(nlmsghdr) std::array<std::byte, 32768> buf{};
    for (;;) {
        const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return diag_error(family, "receive answer", n < 0 ? errno : EPROTO);
        }
        auto left = static_cast<std::size_t>(n);
        std::size_t at = 0;
        while (left - at >= sizeof(nlmsghdr)) {
            nlmsghdr h{};
            std::memcpy(&h, buf.data() + at, sizeof h);
            if (h.nlmsg_len < sizeof h || h.nlmsg_len > left - at) {
                return diag_error(family, "malformed answer", EPROTO);
            }
            const std::byte* body = buf.data() + at + NLMSG_HDRLEN;
            const std::size_t body_len = h.nlmsg_len - NLMSG_HDRLEN;
            if (h.nlmsg_type == NLMSG_DONE) {
                return out;
            }
            if (h.nlmsg_type == NLMSG_ERROR) {
                nlmsgerr e{};
                std::memcpy(&e, body, std::min(body_len, sizeof e));
                return diag_error(family, "refused by the kernel", e.error < 0 ? -e.error : EPROTO);
            }
            if (h.nlmsg_type == SOCK_DIAG_BY_FAMILY) {
                UdpSocketInfo s;
                if (!read_socket(body, body_len, s)) {
                    return diag_error(family, "malformed socket record", EPROTO);
                }
                if (s.local_port == port) {
                    if (out.sockets.size() < kMaxListedSockets) {
                        out.sockets.push_back(s);
                    } else {
                        ++out.not_listed;
                    }
                }
            }
            at += std::min<std::size_t>(NLMSG_ALIGN(h.nlmsg_len), left - at);
        }
    }
}

}  // namespace prizma::udp
