// SPDX-License-Identifier: Apache-2.0
// UdpTransport's face beyond the data path: counters, the description, caps; create() is in
// udp_setup.cpp, send_batch and poll_rx in udp_datapath.cpp.
#include "transports/udp/udp_transport.hpp"

#include <linux/sock_diag.h>  // SK_MEMINFO_DROPS
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <string>

#include "transports/udp/udp_impl.hpp"

namespace prizma::udp {

UdpTransport::UdpTransport(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
UdpTransport::~UdpTransport() = default;

TransportCaps UdpTransport::caps() const noexcept {
    return TransportCaps{impl_->max_datagram, impl_->tx_msgs.size(), 0, true};
}

int UdpTransport::wakeup_fd() const noexcept {
    return impl_->ep.get();
}

// The kernel's drop count is read when asked for, not carried on every receive (SO_RXQ_OVFL
// would put a control message on each datagram: a put_cmsg copy-out per read, and the
// single-datagram recvfrom() path has nowhere to receive it).
UdpCounters UdpTransport::counters() const noexcept {
    UdpCounters c = counters_;
    c.rx_gro_active = static_cast<std::uint64_t>(impl_->gro[0].on())
                      + static_cast<std::uint64_t>(impl_->gro[1].on());
    c.rx_kernel_drops = 0;
    c.rx_queued_bytes = 0;
    for (int fd : {impl_->rx.get(), impl_->uc.get()}) {
        std::array<std::uint32_t, SK_MEMINFO_VARS> mem{};
        socklen_t len = sizeof mem;
        if (fd >= 0 && ::getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mem.data(), &len) == 0
            && len >= (SK_MEMINFO_DROPS + 1) * sizeof(std::uint32_t)) {
            c.rx_kernel_drops += mem[SK_MEMINFO_DROPS];
            c.rx_queued_bytes += mem[SK_MEMINFO_RMEM_ALLOC];
        }
    }
    return c;
}

std::string UdpTransport::description() const {
    const Impl& im = *impl_;
    const UdpCounters c = counters();
    std::string d = "udp iface " + (im.cfg.iface.empty() ? std::string("-") : im.cfg.iface);
    d += " ttl " + std::to_string(im.cfg.ttl);
    if (c.rcvbuf_effective > 0) {
        d += " rcvbuf " + std::to_string(c.rcvbuf_effective);
        if (c.rcvbuf_capped != 0) {
            d += " (asked " + std::to_string(im.cfg.rcvbuf) + ": capped by net.core.rmem_max)";
        }
    }
    d += gso_ ? " gso on" : " gso off";
    d += gro_ ? " gro on" : " gro off";
    return d;
}

std::size_t UdpTransport::named_counters(std::span<NamedCounter> out) const noexcept {
    const UdpCounters c = counters();
    const NamedCounter all[] = {
        {"rx_datagrams", c.rx_datagrams},
        {"rx_gro_segments", c.rx_gro_segments},
        {"rx_gro_switches", c.rx_gro_switches},
        {"rx_gro_active", c.rx_gro_active},
        {"rx_kernel_drops", c.rx_kernel_drops},
        {"rx_queued_bytes", c.rx_queued_bytes},
        {"rx_single_reads", c.rx_single_reads},
        {"rx_truncated", c.rx_truncated},
        {"tx_datagrams", c.tx_datagrams},
        {"tx_syscalls", c.tx_syscalls},
        {"tx_gso_sends", c.tx_gso_sends},
        {"tx_iovecs", c.tx_iovecs},
        {"tx_errors", c.tx_errors},
        {"rcvbuf_bytes", static_cast<std::uint64_t>(c.rcvbuf_effective)},
        {"rcvbuf_capped", c.rcvbuf_capped},
        {"sndbuf_bytes", static_cast<std::uint64_t>(c.sndbuf_effective)},
        {"busy_poll_us", static_cast<std::uint64_t>(c.busy_poll_us)},
    };
    const std::size_t n = std::min(out.size(), std::size(all));
    std::copy_n(std::begin(all), n, out.begin());
    return std::size(all);
}

}  // namespace prizma::udp
