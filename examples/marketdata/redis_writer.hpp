// SPDX-License-Identifier: Apache-2.0
// The Redis writes of the store flush on a thread of their own. The feed pump runs on the
// first event loop, which also serves HTTP and push clients: a synchronous write there (one
// EVALSHA per changed bar, thousands a flush on a busy feed) made every connection of that
// loop wait it out (p99 262 ms in bench/marketdata.sh with REDIS=1). The pump hands each batch
// over and goes on; batches handed over while one is being written are merged into the next
// (the latest value of each bar, the latest feed positions), so what waits stays bounded by
// the number of distinct bars, and batches are written in order (the feed positions after the
// bars they cover, as before).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "gateway.hpp"
#include "md/redis_store.hpp"

namespace md::gw {

class RedisWriter {
public:
    /// Writes through `redis`, holding `redis_mutex` while it does (the fill reads take it
    /// too); counts into `metrics`.
    RedisWriter(RedisStore& redis, std::mutex& redis_mutex, FeedMetrics& metrics);
    ~RedisWriter();
    RedisWriter(const RedisWriter&) = delete;
    RedisWriter& operator=(const RedisWriter&) = delete;

    /// Queues `batch` (merged with what waits); never waits for Redis.
    void submit(StoreBatch&& batch);
    /// Writes what waits, then ends the thread (idempotent).
    void stop();

private:
    void run();
    void merge(StoreBatch&& batch);

    RedisStore& redis_;
    std::mutex& redis_mutex_;
    FeedMetrics& metrics_;
    std::mutex mu_;
    std::condition_variable cv_;
    StoreBatch pending_;
    // The place in pending_.bars of each bar waiting: (code, period, label).
    std::map<std::tuple<Code, int, std::uint64_t>, std::size_t> index_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace md::gw
