// SPDX-License-Identifier: Apache-2.0
#include "redis_writer.hpp"

#include <string>
#include <utility>

#include <fmt/core.h>

namespace md::gw {

RedisWriter::RedisWriter(RedisStore& redis, std::mutex& redis_mutex, FeedMetrics& metrics)
    : redis_(redis), redis_mutex_(redis_mutex), metrics_(metrics), thread_([this] { run(); }) {}

RedisWriter::~RedisWriter() {
    stop();
}

void RedisWriter::submit(StoreBatch&& batch) {
    if (batch.empty()) {
        return;
    }
    {
        const std::lock_guard lock(mu_);
        merge(std::move(batch));
    }
    cv_.notify_one();
}

void RedisWriter::merge(StoreBatch&& batch) {
    for (StoreBatch::Item& item : batch.bars) {
        const auto key = std::make_tuple(item.code, static_cast<int>(item.period), item.bar.time);
        const auto [it, fresh] = index_.try_emplace(key, pending_.bars.size());
        if (fresh) {
            pending_.bars.push_back(std::move(item));
        } else {
            pending_.bars[it->second] = std::move(item);  // a later state of the same bar
        }
    }
    pending_.instruments.insert(pending_.instruments.end(), batch.instruments.begin(),
                                batch.instruments.end());
    pending_.gaps.insert(pending_.gaps.end(), batch.gaps.begin(), batch.gaps.end());
    for (auto& [feed, pos] : batch.feed_seq) {
        pending_.feed_seq[feed] = pos;
    }
    if (batch.stream) {
        pending_.stream = batch.stream;
    }
}

void RedisWriter::stop() {
    {
        const std::lock_guard lock(mu_);
        stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) {
        thread_.join();
    }
}

void RedisWriter::run() {
    std::unique_lock lock(mu_);
    for (;;) {
        cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
        if (pending_.empty()) {
            return;  // stopping, and everything written
        }
        StoreBatch batch = std::move(pending_);
        pending_ = StoreBatch{};
        index_.clear();
        lock.unlock();
        std::string error;
        bool ok = false;
        {
            const std::lock_guard redis_lock(redis_mutex_);
            ok = redis_.write(batch, error);
            metrics_.redis_redirections = redis_.redirections();
            metrics_.redis_asks = redis_.asks();
        }
        if (ok) {
            ++metrics_.redis_writes;
        } else {
            ++metrics_.redis_errors;
            fmt::print(stderr, "md-gateway: {}\n", error);
        }
        lock.lock();
    }
}

}  // namespace md::gw
