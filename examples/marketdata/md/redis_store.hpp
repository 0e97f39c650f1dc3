// SPDX-License-Identifier: Apache-2.0
// The optional Redis backend, in the reference's layout: a sorted set per `{code}_period`
// (score = the bar's label YYYYMMDDHHMM, member = the bar's JSON plus "sseq", the symbol
// sequence number of its last tick), the braces a hash tag so that a code's six periods share
// a Redis Cluster slot. Works with one redis-server or a Redis Cluster (slots from CLUSTER
// SLOTS; MOVED and ASK redirections followed). Several gateways write the same bars: a bar is
// a whole value per score, replaced by a script (remove by score, add) only with a better one
// (complete over gap-flagged, then more ticks), so any number of writers, started at any time,
// leave the same value; a gateway that starts late loads the whole history from it.
// Other keys: `md:codes` (set of known codes), `{code}_info` (instrument), `md:feeds` (hash:
// feed id -> "last_seq last_instant").
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bars.hpp"
#include "lmdb_store.hpp"

struct redisContext;

namespace md {

/// CRC16 (XMODEM) slot of a key, with Redis's hash-tag rule.
unsigned redis_slot(std::string_view key) noexcept;

/// How to authenticate to every node (AUTH [user] password); no AUTH when password is empty.
struct RedisAuth {
    std::string user;
    std::string password;
};

class RedisStore {
public:
    /// Connects to HOST:PORT and, when it is a cluster node, to every master (with
    /// `lazy_slots`, only to the nodes MOVED replies name, as they come); nullptr and `error`
    /// on failure. A redirection (MOVED, ASK) is followed only to a member of the cluster as
    /// CLUSTER SLOTS lists it (asked again once when a reply names another node): a node, or
    /// anything between, cannot send the gateway's connections elsewhere.
    static std::unique_ptr<RedisStore> connect(const std::string& host_port,
                                               bool lazy_slots,
                                               const RedisAuth& auth,
                                               std::string& error);
    ~RedisStore();
    RedisStore(const RedisStore&) = delete;
    RedisStore& operator=(const RedisStore&) = delete;
    RedisStore(RedisStore&&) = delete;
    RedisStore& operator=(RedisStore&&) = delete;

    /// Writes a batch (pipelined per node); false and `error` on failure.
    bool write(const StoreBatch& batch, std::string& error);
    /// Loads every code's bars, the instruments, gaps and feed positions; the number of bars,
    /// or -1 and `error`.
    long long load(BarStore& store,
                   std::map<std::uint64_t, FeedPosition>& feeds,
                   std::string& error);
    /// The bars labelled lo..hi of each (code, period), in `out` (one list per pair); false
    /// and `error` on failure.
    bool bars_in(const std::vector<std::pair<Code, Period>>& pairs,
                 std::uint64_t lo,
                 std::uint64_t hi,
                 std::vector<std::vector<Bar>>& out,
                 std::string& error);
    /// Writes and reads the reference service's layout: `300525.SZ_1m` keys whose members are
    /// the bar's JSON alone (no "sseq": "better bar" then means complete, then the greater text).
    void set_reference_layout(bool on) noexcept { reference_layout_ = on; }
    [[nodiscard]] bool cluster() const noexcept { return cluster_; }
    /// MOVED and ASK replies followed so far.
    [[nodiscard]] std::uint64_t redirections() const noexcept { return redirections_; }
    /// ASK replies followed so far (a slot migrating between two nodes).
    [[nodiscard]] std::uint64_t asks() const noexcept { return asks_; }

private:
    using Args = std::vector<std::string>;
    struct Node {
        std::string host;
        int port = 0;
        redisContext* ctx = nullptr;
    };
    RedisStore() = default;
    int node_for(const std::string& host, int port, std::string& error);
    /// CLUSTER SLOTS: the members (masters and replicas); with `map`, the masters connected
    /// and the slots mapped to them.
    bool learn_cluster(bool map, std::string& error);
    /// node_for() of a redirection's target, when it is a member (-1 and `error` if not).
    int redirect_node(const std::string& host, int port, std::string& error);
    [[nodiscard]] bool member(const std::string& host, int port) const;
    /// Runs commands (each with the key that routes it), pipelined per node; replies as text
    /// ("" for non-string replies, arrays flattened into `arrays`). False and `error` on a
    /// connection error or an error reply other than a redirection.
    bool run(const std::vector<std::pair<std::string, Args>>& cmds,
             std::vector<std::vector<std::string>>* arrays,
             std::string& error);
    /// Where a redirected command goes next: a node (-1: the slot's) and whether an ASKING
    /// goes first.
    struct Hop {
        int node;
        bool ask;
    };
    bool run_one(const std::string& key,
                 const Args& args,
                 std::vector<std::string>* array,
                 std::string& error,
                 Hop first = {-1, false});

    std::vector<Node> nodes_;
    std::vector<std::pair<std::string, int>> members_;  // from CLUSTER SLOTS
    RedisAuth auth_;
    bool reference_layout_ = false;
    std::vector<int> slot_node_ = std::vector<int>(16384, 0);
    bool cluster_ = false;
    std::uint64_t redirections_ = 0;
    std::uint64_t asks_ = 0;
    std::string put_bar_sha_;
};

/// Reads a bar object written by append_bar() back; false when `json` is not one.
bool parse_bar_json(std::string_view json, Bar& out);

}  // namespace md
