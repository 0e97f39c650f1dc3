// SPDX-License-Identifier: Apache-2.0
#include "transports/verbs/ib_sa.hpp"

#include <infiniband/umad.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include "lib/posix/errors.hpp"
#include "lib/runtime/rng.hpp"
#include "transports/verbs/device_policy.hpp"

namespace prizma::verbs {
namespace {

constexpr int kTimeoutMs = 200;
constexpr int kRetries = 5;

std::string hex16(std::uint16_t v) {
    char b[8] = {};
    (void)std::snprintf(b, sizeof b, "%04x", static_cast<unsigned>(v));
    return b;
}

Error fail(std::string msg, std::errc code = std::errc::io_error) {
    return {std::make_error_code(code), std::move(msg)};
}

/// umad_open_port + umad_register for the SA class; errors say what to change.
Result<void, Error> open_sa(const std::string& ca, int port, int& fd, int& agent) {
    if (umad_init() < 0) {
        return fail("libibumad: umad_init failed (is ib_umad loaded?)", std::errc::no_such_device);
    }
    errno = 0;
    fd = umad_open_port(ca.c_str(), port);
    if (fd < 0) {
        // libibumad returns -EIO for a failed open(); open's errno (EACCES: the default
        // root-only mode) tells what to change.
        const int e = errno != 0 ? errno : -fd;
        return fail(policy::umad_advice(ca, port, e), e == EACCES || e == EPERM
                                                          ? std::errc::permission_denied
                                                          : std::errc::no_such_device);
    }
    agent = umad_register(fd, sa::kClassSubnAdm, sa::kSaClassVersion, 0, nullptr);
    if (agent < 0) {
        (void)umad_close_port(fd);
        fd = -1;
        return fail("umad_register for the SA class failed on " + ca, std::errc::io_error);
    }
    return {};
}

/// Sends `mad` to the SM and waits for the reply that `accept` takes.
Result<void, Error> exchange(const std::string& ca,
                             int port,
                             int fd,
                             int agent,
                             const std::array<std::byte, sa::kMadSize>& mad,
                             const std::function<bool(std::span<const std::byte>)>& accept) {
    umad_port_t p{};
    if (umad_get_port(ca.c_str(), port, &p) < 0) {
        return fail("umad_get_port failed for " + ca, std::errc::io_error);
    }
    const auto sm_lid = static_cast<int>(p.sm_lid);
    const auto sm_sl = static_cast<int>(p.sm_sl);
    (void)umad_release_port(&p);
    if (sm_lid == 0) {
        return fail("no subnet manager on " + ca + " (SM LID 0)", std::errc::host_unreachable);
    }
    std::vector<std::byte> buf(umad_size() + sa::kMadSize);
    std::memcpy(umad_get_mad(buf.data()), mad.data(), mad.size());
    (void)umad_set_addr(buf.data(), sm_lid, 1, sm_sl, static_cast<int>(sa::kQp1Qkey));
    (void)umad_set_pkey(buf.data(), 0);
    if (umad_send(fd, agent, buf.data(), static_cast<int>(sa::kMadSize), kTimeoutMs, kRetries)
        < 0) {
        return fail("umad_send to the SA failed: " + posix::errno_text(), std::errc::io_error);
    }
    for (int tries = 0; tries < 8; ++tries) {
        int len = static_cast<int>(sa::kMadSize);
        const int got = umad_recv(fd, buf.data(), &len, kTimeoutMs * (kRetries + 1));
        if (got < 0 || umad_status(buf.data()) != 0) {
            return fail("no answer from the SA (timeout)", std::errc::timed_out);
        }
        const auto* mp = static_cast<const std::byte*>(umad_get_mad(buf.data()));
        if (accept(std::span<const std::byte>(mp, sa::kMadSize))) {
            return {};
        }
    }
    return fail("the SA answered with unrelated MADs", std::errc::io_error);
}

}  // namespace

SaMembership::SaMembership(std::string ca, int port, int fd, int agent) noexcept
    : ca_(std::move(ca)), port_(port), fd_(fd), agent_(agent) {
    tid_ = runtime::Rng::from_entropy()();
}

Result<std::unique_ptr<SaMembership>, Error> SaMembership::join(const std::string& ca,
                                                                int port,
                                                                const sa::McMemberRecord& want) {
    int fd = -1;
    int agent = -1;
    if (auto o = open_sa(ca, port, fd, agent); !o) {
        return o.error();
    }
    std::unique_ptr<SaMembership> m(new SaMembership(ca, port, fd, agent));
    m->want_ = want;
    if (auto r = m->rejoin(); !r) {
        return r.error();
    }
    return m;
}

Result<void, Error> SaMembership::rejoin() {
    // Join; when the group does not exist yet the SA wants the creation components too (it
    // says "insufficient components" or "invalid request"; a busy SA is not asked twice).
    auto r = transact(sa::kMethodSet, sa::join_mask(false), want_);
    if (r && r->status != 0 && !sa::busy(r->status)) {
        r = transact(sa::kMethodSet, sa::join_mask(true), want_);
    }
    if (!r) {
        return r.error();
    }
    if (r->status != 0) {
        // A group that exists with another Q_Key (pre-created in partitions.conf, or by
        // another application) refuses a join that names ours: ask for the group to say so.
        sa::McMemberRecord probe;
        probe.mgid = want_.mgid;
        if (auto g = transact(sa::kMethodGet, sa::kCompMgid, probe);
            g && g->status == 0 && g->rec.mgid == want_.mgid && g->rec.qkey != want_.qkey) {
            return fail(sa::qkey_mismatch(want_.mgid, g->rec.qkey, want_.qkey),
                        std::errc::invalid_argument);
        }
        return fail("SA refused the multicast join (MAD status 0x" + hex16(r->status) + ")");
    }
    rec_ = r->rec;
    if (rec_.qkey != want_.qkey) {
        // An SA that does not check the Q_Key component hands back the group as it is: the
        // QP would drop every datagram. Leave (the destructor does) and refuse.
        return fail(sa::qkey_mismatch(rec_.mgid, rec_.qkey, want_.qkey),
                    std::errc::invalid_argument);
    }
    return {};
}

Result<sa::Response, Error> SaMembership::transact(std::uint8_t method,
                                                   std::uint64_t mask,
                                                   const sa::McMemberRecord& rec) {
    const std::uint64_t tid = ++tid_;
    sa::Response resp;
    auto r =
        exchange(ca_, port_, fd_, agent_, sa::encode_request(method, tid, mask, rec),
                 [&](std::span<const std::byte> mad) {
                     return sa::decode_response(mad, resp) && sa::same_transaction(tid, resp.tid);
                 });
    if (!r) {
        return r.error();
    }
    return resp;
}

Result<sa::PathRecord, Error> query_path(const std::string& ca,
                                         int port,
                                         const std::array<std::uint8_t, 16>& sgid,
                                         const std::array<std::uint8_t, 16>& dgid,
                                         std::uint16_t pkey) {
    int fd = -1;
    int agent = -1;
    if (auto o = open_sa(ca, port, fd, agent); !o) {
        return o.error();
    }
    const std::uint64_t tid = runtime::Rng::from_entropy()();
    sa::PathRecord rec;
    std::uint16_t status = 0;
    auto r = exchange(ca, port, fd, agent, sa::encode_path_query(tid, sgid, dgid, pkey),
                      [&](std::span<const std::byte> mad) {
                          std::uint64_t got = 0;
                          return sa::decode_path_response(mad, got, status, rec)
                                 && sa::same_transaction(tid, got);
                      });
    (void)umad_unregister(fd, agent);
    (void)umad_close_port(fd);
    if (!r) {
        return r.error();
    }
    if (status != 0 || rec.dlid == 0) {
        return fail("the SA has no path to the peer (MAD status " + std::to_string(status)
                        + "); give its LID as dlid=",
                    std::errc::host_unreachable);
    }
    return rec;
}

void SaMembership::set_leave_on_close(bool leave) noexcept {
    leave_on_close_ = leave;
}

SaMembership::~SaMembership() {
    if (fd_ >= 0) {
        if (leave_on_close_) {
            // Leave: delete our membership (best effort; the SM also ages out dead ports).
            auto leave = want_;
            leave.mgid = rec_.mgid;
            (void)transact(sa::kMethodDelete, sa::join_mask(false), leave);
        }
        (void)umad_unregister(fd_, agent_);
        (void)umad_close_port(fd_);
    }
}

}  // namespace prizma::verbs
