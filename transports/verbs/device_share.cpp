// SPDX-License-Identifier: Apache-2.0
#include "transports/verbs/device_share.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "lib/posix/errors.hpp"

namespace prizma::verbs {
namespace {

// The shares of this process by device name. Weak: the last channel on a device closes it.
std::mutex g_mu;
std::map<std::string, std::weak_ptr<DeviceShare>>& registry() {
    static std::map<std::string, std::weak_ptr<DeviceShare>> r;
    return r;
}

}  // namespace

// A LID change (the SM moved the port), a new SM (it may route differently), a client
// reregister (the SM lost its records), a GID change (RoCE: addresses, and the neighbours
// behind them, moved).
bool refreshes_routes(ibv_event_type t) noexcept {
    return t == IBV_EVENT_LID_CHANGE || t == IBV_EVENT_SM_CHANGE || t == IBV_EVENT_CLIENT_REREGISTER
           || t == IBV_EVENT_GID_CHANGE;
}

DeviceShare::DeviceShare(ContextPtr ctx)
    : name_(ibv_get_device_name(ctx->device)), context_(std::move(ctx)) {}

Result<std::shared_ptr<DeviceShare>, Error> DeviceShare::adopt(ContextPtr ctx) {
    const std::string name = ibv_get_device_name(ctx->device);
    const std::lock_guard<std::mutex> lock(g_mu);
    auto& r = registry();
    if (auto it = r.find(name); it != r.end()) {
        if (auto live = it->second.lock()) {
            return live;  // ctx closes here: the channel uses the share's context
        }
    }
    std::shared_ptr<DeviceShare> s(new DeviceShare(std::move(ctx)));
    const int fl = ::fcntl(s->context_->async_fd, F_GETFL);
    (void)::fcntl(s->context_->async_fd, F_SETFL, fl | O_NONBLOCK);
    s->pd_.reset(ibv_alloc_pd(s->context_.get()));
    if (!s->pd_) {
        return Error(std::make_error_code(std::errc::io_error),
                     "ibv_alloc_pd failed on " + name + ": " + posix::errno_text());
    }
    s->stop_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!s->stop_.valid()) {
        return Error(std::make_error_code(std::errc::io_error),
                     "eventfd failed: " + posix::errno_text());
    }
    try {
        s->thread_ = std::thread([p = s.get()] { p->run(); });
    } catch (const std::system_error& e) {
        return Error(std::make_error_code(std::errc::resource_unavailable_try_again),
                     std::string("cannot start the verbs device thread: ") + e.what());
    }
    r[name] = s;
    return s;
}

DeviceShare::~DeviceShare() {
    if (thread_.joinable()) {
        const std::uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(stop_.get(), &one, sizeof one);
        thread_.join();
    }
    const std::lock_guard<std::mutex> lock(ah_mu_);
    ahs_.clear();  // weak: the handles themselves went with the channels that held them
}

std::size_t DeviceShare::channels() const {
    const std::lock_guard<std::mutex> lock(listeners_mu_);
    return listeners_.size();
}

std::uint64_t DeviceShare::listen(Listener l) {
    const std::lock_guard<std::mutex> lock(listeners_mu_);
    const std::uint64_t id = next_id_++;
    listeners_.emplace_back(id, std::move(l));
    return id;
}

void DeviceShare::unlisten(std::uint64_t id) {
    const std::lock_guard<std::mutex> lock(listeners_mu_);
    std::erase_if(listeners_, [id](const auto& e) { return e.first == id; });
}

// The event thread: every async event of the device, to every channel, then acknowledged
// (ibv_destroy_qp and ibv_destroy_cq wait for the acknowledgements of their events).
void DeviceShare::run() noexcept {
    pollfd fds[2] = {{context_->async_fd, POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    for (;;) {
        (void)::poll(fds, 2, -1);
        if ((fds[1].revents & POLLIN) != 0) {
            return;
        }
        ibv_async_event ev{};
        while (ibv_get_async_event(context_.get(), &ev) == 0) {
            if (refreshes_routes(ev.event_type)) {
                new_generation();
            }
            {
                const std::lock_guard<std::mutex> lock(listeners_mu_);
                for (const auto& [id, l] : listeners_) {
                    l(ev);
                }
            }
            ibv_ack_async_event(&ev);
        }
    }
}

DeviceShare::Key DeviceShare::key_of(const policy::AhFields& f) noexcept {
    return {f.is_global, f.dgid, f.flow_label,    f.sgid_index, f.hop_limit,  f.traffic_class,
            f.dlid,      f.sl,   f.src_path_bits, f.port_num,   f.static_rate};
}

std::shared_ptr<ibv_ah> DeviceShare::find_ah(const policy::AhFields& f) {
    const std::lock_guard<std::mutex> lock(ah_mu_);
    const auto it = ahs_.find(key_of(f));
    if (it == ahs_.end()) {
        return nullptr;
    }
    auto live = it->second.ah.lock();
    if (!live || it->second.generation != generation_) {
        ahs_.erase(it);  // gone, or made before a fabric event
        return nullptr;
    }
    return live;
}

std::shared_ptr<ibv_ah> DeviceShare::keep_ah(const policy::AhFields& f, ibv_ah* made) {
    std::shared_ptr<ibv_ah> ah(made, VerbsDeleter<&ibv_destroy_ah>{});
    const std::lock_guard<std::mutex> lock(ah_mu_);
    Kept& k = ahs_[key_of(f)];
    if (auto first = k.ah.lock(); first && k.generation == generation_) {
        return first;  // another channel made one meanwhile: `ah` is destroyed on return
    }
    k.ah = ah;
    k.generation = generation_;
    if (ahs_.size() > 4096) {  // forget the dead ones now and then (weak entries)
        std::erase_if(ahs_, [this](const auto& e) {
            return e.second.ah.expired() || e.second.generation != generation_;
        });
    }
    return ah;
}

void DeviceShare::new_generation() noexcept {
    const std::lock_guard<std::mutex> lock(ah_mu_);
    ++generation_;
}

std::size_t DeviceShare::kept_ahs() {
    const std::lock_guard<std::mutex> lock(ah_mu_);
    return static_cast<std::size_t>(std::count_if(ahs_.begin(), ahs_.end(), [this](const auto& e) {
        return !e.second.ah.expired() && e.second.generation == generation_;
    }));
}

}  // namespace prizma::verbs
