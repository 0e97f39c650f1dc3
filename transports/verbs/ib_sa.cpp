// SPDX-License-Identifier: Apache-2.0
#include "transports/verbs/ib_sa.hpp"

#include <infiniband/umad.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "lib/posix/errors.hpp"

namespace prizma::verbs {
namespace {

constexpr int kTimeoutMs = 200;
constexpr int kRetries = 5;

Error fail(std::string msg, std::errc code = std::errc::io_error) {
    return {std::make_error_code(code), std::move(msg)};
}

}  // namespace

SaMembership::SaMembership(std::string ca, int port, int fd, int agent) noexcept
    : ca_(std::move(ca)), port_(port), fd_(fd), agent_(agent) {
    std::random_device rd;
    tid_ = (std::uint64_t{rd()} << 32U) | rd();
}

Result<std::unique_ptr<SaMembership>, Error> SaMembership::join(const std::string& ca,
                                                                int port,
                                                                const sa::McMemberRecord& want) {
    if (umad_init() < 0) {
        return fail("libibumad: umad_init failed (is ib_umad loaded?)", std::errc::no_such_device);
    }
    const int fd = umad_open_port(ca.c_str(), port);
    if (fd < 0) {
        return fail("cannot open the umad device of " + ca + " port " + std::to_string(port)
                        + " (needs ib_umad and read/write on /dev/infiniband/umad*)",
                    std::errc::no_such_device);
    }
    const int agent = umad_register(fd, sa::kClassSubnAdm, sa::kSaClassVersion, 0, nullptr);
    if (agent < 0) {
        (void)umad_close_port(fd);
        return fail("umad_register for the SA class failed on " + ca, std::errc::io_error);
    }
    std::unique_ptr<SaMembership> m(new SaMembership(ca, port, fd, agent));
    m->want_ = want;
    if (auto r = m->rejoin(); !r) {
        return r.error();
    }
    return m;
}

Result<void, Error> SaMembership::rejoin() {
    // Join; when the group does not exist yet the SA wants the creation components too.
    auto r = transact(sa::kMethodSet, sa::join_mask(false), want_);
    if (r && r->status != 0) {
        r = transact(sa::kMethodSet, sa::join_mask(true), want_);
    }
    if (!r) {
        return r.error();
    }
    if (r->status != 0) {
        return fail("SA refused the multicast join (MAD status " + std::to_string(r->status) + ")");
    }
    rec_ = r->rec;
    return {};
}

Result<sa::Response, Error> SaMembership::transact(std::uint8_t method,
                                                   std::uint64_t mask,
                                                   const sa::McMemberRecord& rec) {
    umad_port_t p{};
    if (umad_get_port(ca_.c_str(), port_, &p) < 0) {
        return fail("umad_get_port failed for " + ca_, std::errc::io_error);
    }
    const auto sm_lid = static_cast<int>(p.sm_lid);
    const auto sm_sl = static_cast<int>(p.sm_sl);
    (void)umad_release_port(&p);
    if (sm_lid == 0) {
        return fail("no subnet manager on " + ca_ + " (SM LID 0)", std::errc::host_unreachable);
    }
    std::vector<std::byte> buf(umad_size() + sa::kMadSize);
    const std::uint64_t tid = ++tid_;
    const auto mad = sa::encode_request(method, tid, mask, rec);
    std::memcpy(umad_get_mad(buf.data()), mad.data(), mad.size());
    (void)umad_set_addr(buf.data(), sm_lid, 1, sm_sl, static_cast<int>(sa::kQp1Qkey));
    (void)umad_set_pkey(buf.data(), 0);
    if (umad_send(fd_, agent_, buf.data(), static_cast<int>(sa::kMadSize), kTimeoutMs, kRetries)
        < 0) {
        return fail("umad_send to the SA failed: " + posix::errno_text(), std::errc::io_error);
    }
    for (int tries = 0; tries < 8; ++tries) {
        int len = static_cast<int>(sa::kMadSize);
        const int got = umad_recv(fd_, buf.data(), &len, kTimeoutMs * (kRetries + 1));
        if (got < 0 || umad_status(buf.data()) != 0) {
            return fail("no answer from the SA (timeout)", std::errc::timed_out);
        }
        sa::Response resp;
        const auto* mp = static_cast<const std::byte*>(umad_get_mad(buf.data()));
        if (sa::decode_response(std::span<const std::byte>(mp, sa::kMadSize), resp)
            && resp.tid == tid) {
            return resp;
        }
    }
    return fail("the SA answered with unrelated MADs", std::errc::io_error);
}

SaMembership::~SaMembership() {
    if (fd_ >= 0) {
        // Leave: delete our membership (best effort; the SM also ages out dead ports).
        auto leave = want_;
        leave.mgid = rec_.mgid;
        (void)transact(sa::kMethodDelete, sa::join_mask(false), leave);
        (void)umad_unregister(fd_, agent_);
        (void)umad_close_port(fd_);
    }
}

}  // namespace prizma::verbs
